"""The induced train-inference mismatch of the CPU rollout (rlec.cpu.induced_mismatch, issue 32 item 4):
the setting refused out of range naming its key, the noise applied to the rollout's copy only (its log-probs move
away from the trainer's, which stay exact without it), and the router-disagreement count by hand."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlec.settings import RlecSettings, SettingError
from rlec.cpu import rollout_server as cr
from rlec.cpu import induced_mismatch as im
from rlec.cpu.rollout_scores import score_tokens


def test_router_disagreement_counts_token_layer_sets_not_their_order():
    rollout = np.array([[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[1, 2], [3, 0]]])  # (tokens 3, layers 2, top_k 2)
    same_sets = rollout[..., ::-1].copy()  # each top-k reversed: the same experts
    assert im.router_disagreement(rollout, same_sets) == (0, 6)
    train = rollout.copy()
    train[1, 0] = [4, 6]   # one expert of one set differs
    train[2, 1] = [1, 2]   # a whole set differs
    assert im.router_disagreement(rollout, train) == (2, 6)
    with pytest.raises(ValueError, match="tokens, layers, top_k"):
        im.router_disagreement(rollout, rollout[:2])


def test_step_disagreement_is_the_pooled_share_and_absent_without_counts():
    rows = [{im.DIFF_FIELD: 1, im.TOTAL_FIELD: 4}, {im.DIFF_FIELD: 0, im.TOTAL_FIELD: 6}, {"global_steps": 3}]
    assert im.disagreement_metrics(rows) == {im.DISAGREEMENT_KEY: pytest.approx(0.1)}  # 1 / 10, not mean(1/4, 0)
    assert im.disagreement_metrics([{"global_steps": 3}, {}]) == {}


@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan, math.inf])
def test_a_bad_noise_scale_is_refused_naming_the_key(value):
    with pytest.raises(SettingError, match=r"rlec\.cpu\.rollout_weight_noise"):
        RlecSettings.from_config({"rlec": {"cpu": {"rollout_weight_noise": value}}})
    with pytest.raises(SettingError, match=r"rlec\.cpu\.rollout_noise_seed"):
        RlecSettings.from_config({"rlec": {"cpu": {"rollout_noise_seed": -1}}})


def test_the_rollout_server_refuses_a_bad_scale_before_loading_the_model():
    config = SimpleNamespace(response_length=8, prompt_length=32, seed=0, custom={"rlec_weight_noise": 2.0})
    with pytest.raises(SettingError, match=r"rlec\.cpu\.rollout_weight_noise"):
        cr.HFRolloutServer(config, SimpleNamespace(local_path="/nonexistent"), replica_rank=0)


def test_noise_is_relative_seeded_and_fresh_per_version():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    with torch.no_grad():
        lin.weight.mul_(10.0)
    before = {k: v.clone() for k, v in lin.state_dict().items()}
    assert im.perturb_weights(lin, 0.0, seed=0, version=0) == 0 and torch.equal(lin.weight, before["weight"])
    assert im.perturb_weights(lin, 0.05, seed=0, version=0) == 2
    delta = lin.weight.detach() - before["weight"]
    rms = before["weight"].pow(2).mean().sqrt()
    assert float(delta.std() / rms) == pytest.approx(0.05, rel=0.1)  # sigma x rms(W), whatever W's scale
    again = torch.nn.Linear(64, 64)
    again.load_state_dict(before)
    im.perturb_weights(again, 0.05, seed=0, version=0)
    assert torch.equal(again.weight, lin.weight)  # seeded: the same noise in every run (and arm)
    again.load_state_dict(before)
    im.perturb_weights(again, 0.05, seed=0, version=1)
    assert not torch.equal(again.weight, lin.weight)  # each weight sync draws its own


def _serve(server, prompts):
    async def run():
        return await asyncio.gather(*[server.generate(prompt_ids=p, sampling_params={"temperature": 1.0, "logprobs": True, "seed": i},
                                                      request_id=str(i)) for i, p in enumerate(prompts)])
    return asyncio.run(run())


def test_noise_moves_the_rollouts_log_probs_off_the_trainers_and_reports_router_disagreement(tiny_moe_dir):
    """The trainer's old log-probs are the exact synced weights' (equal to the rollout's without noise,
    ``test_cpu_rollout.py``); with sigma = 0.05 the rollout's differ from them, and its routes differ on some
    response token-layers, counted in ``extra_fields``; a weight sync keeps the exact copy exact."""
    from transformers import AutoModelForCausalLM

    from rlec.megatron.hf_sync import model_to_hub_state

    trainer = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32).eval()  # the synced weights
    prompts = [[151644, 872, 198, 30 + i, 40 + i] for i in range(4)]

    def gap(server):
        outs = _serve(server, prompts)
        diffs = [max(abs(a - b) for a, b in zip(o.log_probs, score_tokens(trainer, p, o.token_ids).log_probs, strict=True))
                 for p, o in zip(prompts, outs, strict=True)]
        return max(diffs), outs

    exact = cr.HFRolloutServer(SimpleNamespace(response_length=16, prompt_length=32, seed=0),
                               SimpleNamespace(local_path=str(tiny_moe_dir)), replica_rank=0)
    exact_gap, outs = gap(exact)
    assert exact_gap < 2e-5 and exact.exact_model is None
    assert all(im.TOTAL_FIELD not in o.extra_fields for o in outs)  # nothing compared without noise

    config = SimpleNamespace(response_length=16, prompt_length=32, seed=0, custom={"rlec_weight_noise": 0.05, "rlec_noise_seed": 0})
    noisy = cr.HFRolloutServer(config, SimpleNamespace(local_path=str(tiny_moe_dir)), replica_rank=0)
    noisy_gap, outs = gap(noisy)
    assert noisy_gap > 1e-3 > 50 * exact_gap
    assert all(o.routed_experts is None for o in outs)  # routes only compared, not returned (R3 flag off)
    share = im.disagreement_metrics([o.extra_fields for o in outs])[im.DISAGREEMENT_KEY]
    assert sum(o.extra_fields[im.TOTAL_FIELD] for o in outs) == sum(len(o.token_ids) for o in outs) * trainer.config.num_hidden_layers
    assert 0 < share < 1

    # a weight sync: the exact copy takes the trainer's weights as sent, the served copy gets fresh noise on them
    noisy.load_weights(model_to_hub_state(trainer, {k: v.clone() for k, v in trainer.state_dict().items()}))
    for (name, a), b in zip(noisy.exact_model.state_dict().items(), trainer.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert gap(noisy)[0] > 1e-3
