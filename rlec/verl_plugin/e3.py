"""E3 on verl 0.9.1's V1 trainer (``sync`` mode): trainer mixin, agent loop, reward-manager hook.

The pure algorithm is :mod:`rlec.algorithms.e3` (:class:`~rlec.algorithms.e3.E3Controller`);
this module moves its decisions through verl (hook points read in verl 0.9.1's ``trainer/ppo/v1/trainer_base.py`` and
``agent_loop_tq.py``, each pinned by tests/verl_plugin/test_drift_algorithms.py):

- per-step temperature T_t: :class:`E3TrainerMixin.step` sets
  ``actor_rollout_ref.rollout.temperature`` in the trainer's config before the step, which the
  actor and reference log-prob recomputation and the update read (verl divides the logits by it);
  each prompt carries ``rlec_e3_temperature``, and the registered agent loop ``rlec_e3_agent``
  (:class:`E3AgentLoop`) puts it into that prompt's vLLM sampling params, because every
  agent-loop worker samples with its own config copy. Both sides use the same T in ``sync``
  mode; the async modes generate ahead with an older T, so E3 refuses them;
- per-prompt rollout counts: ``__rollout_n__`` on each prompt row (verl's agent loop reads it;
  sum = rollout.n x prompts, so verl's mini-batch sizes still hold);
- length bias: ``rlec_e3_length_mu`` on each prompt row reaches the reward manager's non-tensor
  batch, where the graded outcome is known (:func:`apply_length_bias`);
- after each step: ``actor/entropy`` and the graded outcomes (``reward_extra_info.correct`` from
  TransferQueue) update the controller; its state is saved as ``rlec_e3.json`` in every
  checkpoint folder and restored on resume.

Enabled by ``rlec.e3.enable`` (``megatron_configs/algorithm/e3.yaml``); otherwise every override
here calls straight through to verl.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.utils import tensordict_utils as tu

from rlec.algorithms.e3 import E3_AGENT_LOOP, E3Controller, E3Settings, length_bias_factor
from rlec.verl_plugin.cpu_rollout import SCRIPTED_AGENT_LOOP, ScriptedAnswersMixin
from rlec.verl_plugin.state import load_state, resumed_folder, save_state, saving_folder

logger = logging.getLogger(__name__)

TEMPERATURE_KEY = "rlec_e3_temperature"
PROMPT_KEY = "rlec_e3_prompt"
LENGTH_MU_KEY = "rlec_e3_length_mu"
ROLLOUT_N_KEY = "__rollout_n__"  # verl's per-prompt n (AgentLoopWorkerTQ._run_prompt)
STATE_FILE = "rlec_e3.json"

__all__ = ["E3AgentLoop", "ScriptedAgentLoop", "E3TrainerMixin", "E3_AGENT_LOOP", "apply_length_bias", "e3_sampling_params", "prompt_key_of"]


def prompt_key_of(extra_info: Mapping[str, Any] | None, fallback: Any) -> str:
    """The stable id E3's history keys a prompt by: ``extra_info.question_id``, else ``extra_info.index``, else ``fallback``.

    rlec's data gives every copy of a question (one per target p) the same ``question_id``, so
    the copies share one difficulty.
    """
    info = extra_info or {}
    for key in ("question_id", "index"):
        if info.get(key) is not None:
            return f"{key}:{info[key]}"
    return f"row:{fallback}"


def e3_sampling_params(sampling_params: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling params of one prompt: its E3 temperature replaces the worker's configured one.

    Args:
        sampling_params: what verl's agent-loop worker built from its own config copy.
        fields: the prompt's fields (the agent loop's keyword arguments).

    Returns:
        A copy with ``temperature`` = ``fields["rlec_e3_temperature"]`` when the prompt carries it
        and the request samples (temperature > 0); greedy requests and prompts without the key
        (validation) are left as they are.
    """
    out = dict(sampling_params)
    value = fields.get(TEMPERATURE_KEY)
    if value is not None and float(out.get("temperature", 0.0)) > 0.0:
        out["temperature"] = float(value)
    return out


@register_agent_loop(SCRIPTED_AGENT_LOOP)
class ScriptedAgentLoop(ScriptedAnswersMixin, SingleTurnAgentLoop):
    """verl's single-turn agent loop with the CPU run's scripted answers (:class:`ScriptedAnswersMixin`)."""


@register_agent_loop(E3_AGENT_LOOP)
class E3AgentLoop(ScriptedAnswersMixin, SingleTurnAgentLoop):
    """verl's single-turn agent loop sampling at the prompt's E3 temperature (:func:`e3_sampling_params`)
    (and the CPU run's scripted answers, off unless ``rlec.cpu.scripted_fraction`` > 0)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        return await super().run(e3_sampling_params(sampling_params, kwargs), **kwargs)


def _as_list(values: Any) -> list:
    """A TransferQueue / tensordict non-tensor column (NonTensorStack, LinkedList, numpy) as a list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _response_length(data: DataProto) -> int:
    """Response tokens of the last sample (the one verl's naive manager scores)."""
    item = data[-1]
    width = item.batch["responses"].shape[-1]
    return int(item.batch["attention_mask"][-width:].sum())


def apply_length_bias(result: dict[str, Any], data: DataProto) -> dict[str, Any]:
    """E3's length bias on one scored sample of the reward loop (:func:`rlec.algorithms.e3.length_bias_factor`).

    Args:
        result: the reward manager's ``{"reward_score", "reward_extra_info"}`` for ``data``;
            ``reward_extra_info["correct"]`` is the graded outcome.
        data: the sample (``non_tensor_batch["rlec_e3_length_mu"]`` set by :class:`E3TrainerMixin`).

    Returns:
        ``result`` unchanged when the sample carries no ``rlec_e3_length_mu`` (E3 off, validation);
        else with the reward (and ``score``) of a correct response multiplied by 1 / (1 + mu l),
        and ``e3_length_mu`` / ``e3_length_bias`` (the factor, 1.0 when not applied) added.
        Selection is by the graded outcome, never by the reward's sign or ``score != 0``.
    """
    mu = data.non_tensor_batch.get(LENGTH_MU_KEY)
    if mu is None:
        return result
    mu = float(np.asarray(mu).reshape(-1)[-1])
    info = result["reward_extra_info"]
    factor = length_bias_factor(_response_length(data), mu) if mu > 0 and float(info.get("correct", 0.0)) > 0 else 1.0
    result["reward_score"] = float(result["reward_score"]) * factor
    if "score" in info:
        info["score"] = result["reward_score"]
    info["e3_length_mu"] = mu
    info["e3_length_bias"] = factor
    return result


class E3TrainerMixin:
    """E3 for a verl V1 trainer; a no-op unless ``rlec.e3.enable`` (see the module docstring).

    Raises (at construction, when enabled):
        ValueError: the trainer mode is not ``sync``, the agent loop is not ``rlec_e3_agent``
            while the temperature part is on, or an ``rlec.e3`` value is out of range.
    """

    e3: E3Controller | None = None

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        settings = E3Settings.from_config(self.config)
        self.e3 = None
        if not settings.enable:
            return
        if self.trainer_mode != "sync":
            raise ValueError(f"rlec.e3 needs trainer.v1.trainer_mode rlec_sync (sync): in {self.trainer_mode} mode "
                             "rollouts are generated ahead with an older temperature, so the actor's log-probs would "
                             "use another temperature than the sampler")
        rollout = self.config.actor_rollout_ref.rollout
        if settings.temperature_enable and rollout.agent.default_agent_loop != E3_AGENT_LOOP:
            raise ValueError(f"rlec.e3.temperature needs actor_rollout_ref.rollout.agent.default_agent_loop="
                             f"{E3_AGENT_LOOP} (got {rollout.agent.default_agent_loop}): only that agent loop passes the "
                             "step's temperature to vLLM")
        vocab = settings.vocab_size
        if vocab is None and settings.temperature_enable:
            from rlec.models import read_model_config

            vocab = read_model_config(self.config.actor_rollout_ref.model.path, label="actor_rollout_ref.model.path").get("vocab_size")
        self.e3 = E3Controller(settings, n=int(rollout.n), temperature=float(rollout.temperature), vocab_size=vocab)
        logger.info("E3 on: %s", settings)

    def _next_train_batch(self, num_prompts: int | None = None):
        batch = super()._next_train_batch(num_prompts)
        if self.e3 is None:
            return batch
        infos = list(batch["extra_info"]) if "extra_info" in batch.keys() else [None] * len(batch)
        infos = [getattr(info, "data", info) for info in infos]
        keys = [prompt_key_of(info, uid) for info, uid in zip(infos, batch["uid"])]
        plan = self.e3.plan(keys)
        tu.assign_non_tensor_stack(batch, PROMPT_KEY, keys)
        tu.assign_non_tensor_stack(batch, ROLLOUT_N_KEY, plan.rollout_n)
        tu.assign_non_tensor_stack(batch, LENGTH_MU_KEY, plan.length_mu)
        tu.assign_non_tensor_data(batch, TEMPERATURE_KEY, plan.temperature)
        return batch

    def _e3_step_records(self, batch) -> list[tuple[str, dict]]:
        """(prompt key, reward_extra_info) of the step's non-padding responses, read from TransferQueue."""
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[PROMPT_KEY, "extra_fields"])
        keys, fields = _as_list(data.pop(PROMPT_KEY)), _as_list(data.pop("extra_fields"))
        return [(str(key), (f or {}).get("reward_extra_info") or {})
                for key, f, tag in zip(keys, fields, batch.tags, strict=True) if not tag.get("is_padding", False)]

    def step(self, metrics: dict, timing_raw: dict):
        if self.e3 is None:
            return super().step(metrics, timing_raw)
        self.config.actor_rollout_ref.rollout.temperature = self.e3.temperature  # the actor side of T_t
        batch = super().step(metrics, timing_raw)
        records = self._e3_step_records(batch)
        infos = [info for _, info in records]
        metrics.update(self.e3.observe(
            self.global_steps, self.total_training_steps, metrics.get("actor/entropy"), [k for k, _ in records],
            [float(i.get("correct", 0.0)) for i in infos], [float(i.get("e3_length_mu", 0.0)) for i in infos],
            [float(i.get("e3_length_bias", 1.0)) for i in infos]))
        return batch

    def _save_checkpoint(self):
        if self.e3 is not None:  # before verl marks the checkpoint as the latest
            save_state(saving_folder(self.config, self.global_steps), STATE_FILE, self.e3.state_dict())
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        out = super()._load_checkpoint()
        if self.e3 is not None:
            state = load_state(resumed_folder(self.config, self.global_steps), STATE_FILE)
            if state is not None:
                self.e3.load_state_dict(state)
                logger.info("E3 state restored: temperature %.4f, %d prompts seen", self.e3.temperature, len(self.e3.history))
        return out

