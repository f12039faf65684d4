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
  probe set instead of the batch); ``rlec/probe/response_length`` (mean tokens per response) beside it;
- with ``rlec.probe.pass_k`` = k set, the same responses **graded by the run's grader** (decoded as verl's naive reward
  manager decodes a rollout, ``skip_special_tokens=True``, then :func:`rlec.grading.grade_batch`, which rlec's reward
  manager grades with, at ``rlec.grading.timeout_s``; right = ``Outcome.CORRECT``, the reward manager's ``correct``):
  ``rlec/probe/pass@<k>``, each prompt's unbiased pass@k from its ``rlec.probe.samples`` = n >= k responses
  (Chen et al. 2021, :func:`rlec.algorithms.passk.pass_at_k_array`) averaged over the prompts, ``rlec/probe/pass@1``
  beside it, and ``rlec/probe/pass@<k>/low_q``, the same mean over the prompts the file's boolean column ``low_q``
  marks (a low base pass rate, measured by the experiment's pilot: :mod:`rlec.experiments.pilot`); absent where the
  file marks none. The probe samples at ``rlec.probe.temperature`` without top-k / top-p, so a graded probe is refused
  at the start of training unless the rollout samples so too (the figure must be the run's own pass@k).

The measurement is logged with the step whose update it follows (``_compute_metrics`` runs after ``on_step_end`` has
synced the weights): step t's value is the policy after t updates. It needs the CPU rollout (``rollout.name=rlec_hf``);
any other rollout is refused when training begins.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

from rlec.probe_keys import ENTROPY, LOW_Q, RESPONSE_LENGTH, TIMING, pass_at_k_key  # the names this hook logs
from rlec.verl_plugin.cpu_interface import ROLLOUT_NAME, request_seed, server_name

if TYPE_CHECKING:
    from rlec.run_config import RunConfig

logger = logging.getLogger(__name__)

__all__ = ["ProbeMixin", "is_probe_step", "pass_at_k_metrics", "probe_metrics", "probe_seeds", "read_probe_answers",
           "read_probe_prompts", "sampling_mismatch"]


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


def read_probe_answers(path: str) -> tuple[list[str], list[str], list[bool] | None]:
    """What grading the probe responses needs, per prompt in file order: the gold answer (``reward_model.ground_truth``),
    the ``data_source`` (which grader) and the ``low_q`` flags (None: the file has no such column).

    Raises:
        ValueError: a column is missing, a row has no ``reward_model.ground_truth``, or ``low_q`` holds a value that is
            not a boolean (names the file and the row).
    """
    import numpy as np
    import pandas as pd

    frame = pd.read_parquet(path)
    missing = [c for c in ("data_source", "reward_model") if c not in frame.columns]
    if missing:
        raise ValueError(f"rlec.probe.file={path}: grading the probe (rlec.probe.pass_k) needs the columns 'data_source' "
                         f"and 'reward_model' (verl's data format), missing {missing}")
    golds = []
    for row, reward_model in enumerate(frame["reward_model"]):
        gold = dict(reward_model or {}).get("ground_truth")
        if gold is None:
            raise ValueError(f"rlec.probe.file={path}: row {row} has no reward_model.ground_truth (the gold answer the "
                             "probe's grader needs)")
        golds.append(str(gold))
    sources = [str(s) for s in frame["data_source"]]
    if LOW_Q not in frame.columns:
        return golds, sources, None
    flags = []
    for row, value in enumerate(frame[LOW_Q]):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"rlec.probe.file={path}: row {row} has {LOW_Q}={value!r}: expected true or false")
        flags.append(bool(value))
    return golds, sources, flags


def pass_at_k_metrics(correct: Sequence[Sequence[bool]], k: int, low_q: Sequence[bool] | None = None) -> dict[str, float]:
    """The graded probe's figures: per prompt the unbiased pass@k of its n responses (Chen et al. 2021,
    ``1 - C(n - c, k) / C(n, k)`` with c right of n, :func:`rlec.algorithms.passk.pass_at_k_array`), averaged over the
    prompts (``rlec/probe/pass@<k>``) and over the prompts ``low_q`` marks (``rlec/probe/pass@<k>/low_q``; absent when
    none is marked), and the mean pass@1 (``rlec/probe/pass@1``, the right share per prompt, averaged).

    Args:
        correct: per prompt, the grader's verdict (right or not) of each of its responses.
        k: >= 1.
        low_q: per prompt, whether it counts in the ``low_q`` mean (None: no such figure).

    Raises:
        ValueError: no prompt, a prompt with fewer than k responses, or ``low_q`` of another length.
    """
    import numpy as np

    from rlec.algorithms.passk import pass_at_k_array

    n = np.array([len(c) for c in correct], dtype=float)
    if not len(n) or int(k) != k or k < 1 or (n < k).any():
        raise ValueError(f"probe pass@{k}: {len(n)} prompts with {sorted(set(n.astype(int).tolist()))} responses each: "
                         "expected at least one prompt, k >= 1 and at least k responses per prompt")
    if low_q is not None and len(low_q) != len(n):
        raise ValueError(f"probe pass@{k}: {len(low_q)} low_q flags for {len(n)} prompts")
    c = np.array([sum(bool(x) for x in row) for row in correct], dtype=float)
    per_prompt = pass_at_k_array(n, c, int(k))
    out = {pass_at_k_key(k): float(per_prompt.mean()), pass_at_k_key(1): float(np.mean(c / n))}
    if low_q is not None and any(low_q):
        out[pass_at_k_key(k, LOW_Q)] = float(per_prompt[np.asarray(low_q, dtype=bool)].mean())
    return out


def sampling_mismatch(settings: Any, rollout: Any) -> str | None:
    """Why the probe's samples are not the run's (None: they are): the probe samples at ``settings.temperature`` with no
    top-k / top-p; ``rollout`` (``actor_rollout_ref.rollout``) must sample so for a graded probe to be the run's pass@k."""
    temperature = float(rollout.get("temperature", 1.0))
    top_k = int(rollout.get("top_k", -1) or -1)
    top_p = float(rollout.get("top_p", 1.0))
    if temperature == float(settings.temperature) and top_k <= 0 and top_p >= 1.0:
        return None
    return (f"rlec.probe.pass_k={settings.pass_k}: the probe samples at T = {settings.temperature} with no top-k / top-p, "
            f"the rollout at actor_rollout_ref.rollout.temperature={temperature}, top_k={top_k}, top_p={top_p}: set "
            "them equal, or the probe's pass@k is not the run's")


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

    # (settings, rendered prompt ids, (golds, data sources, low_q flags) or None) once training begins
    rlec_run: RunConfig  # the trainer's config, converted once at construction (rlec.verl_plugin.trainers.AlgorithmsMixin)
    _rlec_probe: tuple[Any, list[list[int]], Any] | None = None

    def on_train_begin(self) -> None:
        """verl's hook before its training loop starts (``fit``, after a resume). With ``rlec.probe.file``: checks that
        the rollout is :data:`ROLLOUT_NAME` (the one with a probe method) and, with ``pass_k``, that the probe samples
        as training does and reads the answers; renders the probe prompts once and keeps all on ``_rlec_probe`` for
        the probe steps. Without it, changes nothing. Then verl's own hook.

        Raises:
            ValueError: another rollout, or the probe's sampling differs from training's (:func:`sampling_mismatch`).
        """
        settings = self.rlec_run.rlec.probe
        if settings.file is not None:
            name = str(self.config.actor_rollout_ref.rollout.name)
            if name != ROLLOUT_NAME:
                raise ValueError(f"rlec.probe.file={settings.file}: the probe set is sampled by the rollout server "
                                 f"{ROLLOUT_NAME!r}; actor_rollout_ref.rollout.name={name!r} has no probe method")
            answers = None
            if settings.pass_k is not None:
                mismatch = sampling_mismatch(settings, self.config.actor_rollout_ref.rollout)
                if mismatch:
                    raise ValueError(mismatch)
                answers = read_probe_answers(settings.file)
            self._rlec_probe = (settings, self._rlec_probe_prompt_ids(settings.file), answers)
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
        settings, prompts, answers = self._rlec_probe
        total = int(getattr(self, "total_training_steps", 0) or 0)
        if is_probe_step(int(global_steps), settings.every, total):
            metrics.update(self._rlec_measure_probe(int(global_steps), settings, prompts, answers))

    def _rlec_measure_probe(self, step: int, settings: Any, prompts: list[list[int]], answers: Any = None) -> dict[str, float]:
        """Sample and score the probe set on replica 0's rollout server; the step's ``rlec/probe/*`` metrics (graded
        too when ``answers``, :func:`read_probe_answers`'s, is given)."""
        import ray

        start = time.perf_counter()
        seed = int(self.config.data.get("seed", 0) or 0)
        rows = [ids for ids in prompts for _ in range(settings.samples)]
        seeds = probe_seeds(seed, step, len(prompts), settings.samples)
        server = ray.get_actor(server_name(0))
        results = ray.get(server.probe.remote(rows, seeds, float(settings.temperature)))
        out = probe_metrics([r["entropies"] for r in results])
        if answers is not None:
            out.update(self._rlec_grade_probe(settings, [r["tokens"] for r in results], answers))
        out[TIMING] = time.perf_counter() - start
        return out

    def _rlec_grade_probe(self, settings: Any, tokens: list[list[int]], answers: Any) -> dict[str, float]:
        """The probe responses (prompt-major, ``settings.samples`` each) decoded and graded as the run grades its own;
        :func:`pass_at_k_metrics` of the verdicts."""
        from rlec.grading import grade_batch
        from rlec.grading.outcome import Outcome

        golds, sources, low_q = answers
        n = int(settings.samples)
        texts = [self.tokenizer.decode(t, skip_special_tokens=True) for t in tokens]
        graded = grade_batch(texts, [g for g in golds for _ in range(n)], [s for s in sources for _ in range(n)],
                             timeout_s=self.rlec_run.rlec.grading.timeout_s)
        right = [r.outcome is Outcome.CORRECT for r in graded]
        return pass_at_k_metrics([right[i * n:(i + 1) * n] for i in range(len(golds))], int(settings.pass_k), low_q)
