"""The train-inference mismatch alarm (rlec.verl_plugin.mismatch): warns naming step and value, stops before the update."""

from __future__ import annotations

import logging

import pytest

from rlec.verl_plugin import mismatch as mm


def test_below_the_level_no_warning_and_the_alarm_metric_is_zero(caplog, capsys):
    with caplog.at_level(logging.INFO, logger=mm.__name__):
        out = mm.check_mismatch(3, {"rollout_corr/k3_kl": 0.001, "rollout_corr/kl": 0.0009}, alarm=0.004, stop=True)
    assert out == {"rlec/mismatch_alarm": 0.0}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "rlec step 3 train-inference mismatch: rollout_corr/kl=0.0009, rollout_corr/k3_kl=0.001" in capsys.readouterr().out


def test_above_the_level_warns_naming_step_and_value(caplog):
    with caplog.at_level(logging.WARNING, logger=mm.__name__):
        out = mm.check_mismatch(17, {"rollout_corr/k3_kl": 0.0125}, alarm=0.004, stop=False)
    assert out == {"rlec/mismatch_alarm": 1.0}
    assert "step 17" in caplog.text and "rollout_corr/k3_kl=0.0125" in caplog.text and "mismatch_kl_alarm=0.004" in caplog.text


def test_stop_raises_before_the_update():
    with pytest.raises(mm.MismatchError, match=r"step 5: .*k3_kl=0.02 > rlec.check.mismatch_kl_alarm=0.004.*stopped before the update"):
        mm.check_mismatch(5, {"rollout_corr/k3_kl": 0.02}, alarm=0.004, stop=True)


def test_no_metric_no_alarm():
    assert mm.check_mismatch(1, {"actor/entropy": 1.0}, alarm=0.004, stop=True) == {}


class _Base:
    def __init__(self):
        self.updated = False

    def _update_actor(self, batch, metrics):
        self.updated = True
        return batch


class _Trainer(mm.MismatchAlarmMixin, _Base):
    def __init__(self, stop):
        super().__init__()
        from omegaconf import OmegaConf

        from rlec.run_config import RunConfig

        self.config = OmegaConf.create({"rlec": {"check": {"mismatch_kl_alarm": 0.004, "mismatch_kl_stop": stop}}})
        self.rlec_run = RunConfig(self.config)  # what rlec's trainers build at construction
        self.global_steps = 9


def test_the_mixin_reads_the_settings_and_stops_before_verls_update():
    warn = _Trainer(stop=False)
    metrics = {"rollout_corr/k3_kl": 0.01}
    assert warn._update_actor("batch", metrics) == "batch" and warn.updated and metrics["rlec/mismatch_alarm"] == 1.0
    stop = _Trainer(stop=True)
    with pytest.raises(mm.MismatchError, match="step 9"):
        stop._update_actor("batch", {"rollout_corr/k3_kl": 0.01})
    assert not stop.updated  # the weights of the alarmed step were never changed


def test_the_trainers_carry_the_alarm():
    from rlec.verl_plugin.trainers import RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer, RLECSyncTrainer

    for cls in (RLECSyncTrainer, RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer):
        assert issubclass(cls, mm.MismatchAlarmMixin)
        assert cls.__mro__.index(mm.MismatchAlarmMixin) < next(i for i, c in enumerate(cls.__mro__) if c.__name__.startswith("PPOTrainer"))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_kl_is_an_alarm_not_a_pass(value):
    with pytest.raises(mm.MismatchError, match="stopped before the update"):
        mm.check_mismatch(2, {"rollout_corr/k3_kl": value}, alarm=0.004, stop=True)
    assert mm.check_mismatch(2, {"rollout_corr/k3_kl": value}, alarm=0.004, stop=False) == {"rlec/mismatch_alarm": 1.0}
