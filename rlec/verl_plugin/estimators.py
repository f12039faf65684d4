"""rlec's advantage estimators for verl 0.9.1: ``rlec_passk`` (Pass@k Training) and its entropy switch.

``algorithm=passk`` (``megatron_configs/algorithm/passk.yaml``) switches Pass@k on
(``rlec.passk.enable``, settings in ``rlec.passk``) and sets verl's side from it:
``algorithm.adv_estimator=rlec_passk`` selects :func:`compute_rlec_passk_advantage`. verl's V1
trainer calls it in the trainer process with ``token_level_rewards, response_mask, index`` (the
prompt ``uid`` of each response) and ``config`` = the live ``config.algorithm`` (verl hands an
estimator nothing else), so what it reads is verl's copy the overlay puts there:

- ``algorithm.passk.k``: ``${rlec.passk.k}``, the k of pass@k (>= 2; :meth:`rlec.algorithms.passk.algorithm.PassK.check`
  refuses a copy that differs from the home);
- ``algorithm.passk.active_k``: the k in force this step, written into the trainer config by
  :class:`rlec.algorithms.passk.algorithm.PassK` (its ``step_overrides``; null = ``k``);
- ``algorithm.norm_adv_by_std_in_grpo``: used only in the pass@1 regime.

With k >= 2 a response is "correct" when its reward is > 0: with RLEC's rewards that is exactly
the graded outcome "correct" (R_p^(b)(correct) = (1-p)^b > 0; incorrect -p(1-p)^(b-1) <= 0;
abstain 0), also after E3's length bias (a factor in (0, 1]). Abstentions therefore count as not
correct. ``tests/verl_plugin/test_estimators.py`` pins this equivalence. The advantage is
:func:`rlec.algorithms.passk.passk_advantage_batch`. With active k = 1 (the switch's pass@1
regime) it is RLEC's own mean-only group advantage on the real reward, by verl's GRPO function.

The switch (arXiv 2508.10751's combination) is :class:`rlec.algorithms.passk.algorithm.PassK`,
driven by the generic trainer mixin: after each step it reads ``actor/entropy`` and sets
``active_k`` for the next step (pass@1 while the entropy is above
``rlec.passk.switch.entropy_threshold``, pass@k below), logs ``passk/active_k`` (the k of the
step), and its state is saved with every checkpoint (``rlec_algorithms.json``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from rlec.algorithms.passk import PASSK_ESTIMATOR, passk_advantage_batch
from rlec.verl_plugin.typed_config import live_algorithm_value

logger = logging.getLogger(__name__)

__all__ = ["PASSK_ESTIMATOR", "active_k", "compute_rlec_passk_advantage"]


def active_k(config: Any) -> int:
    """The k in force: ``passk.active_k`` of the algorithm config when set, else ``passk.k`` (verl's copy of ``rlec.passk.k``).

    Both are validated before the first step, once, by :meth:`rlec.algorithms.passk.algorithm.PassK.check`
    (2 <= k < rollout.n, the copy equal to ``rlec.passk.k``, ``active_k`` within [1, rollout.n]),
    which verl's trainer (rlec's modes), DRY_RUN and the launcher apply; the trainer then writes
    only k or 1 there. So this reads, and does not re-check them.

    Raises:
        ValueError: no ``passk.k`` at all (the passk overlay was not composed: the estimator called
            on a config no check has seen; tests/verl_plugin/test_estimators.py pins the message).
    """
    k = live_algorithm_value(config, "passk.active_k")
    k = live_algorithm_value(config, "passk.k") if k is None else k
    if k is None:
        raise ValueError("adv_estimator rlec_passk needs algorithm.passk.k (verl's copy of rlec.passk.k): compose "
                         "megatron_configs/algorithm/passk.yaml (algorithm=passk)")
    return int(k)


@register_adv_est(PASSK_ESTIMATOR)
def compute_rlec_passk_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k Training's analytic advantage (arXiv 2508.10751, Sec. 3) for verl.

    Args:
        token_level_rewards: (bs, response_len) rewards; their sum over tokens is the response's
            reward (the RLEC reward, possibly length-biased).
        response_mask: (bs, response_len) 1 on response tokens.
        index: (bs,) the prompt uid of each response (groups of any sizes).
        config: the algorithm config (``passk.k``, ``passk.active_k``, ``norm_adv_by_std_in_grpo``).
        **kwargs: other verl arguments (ignored).

    Returns:
        ``(advantages, returns)``, both (bs, response_len): each response's advantage on every
        response token, 0 elsewhere.

    Raises:
        ValueError: no group ids, or no ``passk.k`` in the config (:func:`active_k`; k itself is
            validated before the first step and not re-checked here).
    """
    if index is None:
        raise ValueError("rlec_passk needs the prompt uid of every response (verl passes non_tensor_batch['uid'] as index)")
    k = active_k(config)
    if k == 1:  # pass@1 regime: RLEC's mean-only group advantage on the real reward
        return compute_grpo_outcome_advantage(token_level_rewards=token_level_rewards, response_mask=response_mask,
                                              index=index, norm_adv_by_std_in_grpo=bool(live_algorithm_value(config, "norm_adv_by_std_in_grpo", False)))
    with torch.no_grad():
        correct = token_level_rewards.sum(dim=-1) > 0
        adv = passk_advantage_batch(correct, list(index), k).to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return adv, adv
