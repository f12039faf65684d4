"""rlec's advantage estimators for verl 0.9.1: ``rlec_passk`` (Pass@k Training) and its entropy switch.

``algorithm.adv_estimator=rlec_passk`` (``megatron_configs/algorithm/passk.yaml``) selects
:func:`compute_rlec_passk_advantage`. verl's V1 trainer calls it in the trainer process with
``token_level_rewards, response_mask, index`` (the prompt ``uid`` of each response) and
``config`` = the live ``config.algorithm``, from which it reads:

- ``algorithm.passk.k``: the k of pass@k (>= 2);
- ``algorithm.passk.active_k``: the k in force this step, written by :class:`PasskSwitchMixin`
  when ``algorithm.passk.switch.enable`` (null = ``k``);
- ``algorithm.norm_adv_by_std_in_grpo``: used only in the pass@1 regime.

With k >= 2 a response is "correct" when its reward is > 0: with RLEC's rewards that is exactly
the graded outcome "correct" (R_p^(b)(correct) = (1-p)^b > 0; incorrect -p(1-p)^(b-1) <= 0;
abstain 0), also after E3's length bias (a factor in (0, 1]). Abstentions therefore count as not
correct. ``tests/verl_plugin/test_estimators.py`` pins this equivalence. The advantage is
:func:`rlec.algorithms.passk.passk_advantage_batch`. With active k = 1 (the switch's pass@1
regime) it is RLEC's own mean-only group advantage on the real reward, by verl's GRPO function.

The switch (arXiv 2508.10751's combination): after each step :class:`PasskSwitchMixin` reads
``actor/entropy`` and sets ``active_k`` for the next step (pass@1 while the entropy is above
``algorithm.passk.switch.entropy_threshold``, pass@k below); it logs ``passk/active_k`` (the k of
the step) and saves its state as ``rlec_passk.json`` with every checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from omegaconf import open_dict
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from rlec.algorithms.passk import PASSK_ESTIMATOR, EntropySwitch, passk_advantage_batch
from rlec.config import select
from rlec.verl_plugin.state import load_state, resumed_folder, save_state, saving_folder

logger = logging.getLogger(__name__)

STATE_FILE = "rlec_passk.json"

__all__ = ["PASSK_ESTIMATOR", "PasskSwitchMixin", "active_k", "compute_rlec_passk_advantage"]


def active_k(config: Any) -> int:
    """The k in force: ``passk.active_k`` of the algorithm config when set, else ``passk.k``.

    Raises:
        ValueError: no ``passk.k`` (the passk overlay was not composed), or a k < 1.
    """
    k = select(config, "passk.active_k", select(config, "passk.k"))
    if k is None:
        raise ValueError("adv_estimator rlec_passk needs algorithm.passk.k: compose megatron_configs/algorithm/passk.yaml "
                         "(algorithm=passk)")
    if int(k) != k or int(k) < 1:
        raise ValueError(f"algorithm.passk.k must be an integer >= 1, got {k!r}")
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
        ValueError: no group ids, or no ``passk.k`` in the config.
    """
    if index is None:
        raise ValueError("rlec_passk needs the prompt uid of every response (verl passes non_tensor_batch['uid'] as index)")
    k = active_k(config)
    if k == 1:  # pass@1 regime: RLEC's mean-only group advantage on the real reward
        return compute_grpo_outcome_advantage(token_level_rewards=token_level_rewards, response_mask=response_mask,
                                              index=index, norm_adv_by_std_in_grpo=bool(select(config, "norm_adv_by_std_in_grpo", False)))
    with torch.no_grad():
        correct = token_level_rewards.sum(dim=-1) > 0
        adv = passk_advantage_batch(correct, list(index), k).to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return adv, adv


class PasskSwitchMixin:
    """The entropy switch of Pass@k Training for a verl V1 trainer (module docstring).

    A no-op unless ``algorithm.adv_estimator`` is ``rlec_passk``; with the switch off it only
    logs ``passk/active_k`` = k.
    """

    passk_switch: EntropySwitch | None = None
    _passk_on: bool = False

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        algo = self.config.algorithm
        self.passk_switch = None
        self._passk_on = select(algo, "adv_estimator") == PASSK_ESTIMATOR
        if not self._passk_on:
            return
        k = active_k({"passk": {"k": select(algo, "passk.k")}})
        if select(algo, "passk.switch.enable", False):
            threshold = select(algo, "passk.switch.entropy_threshold")
            if threshold is None:
                raise ValueError("algorithm.passk.switch.enable needs algorithm.passk.switch.entropy_threshold (nats)")
            self.passk_switch = EntropySwitch(k=k, threshold=float(threshold))
            self._set_active_k(self.passk_switch.active_k)

    def _set_active_k(self, k: int) -> None:
        with open_dict(self.config):
            self.config.algorithm.passk.active_k = int(k)

    def step(self, metrics: dict, timing_raw: dict):
        if not self._passk_on:
            return super().step(metrics, timing_raw)
        used = active_k(self.config.algorithm)
        batch = super().step(metrics, timing_raw)
        metrics["passk/active_k"] = float(used)
        entropy = metrics.get("actor/entropy")
        if self.passk_switch is not None and entropy is not None:
            self._set_active_k(self.passk_switch.update(float(entropy)))
        return batch

    def _save_checkpoint(self):
        if self.passk_switch is not None:  # before verl marks the checkpoint as the latest
            save_state(saving_folder(self.config, self.global_steps), STATE_FILE, self.passk_switch.state_dict())
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        out = super()._load_checkpoint()
        if self.passk_switch is not None:
            state = load_state(resumed_folder(self.config, self.global_steps), STATE_FILE)
            if state is not None:
                self.passk_switch.load_state_dict(state)
                self._set_active_k(self.passk_switch.active_k)
        return out
