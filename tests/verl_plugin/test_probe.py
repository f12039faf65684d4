"""The probe-set entropy (rlec.verl_plugin.probe, HFRolloutServer.probe): the metric equals a direct computation on a
tiny model, the rollout's own engine samples it, the schedule and seeds are the declared ones (issue 57 item 4)."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch

from rlec.cpu import rollout_server as cr
from rlec import probe_keys
from rlec.run_config import RunConfig
from rlec.verl_plugin import probe
from rlec.cpu.rollout_scores import response_entropies

PROMPTS = [[151644, 872, 198, 16], [151644, 872, 198, 17, 18, 19]]  # unequal lengths: the padding is exercised


@pytest.fixture(scope="module")
def server(tiny_moe_dir):
    config = SimpleNamespace(response_length=6, prompt_length=32, seed=0)
    return cr.HFRolloutServer(config, SimpleNamespace(local_path=str(tiny_moe_dir)), replica_rank=0)


def _direct_entropies(model, prompt, response, temperature=1.0):
    """-sum p log p of the full next-token distribution at each response token, one unpadded forward per row."""
    ids = torch.tensor([[*prompt, *response]])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].double() / temperature
    p = torch.softmax(logits, dim=-1)
    h = -(p * torch.log(p)).sum(-1)
    return h[len(prompt) - 1:len(prompt) - 1 + len(response)].tolist()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_response_entropies_equal_the_direct_sum_over_the_vocabulary(server, temperature):
    model = server.engine.model
    responses = [[11, 12, 13], [14], []]
    prompts = [*PROMPTS, PROMPTS[0]]
    got = response_entropies(model, prompts, responses, temperature=temperature, chunk=2)  # two chunks
    assert [len(g) for g in got] == [3, 1, 0]
    for prompt, response, values in zip(prompts, responses, got):
        expected = _direct_entropies(model, prompt, response, temperature)
        assert values == pytest.approx(expected, abs=1e-4)
        assert all(0 < v <= math.log(model.config.vocab_size) + 1e-6 for v in values)


def test_the_probe_samples_with_the_rollouts_engine_and_measures_the_entropy_of_its_own_responses(server):
    rows = [PROMPTS[0], PROMPTS[0], PROMPTS[1]]
    seeds = [11, 12, 13]
    first = asyncio.run(server.probe(rows, seeds, 1.0))
    again = asyncio.run(server.probe(rows[::-1], seeds[::-1], 1.0))
    assert [r["tokens"] for r in again[::-1]] == [r["tokens"] for r in first]  # each row from its own seed
    engine = server.engine.sample([PROMPTS[1]], n=1, max_new_tokens=6, temperature=1.0, row_seeds=[13])
    assert first[2]["tokens"] == engine.responses[0, : int(engine.response_mask[0].sum())].tolist()
    for row, result in zip(rows, first):
        assert 1 <= len(result["tokens"]) <= 6
        assert result["entropies"] == pytest.approx(_direct_entropies(server.engine.model, row, result["tokens"]), abs=1e-4)
    metrics = probe.probe_metrics([r["entropies"] for r in first])
    tokens = [h for r in first for h in r["entropies"]]
    assert metrics[probe_keys.ENTROPY] == pytest.approx(sum(tokens) / len(tokens))  # token-mean, as actor/entropy
    assert metrics[probe_keys.RESPONSE_LENGTH] == pytest.approx(len(tokens) / 3)


def test_the_probe_leaves_the_training_requests_batch_seed_alone(server):
    before = server.get_stats()["batches"]
    asyncio.run(server.probe([PROMPTS[0]], [1], 1.0))
    assert server.get_stats()["batches"] == before


def test_probe_refuses_rows_without_seeds(server):
    with pytest.raises(ValueError, match="one seed per row"):
        asyncio.run(server.probe([PROMPTS[0]], [], 1.0))


def test_probe_metrics_by_hand_and_refusals():
    got = probe.probe_metrics([[1.0, 2.0, 3.0], [0.0]])
    assert got == {probe_keys.ENTROPY: 1.5, probe_keys.RESPONSE_LENGTH: 2.0}  # (1 + 2 + 3 + 0) / 4 tokens, 4 / 2 responses
    with pytest.raises(ValueError, match="nothing to measure"):
        probe.probe_metrics([[], []])


def test_probe_steps_are_the_first_every_nth_and_the_last():
    assert [s for s in range(1, 51) if probe.is_probe_step(s, 20, 50)] == [1, 20, 40, 50]
    assert [s for s in range(1, 4) if probe.is_probe_step(s, 20, 3)] == [1, 3]


def test_probe_seeds_depend_on_seed_and_step_only_and_never_repeat_a_training_requests():
    a = probe.probe_seeds(0, 20, 64, 8)
    assert len(a) == 512 and len(set(a)) == 512
    assert a == probe.probe_seeds(0, 20, 64, 8)  # every arm of seed 0 draws the same probe samples at step 20
    assert a != probe.probe_seeds(1, 20, 64, 8) and a != probe.probe_seeds(0, 40, 64, 8)
    assert a[8 * 3 + 2] == cr.request_seed(0, "probe20", 3, 2)  # prompt-major
    assert cr.request_seed(0, 20, 3, 2) != a[8 * 3 + 2]  # a training request of step 20


def test_read_probe_prompts_refuses_a_file_without_prompts(tmp_path):
    import pandas as pd

    path = tmp_path / "probe.parquet"
    pd.DataFrame({"question": ["x"]}).to_parquet(path)
    with pytest.raises(ValueError, match=r"rlec.probe.file=.*'prompt' column"):
        probe.read_probe_prompts(str(path))
    pd.DataFrame({"prompt": [[{"role": "user", "content": "1 + 1?"}]]}).to_parquet(path)
    assert probe.read_probe_prompts(str(path)) == [[{"role": "user", "content": "1 + 1?"}]]


# ---- the graded probe: rlec/probe/pass@k (rlec.probe.pass_k) ------------------------------------------------------

def test_probe_pass_at_k_by_hand():
    # prompt 0: 2 right of 6 -> pass@4 = 1 - C(4, 4) / C(6, 4) = 1 - 1/15 = 14/15; prompt 1: 0 of 6 -> 0; prompt 2: 6 of 6 -> 1
    correct = [[True, False, False, True, False, False], [False] * 6, [True] * 6]
    got = probe.pass_at_k_metrics(correct, 4, low_q=[True, True, False])
    assert got[probe_keys.pass_at_k_key(4)] == pytest.approx((14 / 15 + 0 + 1) / 3)
    assert got[probe_keys.pass_at_k_key(4, probe_keys.LOW_Q)] == pytest.approx((14 / 15 + 0) / 2)  # prompts 0 and 1 only
    assert got[probe_keys.pass_at_k_key(1)] == pytest.approx((2 / 6 + 0 + 1) / 3)
    assert probe_keys.pass_at_k_key(4, probe_keys.LOW_Q) == "rlec/probe/pass@4/low_q"
    from rlec.experiments.spec import Probe  # the keys an experiment stores are the ones logged here

    assert set(Probe(pass_k=4).metrics()) == {probe_keys.ENTROPY, *got} and Probe().metrics() == (probe_keys.ENTROPY,)
    # n = k: pass@k is "any of the k right" (prompt 0 has one right of 4)
    assert probe.pass_at_k_metrics([[False, False, True, False], [False] * 4], 4)[probe_keys.pass_at_k_key(4)] == 0.5
    # no prompt marked: no low_q figure (not a zero)
    assert probe_keys.pass_at_k_key(4, probe_keys.LOW_Q) not in probe.pass_at_k_metrics(correct, 4, low_q=[False] * 3)


def test_probe_pass_at_k_refuses_fewer_responses_than_k_and_misaligned_flags():
    with pytest.raises(ValueError, match="at least k responses per prompt"):
        probe.pass_at_k_metrics([[True] * 4, [True] * 3], 4)
    with pytest.raises(ValueError, match="2 low_q flags for 1 prompts"):
        probe.pass_at_k_metrics([[True] * 4], 4, low_q=[True, False])


def _pair_sum_rows():
    from rlec.environments import get_environment, problem_row

    env = get_environment("pair_sum")
    return [problem_row(env.generate(seed, 1), index=i, split="probe") for i, seed in enumerate((1, 3))]


def test_the_graded_probe_uses_the_reward_managers_grader(tmp_path):
    """Each probe response's verdict equals the reward manager's ``correct`` for it (score_one_async, rlec's reward
    manager's scoring), and the figures are pass_at_k_metrics of those verdicts."""
    import pandas as pd
    from omegaconf import OmegaConf

    from rlec.environments.base import Problem
    from rlec.reward.batch import score_one_async
    from rlec.reward.schedule import LinearSchedule

    rows = _pair_sum_rows()
    frame = pd.DataFrame(rows)
    frame[probe_keys.LOW_Q] = [True, False]
    path = tmp_path / "probe.parquet"
    frame.to_parquet(path)
    golds, sources, low_q = probe.read_probe_answers(str(path))
    assert low_q == [True, False] and sources == [r["data_source"] for r in rows]
    assert [Problem.from_json(g).data["n"] for g in golds] == [134, 90]  # m = 99 (level 1)
    # prompt 0 (n = 134): two right pairs (spaces differ), a wrong sum, an unparsable box; prompt 1 (n = 90): a right
    # pair, an out-of-range one (100 > m), no answer, another right pair
    texts = ["\\boxed{99 + 35}", "\\boxed{35+99}", "\\boxed{99 + 36}", "\\boxed{seven}",
             "\\boxed{88 + 2}", "\\boxed{100 + -10}", "", "\\boxed{0 + 90}"]
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: texts[ids[0]])
    trainer = SimpleNamespace(tokenizer=tokenizer, rlec_run=RunConfig(OmegaConf.create({"rlec": {"grading": {"timeout_s": 5.0}}})))
    settings = SimpleNamespace(samples=4, pass_k=2)
    got = probe.ProbeMixin._rlec_grade_probe(trainer, settings, [[i] for i in range(8)], (golds, sources, low_q))
    schedule = LinearSchedule(end_step=2)
    manager = [asyncio.run(score_one_async(t, golds[i // 4], sources[i // 4], rows[i // 4]["extra_info"], 1, schedule))["correct"]
               for i, t in enumerate(texts)]
    assert manager == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    expected = probe.pass_at_k_metrics([[bool(x) for x in manager[:4]], [bool(x) for x in manager[4:]]], 2, [True, False])
    assert got == expected
    # both prompts 2 right of 4: pass@2 = 1 - C(2, 2) / C(4, 2) = 5/6 each; pass@1 = 1/2
    assert got == {probe_keys.pass_at_k_key(2): pytest.approx(5 / 6), probe_keys.pass_at_k_key(1): 0.5,
                   probe_keys.pass_at_k_key(2, probe_keys.LOW_Q): pytest.approx(5 / 6)}


def test_read_probe_answers_names_what_is_missing(tmp_path):
    import pandas as pd

    path = tmp_path / "probe.parquet"
    pd.DataFrame({"prompt": [[{"role": "user", "content": "1 + 1?"}]]}).to_parquet(path)
    with pytest.raises(ValueError, match=r"rlec.probe.file=.*missing \['data_source', 'reward_model'\]"):
        probe.read_probe_answers(str(path))
    frame = pd.DataFrame(_pair_sum_rows())
    frame["reward_model"] = [frame["reward_model"][0], {"style": "rule"}]  # row 1 lost its gold answer
    frame.to_parquet(path)
    with pytest.raises(ValueError, match=r"row 1 has no reward_model.ground_truth"):
        probe.read_probe_answers(str(path))
    frame = pd.DataFrame(_pair_sum_rows())
    frame[probe_keys.LOW_Q] = ["yes", "no"]
    frame.to_parquet(path)
    with pytest.raises(ValueError, match=r"row 0 has low_q='yes': expected true or false"):
        probe.read_probe_answers(str(path))


def test_a_graded_probe_must_sample_as_the_rollout_does():
    settings = SimpleNamespace(temperature=1.0, pass_k=4)
    assert probe.sampling_mismatch(settings, {"temperature": 1.0, "top_k": -1, "top_p": 1.0}) is None
    assert probe.sampling_mismatch(settings, {"temperature": 1.0, "top_k": 0}) is None  # 0: no top-k, as -1
    message = probe.sampling_mismatch(settings, {"temperature": 1.0, "top_k": 5, "top_p": 1.0})
    assert message is not None and "top_k=5" in message and "rlec.probe.pass_k=4" in message
    assert probe.sampling_mismatch(settings, {"temperature": 0.7}) is not None
