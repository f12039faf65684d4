"""Every numeric setting of the recipe and the overlays, fed non-finite, negative, zero and out-of-range values:
the one early rule set (rlec.rules.settings_rules with every algorithm's check, what DRY_RUN, the launcher and
verl's trainer run before any build or Ray start, on every layout) refuses each naming the key, or LEGAL says why it is legal."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from rlec.algorithms.registry import check_all
from rlec.cluster.config_check import main
from rlec.rules.settings_rules import NUMBER_RULES, early_errors, override_rules, settings_rules
from rlec.config import CPU_LAYOUT, CPU_PRECISION, compose
from rlec.run_config import RunConfig

CONFIGS = Path(__file__).resolve().parents[2] / "megatron_configs"
ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
NAN, INF = float("nan"), float("inf")
VALUES = (NAN, INF, -INF, -1, -0.5, 0, 1.5, 1e9)
# numeric keys rlec reads that the YAML files leave at verl's default (issue 34 names them)
READ_ONLY_KEYS = (f"{ROLLOUT}.temperature", f"{ROLLOUT}.top_p", f"{ROLLOUT}.top_k", f"{ACTOR}.entropy_coeff",
                  f"{ACTOR}.clip_ratio_c", f"{ACTOR}.optim.clip_grad", "algorithm.passk.active_k")

_COUNT = "a count: any integer >= its least value is legal"
# key -> {value: why it is legal}; every other (key, value) of the enumeration must be refused
LEGAL: dict[str, dict[float, str]] = {
    f"{ACTOR}.clip_ratio_high": {0: "no upper clip margin", 1.5: "a wide clip-higher range", 1e9: "no upper clip"},
    f"{ACTOR}.entropy_coeff": {-1: "an entropy penalty", -0.5: "an entropy penalty", 0: "no entropy term (verl's "
                               "default)", 1.5: "a strong entropy bonus", 1e9: "the user's weight: finite"},
    f"{ACTOR}.clip_ratio_c": {1.5: "a dual-clip bound > 1", 1e9: "no dual clip"},
    f"{ACTOR}.optim.clip_grad": {1.5: "a norm bound", 1e9: "no clipping in effect"},
    f"{ACTOR}.optim.lr_warmup_steps": {-1: "use lr_warmup_steps_ratio (the recipe's value)", 0: "no warm-up"},
    f"{ACTOR}.optim.weight_decay": {0: "no weight decay"},
    f"{ACTOR}.optim.lr_warmup_steps_ratio": {0: "no warm-up"},
    f"{ACTOR}.clip_ratio_low": {0: "no lower clip margin"},
    f"{ACTOR}.megatron.override_transformer_config.moe_aux_loss_coeff": {
        0: "no load-balancing loss", 1.5: "a loss weight", 1e9: "a loss weight: finite"},
    f"{ROLLOUT}.temperature": {1.5: "hotter sampling (within rlec.e3.temperature [min, max])"},
    f"{ROLLOUT}.top_k": {-1: "all tokens"},
    f"{ROLLOUT}.val_kwargs.temperature": {0: "greedy validation", 1.5: "hotter sampling", 1e9: "near-uniform: finite"},
    f"{ROLLOUT}.val_kwargs.top_k": {-1: "all tokens"},
    "actor_rollout_ref.model.override_config.rope_theta": {1.5: "a RoPE base", 1e9: "a long-context RoPE base"},
    "algorithm.rollout_correction.rollout_is_threshold": {1.5: "an IS bound", 1e9: "no IS truncation in effect"},
    "data.dataloader_num_workers": {0: "load in the trainer process (RLVE requires it)"},
    "data.filter_overlong_prompts_workers": {0: "the prompt-length filter in the trainer process (layout=cpu)"},
    "data.val_max_samples": {-1: "every validation row (verl's default)"},
    "trainer.save_freq": {-1: "no checkpoints (verl's default)", 0: "no checkpoints (verl saves when save_freq > 0)"},
    "trainer.test_freq": {-1: "no validation (verl's default)", 0: "no validation (verl tests when test_freq > 0)"},
    "trainer.log_val_generations": {0: "none logged"},
    "ray_kwargs.ray_init.num_gpus": {0: "a CPU-only Ray cluster"},
    "data.seed": {0: "a seed"},
    # rlec's own settings (the schema and each algorithm's check)
    "rlec.check.gpu_memory_gib": {1.5: "a GPU's memory", 1e9: "a claim about the hardware, checked against the "
                                  "model's need"},
    "rlec.check.mismatch_kl_alarm": {1.5: "a KL level (a loose alarm)", 1e9: "the alarm never fires: a level, finite"},
    # issue 55: 1e9 s (and 1e308) turned the grader's hang guard off; refused above 60 s now
    "rlec.grading.timeout_s": {1.5: "seconds"},
    "rlec.schedule.start_value": {0: "b = 0 (the recipe's)"},
    "rlec.schedule.end_value": {0: "b = 0"},
    "rlec.cpu.scripted_fraction": {0: "no scripted answers"},
    "rlec.cpu.rollout_weight_noise": {0: "no induced mismatch (the default)"},
    "rlec.cpu.rollout_noise_seed": {0: "a seed"},
    "rlec.schedule.start_step": {0: "the ramp starts before the first step (step 1): b is past start_value at step 1"},
    "rlec.rlve.rows_per_epoch": {1e9: "a whole number: the algorithms' settings read whole floats as ints "
                                 "(rlec.settings' typed reader)"},
    # "rlec.e3.budget.n_max" 1e9 was listed legal ("a cap"); issue 55 bounds it by a step's responses
    "rlec.e3.length_bias.mu": {0: "no length bias", 1.5: "a penalty rate", 1e9: "a penalty rate: finite"},
    "rlec.e3.length_bias.penalty_threshold": {0: "no prompt counts as easy"},
    "rlec.probe.temperature": {1.5: "a hotter probe (a measurement: the training is not affected)",
                               1e9: "near-uniform: finite"},
    "rlec.e3.temperature.anneal.start": {0: "anneal over the whole run"},
    "rlec.e3.temperature.init_steps": {1e9: "H* from every step of the run"},
    "rlec.e3.temperature.max": {1.5: "the recipe's bound", 1e9: "effectively no upper bound (null is none)"},
    "rlec.rlve.initial_difficulty": {0: "the easiest level (the recipe's)"},
    "rlec.rlve.target_min": {0: "the recipe's"},
    "rlec.rlve.seed": {0: "a seed"},
    "rlec.rlve.binary_fraction": {0: "no binary targets"},
}


def _numeric_keys() -> list[str]:
    """Every numeric leaf of recipe.yaml, rlec.yaml and the layouts and overlays (megatron_configs/*/*.yaml)."""
    keys: set[str] = set()

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                keys.add(f"{prefix}{key}")

    for path in [*sorted(CONFIGS.glob("*.yaml")), *sorted(CONFIGS.glob("*/*.yaml"))]:
        walk({k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k != "hydra"}, "")
    return sorted(keys | set(READ_ONLY_KEYS))


@pytest.fixture(scope="module")
def base() -> dict:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose(["layout=tiny_1gpu", "algorithm=[e3,passk,rlve]"]), resolve=True)
    assert _refusals(cfg) == []
    return cfg


def _put(cfg: dict, key: str, value: object) -> None:
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _refusals(cfg: dict) -> list:
    """The early rule set's errors: the settings rules, then every algorithm's check (verl's trainer's order)."""
    return settings_rules(RunConfig(cfg)) + [f for f in check_all(RunConfig(cfg)) if f.level == "error"]


def _names(finding, key: str, value: object) -> bool:
    """The refusal names the key (or its section, with the leaf in the message) and the value."""
    leaf = key.rsplit(".", 1)[-1]
    section = key.rsplit(".", 1)[0]
    named = (finding.key == key or (key.startswith(finding.key + ".") and leaf in finding.message)
             or (f"{section} [" in finding.message and leaf in finding.message))  # "rlec.e3.temperature [min, max]"
    shown = repr(value) in finding.message or str(value) in finding.message or (
        isinstance(value, float) and value.is_integer() and str(int(value)) in finding.message)
    return named and shown


def test_the_enumeration_covers_every_numeric_key_and_each_verl_key_has_a_rule():
    keys = _numeric_keys()
    assert len(keys) >= 80 and f"{ACTOR}.optim.lr" in keys and "rlec.rlve.window" in keys
    assert [k for k in keys if not k.startswith("rlec.") and k not in NUMBER_RULES
            and k not in (f"{ACTOR}.optim.clip_grad", "rlec.passk.k", "algorithm.passk.active_k",
                          "algorithm.rollout_correction.rollout_is_threshold")] == []  # each a rule of its own
    assert set(LEGAL) <= set(keys)


def test_each_bad_value_of_each_numeric_key_is_refused_naming_key_and_value_or_listed_legal(base):
    accepted, unnamed, refused_legal = [], [], []
    for key in _numeric_keys():
        for value in VALUES:
            cfg = copy.deepcopy(base)
            _put(cfg, key, value)
            if key.startswith("rlec.rlve."):  # data.rlve is ${rlec.rlve} in the YAML: what the dataset reads
                _put(cfg, "data.rlve." + key.removeprefix("rlec.rlve."), value)
            found = _refusals(cfg)
            legal = any(v == value or (math.isnan(v) and math.isnan(value))
                        for v in LEGAL.get(key, {}) if isinstance(v, float) == isinstance(value, float) or v == value)
            if legal and found:
                refused_legal.append((key, value, [str(f) for f in found]))
            elif legal:
                continue
            elif not found:
                accepted.append((key, value))
            elif not any(_names(f, key, value) for f in found):
                unnamed.append((key, value, [str(f) for f in found]))
    assert accepted == [] and unnamed == [] and refused_legal == [], (accepted, unnamed, refused_legal)


# issue 34: settings verl's check (DRY_RUN + TRAINER=verl) accepted; key refused, the override that sets it
ISSUE_34 = [
    (f"{ACTOR}.optim.lr", f"{ACTOR}.optim.lr=-1e-5"),  # LR=-1e-5
    ("data.max_response_length", "data.max_response_length=-5"),  # MAX_RESPONSE_LENGTH=-5
    (f"{ACTOR}.optim.lr", f"{ACTOR}.optim.lr=inf"),
    (f"{ROLLOUT}.temperature", f"{ROLLOUT}.temperature=inf"),
    (f"{ACTOR}.entropy_coeff", f"{ACTOR}.entropy_coeff=nan"),
    (f"{ACTOR}.optim.weight_decay", f"{ACTOR}.optim.weight_decay=-1"),
    (f"{ACTOR}.optim.weight_decay", f"{ACTOR}.optim.weight_decay=nan"),
    (f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_low=2"),
    (f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_low=-0.5"),
    (f"{ACTOR}.clip_ratio_high", f"{ACTOR}.clip_ratio_high=nan"),
    (f"{ACTOR}.optim.lr_warmup_steps", f"{ACTOR}.optim.lr_warmup_steps=-3"),
    (f"{ACTOR}.optim.lr", f"{ACTOR}.optim.lr=1e9"),
    ("data.seed", "data.seed=-1"),
    ("data.max_prompt_length", "data.max_prompt_length=0"),
    (f"{ROLLOUT}.top_k", f"{ROLLOUT}.top_k=0"),
]


def _cpu_errors(overrides: list[str]) -> list:
    """The early errors of ``make run``'s config (the CPU layout) with ``overrides``: what verl's trainer refuses at construction."""
    return early_errors(RunConfig(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", *overrides])), overrides)


@pytest.mark.parametrize(("key", "override"), ISSUE_34)
def test_settings_verls_check_accepted_are_refused_by_dry_run_and_the_cpu_layout(tmp_path, capsys, key, override):
    out = tmp_path / "resolved.yaml"
    assert main(["layout=tiny_1gpu", "--skip-path-checks", "--output", str(out), override]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlec.cluster.config_check: refused: ERROR [{key}] "), lines
    assert not out.exists()
    assert [f.key for f in _cpu_errors([override])][:1] == [key]


def test_passks_active_k_above_rollout_n_is_refused_by_its_own_check_in_dry_run_and_the_cpu_layout(tmp_path, capsys):
    """The runtime slot verl's estimator reads (``algorithm.passk.active_k``) is Pass@k's key: its rule is
    ``PassK.check`` (issue 35), which DRY_RUN reports with the other checks (exit 1, nothing written) and verl's
    trainer applies at construction."""
    key, out = "algorithm.passk.active_k", tmp_path / "resolved.yaml"
    overrides = ["algorithm=passk", f"{key}=9"]  # above rollout.n (4 on tiny_1gpu and on the CPU layout)
    assert main(["layout=tiny_1gpu", "--skip-path-checks", "--output", str(out), *overrides]) == 1
    captured = capsys.readouterr()
    assert f"ERROR [{key}] 9 must be an integer in [1, actor_rollout_ref.rollout.n = 4]" in captured.out + captured.err
    assert not out.exists()
    assert [f.key for f in _cpu_errors(overrides)] == [key]


def test_an_algorithm_named_twice_is_refused_by_dry_run_and_the_cpu_layout(capsys):
    assert [f.key for f in override_rules(["algorithm=[e3,e3]"])] == ["algorithm"]
    assert override_rules(["algorithm=[e3,passk]", "rlec.passk.k=2"]) == []
    assert main(["layout=tiny_1gpu", "--skip-path-checks", "algorithm=[e3,e3]"]) == 2
    assert "ERROR [algorithm] '[e3,e3]' names e3 more than once" in capsys.readouterr().err
    errors = _cpu_errors(["algorithm=[e3,e3]"])
    assert [f.key for f in errors] == ["algorithm"] and "names e3 more than once" in errors[0].message


@pytest.mark.parametrize(("key", "override"), ISSUE_34[:2] + [ISSUE_34[9], ISSUE_34[14]])
def test_verls_trainer_refuses_them_at_construction_before_verl_starts(compose_rlec, monkeypatch, key, override):
    """``main_ppo`` started without the launcher: rlec's trainer applies the same rule set before verl's init."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from rlec.verl_plugin import RLECSyncTrainer

    started = []
    monkeypatch.setattr(PPOTrainerSync, "__init__", lambda self, *a, **k: started.append(True))
    with pytest.raises(ValueError, match=rf"^ERROR \[{key}\] "):
        RLECSyncTrainer(compose_rlec("layout=tiny_1gpu", override))
    assert started == []
    RLECSyncTrainer(compose_rlec("layout=tiny_1gpu"))
    assert started == [True]
