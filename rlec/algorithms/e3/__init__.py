"""E3: entropy-targeting temperature, per-prompt difficulty, dynamic rollout budget, length bias.

Source: Liao et al., "Enhancing Efficiency and Exploration in Reinforcement Learning for LLMs"
(E3), arXiv 2505.18573, EMNLP 2025: Sec. 3.1 (dynamic rollout budget by question difficulty,
with a length penalty on easy questions) and Sec. 3.2 (temperature scheduler that keeps the
policy entropy at a target, with annealing of the target). Each piece below is a pure function
or a small object with ``state_dict``; :class:`rlec.algorithms.e3.algorithm.E3` is what both
training loops drive (verl's only E3-specific registration is the agent loop of :mod:`rlec.verl_plugin.e3`).

1. Temperature (:class:`TemperatureScheduler`). After step t, with H_t the policy entropy of
   that step (verl's ``actor/entropy``: exact, full vocabulary, at the step's temperature), V
   the vocabulary size and H* the target::

       T_{t+1} = T_t * (1 + T_t * ln(H* / H_t) / (ln V + ln ln V))

   then clipped to rlec's safety bound [T_min, T_max] (not part of E3; either side may be null:
   :mod:`.temperature`).

   H* is the mean entropy of the first ``init_steps`` steps (the temperature stays at T_0
   meanwhile) or a configured value. Annealing: from ``anneal_start`` (0.6) of training,
   H*(t) = H*_0 ((1 - f) * 0.5 * (1 + cos(pi * progress)) + f), f = ``anneal_final`` (0.9),
   progress going 0 -> 1 over the remaining steps. The target is a pure function of the step.
2. Difficulty (:class:`PromptHistory`). A prompt's accuracy is its share of correct responses
   over all its earlier appearances (abstentions are not correct); its difficulty rank is the
   share of the other remembered prompts that are strictly easier (higher accuracy), in [0, 1]:
   0 = easiest, 1 = hardest. Prompts never seen have no rank.
3. Budget (:func:`allocate_rollouts`). A batch of B prompts gets exactly n * B responses: unseen
   prompts get n; the S seen ones share n * S as x_i = min(n_max, max(c, n_min + lam * rank_i)),
   lam raised first (harder prompts gain in proportion to their rank, as in E3), the floor c only
   once every prompt of positive rank is at n_max; rounded by largest remainder, so n_min <= n_i
   <= n_max and a harder prompt never gets fewer.
4. Length bias (:func:`length_bias_factor`): the easy prompts are exactly the easiest
   ``penalty_threshold`` share of the remembered prompts (floor(share x m) of m, by rank, ties by
   a stable digest of the key: :meth:`PromptHistory.easiest`); a correct response of an easy
   prompt has its reward multiplied by 1 - mu l / (1 + mu l) = 1 / (1 + mu l), l its length in
   tokens; the reward stays > 0, so answering correctly still beats abstaining.

How this differs from the public E3 code (FSDP only):

- the scheduler steps on ``actor/entropy``; the committed code steps on ``actor/entropy_loss``,
  which verl does not log when ``entropy_coeff = 0``, so its temperature never moves. It also
  never clips T; here T is clipped to a configurable safety bound (default [0.5, 1.5], null = none),
  and a zero entropy is read as 1e-8 nats (docs/e3.md lists every difference and its reason);
- budgets are exact and bounded: the original's rounding fix-up can exceed n_max, it gives
  unseen prompts n_min (here: n), and it widens [n_min, n_max] per epoch (here: fixed);
- ranks come from a running per-prompt history at batch time, not from a per-epoch dataset pass;
- the length bias multiplies the reward of *correct* responses (the graded outcome); the
  original subtracts mu l / (1 + mu l) wherever ``score != 0``, which with RLEC's negative
  incorrect rewards would shorten incorrect answers too and could push a correct reward below
  the abstention reward 0.

Modules: :mod:`.temperature` (1), :mod:`.budget` (2-4), :mod:`.settings` (``rlec.e3`` of the config),
:mod:`.controller` (the per-step plan / observe / state), :mod:`.algorithm` (the
:class:`rlec.algorithms.base.Algorithm` verl's trainer drives).
"""

from __future__ import annotations

from rlec.algorithms.e3.budget import (
    PromptHistory,
    allocate_rollouts,
    length_bias_factor,
)
from rlec.algorithms.e3.controller import BatchPlan, E3Controller
from rlec.algorithms.e3.settings import E3_AGENT_LOOP, E3Settings
from rlec.algorithms.e3.temperature import (
    MIN_ENTROPY,
    TemperatureScheduler,
    anneal_factor,
    temperature_update,
)

__all__ = [
    "E3_AGENT_LOOP",
    "MIN_ENTROPY",
    "BatchPlan",
    "E3Controller",
    "E3Settings",
    "PromptHistory",
    "TemperatureScheduler",
    "allocate_rollouts",
    "anneal_factor",
    "length_bias_factor",
    "temperature_update",
]
