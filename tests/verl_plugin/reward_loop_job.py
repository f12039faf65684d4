"""Reward-loop samples, and a job that scores them through verl's RewardLoopManager on Ray.

``build_batch`` makes a verl ``DataProto`` the way the agent loop hands samples to the reward
workers (prompts, responses, attention mask; data_source, reward_model, extra_info and the
trainer's ``global_steps`` per row). ``EXPECTED`` holds the hand-computed rewards.

Run as a script (by test_reward_loop_ray.py) in a fresh process, so that Ray's workers get
exactly the environment a verl run gives them::

    python tests/verl_plugin/reward_loop_job.py MODEL_DIR {with-env|without-env}

It starts Ray as ``verl.trainer.main_ppo.run_ppo`` does (verl's runtime env merged with
``ray_kwargs.ray_init.runtime_env`` of the composed rlec config; ``without-env`` drops
``VERL_USE_EXTERNAL_MODULES`` from it), imports the plugin in the driver only, runs
``RewardLoopManager(config).compute_rm_score(batch)`` with one worker and prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

# (response, gold, data_source, extra_info, global_step); schedule: trainer.total_training_steps=11
SAMPLES = [
    ("So the answer is \\boxed{4}.", "4", "math_dapo", {"target_p": 0.5, "objective": "rlec"}, 6),
    ("\\boxed{5}", "4", "math_dapo", {"target_p": 0.25, "objective": "rlec"}, 6),
    ("\\boxed{I don't know}", "Paris", "hotpotqa", {"target_p": 0.75, "objective": "rlec"}, 6),
    ("It is \\boxed{Paris}", "Paris", "hotpotqa", {"target_p": 0.0, "objective": "binary"}, 6),
    ("\\boxed{4}", "4", "math_dapo", {"target_p": 0.5, "objective": "rlec"}, 1),
    ("\\boxed{7}", "4", "math_dapo", {"target_p": 0.25, "objective": "rlec"}, 11),
    # no exact match: math-verify decides, in the worker's process pool
    ("\\boxed{\\frac{1}{2}}", "0.5", "math_dapo", {"target_p": 0.2, "objective": "rlec"}, 11),
]
# b = (step - 1) / 10. Correct: (1-p)^b; incorrect: -p (1-p)^(b-1); abstain: 0; binary: 1 / 0.
EXPECTED_B = [0.5, 0.5, 0.5, 0.5, 0.0, 1.0, 1.0]
EXPECTED = [0.5**0.5, -0.25 * 0.75**-0.5, 0.0, 1.0, 1.0, -0.25, 0.8]
OVERRIDES = ["layout=tiny_1gpu", "trainer.total_training_steps=11", "reward.num_workers=1",
             "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]


def build_batch(tokenizer, samples=SAMPLES):
    """A right-padded reward-loop batch of ``samples`` (see the module docstring)."""
    import torch
    from verl import DataProto

    prompt = tokenizer("Question?", add_special_tokens=False)["input_ids"]
    responses = [tokenizer(s[0], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for s in samples]
    width = max(map(len, responses))
    pad = tokenizer.pad_token_id
    response_ids = torch.tensor([r + [pad] * (width - len(r)) for r in responses])
    prompt_ids = torch.tensor([prompt] * len(samples))
    mask = torch.tensor([[1] * len(prompt) + [1] * len(r) + [0] * (width - len(r)) for r in responses])

    def column(values):
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    return DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask,
                 "input_ids": torch.cat([prompt_ids, response_ids], dim=1)},
        non_tensors={
            "data_source": column([s[2] for s in samples]),
            "reward_model": column([{"style": "rule", "ground_truth": s[1]} for s in samples]),
            "extra_info": column([dict(s[3]) for s in samples]),
            "global_steps": column([s[4] for s in samples]),
            "__num_turns__": column([1] * len(samples)),
        },
    )


def main(model_dir: str, mode: str) -> dict:
    import ray
    from omegaconf import OmegaConf

    from rlec.config import compose

    cfg = compose([*OVERRIDES, f"actor_rollout_ref.model.path={model_dir}"])
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    runtime_env = OmegaConf.to_container(runtime_env)
    if mode == "without-env":
        runtime_env["env_vars"].pop("VERL_USE_EXTERNAL_MODULES")
    runtime_env["env_vars"]["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    # logical CPUs: the reward worker, the TransferQueue controller and its storage unit take one each
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    try:
        import rlec.verl_plugin  # noqa: F401  the driver resolves the manager class itself
        from verl.experimental.reward_loop import RewardLoopManager
        from verl.utils import hf_tokenizer

        batch = build_batch(hf_tokenizer(model_dir))
        try:
            out = RewardLoopManager(cfg).compute_rm_score(batch)
        except Exception as exc:  # a worker that cannot build the manager dies; report why
            return {"error": f"{type(exc).__name__}: {exc}"}
        extra = {k: out.non_tensor_batch[k].tolist() for k in out.meta_info["reward_extra_keys"]}
        return {"scores": out.batch["rm_scores"].sum(dim=1).tolist(), "extra": extra,
                "keys": out.meta_info["reward_extra_keys"], "metrics": train_metrics_via_transfer_queue(cfg, extra)}
    finally:
        ray.shutdown()


def train_metrics_via_transfer_queue(cfg, extra: dict) -> dict:
    """Store each sample's reward_extra_info in TransferQueue as verl's agent loop does
    (``extra_fields.reward_extra_info``, plus one padding row), then read the rlec training
    metrics back through the trainer's hook."""
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from rlec.reward.metrics import reward_metrics
    from rlec.verl_plugin import RLECSyncTrainer

    infos = [dict(zip(extra, values)) for values in zip(*extra.values())]
    rows = infos + [dict(infos[0], outcome="correct")]  # the padding row must not count
    keys = [f"uid{i}_0_0" for i in range(len(rows))]
    tags = [{"status": "success", "is_padding": i == len(infos)} for i in range(len(rows))]
    tq.init(cfg.transfer_queue)
    try:
        tq.kv_batch_put(keys=keys, partition_id="train", tags=tags,
                        fields=list_of_dict_to_tensordict([{"extra_fields": {"reward_extra_info": r}} for r in rows]))
        trainer = RLECSyncTrainer.__new__(RLECSyncTrainer)  # the hook reads nothing from the trainer
        records = trainer._rlec_reward_records(KVBatchMeta(keys=keys, tags=tags, partition_id="train"))
        return reward_metrics(records, prefix="rlec")
    finally:
        tq.close()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2]), default=str))
