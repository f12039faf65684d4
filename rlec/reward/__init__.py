"""The RLEC reward: R_p^(b), the schedule of b, scoring of responses and the reward metrics.

- :mod:`rlec.reward.formula`: the reward family R_p^(b) (correct (1-p)^b, incorrect
  -p(1-p)^(b-1), abstain 0) and its checks;
- :mod:`rlec.reward.schedule`: b linear from 0 to 1 over training, built from the config
  (:func:`schedule_from_config`), and the evaluation b;
- :mod:`rlec.reward.score`: ``compute_score``, the verl custom score function (public entry point
  for verl users who plug rlec's scoring into another reward manager);
- :mod:`rlec.reward.batch`: grading + reward of one training batch (shared by both trainers);
- :mod:`rlec.reward.metrics`: the per-step ``rlec/...`` training metrics.

Pure: imports neither verl nor torch.distributed nor Megatron.
"""

from typing import Any

from rlec.reward.formula import Outcome, reward_stakes, rlec_reward, rlec_reward_array
from rlec.reward.schedule import EVALUATION_B, LinearSchedule, schedule_from_config

__all__ = [
    "EVALUATION_B",
    "LinearSchedule",
    "Outcome",
    "compute_score",
    "reward_stakes",
    "rlec_reward",
    "rlec_reward_array",
    "schedule_from_config",
]


def __getattr__(name: str) -> Any:
    # compute_score imports rlec.grading, which imports rlec.reward.formula: resolve it lazily so
    # importing either package first works.
    if name == "compute_score":
        from rlec.reward.score import compute_score

        return compute_score
    raise AttributeError(f"module 'rlec.reward' has no attribute {name!r}")
