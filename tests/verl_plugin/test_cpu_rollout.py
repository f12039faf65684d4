"""The CPU rollout ``rlec_hf`` (rlec.cpu.rollout_server): verl's rollout-server interface on transformers.

The server is exercised as a plain object (no Ray): requests arrive concurrently as verl's agent loop
sends them, with per-request sampling params. What it does not cover that vLLM does is pinned by the
refusals below and listed in the module docstring.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from rlec.cpu import rollout_server as cr
from rlec.cpu.agent_loops import ScriptedAnswersMixin


def _config(response_length=8, prompt_length=32, seed=0):
    return SimpleNamespace(response_length=response_length, prompt_length=prompt_length, seed=seed)


@pytest.fixture(scope="module")
def server(tiny_moe_dir):
    return cr.HFRolloutServer(_config(), SimpleNamespace(local_path=str(tiny_moe_dir)), replica_rank=0)


@pytest.fixture(scope="module")
def scoring_server(tiny_moe_dir):
    """A server of its own (``server``'s weights are zeroed by the weight-update test), routes on."""
    config = SimpleNamespace(response_length=8, prompt_length=32, seed=0, enable_rollout_routing_replay=True)
    return cr.HFRolloutServer(config, SimpleNamespace(local_path=str(tiny_moe_dir)), replica_rank=0)


def _generate_all(server, requests):
    async def run():
        return await asyncio.gather(*[server.generate(prompt_ids=ids, sampling_params=dict(sp), request_id=str(i))
                                      for i, (ids, sp) in enumerate(requests)])
    return asyncio.run(run())


def test_response_budget_follows_verls_vllm_server():
    assert cr.max_new_tokens(10, {}, response_length=8, prompt_length=32) == 8
    assert cr.max_new_tokens(38, {}, response_length=8, prompt_length=32) == 2  # prompt + response budget
    assert cr.max_new_tokens(10, {"max_tokens": 3}, response_length=8, prompt_length=32) == 3
    assert cr.max_new_tokens(50, {}, response_length=8, prompt_length=32) == 1  # never below 1


def test_concurrent_requests_are_batched_per_sampling_key(server):
    before = server.get_stats()
    prompts = [[151644, 872, 198, 16 + i] for i in range(6)]
    requests = [(ids, {"temperature": 1.0 if i % 2 else 0.7, "top_p": 1.0, "top_k": -1}) for i, ids in enumerate(prompts)]
    outs = _generate_all(server, requests)
    after = server.get_stats()
    assert after["requests"] - before["requests"] == 6
    assert after["batches"] - before["batches"] == 2  # one batch per temperature, not one per request
    for out in outs:
        assert 1 <= len(out.token_ids) <= 8 and out.stop_reason == "completed" and out.log_probs is None


def test_greedy_requests_are_deterministic_and_prompt_specific(server):
    sp = {"temperature": 0.0, "top_p": 1.0, "top_k": -1}
    a = _generate_all(server, [([151644, 872, 198, 20], sp), ([151644, 872, 198, 21], sp)])
    b = _generate_all(server, [([151644, 872, 198, 20], sp)])
    assert a[0].token_ids == b[0].token_ids


@pytest.mark.parametrize(("params", "message"), [
    ({"repetition_penalty": 1.2}, "repetition_penalty"),
])
def test_what_vllm_does_and_this_rollout_does_not_is_refused(server, params, message):
    with pytest.raises(ValueError, match=message):
        _generate_all(server, [([151644, 872], {"temperature": 1.0, **params})])


def test_weight_update_changes_the_served_model(server):
    from rlec.megatron.hf_sync import model_to_hub_state

    model = server.engine.model
    hub = model_to_hub_state(model, {k: v.clone() for k, v in model.state_dict().items()})
    name = next(k for k in hub if k.endswith("embed_tokens.weight"))
    hub[name] = torch.zeros_like(hub[name])
    server.set_global_steps(7)
    assert server.load_weights(hub) > 0
    assert float(model.get_input_embeddings().weight.abs().sum()) == 0.0
    out = _generate_all(server, [([151644, 872], {"temperature": 0.0})])[0]
    assert out.extra_fields["global_steps"] == 7  # the weights' version, as vLLM's server reports it


def test_registered_in_both_of_verls_rollout_registries():
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    cr.register_rollout()
    assert get_rollout_class(cr.ROLLOUT_NAME) is cr.HFServerAdapter
    assert get_rollout_replica_class(cr.ROLLOUT_NAME) is cr.HFRolloutReplica
    assert cr.HFRolloutReplica.rollout_worker_use_gpu(object.__new__(cr.HFRolloutReplica)) is False


def test_scripted_answers_take_the_last_share_of_each_group_and_are_reproducible():
    from omegaconf import OmegaConf

    loop = object.__new__(ScriptedAnswersMixin)
    loop.config = OmegaConf.create({"rlec": {"cpu": {"scripted_fraction": 0.5}}})
    loop.rollout_config = OmegaConf.create({"n": 4})
    row = {"data_source": "math_dapo", "reward_model": {"ground_truth": "42"}}
    texts = [loop._scripted_text({**row, "session_id": i}) for i in range(4)]
    assert texts[:2] == [None, None]  # the rollout answers the first n - round(n x fraction) samples
    assert all(t in ("\\boxed{42}", "\\boxed{I don't know}") for t in texts[2:])
    assert texts == [loop._scripted_text({**row, "session_id": i}) for i in range(4)]  # same problem, same script
    loop.config = OmegaConf.create({"rlec": {"cpu": {"scripted_fraction": 0.0}}})
    assert all(loop._scripted_text({**row, "session_id": i}) is None for i in range(4))  # off: real training


def test_scripted_answers_read_the_settings_once_per_config_not_once_per_sample(monkeypatch):
    """verl builds a new agent loop per sample, so a settings cache on the loop never hit: every sample re-read
    ``rlec.cpu`` (1.2 ms CPU each, docs/speed.md). The read is now kept per config object; the scripts are unchanged."""
    from omegaconf import OmegaConf

    from rlec import run_config, settings

    calls = []
    real = settings.RlecSettings.from_config
    monkeypatch.setattr(settings.RlecSettings, "from_config", classmethod(lambda cls, cfg: calls.append(cfg) or real(cfg)))
    monkeypatch.setattr(run_config, "_WORKER_RUN", None)
    config = OmegaConf.create({"rlec": {"cpu": {"scripted_fraction": 0.5}}})
    row = {"data_source": "math_dapo", "reward_model": {"ground_truth": "42"}}
    texts = []
    for i in range(8):  # one loop object per sample, as verl's worker makes them
        loop = object.__new__(ScriptedAnswersMixin)
        loop.config, loop.rollout_config = config, OmegaConf.create({"n": 8})
        texts.append(loop._scripted_text({**row, "session_id": i}))
    assert len(calls) == 1
    assert texts[:4] == [None] * 4 and all(t in ("\\boxed{42}", "\\boxed{I don't know}") for t in texts[4:])
    other = OmegaConf.create({"rlec": {"cpu": {"scripted_fraction": 0.0}}})  # another config object: read afresh
    loop.config = other
    assert loop._scripted_text({**row, "session_id": 7}) is None and len(calls) == 2


def _trainer_log_probs(model, rows, temperature):
    """The trainer's old log-probs, recomputed independently: one left-padded batch with verl's attention mask
    and position ids (prompt left-padded, response right-padded), logits / T, verl's ``logprobs_from_logits``."""
    from verl.utils.torch_functional import logprobs_from_logits

    P = max(len(p) for p, _ in rows)
    R = max(len(r) for _, r in rows)
    ids = torch.zeros((len(rows), P + R), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(rows):
        ids[i, P - len(p):P], mask[i, P - len(p):P] = torch.tensor(p), 1
        ids[i, P:P + len(r)], mask[i, P:P + len(r)] = torch.tensor(r), 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    lp = logprobs_from_logits(logits[:, P - 1:-1].float() / temperature, ids[:, P:])
    return [lp[i, :len(r)].tolist() for i, (_, r) in enumerate(rows)]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_of_the_sampled_tokens_equal_the_trainers_at_the_sampling_temperature(scoring_server, temperature):
    """``rollout.calculate_log_probs`` (verl sends ``logprobs``): one log-prob per response token, equal to the
    trainer's recomputation for the same weights within fp32 tolerance; at another temperature they differ."""
    prompts = [[151644, 872, 198, 30 + i] + [100 + i] * i for i in range(4)]  # different lengths: padding in the recomputation
    outs = _generate_all(scoring_server, [(ids, {"temperature": temperature, "top_p": 1.0, "top_k": -1, "logprobs": True}) for ids in prompts])
    rows = [(p, o.token_ids) for p, o in zip(prompts, outs, strict=True)]
    expected = _trainer_log_probs(scoring_server.engine.model, rows, temperature)
    other = _trainer_log_probs(scoring_server.engine.model, rows, 2.0 * temperature)
    for out, want, wrong in zip(outs, expected, other, strict=True):
        assert out.log_probs is not None and len(out.log_probs) == len(out.token_ids)
        assert out.log_probs == pytest.approx(want, abs=2e-5)
        assert max(abs(a - b) for a, b in zip(out.log_probs, wrong)) > 1e-3  # the temperature reaches them


def test_log_probs_follow_top_k_like_the_sampler(scoring_server):
    """With top-k the tokens were drawn from the renormalised top-k distribution (vLLM's ``processed_logprobs``):
    every log-prob is >= the full-vocabulary one."""
    prompt = [151644, 872, 198, 42]
    out = _generate_all(scoring_server, [(prompt, {"temperature": 1.0, "top_k": 5, "logprobs": True})])[0]
    full = _trainer_log_probs(scoring_server.engine.model, [(prompt, out.token_ids)], 1.0)[0]
    assert all(a >= b - 1e-6 for a, b in zip(out.log_probs, full, strict=True))
    assert any(a > b + 1e-4 for a, b in zip(out.log_probs, full, strict=True))


def _hf_router_choices(model, ids):
    """The indices each ``Qwen3MoeTopKRouter`` itself returned (its third output), recorded by hooks in a fresh forward."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    recorded = []
    hooks = [m.register_forward_hook(lambda _m, _a, out: recorded.append(out[2].clone()))
             for m in model.modules() if isinstance(m, Qwen3MoeTopKRouter)]
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    assert len(recorded) == model.config.num_hidden_layers
    return torch.stack(recorded, dim=1).long()


def test_routed_experts_are_the_routers_top_k_of_every_token_in_verls_format(scoring_server):
    """``rollout.enable_rollout_routing_replay``: ``routed_experts`` (tokens = prompt + response, layers, top_k), as
    vLLM returns it and verl's agent loop reads it, equal to the HF router's choices recomputed for the same tokens."""
    srv = scoring_server
    prompts = [[151644, 872, 198, 50], [151644, 872, 198, 51, 52, 53]]
    outs = _generate_all(srv, [(ids, {"temperature": 1.0}) for ids in prompts])
    cfg = srv.engine.model.config
    for prompt, out in zip(prompts, outs, strict=True):
        seq = prompt + out.token_ids
        assert out.log_probs is None  # not asked for
        routes = out.routed_experts
        assert routes.shape == (len(seq), cfg.num_hidden_layers, cfg.num_experts_per_tok)
        assert routes.min() >= 0 and routes.max() < cfg.num_experts
        assert torch.equal(torch.from_numpy(routes).long(), _hf_router_choices(srv.engine.model, seq))


def test_forced_tokens_are_returned_scored_not_sampled(scoring_server):
    """The scripted answers' path: the given tokens come back with their log-probs, nothing is generated."""
    before = scoring_server.get_stats()["batches"]
    prompt, forced = [151644, 872, 198, 60], [16, 17, 18]

    async def run():
        return await scoring_server.generate(prompt_ids=prompt, sampling_params={"temperature": 1.0, "logprobs": True},
                                     request_id="x", **{cr.FORCED_TOKENS: forced})
    out = asyncio.run(run())
    assert out.token_ids == forced and scoring_server.get_stats()["batches"] == before
    assert out.log_probs == pytest.approx(_trainer_log_probs(scoring_server.engine.model, [(prompt, forced)], 1.0)[0], abs=2e-5)


def test_score_tokens_refuses_routes_of_a_dense_model(tiny_dense_dir):
    from transformers import AutoModelForCausalLM

    from rlec.cpu.rollout_scores import score_tokens

    model = AutoModelForCausalLM.from_pretrained(tiny_dense_dir, dtype=torch.float32).eval()
    with pytest.raises(ValueError, match="not an MoE model"):
        score_tokens(model, [1, 2], [3], routes=True)
    with pytest.raises(ValueError, match="non-empty prompt"):
        score_tokens(model, [], [3])


def test_request_seed_depends_on_the_sample_and_the_step_only():
    seed = cr.request_seed(1, 3, 17, 2)
    assert seed == cr.request_seed(1, 3, 17, 2) and 0 <= seed < 2**63
    others = {cr.request_seed(*args) for args in [(2, 3, 17, 2), (1, 4, 17, 2), (1, 3, 18, 2), (1, 3, 17, 3)]}
    assert len(others) == 4 and seed not in others


def test_seeded_requests_get_the_same_tokens_whatever_batch_they_land_in(server):
    """A sampled request (temperature 1) with its own seed: the same tokens alone, first or last in a batch, beside
    other requests; another seed gives other tokens. Without a seed the batch's seed decides (the old behaviour)."""
    sp = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
    a = ([151644, 872, 198, 30], {**sp, "seed": cr.request_seed(0, 1, 5, 0)})
    others = [([151644, 872, 198, 31 + i, 40], {**sp, "seed": cr.request_seed(0, 1, 6 + i, 0)}) for i in range(3)]
    alone = _generate_all(server, [a])[0].token_ids
    first = _generate_all(server, [a, *others])[0].token_ids
    last = _generate_all(server, [*others[::-1], a])[-1].token_ids
    assert alone == first == last and len(alone) > 1
    other_seed = _generate_all(server, [(a[0], {**sp, "seed": cr.request_seed(0, 2, 5, 0)})])[0].token_ids
    assert other_seed != alone


def test_rlecs_agent_loops_give_each_sample_its_seed_on_the_cpu_rollout():
    from omegaconf import OmegaConf

    loop = object.__new__(ScriptedAnswersMixin)
    loop.config = OmegaConf.create({"data": {"seed": 7}})
    loop.rollout_config = OmegaConf.create({"name": cr.ROLLOUT_NAME, "n": 4})
    sample = {"index": 12, "global_steps": 3, "raw_prompt": [{"role": "user", "content": "q"}]}
    params = loop._with_request_seed({"temperature": 1.0}, {**sample, "session_id": 1})
    assert params == {"temperature": 1.0, "seed": cr.request_seed(7, 3, 12, 1)}
    assert loop._with_request_seed({}, {**sample, "session_id": 2})["seed"] != params["seed"]
    # a prompt source without an index: the prompt names the sample
    no_index = {**sample, "index": None, "session_id": 1}
    assert loop._with_request_seed({}, no_index)["seed"] == cr.request_seed(7, 3, repr(sample["raw_prompt"]), 1)
    loop.rollout_config = OmegaConf.create({"name": "vllm", "n": 4})  # vLLM's own seeding stays as verl sets it
    assert loop._with_request_seed({"temperature": 1.0}, {**sample, "session_id": 1}) == {"temperature": 1.0}


def test_the_replicas_forwards_run_one_at_a_time_and_score_exactly_as_alone(scoring_server, monkeypatch):
    """Every response was scored on a thread of its own (asyncio.to_thread), so a step's 32 scoring forwards ran at
    once, each with its own OpenMP team, on 2 cores (6 at once in this test before the change). Now the
    replica's forwards (sampling and scoring) queue on one thread: never two at a time, and each response's
    log-probs are its batch-1 scores, bit for bit."""
    import threading
    import time

    from rlec.cpu import rollout_scores

    lock, running, most = threading.Lock(), [0], [0]
    real = rollout_scores.score_tokens

    def counted(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)  # hold the slot long enough for a concurrent call to show
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(rollout_scores, "score_tokens", counted)
    prompt = [151644, 872, 198]
    forced = [[16 + i, 17, 18 + i] for i in range(8)]

    async def run():
        return await asyncio.gather(*[scoring_server.generate(prompt_ids=prompt + [60 + i], request_id=str(i),
                                                              sampling_params={"temperature": 1.0, "logprobs": True},
                                                              **{cr.FORCED_TOKENS: f}) for i, f in enumerate(forced)])
    outs = asyncio.run(run())
    assert most[0] == 1, f"{most[0]} scoring forwards ran at once"
    for i, (out, f) in enumerate(zip(outs, forced)):
        alone = real(scoring_server.engine.model, prompt + [60 + i], f, temperature=1.0, routes=True)
        assert out.log_probs == alone.log_probs
