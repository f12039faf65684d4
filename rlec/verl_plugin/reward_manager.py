"""The ``rlec`` reward manager for verl 0.9.1's reward loop: R_p^(b) with b scheduled by the step.

verl's naive manager (decoding, verl's per-sample interface) with rlec's scoring
(:func:`rlec.reward.batch.score_one_async`). b comes from :func:`rlec.reward.schedule.schedule_from_config`
at ``data.non_tensor_batch["global_steps"]``, which verl's V1 trainer stamps on every batch
(``extra_info["global_steps"]`` is the rollout weights version instead, see docs/cluster.md).
Selected by ``reward.reward_manager.source=register`` and ``reward.reward_manager.name=rlec``.
Then every registered algorithm's stateless :meth:`rlec.algorithms.base.Algorithm.adjust_reward`
sees the scored sample with its prompt's fields (``non_tensor_batch``): a sample carries an
algorithm's fields only when that algorithm planned its prompt (E3's ``rlec_e3_length_mu``: the
length bias of correct responses of easy prompts), so validation samples are left as scored.

A sample never fails the batch: one whose row cannot be read or graded is scored as INCORRECT with
``grader_error`` set (:mod:`rlec.grading.errors`), counted in ``rlec/grader_error_rate``. Wiring
errors that are the same for every sample (no ``global_steps`` on the batch, bucket edges that do
not cover [0, 1)) still raise, at the first step or at construction.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

from rlec.grading.errors import record_error
from rlec.reward.batch import failed_sample_info, score_one_async
from rlec.reward.schedule import schedule_from_config
from rlec.algorithms.registry import ALGORITHMS
from rlec.run_config import RunConfig

logger = logging.getLogger(__name__)

REWARD_MANAGER_NAME = "rlec"
# The step of the sample being scored. ``run_single`` sets it and awaits verl's naive
# ``run_single`` in the same asyncio task, which awaits our async score function: the value
# cannot leak between concurrently scored samples, even of different steps.
_GLOBAL_STEP: contextvars.ContextVar[int] = contextvars.ContextVar("rlec_global_step")

__all__ = ["REWARD_MANAGER_NAME", "RLECRewardManager", "adjust_rewards", "global_step_of"]


def global_step_of(data: DataProto) -> int:
    """The trainer's global step of a reward-loop item (``non_tensor_batch["global_steps"]``).

    Raises:
        KeyError: the item carries no ``global_steps`` (only verl's V1 trainer stamps it).
    """
    steps = data.non_tensor_batch.get("global_steps")
    if steps is None:
        raise KeyError(
            "the rlec reward manager needs data.non_tensor_batch['global_steps'], which verl's V1 trainer "
            "(trainer.use_v1=true) stamps on every batch; got keys "
            f"{sorted(data.non_tensor_batch)}"
        )
    return int(np.asarray(steps).reshape(-1)[-1])


def _response_length(data: DataProto) -> int:
    """Response tokens of the last sample (the one verl's naive manager scores)."""
    item = data[-1]
    width = item.batch["responses"].shape[-1]
    return int(item.batch["attention_mask"][-width:].sum())


def adjust_rewards(result: dict[str, Any], data: DataProto) -> dict[str, Any]:
    """Every registered algorithm's :meth:`~rlec.algorithms.base.Algorithm.adjust_reward` on one scored sample.

    Args:
        result: the reward manager's ``{"reward_score", "reward_extra_info"}`` for ``data``.
        data: the sample (the last row); its ``non_tensor_batch`` holds the prompt's fields.

    Returns:
        ``result`` with ``reward_score`` (and any ``reward_extra_info`` keys the algorithms add)
        updated; unchanged when the sample carries no algorithm's fields.
    """
    fields = {}
    for key, value in data.non_tensor_batch.items():
        fields[key] = value[-1] if isinstance(value, np.ndarray) and value.ndim and len(value) else value
    score, length = result["reward_score"], _response_length(data)
    for cls in ALGORITHMS:
        score = cls.adjust_reward(score, result["reward_extra_info"], fields, length)
    result["reward_score"] = score
    return result


@register(REWARD_MANAGER_NAME)
class RLECRewardManager(NaiveRewardManager):
    """verl's naive reward manager scoring with R_p^(b), b scheduled by the global step.

    Config (the trainer config verl passes in): ``rlec.schedule.*`` (see
    :func:`schedule_from_config`), ``rlec.grading.timeout_s`` (math-verify per item, seconds),
    ``rlec.metrics.target_bucket_edges``.

    Returns from ``run_single``: ``{"reward_score": R_p^(b), "reward_extra_info":``
    :func:`rlec.reward.batch.sample_info` ``}``.

    Raises:
        ValueError: ``reward.custom_reward_function.path`` is set (it would be ignored), the
            schedule length is unknown, or an ``rlec.*`` setting is refused
            (:class:`rlec.settings.SettingError`, e.g. bucket edges that do not cover [0, 1]).
    """

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        run = RunConfig(config)  # read once in this reward worker: verl hands every worker the trainer's config
        if run.keys.custom_reward_function_path:
            raise ValueError(
                "reward manager 'rlec' scores with rlec.grading and R_p^(b); unset "
                "reward.custom_reward_function.path or choose another reward_manager.name"
            )
        super().__init__(config, tokenizer, self._score, reward_router_address, reward_model_tokenizer)
        settings = run.rlec  # the verl side's check of rlec's settings, at trainer start
        self.schedule = schedule_from_config(run)  # parsed once: the settings above
        self.timeout_s = settings.grading.timeout_s
        self.bucket_edges = settings.metrics.target_bucket_edges
        logger.info("rlec reward manager: b schedule %s, grading timeout %.1fs", self.schedule, self.timeout_s)

    async def run_single(self, data: DataProto) -> dict:
        """Score one sample (the last of ``data``, as verl's naive manager does), then :func:`adjust_rewards`.

        Raises:
            KeyError: the batch carries no ``global_steps`` (see :func:`global_step_of`).
        """
        step = global_step_of(data)
        token = _GLOBAL_STEP.set(step)
        try:
            result = await super().run_single(data)
        except Exception as exc:  # the row could not be read (verl's decoding / field access): score it, do not fail the step
            return self._failed(data, step, record_error("internal", f"reward manager: {type(exc).__name__}: {exc}", exc))
        finally:
            _GLOBAL_STEP.reset(token)
        return adjust_rewards(result, data)

    def _failed(self, data: DataProto, step: int, reason: str) -> dict:
        fields = data.non_tensor_batch
        extra_info = fields.get("extra_info")
        extra_info = extra_info[-1] if isinstance(extra_info, np.ndarray) and len(extra_info) else extra_info
        source = fields.get("data_source")
        source = source[-1] if isinstance(source, np.ndarray) and len(source) else source
        info = failed_sample_info(reason, extra_info, source, step, self.schedule, edges=self.bucket_edges)
        return {"reward_score": info["score"], "reward_extra_info": info}

    async def _score(self, data_source, solution_str, ground_truth, extra_info=None, **_: Any) -> dict:
        return await score_one_async(
            solution_str,
            ground_truth,
            data_source,
            extra_info,
            _GLOBAL_STEP.get(),
            self.schedule,
            timeout_s=self.timeout_s,
            edges=self.bucket_edges,
        )
