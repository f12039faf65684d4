"""The local rollout: verl's DataProto fields, groups, scripted answers that give groups reward variance, advantages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlec.local.rollout import inject_scripted, rollout
from rlec.prompts import build_messages, math_task


@pytest.fixture(scope="module")
def engine(tiny_moe_dir: Path):
    from rlec.generation import HFEngine
    from rlec.models import load_tokenizer

    torch.set_num_threads(1)
    return HFEngine(str(tiny_moe_dir), load_tokenizer(tiny_moe_dir), device="cpu")


def _batch() -> dict:
    """Two prompts as verl's collate_fn returns them (object arrays), both with target p = 0.4."""
    extra = {"target_p": 0.4, "objective": "rlec"}
    return {"raw_prompt": np.array([build_messages(math_task("What is 2+3?"), 0.4),
                                    build_messages(math_task("What is 10-7?"), 0.4)] + [], dtype=object),
            "data_source": np.array(["math", "math"], dtype=object),
            "reward_model": np.array([{"ground_truth": "5"}, {"ground_truth": "3"}], dtype=object),
            "extra_info": np.array([extra, extra], dtype=object), "dummy_tensor": torch.zeros(2, 1)}


def _rollout(engine, n_per_prompt=(3, 3), seed=5, width=6):
    return rollout(engine, _batch(), n_per_prompt=list(n_per_prompt), max_new_tokens=width, temperature=1.0, top_p=1.0, seed=seed,
                   uids=["a", "b"], chat_template_kwargs={"enable_thinking": False})


def test_rollout_builds_verls_batch_with_consecutive_groups(engine) -> None:
    data = _rollout(engine, n_per_prompt=(2, 4))
    assert len(data) == 6 and list(data.non_tensor_batch["uid"]) == ["a"] * 2 + ["b"] * 4
    assert [rm["ground_truth"] for rm in data.non_tensor_batch["reward_model"]] == ["5"] * 2 + ["3"] * 4
    b = data.batch
    assert b["input_ids"].shape == b["attention_mask"].shape == (6, b["prompts"].shape[1] + 6)
    assert torch.equal(b["input_ids"][:, -6:], b["responses"]) and torch.equal(b["attention_mask"][:, -6:], b["response_mask"])
    assert torch.equal(b["position_ids"], (b["attention_mask"].cumsum(1) - 1).clamp(min=0))
    assert data.meta_info["temperature"] == 1.0 and data.meta_info["global_token_num"] == b["attention_mask"].sum(1).tolist()
    assert torch.equal(_rollout(engine, n_per_prompt=(2, 4)).batch["responses"], b["responses"])  # seeded by step


def test_scripted_answers_give_every_group_reward_variance(engine) -> None:
    from rlec.reward.batch import score_batch
    from rlec.reward.schedule import LinearSchedule

    data = _rollout(engine, seed=1, width=12)
    before, _ = score_batch(list(data.non_tensor_batch["response_text"]), ["5"] * 3 + ["3"] * 3, ["math"] * 6,
                            list(data.non_tensor_batch["extra_info"]), 1, LinearSchedule(end_step=2))
    assert len(set(before[:3])) == 1 and len(set(before[3:])) == 1  # a random model: one outcome per group
    assert inject_scripted(data, engine.tokenizer, fraction=0.34, seed=0) == 2
    texts = list(data.non_tensor_batch["response_text"])
    assert texts[2] in ("\\boxed{5}", "\\boxed{I don't know}") and texts[5] in ("\\boxed{3}", "\\boxed{I don't know}")
    for row in (2, 5):  # the tokens say what the text says, and the masks follow them
        n = int(data.batch["response_mask"][row].sum())
        assert engine.tokenizer.decode(data.batch["responses"][row, : n - 1]) == texts[row]
        assert torch.equal(data.batch["attention_mask"][row, -12:], data.batch["response_mask"][row])
    after, infos = score_batch(texts, ["5"] * 3 + ["3"] * 3, ["math"] * 6, list(data.non_tensor_batch["extra_info"]), 1,
                               LinearSchedule(end_step=2))
    assert len(set(after[:3])) == 2 and len(set(after[3:])) == 2  # gold (+1) or I don't know (0) vs the wrong answers (-0.4/0.6)


def test_advantages_are_verls_mean_only_grpo(engine) -> None:
    from rlec.config import compose
    from rlec.local.update import compute_advantages, set_rewards

    data = _rollout(engine, seed=2)
    set_rewards(data, [1.0, 0.0, 0.5, -3.0, -3.0, -3.0])
    compute_advantages(data, compose([], "local"))
    adv = data.batch["advantages"]
    assert torch.allclose(adv[:3, 0], torch.tensor([0.5, -0.5, 0.0]))
    assert torch.all(adv[3:] == 0)  # an all-equal group has no advantage
    assert torch.all((adv != 0) <= (data.batch["response_mask"] > 0))  # zero outside the response
    assert torch.allclose(data.batch["token_level_rewards"].sum(1), torch.tensor([1.0, 0.0, 0.5, -3.0, -3.0, -3.0]))
