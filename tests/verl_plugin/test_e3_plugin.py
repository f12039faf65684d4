"""E3 on verl's V1 trainer, tested as far as CPU allows: the agent loop's sampling params (through
verl's own instantiation and SingleTurnAgentLoop.run), the reward manager's length bias on real
graded samples, and the generic algorithms mixin driving E3 on a real RLECSyncTrainer (verl's GPU-bound
step and checkpoint I/O replaced by recorders that emulate their contract)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("verl")

from rlec.verl_plugin import RLECColocateAsyncTrainer, RLECSyncTrainer  # noqa: E402
from rlec.algorithms.base import StepRecord  # noqa: E402
from rlec.verl_plugin.e3 import (  # noqa: E402
    LENGTH_MU_KEY,
    PROMPT_KEY,
    TEMPERATURE_KEY,
    e3_sampling_params,
    prompt_key_of,
)
from rlec.verl_plugin.trainers import ROLLOUT_N_KEY, STATE_FILE  # noqa: E402

QWEN_TINY_BASE = ("layout=tiny_1gpu", "algorithm=e3")


def test_sampling_params_take_the_prompt_temperature_except_greedy_and_validation():
    base = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    assert e3_sampling_params(base, {TEMPERATURE_KEY: 0.83, "raw_prompt": []})["temperature"] == 0.83
    assert e3_sampling_params({**base, "temperature": 0}, {TEMPERATURE_KEY: 0.83})["temperature"] == 0  # greedy stays greedy
    assert e3_sampling_params(base, {"raw_prompt": []}) == base  # validation prompts carry no E3 temperature
    assert base["temperature"] == 1.0  # the worker's dict is not modified


def test_prompt_key_prefers_question_id():
    assert prompt_key_of({"question_id": "dapo-7", "index": 3}, "uid") == "question_id:dapo-7"
    assert prompt_key_of({"index": 3}, "uid") == "index:3"
    assert prompt_key_of(None, "uid1") == "row:uid1"


class RecordingServer:
    """Stands in for verl's LLM server client: records the sampling params vLLM would get."""

    def __init__(self):
        self.calls = []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append(dict(sampling_params))
        return TokenOutput(token_ids=[11, 12, 13], log_probs=None)


def test_registered_agent_loop_sends_the_step_temperature_to_the_sampler(compose_rlec, tiny_moe_dir):
    """Built the way verl's AgentLoopWorker builds it (registry + hydra.utils.instantiate)."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = compose_rlec(*QWEN_TINY_BASE, f"actor_rollout_ref.model.path={tiny_moe_dir}")
    server = RecordingServer()
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry[cfg.actor_rollout_ref.rollout.agent.default_agent_loop],
        trainer_config=DictConfigWrap(config=cfg), server_manager=server, tokenizer=hf_tokenizer(str(tiny_moe_dir)),
        processor=None, hf_model_type="qwen3_moe", dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]))
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
    prompt = {"raw_prompt": [{"role": "user", "content": "What is 2 + 2?"}], TEMPERATURE_KEY: 0.71, LENGTH_MU_KEY: 0.0}
    # the agent loop captures its event loop at construction (as verl's worker does): drive it with that one
    out = loop.loop.run_until_complete(loop.run(dict(params), **prompt))
    assert server.calls[-1]["temperature"] == 0.71 and server.calls[-1]["top_p"] == 1.0
    assert list(out.response_ids) == [11, 12, 13]
    loop.loop.run_until_complete(loop.run(dict(params), raw_prompt=prompt["raw_prompt"]))  # a validation prompt: no E3 key
    assert server.calls[-1]["temperature"] == 1.0


@pytest.fixture(scope="module")
def reward_manager(compose_rlec, tiny_moe_dir):
    import importlib.util
    from pathlib import Path

    from verl.utils import hf_tokenizer

    from rlec.verl_plugin import RLECRewardManager

    spec = importlib.util.spec_from_file_location("reward_loop_job", Path(__file__).with_name("reward_loop_job.py"))
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    cfg = compose_rlec(*job.OVERRIDES, f"actor_rollout_ref.model.path={tiny_moe_dir}")
    tokenizer = hf_tokenizer(str(tiny_moe_dir))
    return RLECRewardManager(config=cfg, tokenizer=tokenizer, compute_score=None), tokenizer, job


def test_length_bias_applies_to_correct_responses_of_easy_prompts_only(reward_manager):
    mgr, tokenizer, job = reward_manager
    batch = job.build_batch(tokenizer)
    mu = 0.01
    batch.non_tensor_batch[LENGTH_MU_KEY] = np.array([mu, mu, mu, 0.0, mu, mu, mu], dtype=object)
    outs = [mgr.loop.run_until_complete(mgr.run_single(batch[i : i + 1])) for i in range(len(batch))]
    lengths = [len(tokenizer(s[0], add_special_tokens=False)["input_ids"]) + 1 for s in job.SAMPLES]  # + eos
    # sample 0: correct, easy -> (1-p)^b / (1 + mu l); 1: incorrect (negative reward) untouched; 2: abstain untouched;
    # 3: correct but mu = 0 (not an easy prompt) untouched; 4: correct, easy; 5: incorrect; 6: correct, easy
    factors = [1 / (1 + mu * lengths[0]), 1.0, 1.0, 1.0, 1 / (1 + mu * lengths[4]), 1.0, 1 / (1 + mu * lengths[6])]
    assert [o["reward_score"] for o in outs] == pytest.approx([r * f for r, f in zip(job.EXPECTED, factors)])
    assert [o["reward_extra_info"]["e3_length_bias"] for o in outs] == pytest.approx(factors)
    assert [o["reward_extra_info"]["score"] for o in outs] == pytest.approx([o["reward_score"] for o in outs])
    assert all(o["reward_score"] > 0 for o, s in zip(outs, job.EXPECTED) if s > 0)  # answering right still beats abstaining
    assert len({tuple(sorted(o["reward_extra_info"])) for o in outs}) == 1  # same keys for every sample (verl stacks them)


def test_samples_without_e3_key_are_scored_as_before(reward_manager):
    mgr, tokenizer, job = reward_manager
    out = mgr.loop.run_until_complete(mgr.run_single(job.build_batch(tokenizer)[0:1]))
    assert out["reward_score"] == pytest.approx(job.EXPECTED[0]) and "e3_length_bias" not in out["reward_extra_info"]


# ----------------------------------------------------------------------------- trainer mixin

# eight questions with fixed chances of a correct answer (q0 always right ... q7 never)
SOLVE_RATE = {f"q{i}": 1 - i / 7 for i in range(8)}


def fake_dataloader():
    """One batch of 8 prompts, as verl's collate_fn returns them (numpy object columns)."""
    def col(values):
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    qids = list(SOLVE_RATE)
    return [{"raw_prompt": col([[{"role": "user", "content": q}] for q in qids]),
             "extra_info": col([{"question_id": q, "index": i} for i, q in enumerate(qids)]),
             "index": np.arange(8), "data_source": col(["math_dapo"] * 8)}]


@pytest.fixture
def e3_env(compose_rlec, tiny_moe_dir, monkeypatch, tmp_path):
    """verl's step / checkpoint I/O replaced by recorders that keep their contract (see below)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    log = {"actor_temperature": [], "batches": [], "saved": []}
    entropy_of = {"value": None}

    def fake_step(self, metrics, timing_raw):
        # verl: prepare_step -> _next_train_batch; rollout; old log-probs at config temperature -> actor/entropy
        batch = self._next_train_batch()
        log["batches"].append(batch)
        log["actor_temperature"].append(float(self.config.actor_rollout_ref.rollout.temperature))
        metrics["actor/entropy"] = entropy_of["value"](log["actor_temperature"][-1])
        return batch

    def fake_records(self, batch, fields=(), metrics=None):  # what TransferQueue returns after rollout + reward
        rows = []
        for key, n, mu in zip(batch[PROMPT_KEY], batch[ROLLOUT_N_KEY], batch[LENGTH_MU_KEY]):
            solved = round(SOLVE_RATE[key.split(":")[1]] * n)
            for j in range(n):
                ok = float(j < solved)
                rows.append((key, {"correct": ok, "e3_length_mu": mu, "e3_length_bias": 0.5 if ok and mu > 0 else 1.0}))
        assert PROMPT_KEY in fields  # E3 reads its prompt key back with the responses
        return StepRecord([{PROMPT_KEY: k} for k, _ in rows], [{} for _ in rows], [i for _, i in rows], metrics or {})

    def fake_save(self):
        folder = tmp_path / f"global_step_{self.global_steps}"
        assert (folder / STATE_FILE).exists()  # rlec's state is written before verl marks the checkpoint
        log["saved"].append(self.global_steps)

    monkeypatch.setattr(PPOTrainer, "step", fake_step)
    monkeypatch.setattr(RLECSyncTrainer, "_rlec_step_record", fake_records)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", fake_save)
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", lambda self: setattr(self, "global_steps", self._resume_to))

    def make(*overrides):
        cfg = compose_rlec(*QWEN_TINY_BASE, f"actor_rollout_ref.model.path={tiny_moe_dir}", f"trainer.default_local_dir={tmp_path}",
                           "rlec.e3.temperature.init_steps=2", "rlec.e3.budget.n_min=2", "rlec.e3.budget.n_max=8",
                           "rlec.e3.length_bias.penalty_threshold=0.3", *overrides)
        trainer = RLECSyncTrainer(cfg)
        trainer.train_dataloader, trainer.train_dataloader_it, trainer.total_training_steps = fake_dataloader(), None, 10
        return trainer

    return make, log, entropy_of


def e3_of(trainer):
    """The trainer's E3 controller (the only enabled algorithm of these tests)."""
    (e3,) = trainer._algorithms()
    return e3.controller


def trainer_model_dir(trainer):
    from pathlib import Path

    return Path(trainer.config.actor_rollout_ref.model.path)


def run_steps(trainer, steps):
    out = []
    for step in steps:
        trainer.global_steps = step
        metrics = {}
        trainer.step(metrics, {})
        out.append(metrics)
    return out


def test_e3_is_refused_in_async_modes_and_without_its_agent_loop(compose_rlec, tiny_moe_dir):
    base = (*QWEN_TINY_BASE, f"actor_rollout_ref.model.path={tiny_moe_dir}")
    with pytest.raises(ValueError, match=r"\[trainer.v1.trainer_mode\] rlec.e3 needs rlec_sync"):
        RLECColocateAsyncTrainer(compose_rlec(*base, "trainer.v1.trainer_mode=rlec_colocate_async"))
    with pytest.raises(ValueError, match="default_agent_loop.*rlec.e3.temperature needs rlec_e3_agent"):
        RLECSyncTrainer(compose_rlec(*base, "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"))
    off = RLECSyncTrainer(compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}"))
    assert off._algorithms() == []


def test_batches_carry_exact_budgets_temperature_and_length_bias(e3_env):
    make, log, entropy_of = e3_env
    entropy_of["value"] = lambda t: 0.5
    trainer = make()
    assert e3_of(trainer).scheduler.vocab_size == json.loads((trainer_model_dir(trainer) / "config.json").read_text())["vocab_size"]
    metrics = run_steps(trainer, [1, 2])
    first, second = log["batches"]
    n = trainer.config.actor_rollout_ref.rollout.n
    assert list(first[ROLLOUT_N_KEY]) == [n] * 8 and list(first[LENGTH_MU_KEY]) == [0.0] * 8  # nothing seen yet
    counts, mus = list(second[ROLLOUT_N_KEY]), list(second[LENGTH_MU_KEY])
    assert sum(counts) == n * 8 and all(2 <= c <= 8 for c in counts)
    assert counts == sorted(counts)  # q0 (easiest) ... q7 (hardest): harder prompts get more
    # exactly the easiest 30 % of the 8 prompts (floor(2.4) = 2) are length-biased: q0 (4 of 4 right), then one of
    # q1 / q2 (3 of 4 each: a tie, broken by the stable digest of the id)
    assert mus[0] == 0.001 and sorted(mus[1:3]) == [0.0, 0.001] and mus[3:] == [0.0] * 5
    assert second[TEMPERATURE_KEY] == log["actor_temperature"][1]  # sampler and actor use the same T
    assert metrics[1]["e3/rollout_n/min"] == min(counts) and metrics[1]["e3/rollout_n/max"] == max(counts)
    assert metrics[1]["e3/rollout_n/mean"] == n
    assert metrics[1]["e3/length_bias/mean"] == 0.5 and metrics[1]["e3/length_bias/count"] > 0


@pytest.mark.parametrize(("target", "direction"), [(1.0, +1), (0.1, -1)], ids=["target-above-entropy", "target-below-entropy"])
def test_temperature_moves_toward_the_target_in_both_regimes(e3_env, target, direction):
    make, log, entropy_of = e3_env
    entropy_of["value"] = lambda t: 0.4 * t  # a policy whose entropy grows with temperature
    trainer = make(f"rlec.e3.temperature.target_entropy={target}", "rlec.e3.temperature.anneal.enable=false")
    metrics = run_steps(trainer, range(1, 7))
    temps = log["actor_temperature"]
    assert temps[0] == 1.0 and all(direction * (b - a) > 0 for a, b in zip(temps, temps[1:]) if a != b)
    assert direction * (temps[-1] - 1.0) > 0
    assert [m["e3/temperature"] for m in metrics] == temps and metrics[0]["e3/target_entropy"] == target
    assert metrics[-1]["e3/entropy"] == pytest.approx(0.4 * temps[-1])


def test_checkpoint_holds_e3_state_and_resume_equals_uninterrupted(e3_env, tmp_path):
    make, log, entropy_of = e3_env
    entropy_of["value"] = lambda t: 0.3 + 0.2 * t
    whole = make()
    run_steps(whole, range(1, 7))
    expected_temps, expected_counts = log["actor_temperature"][:], [list(b[ROLLOUT_N_KEY]) for b in log["batches"]]

    log["actor_temperature"].clear(), log["batches"].clear()
    first = make()
    run_steps(first, range(1, 4))
    first._save_checkpoint()
    saved = json.loads((tmp_path / "global_step_3" / STATE_FILE).read_text())["e3"]
    assert set(saved) == {"temperature", "history"} and len(saved["history"]["counts"]) == 8
    resumed = make()
    resumed._resume_to = 3
    resumed._load_checkpoint()
    assert e3_of(resumed).state_dict() == e3_of(first).state_dict()
    run_steps(resumed, range(4, 7))
    assert log["actor_temperature"] == expected_temps
    assert [list(b[ROLLOUT_N_KEY]) for b in log["batches"]] == expected_counts
    assert math.isclose(e3_of(resumed).temperature, e3_of(whole).temperature)


def test_a_checkpoint_without_the_algorithms_state_file_warns_that_e3_starts_afresh(e3_env, tmp_path, caplog):
    """A verl checkpoint without ``rlec_algorithms.json`` resumes E3 afresh, with a warning (never silently)."""
    make, log, entropy_of = e3_env
    entropy_of["value"] = lambda t: 0.3 + 0.2 * t
    first = make()
    run_steps(first, range(1, 4))
    first._save_checkpoint()
    (tmp_path / "global_step_3" / STATE_FILE).unlink()
    fresh = make()
    fresh._resume_to = 3
    with caplog.at_level("WARNING", logger="rlec.verl_plugin.trainers"):
        fresh._load_checkpoint()
    assert any("without e3's state" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_step_records_round_trip_through_transfer_queue(run_job):
    """The fields E3 adds to each prompt come back from a real TransferQueue (Ray on CPU), padding dropped."""
    from pathlib import Path

    result = run_job(Path(__file__).with_name("e3_tq_job.py"))
    records = result["records"]
    assert [key for key, _ in records] == ["question_id:q-1"] * 2 + ["question_id:q-2"] * 3
    assert [info["correct"] for _, info in records] == [1.0, 0.0, 0.0, 1.0, 1.0]
    assert [info["difficulty"] for info in result["extra_info"]] == [0, 1, 2, 3, 4]  # RLVE's fields, same read
