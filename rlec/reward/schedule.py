"""The schedule of the stability coefficient b, read from the one config schema.

b moves linearly from ``rlec.schedule.start_value`` (0) to ``end_value`` (1) between
``start_step`` (1, verl counts steps from 1) and ``end_step`` (default: the run's total training
steps), as a pure function of the global step: a resumed run gets exactly the b of an
uninterrupted one. Evaluation always scores with :data:`EVALUATION_B` = 1, the end of the
schedule (the bounded stakes +(1-p) / -p that the prompt states).

Both trainers build their schedule with :func:`schedule_from_config` from the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlec.reward.formula import check_b
from rlec.run_config import RunConfig

EVALUATION_B = 1.0

__all__ = ["EVALUATION_B", "LinearSchedule", "schedule_from_config", "schedule_length"]


@dataclass(frozen=True)
class LinearSchedule:
    """b as a pure, clamped linear function of the global training step.

    ``b(step) = start_value + (end_value - start_value) * clip((step - start_step) /
    (end_step - start_step), 0, 1)``. Because it depends on the step alone, a run resumed at
    step k gets exactly the b of an uninterrupted run.

    verl counts global steps from 1 (the first update is step 1) to ``total_training_steps``,
    so the defaults ``start_step=1, end_step=total_training_steps`` give b = 0 on the first
    step and b = 1 on the last.

    Attributes:
        end_step: the step at which ``end_value`` is reached (usually the total step count).
        start_value: b before and at ``start_step``, in [0, 1] (default 0).
        end_value: b at and after ``end_step``, in [0, 1] (default 1).
        start_step: the step at which the ramp starts (default 1).

    Raises:
        ValueError: values outside [0, 1], or ``end_step <= start_step``.
    """

    end_step: int
    start_value: float = 0.0
    end_value: float = 1.0
    start_step: int = 1

    def __post_init__(self) -> None:
        check_b(self.start_value)
        check_b(self.end_value)
        if int(self.end_step) <= int(self.start_step):
            raise ValueError(
                f"schedule end_step ({self.end_step}) must be greater than start_step ({self.start_step})"
            )

    def __call__(self, step: int) -> float:
        """b at global step ``step`` (any integer; clamped outside the ramp)."""
        frac = (int(step) - self.start_step) / (self.end_step - self.start_step)
        frac = min(1.0, max(0.0, frac))
        return self.start_value + (self.end_value - self.start_value) * frac


def schedule_length(run: RunConfig) -> int:
    """The global step at which b reaches its end value, read from the trainer config.

    First match wins:

    1. ``rlec.schedule.end_step`` (rlec's own setting);
    2. ``trainer.total_training_steps`` (verl's explicit step count; the launcher's STEPS sets it);
    3. ``actor_rollout_ref.actor.optim.total_training_steps / parameter_sync_step``: verl's
       trainer writes this (dataset size // train_batch_size * total_epochs, times the local
       updates per step) into the config in ``_init_dataloader``, before it starts the reward
       workers, so the workers see the real count.

    ``run`` is the caller's :class:`rlec.run_config.RunConfig`, so one code path parses the settings once.

    Raises:
        ValueError: none of these is set (a config used outside verl's trainer).
    """
    end_step = run.rlec.schedule.end_step
    if end_step is not None:
        return end_step
    steps = run.keys.total_training_steps
    if steps is not None:
        return int(steps)
    optim_steps = run.keys.optim_total_training_steps
    if optim_steps is not None and int(optim_steps) > 0:
        return int(optim_steps) // int(run.parameter_sync_step)
    raise ValueError(
        "cannot tell the b schedule's length: set rlec.schedule.end_step or trainer.total_training_steps "
        "(verl's trainer sets actor_rollout_ref.actor.optim.total_training_steps itself)"
    )


def schedule_from_config(run: RunConfig) -> LinearSchedule:
    """The b schedule: ``rlec.schedule.{start_value, end_value, start_step}`` and :func:`schedule_length`
    (``run``: the caller's :class:`rlec.run_config.RunConfig`).

    Raises:
        ValueError: see :func:`schedule_length`; values outside [0, 1]; end step <= start step; any
            ``rlec.*`` setting the schema refuses (:class:`rlec.settings.SettingError`).
    """
    schedule = run.rlec.schedule
    return LinearSchedule(end_step=schedule_length(run), start_value=schedule.start_value,
                          end_value=schedule.end_value, start_step=schedule.start_step)
