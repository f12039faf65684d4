"""E3, Pass@k Training and RLVE in the local run: the runner drives the same Algorithm objects verl's trainer drives
(rlec.algorithms.registry), at the same points of the step; the helpers below make the runner's calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlec.algorithms import registry
from rlec.algorithms.base import AlgorithmContext, RolloutPlan, StepRecord
from rlec.algorithms.e3.algorithm import E3
from rlec.algorithms.passk.algorithm import PassK
from rlec.algorithms.rlve.algorithm import RLVE
from rlec.config import compose
from rlec.local.runner import _response_fields


def _batch(qids: list[str]) -> dict:
    return {"extra_info": np.array([{"question_id": q, "target_p": 0.5} for q in qids], dtype=object)}


def _data(n_per_prompt: list[int], lengths: list[int], step: int = 1):
    """A rollout-shaped DataProto: rows grouped by prompt (uid s<step>p<i>), response masks of the given lengths."""
    from verl import DataProto

    rows = [i for i, k in enumerate(n_per_prompt) for _ in range(k)]
    mask = torch.zeros(len(rows), 8, dtype=torch.long)
    for r, length in enumerate(lengths):
        mask[r, :length] = 1
    return DataProto.from_dict(tensors={"response_mask": mask},
                               non_tensors={"uid": np.array([f"s{step}p{i}" for i in rows], dtype=object),
                                            "extra_info": np.array([{} for _ in rows], dtype=object)})


def _e3(*overrides: str) -> E3:
    cfg = compose(["algorithm=e3", "rlec.e3.budget.n_min=2", "rlec.e3.budget.n_max=8", "trainer.total_training_steps=20",
                   *overrides], "local")
    return E3.from_config(cfg, AlgorithmContext(vocab_size=151_936))


def _plan(algorithm, step, batch, plan):
    algorithm.plan_rollout(step, list(batch["extra_info"]), plan)
    _plan.last = plan


def _observe(algorithm, step, data, infos, metrics, plan=None):
    """What the runner does after the update: one StepRecord of the step's responses."""
    plan = plan or _plan.last
    fields = _response_fields(data, plan) if data is not None else []
    extra = [dict(e or {}) for e in data.non_tensor_batch["extra_info"]] if data is not None else []
    return algorithm.observe(step, 20, StepRecord(fields, extra, infos, metrics))


def _adjust(algorithm, data, scores, infos, plan=None):
    """What the runner does after grading: every response's reward through the algorithm's adjust_reward."""
    fields = _response_fields(data, plan or _plan.last)
    lengths = data.batch["response_mask"].sum(dim=1).tolist()
    return [type(algorithm).adjust_reward(s, i, f, int(n)) for s, i, f, n in zip(scores, infos, fields, lengths)]


@pytest.mark.parametrize(("target", "direction"), [(20.0, 1), (2.0, -1)])
def test_e3_temperature_moves_toward_the_target_entropy(target: float, direction: int) -> None:
    hook = _e3(f"rlec.e3.temperature.target_entropy={target}")
    plan = RolloutPlan(1.0, [4, 4])
    _plan(hook, 1, _batch(["a", "b"]), plan)
    assert plan.temperature == 1.0
    data = _data(plan.n_per_prompt, [3] * 8)
    infos = [{"correct": 0.0} for _ in range(8)]
    metrics = _observe(hook, 1, data, infos, {"actor/entropy": 11.9})
    assert metrics["e3/temperature"] == 1.0 and metrics["e3/target_entropy"] == target
    _plan(hook, 2, _batch(["a", "b"]), plan)
    assert (plan.temperature - 1.0) * direction > 0  # entropy below the target: hotter; above: colder
    restored = _e3(f"rlec.e3.temperature.target_entropy={target}")
    restored.load_state_dict(hook.state_dict())
    assert restored.controller.temperature == hook.controller.temperature


def test_e3_budget_sums_exactly_and_gives_harder_prompts_more() -> None:
    hook = _e3("rlec.e3.temperature.target_entropy=5.0")
    plan = RolloutPlan(1.0, [4, 4, 4])
    _plan(hook, 1, _batch(["easy", "mid", "hard"]), plan)
    data = _data(plan.n_per_prompt, [3] * 12)
    correct = [1.0] * 4 + [1.0, 1.0, 0.0, 0.0] + [0.0] * 4
    _observe(hook, 1, data, [{"correct": c} for c in correct], {"actor/entropy": 5.0})
    _plan(hook, 2, _batch(["easy", "mid", "hard"]), plan)
    assert sum(plan.n_per_prompt) == 12 and plan.n_per_prompt[0] <= plan.n_per_prompt[1] <= plan.n_per_prompt[2]
    assert plan.n_per_prompt[2] > plan.n_per_prompt[0] and min(plan.n_per_prompt) >= 2


def test_e3_length_bias_only_on_correct_answers_of_easy_prompts() -> None:
    hook = _e3("rlec.e3.length_bias.mu=0.1", "rlec.e3.length_bias.penalty_threshold=0.4")
    plan = RolloutPlan(1.0, [2, 2, 2])
    _plan(hook, 1, _batch(["easy", "mid", "hard"]), plan)
    _observe(hook, 1, _data([2, 2, 2], [2] * 6), [{"correct": c} for c in (1, 1, 1, 0, 0, 0)], {"actor/entropy": 5.0})
    _plan(hook, 2, _batch(["easy", "mid", "hard"]), plan)
    n = plan.n_per_prompt
    data = _data(n, [5] * sum(n), step=2)
    infos = [{"correct": 1.0 if i % 2 == 0 else 0.0} for i in range(sum(n))]
    scores = [0.5 if info["correct"] else -0.5 for info in infos]
    out = _adjust(hook, data, list(scores), infos)
    rows_easy = range(n[0])
    for row, (before, after, info) in enumerate(zip(scores, out, infos)):
        if row in rows_easy and info["correct"]:
            assert after == pytest.approx(before / (1 + 0.1 * 5)) and after > 0  # shorter is better, still above abstaining
        else:
            assert after == before  # wrong answers and harder prompts are never length-biased
    metrics = _observe(hook, 2, data, infos, {"actor/entropy": 5.0})
    assert metrics["e3/length_bias/mean"] == pytest.approx(1 / 1.5) and metrics["e3/rollout_n/mean"] == 4  # = rollout.n


def test_passk_switch_sets_the_estimators_k_and_the_advantage_is_pass_at_k() -> None:
    from rlec.local.update import compute_advantages, set_rewards

    cfg = compose(["algorithm=passk", "rlec.passk.k=2", "rlec.passk.switch.enable=true",
                   "rlec.passk.switch.entropy_threshold=3.0"], "local")
    __import__(PassK.registration)  # the rlec_passk estimator, as the runner imports it
    (hook,) = [a for a in registry.build(cfg, AlgorithmContext()) if a.name == "passk"]
    assert hook.step_overrides(1) == {"algorithm.passk.active_k": 1}  # pass@1 (mean-only) until the entropy falls below the threshold
    assert _observe(hook, 1, None, [], {"actor/entropy": 5.0}) == {"passk/active_k": 1.0}
    _observe(hook, 2, None, [], {"actor/entropy": 1.0})
    assert hook.step_overrides(3) == {"algorithm.passk.active_k": 2}
    data = _data([4], [3] * 4)
    set_rewards(data, [0.5, -0.5, -0.5, 0.0])  # one correct of four (an abstention is not correct)
    local = compose(["algorithm=passk"], "local")
    compute_advantages(data, _with(local, hook.step_overrides(3)))
    adv = data.batch["advantages"][:, 0]
    # N=4, N_neg=3, k=2: R = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2; A_pos = 1, A_neg = (1/2 - C(2,1)/C(3,1)) / (1/2) = -1/3
    assert adv.tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    restored = PassK.from_config(cfg, AlgorithmContext())
    restored.load_state_dict(hook.state_dict())
    assert restored.step_overrides(4) == {"algorithm.passk.active_k": 2}


def _with(cfg, overrides):
    from rlec.local.runner import _with as runner_with

    return runner_with(cfg, overrides)


def test_rlve_hook_feeds_every_response_to_the_controllers() -> None:
    from rlec.environments import EnvironmentSource

    source = EnvironmentSource({"environments": ["arithmetic"], "samples_per_prompt": 1, "min_samples_factor": 1})
    hook = RLVE(source)
    data = _data([2, 2], [3] * 4)
    data.non_tensor_batch["extra_info"] = np.array([{"environment": "arithmetic", "difficulty": 0}] * 4, dtype=object)
    metrics = _observe(hook, 1, data, [{"correct": 1.0}] * 4, {}, plan=RolloutPlan(1.0, [2, 2]))
    assert metrics["rlve/arithmetic/share"] == 1.0 and "rlve/arithmetic/difficulty" in metrics


def test_environments_variable_trains_on_environments_only(qwen_tokenizer) -> None:
    from rlec.local.config import load_config
    from rlec.local.data import PromptLoader

    cfg = load_config([], env={"ENVIRONMENTS": "arithmetic,sorting"})
    assert list(cfg.data.train_files) == [] and cfg.data.rlve.enable and list(cfg.rlec.rlve.environments) == ["arithmetic", "sorting"]
    loader = PromptLoader(cfg, qwen_tokenizer)
    (hook,) = registry.build(cfg, AlgorithmContext(source=loader.dataset.rlve_source))
    batch = loader.next_batch()
    assert {info["environment"] for info in batch["extra_info"]} <= {"arithmetic", "sorting"}
    assert all(ds.startswith("rlve/") for ds in batch["data_source"]) and math.isfinite(len(loader))
    assert hook.source is loader.dataset.rlve_source
