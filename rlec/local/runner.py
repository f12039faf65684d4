"""The local RLEC run: the whole training loop on CPU, with the real Megatron update.

    python -m rlec.local.runner [key=value ...]                    # one process
    torchrun --nproc_per_node 4 -m rlec.local.runner layout.tp=2 layout.ep=2   # TP2 x EP2 (gloo)
    bash tools/run_megatron_rlec.sh                                # what the launcher does without GPUs

Per step (verl's trainer does the same on GPUs; every piece but the orchestration is shared):

1. prompts: the next ``prompts_per_step`` rows of the prepared train parquet (seeded sampler);
2. rollout: ``n`` responses per prompt with the HF model (``rlec.local.rollout``), rank 0;
3. score: ``rlec.reward.batch.score_batch`` (the verl plugin's scoring) with b from the schedule;
4. advantage: verl's ``grpo`` estimator with ``norm_adv_by_std_in_grpo=False`` (mean-only);
5. update: old log-probs from the pre-update Megatron policy, then verl's ``vanilla`` policy
   loss (clip 0.2 / 0.28, token-mean over the global batch) through Megatron's forward-backward
   schedule and optimizer, each data-parallel rank on its slice of the batch;
6. weight sync: the Megatron weights exported to HF names through mbridge and loaded into the HF
   rollout model; one tensor is compared for exact equality every step;
7. log: console (tqdm), ``metrics.jsonl``, TensorBoard.

Checkpoints (every ``trainer.save_every`` steps) hold the Megatron dist checkpoint with the
optimizer state, the step and the sampler state; ``trainer.resume=true`` continues from the
latest, reproducing the uninterrupted run's metrics (sampling is seeded by step).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from rlec.io import atomic_write_text
from rlec.local import checkpoint as ckpt
from rlec.local.config import as_dict, load_config, schedule_steps, to_yaml
from rlec.local.data import PromptSampler, load_rows
from rlec.local.setup import LocalRunError, ensure_data, ensure_model, log0, preflight, start_fresh_or_find_resume


def run(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Run the local training loop; returns the last step's metrics (rank 0; {} elsewhere)."""
    from transformers import AutoModelForCausalLM

    from rlec import megatron as meg
    from rlec.reward.batch import score_batch
    from rlec.local import update
    from rlec.local.logger import MetricsLogger
    from rlec.local.rollout import generate, inject_scripted
    from rlec.models import load_tokenizer
    from rlec.reward.metrics import reward_metrics
    from rlec.reward.formula import LinearSchedule

    try:
        cfg = load_config(overrides)
    except (ValueError, FileNotFoundError) as exc:
        raise LocalRunError(str(exc)) from None
    out_dir = Path(cfg.trainer.output_dir)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    layout = preflight(cfg, world)  # before any work: bad layouts, models and data fail here
    threads = int(cfg.trainer.threads) or max(1, (os.cpu_count() or 1) // world)
    torch.set_num_threads(threads)
    meg.init_parallel(layout, seed=int(cfg.trainer.seed))
    rank = torch.distributed.get_rank()
    out_dir.mkdir(parents=True, exist_ok=True)
    train_path = ensure_data(cfg)
    try:
        rows = load_rows(train_path)  # before the model is built: a bad file leaves nothing behind
    except (FileNotFoundError, ValueError) as exc:
        raise LocalRunError(str(exc)) from None
    model_path = ensure_model(cfg, out_dir)
    resume_from = start_fresh_or_find_resume(cfg, out_dir)
    sampler = PromptSampler(len(rows), seed=int(cfg.trainer.seed))
    schedule = LinearSchedule(end_step=schedule_steps(cfg), start_value=cfg.reward.b_start, end_value=cfg.reward.b_end)

    t0 = time.perf_counter()
    policy = meg.build_model(model_path, layout, load_weights=True, wrap_ddp=True)
    optimizer = meg.build_optimizer(policy, lr=cfg.actor.lr, weight_decay=cfg.actor.weight_decay, clip_grad=cfg.actor.clip_grad)
    start_step = 0
    if resume_from is not None:
        state = meg.load_dist_checkpoint(policy, resume_from, optimizer=optimizer)
        start_step = int(state["step"])
        sampler.load_state_dict(state["user_state"]["sampler"])
        log0(f"resumed from {resume_from} (step {start_step})")
    tokenizer = load_tokenizer(model_path)
    rollout_model = None
    if rank == 0:
        rollout_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        atomic_write_text(out_dir / "config.yaml", to_yaml(cfg))
    update.sync_weights(policy, rollout_model)  # resumed weights reach the rollout model too
    logger = MetricsLogger(out_dir, resume_step=start_step if cfg.trainer.resume else None) if rank == 0 else None
    log0(f"ready in {time.perf_counter() - t0:.1f}s: {len(rows)} prompts, layout {layout.as_dict()}, "
          f"{world} process(es) x {threads} thread(s), model {model_path}")
    scripted_fraction = cfg.rollout.scripted_fraction
    if scripted_fraction is None:
        scripted_fraction = 0.0 if cfg.model.path else 0.25
    if not cfg.model.path:
        log0("the tiny model has random weights: its own answers are noise and it learns nothing useful")
    if scripted_fraction:
        log0(f"rollout.scripted_fraction={scripted_fraction}: that share of each group is replaced by a scripted "
              "answer (gold or I don't know) so groups have reward variance and the update is non-zero; "
              "set rollout.scripted_fraction=0 for real training")

    from tqdm import tqdm

    last: dict[str, Any] = {}
    bar = tqdm(range(start_step + 1, cfg.trainer.steps + 1), desc="rlec local", disable=rank != 0, initial=start_step, total=cfg.trainer.steps)
    for step in bar:
        times: dict[str, float] = {}
        payload = None
        if rank == 0:
            t = time.perf_counter()
            picked = [rows[i] for i in sampler.next_indices(cfg.rollout.prompts_per_step)]
            batch = generate(rollout_model, tokenizer, [r.messages for r in picked], [r.uid for r in picked],
                             n=cfg.rollout.n, max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                             top_p=cfg.rollout.top_p, seed=int(cfg.trainer.seed) * 100_003 + step)
            gen_metrics = update.rollout_metrics(batch)  # before scripted answers replace any row
            scripted = inject_scripted(batch, tokenizer, [r.ground_truth for r in picked], cfg.rollout.n,
                                       scripted_fraction, seed=int(cfg.trainer.seed) * 7919 + step)
            times["timing_s/gen"] = time.perf_counter() - t
            t = time.perf_counter()
            expand = [r for r in picked for _ in range(cfg.rollout.n)]
            scores, infos = score_batch(batch.texts, [r.ground_truth for r in expand], [r.data_source for r in expand],
                                        [r.extra_info for r in expand], step, schedule)
            times["timing_s/reward"] = time.perf_counter() - t
            payload = update.make_payload(batch, scores, infos)
            payload["sampler"] = sampler.state_dict()
            payload["metrics"].update(gen_metrics, **{"rollout/scripted_fraction": scripted / len(batch.texts)})
        payload = update.broadcast(payload)
        t = time.perf_counter()
        step_metrics = update.update_policy(policy, optimizer, payload, cfg)
        times["timing_s/update_actor"] = time.perf_counter() - t
        t = time.perf_counter()
        sync_ok = update.sync_weights(policy, rollout_model, check_index=step)
        times["timing_s/update_weights"] = time.perf_counter() - t
        if step % cfg.trainer.save_every == 0 or step == cfg.trainer.steps:
            t = time.perf_counter()
            ckpt.save(policy, optimizer, out_dir, step, {"sampler": payload["sampler"]}, keep=int(cfg.trainer.keep_checkpoints), config=as_dict(cfg))
            times["timing_s/save_checkpoint"] = time.perf_counter() - t
        if rank == 0:
            times["timing_s/step"] = sum(v for k, v in times.items() if k != "timing_s/save_checkpoint")
            last = {**step_metrics, **times, **reward_metrics(payload["infos"]), **payload["metrics"],
                    "weight_sync/exact": float(sync_ok)}
            logger.log(step, last)
            bar.set_postfix(reward=f"{last.get('rlec/reward/mean', float('nan')):.3f}", b=f"{schedule(step):.2f}",
                            loss=f"{last.get('actor/pg_loss', float('nan')):.4f}")
            if not sync_ok:
                raise RuntimeError(f"step {step}: weight sync check failed: the rollout model differs from the Megatron policy")
    bar.close()
    if rank == 0:
        logger.close()
        final = out_dir / "hf_final"
        update.save_hf(rollout_model, tokenizer, final)
        log0(f"final HF weights in {final}; metrics in {out_dir / 'metrics.jsonl'}")
    meg.destroy_parallel()
    if rank == 0:
        from rlec.local.summary import evaluate_final, print_training_summary

        print_training_summary(out_dir / "metrics.jsonl")
        if not cfg.model.path:
            print("\n(random tiny model: rewards are noise; the scripted share of each group is what moves the loss)")
        if cfg.eval.at_end and evaluate_final(cfg, out_dir, final):
            raise RuntimeError("the final evaluation failed (see its output above)")
    return last


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m rlec.local.runner [key=value ...]`` (see megatron_configs/local/cpu.yaml)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        print("Settings (key=value; environment variables in rlec.local.config.ENV_OVERRIDES):\n")
        print(to_yaml(load_config([])))
        return 0
    try:
        run(args)
    except LocalRunError as exc:
        print(f"rlec.local: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
