"""The RLEC reward: R_p^(b), the schedule of b, scoring of responses and the reward metrics.

- :mod:`rlec.reward.formula`: the reward family R_p^(b) (correct (1-p)^b, incorrect
  -p(1-p)^(b-1), abstain 0) and its checks; the outcome it rewards is grading's
  (:class:`rlec.grading.outcome.Outcome`): the reward reads grading, never the reverse;
- :mod:`rlec.reward.schedule`: b linear from 0 to 1 over training, built from the config
  (:func:`schedule_from_config`), and the evaluation b;
- :mod:`rlec.reward.score`: the target p of a row (``target_of``, shared with the data contract) and the
  score dict of a graded response;
- :mod:`rlec.reward.batch`: grading + reward of a training batch's responses, one at a time
  (``score_one_async``, what rlec's reward manager in verl's reward loop calls);
- :mod:`rlec.reward.metrics`: the per-step ``rlec/...`` training metrics.

Pure: imports neither verl nor torch.distributed nor Megatron.
"""

from rlec.reward.formula import reward_stakes, rlec_reward, rlec_reward_array
from rlec.reward.schedule import EVALUATION_B, LinearSchedule, schedule_from_config

__all__ = [
    "EVALUATION_B",
    "LinearSchedule",
    "reward_stakes",
    "rlec_reward",
    "rlec_reward_array",
    "schedule_from_config",
]
