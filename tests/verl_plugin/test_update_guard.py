"""A non-finite update stops verl's trainer before the step is saved (rlec.verl_plugin.update_guard; the retired
local loop's check_finite_update, now on the one loop)."""

from __future__ import annotations

import math

import pytest

from rlec.verl_plugin import update_guard as ug


@pytest.mark.parametrize("bad", [{"actor/pg_loss": math.nan}, {"actor/grad_norm": math.inf}, {"actor/grad_norm": None},
                                 {"actor/pg_loss": "nan"}])
def test_a_non_finite_loss_or_grad_norm_is_refused_naming_it_and_the_step(bad):
    metrics = {"actor/pg_loss": 0.1, "actor/grad_norm": 2.0, **bad}
    key = next(iter(bad))
    with pytest.raises(ug.NonFiniteUpdateError, match=rf"^step 7: {key}=.* stopped before saving it; the last checkpoint"):
        ug.check_finite_update(7, metrics)


def test_finite_figures_pass_and_a_missing_figure_is_not_a_pass():
    ug.check_finite_update(1, {"actor/pg_loss": -0.3, "actor/grad_norm": 0.0})
    with pytest.raises(ug.NonFiniteUpdateError, match="actor/grad_norm=None"):
        ug.check_finite_update(1, {"actor/pg_loss": -0.3})


class _Base:
    def __init__(self, update: dict):
        self.update, self.saved = update, False

    def _update_actor(self, batch, metrics):
        metrics.update(self.update)  # what verl's _update_actor merges: the actor's reduced metrics
        return batch


class _Trainer(ug.FiniteUpdateMixin, _Base):
    global_steps = 4

    def step(self):
        """verl's fit order: the update, then the checkpoint."""
        metrics: dict = {}
        self._update_actor("batch", metrics)
        self.saved = True
        return metrics


def test_the_mixin_stops_after_verls_update_and_before_the_save():
    good = _Trainer({"actor/pg_loss": 0.2, "actor/grad_norm": 1.0})
    assert good.step()["actor/grad_norm"] == 1.0 and good.saved
    bad = _Trainer({"actor/pg_loss": 0.2, "actor/grad_norm": math.nan})
    with pytest.raises(ug.NonFiniteUpdateError, match="step 4: actor/grad_norm=nan"):
        bad.step()
    assert not bad.saved


def test_the_trainers_carry_the_guard_before_verls_own_class():
    from rlec.verl_plugin.trainers import RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer, RLECSyncTrainer

    for cls in (RLECSyncTrainer, RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer):
        mro = cls.__mro__
        assert mro.index(ug.FiniteUpdateMixin) < next(i for i, c in enumerate(mro) if c.__name__.startswith("PPOTrainer"))
