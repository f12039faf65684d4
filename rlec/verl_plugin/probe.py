"""The policy's entropy on a fixed probe set, measured inside verl's trainer (issue 57 item 4): ``rlec/probe/*``.

verl's ``actor/entropy`` is measured on the step's drawn batch, so it swings with the prompts drawn (within-run SD
0.07 nats against 0.004-0.027 between arms, ``docs/results/e3.json``). With ``rlec.probe.file`` set, every
``rlec.probe.every`` steps, and at the first and the last step, :class:`ProbeMixin` measures the policy on the same
prompts instead:

- the file's prompts (a parquet in verl's data format: ``prompt`` = chat messages), rendered as verl's agent loop renders
  a training prompt (verl's Continuous Token builder, ``data.apply_chat_template_kwargs``);
- ``rlec.probe.samples`` responses each, sampled by the rollout server itself
  (:meth:`rlec.cpu.rollout_server.HFRolloutServer.probe`: the same engine and the same weights as the rollout,
  synced after the step's update) at ``rlec.probe.temperature`` (1.0: the policy's own distribution) over the whole
  vocabulary, each response from a seed of (``data.seed``, step, prompt, sample) (:func:`probe_seeds`): arms of one seed
  draw their probe samples from the same seeds;
- ``rlec/probe/entropy``: the **mean per-token entropy of the sampled probe responses**, the entropy of the full
  next-token distribution at T = ``rlec.probe.temperature`` at each response token (stop token included), averaged over
  every token of every probe response (verl's ``token-mean``, the definition and formula of ``actor/entropy``, on the
  probe set instead of the batch); ``rlec/probe/response_length`` (mean tokens per response) beside it.

The measurement is logged with the step whose update it follows (``_compute_metrics`` runs after ``on_step_end`` has
synced the weights): step t's value is the policy after t updates. It needs the CPU rollout (``rollout.name=rlec_hf``);
any other rollout is refused when training begins.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from rlec.verl_plugin.cpu_interface import ROLLOUT_NAME, request_seed, server_name

logger = logging.getLogger(__name__)

ENTROPY = "rlec/probe/entropy"
RESPONSE_LENGTH = "rlec/probe/response_length"
TIMING = "timing_s/rlec_probe"

__all__ = ["ENTROPY", "RESPONSE_LENGTH", "ProbeMixin", "is_probe_step", "probe_metrics", "probe_seeds", "read_probe_prompts"]


def is_probe_step(step: int, every: int, total: int) -> bool:
    """Whether step ``step`` (1-based) measures the probe set: the first, every ``every``-th and the last (``total``)."""
    return step == 1 or step % every == 0 or step == total


def probe_seeds(data_seed: int, step: int, prompts: int, samples: int) -> list[int]:
    """One sampling seed per probe row (prompt-major: prompt i's samples are rows ``i * samples ...``).

    :func:`rlec.verl_plugin.cpu_interface.request_seed` of (``data_seed``, ``"probe<step>"``, prompt, sample): the same
    for every arm of a seed at a step (paired arms measure with the same draws), distinct from every training request
    (whose step field is an integer).
    """
    return [request_seed(data_seed, f"probe{step}", i, j) for i in range(prompts) for j in range(samples)]


def read_probe_prompts(path: str) -> list[list[dict[str, Any]]]:
    """The chat messages of every prompt of the probe file (verl's data format, column ``prompt``), in file order.

    Raises:
        ValueError: the file has no ``prompt`` column or no rows (names the file).
    """
    import pandas as pd

    frame = pd.read_parquet(path)
    if "prompt" not in frame.columns or not len(frame):
        raise ValueError(f"rlec.probe.file={path}: expected a parquet with a 'prompt' column (chat messages) and at least "
                         f"one row, got {len(frame)} rows and columns {list(frame.columns)}")
    return [[{str(k): v for k, v in dict(m).items()} for m in messages] for messages in frame["prompt"]]


def probe_metrics(entropies: Sequence[Sequence[float]]) -> dict[str, float]:
    """``rlec/probe/entropy`` (mean over every token of every response) and ``rlec/probe/response_length``.

    Args:
        entropies: per probe response, the entropy (nats) of each of its tokens.

    Raises:
        ValueError: no response, or no token in any response.
    """
    tokens = sum(len(e) for e in entropies)
    if not entropies or not tokens:
        raise ValueError(f"probe: {len(entropies)} responses with {tokens} tokens: nothing to measure")
    return {ENTROPY: float(sum(sum(e) for e in entropies) / tokens), RESPONSE_LENGTH: tokens / len(entropies)}


class ProbeMixin:
    """Adds ``rlec/probe/*`` to the probe steps' metrics of a verl V1 trainer (module docstring); a no-op without
    ``rlec.probe.file``."""

    _rlec_probe: tuple[Any, list[list[int]]] | None = None  # (settings, rendered prompt ids) once training begins

    def on_train_begin(self):
        from rlec.settings import RlecSettings

        settings = RlecSettings.from_config(self.config).probe
        if settings.file is not None:
            name = str(self.config.actor_rollout_ref.rollout.name)
            if name != ROLLOUT_NAME:
                raise ValueError(f"rlec.probe.file={settings.file}: the probe set is sampled by the rollout server "
                                 f"{ROLLOUT_NAME!r}; actor_rollout_ref.rollout.name={name!r} has no probe method")
            self._rlec_probe = (settings, self._rlec_probe_prompt_ids(settings.file))
            logger.info("probe set: %d prompts x %d samples every %d steps from %s", len(self._rlec_probe[1]),
                        settings.samples, settings.every, settings.file)
        return super().on_train_begin()

    def _rlec_probe_prompt_ids(self, path: str) -> list[list[int]]:
        """The probe prompts rendered as verl's agent loop renders a training prompt (Continuous Token builder)."""
        from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

        from rlec.models import read_model_config

        model_type = read_model_config(str(self.config.actor_rollout_ref.model.path),
                                       label="actor_rollout_ref.model.path").get("model_type")
        kwargs = self.config.data.get("apply_chat_template_kwargs", None) or {}
        builder = create_continuous_token_builder(self.tokenizer, hf_model_type=model_type,
                                                  chat_template_kwargs=dict(kwargs))
        return [list(map(int, builder.build_initial_tokens(messages))) for messages in read_probe_prompts(path)]

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if self._rlec_probe is None:
            return
        settings, prompts = self._rlec_probe
        total = int(getattr(self, "total_training_steps", 0) or 0)
        if is_probe_step(int(global_steps), settings.every, total):
            metrics.update(self._rlec_measure_probe(int(global_steps), settings, prompts))

    def _rlec_measure_probe(self, step: int, settings: Any, prompts: list[list[int]]) -> dict[str, float]:
        """Sample and score the probe set on replica 0's rollout server; the step's ``rlec/probe/*`` metrics."""
        import ray


        start = time.perf_counter()
        seed = int(self.config.data.get("seed", 0) or 0)
        rows = [ids for ids in prompts for _ in range(settings.samples)]
        seeds = probe_seeds(seed, step, len(prompts), settings.samples)
        server = ray.get_actor(server_name(0))
        results = ray.get(server.probe.remote(rows, seeds, float(settings.temperature)))
        out = probe_metrics([r["entropies"] for r in results])
        out[TIMING] = time.perf_counter() - start
        return out
