"""The RLEC reward: R_p^(b), the schedule of b, scoring of responses and the reward metrics.

- :mod:`rlec.reward.formula`: the reward family R_p^(b) (correct (1-p)^b, incorrect
  -p(1-p)^(b-1), abstain 0) and its checks; the outcome it rewards is grading's
  (:class:`rlec.grading.outcome.Outcome`): the reward reads grading, never the reverse;
- :mod:`rlec.reward.schedule`: b linear from 0 to 1 over training, built from the config
  (:func:`schedule_from_config`), and the evaluation b;
- :mod:`rlec.reward.score`: ``compute_score``, the verl custom score function (public entry point
  for verl users who plug rlec's scoring into another reward manager);
- :mod:`rlec.reward.batch`: grading + reward of one training batch (verl's reward manager scores one response at a time with the same functions);
- :mod:`rlec.reward.metrics`: the per-step ``rlec/...`` training metrics.

Pure: imports neither verl nor torch.distributed nor Megatron.
"""

from rlec.reward.formula import reward_stakes, rlec_reward, rlec_reward_array
from rlec.reward.schedule import EVALUATION_B, LinearSchedule, schedule_from_config
from rlec.reward.score import compute_score

__all__ = [
    "EVALUATION_B",
    "LinearSchedule",
    "compute_score",
    "reward_stakes",
    "rlec_reward",
    "rlec_reward_array",
    "schedule_from_config",
]
