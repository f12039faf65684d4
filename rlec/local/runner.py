"""The local RLEC run: the whole training loop on CPU, with the real Megatron update.

    python -m rlec.local.runner [key=value ...]                    # one process
    torchrun --nproc_per_node 4 -m rlec.local.runner layout.tp=2 layout.ep=2   # TP2 x EP2 (gloo)
    bash tools/run_megatron_rlec.sh                                # what the launcher does without GPUs

Per step (verl's trainer does the same on GPUs; every piece but the orchestration is shared):

1. prompts: the next ``prompts_per_step`` rows of the prepared train parquet (seeded sampler);
2. rollout: ``n`` responses per prompt with the HF model (``rlec.local.rollout``), rank 0;
3. score: ``rlec.batch_reward.score_batch`` (the verl plugin's scoring) with b from the schedule;
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

from rlec.local import checkpoint as ckpt
from rlec.local.config import as_dict, load_config, schedule_steps, to_yaml
from rlec.local.data import PromptSampler, load_rows


class LocalRunError(ValueError):
    """Bad input found before any work starts (printed without a traceback, exit status 2)."""


def _log0(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[rlec.local] {msg}", file=sys.stderr, flush=True)


def preflight(cfg: Any, world: int) -> Any:
    """Check the layout, the model and the data before anything heavy starts.

    Returns:
        The :class:`rlec.megatron.ParallelLayout`.

    Raises:
        LocalRunError: the layout does not fit the process count or the batch, ``model.path`` is
            not a Qwen3 family model, or the data is missing and may not be prepared.
    """
    from rlec import megatron as meg

    layout = meg.ParallelLayout(tp=cfg.layout.tp, ep=cfg.layout.ep, etp=cfg.layout.etp, pp=cfg.layout.pp, world_size=world)
    try:
        layout.check()
    except ValueError as exc:
        raise LocalRunError(f"layout {dict(tp=layout.tp, ep=layout.ep, pp=layout.pp)} does not fit {world} process(es): {exc}; "
                            "set NPROC to a multiple of TP x PP (and EP must divide the data-parallel size)") from None
    batch = cfg.rollout.prompts_per_step * cfg.rollout.n
    if batch % layout.dp:
        raise LocalRunError(f"rollout.prompts_per_step x rollout.n = {batch} responses do not split over {layout.dp} data-parallel ranks")
    if cfg.model.path:
        try:
            resolve_model(cfg, Path(cfg.trainer.output_dir))
        except (FileNotFoundError, ValueError) as exc:
            raise LocalRunError(str(exc)) from None
    train = Path(cfg.data.dir) / cfg.data.train_file
    if not train.is_file() and not cfg.data.prepare_if_missing:
        raise LocalRunError(f"{train} is missing and data.prepare_if_missing=false: run `python -m rlec.data.prepare --output-dir {cfg.data.dir}`")
    return layout


def ensure_data(cfg: Any) -> Path:
    """The train parquet, preparing the shipped samples first when it is missing (rank 0).

    Raises:
        FileNotFoundError: missing and ``data.prepare_if_missing`` is false.
    """
    data_dir = Path(cfg.data.dir)
    train = data_dir / cfg.data.train_file
    if train.is_file():
        return train
    if not cfg.data.prepare_if_missing:
        raise FileNotFoundError(f"{train} is missing and data.prepare_if_missing=false: run `python -m rlec.data.prepare --output-dir {data_dir}`")
    if int(os.environ.get("RANK", "0")) == 0:
        _log0(f"{train} missing: preparing the shipped sample data into {data_dir}")
        from rlec.data.prepare import main as prepare_main

        if prepare_main(["--output-dir", str(data_dir)]) != 0:
            raise RuntimeError("data preparation failed (see its output above)")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return train


def resolve_model(cfg: Any, out_dir: Path) -> Path:
    """The HF model folder: ``model.path``, or the tiny random model built once under ``out_dir``.

    Raises:
        FileNotFoundError / ValueError: ``model.path`` missing or not a Qwen3 family model.
    """
    from rlec.models import SUPPORTED_MODEL_TYPES, build_tiny_model

    if cfg.model.path:
        path = Path(cfg.model.path)
        config = path / "config.json"
        if not config.is_file():
            raise FileNotFoundError(f"MODEL_PATH={path}: no config.json there")
        import json

        model_type = json.loads(config.read_text()).get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"MODEL_PATH={path}: model_type {model_type!r} is not supported; expected one of {SUPPORTED_MODEL_TYPES}")
        return path
    path = out_dir / "tiny_model"
    if not torch.distributed.is_initialized():
        return path
    if int(os.environ.get("RANK", "0")) == 0 and not path.exists():
        _log0(f"building the tiny random Qwen3-MoE (seed {cfg.model.tiny_seed}) in {path}")
        build_tiny_model(path, seed=int(cfg.model.tiny_seed))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return path


def policy_loss_fn(cfg: Any, num_micro_batches: int, dp_size: int, global_tokens: int):
    """verl's ``vanilla`` policy loss on a Megatron micro-batch, normalised as verl's Megatron actor does.

    token-mean over the *global* batch: ``agg_loss`` divides by the global token count and
    multiplies by ``dp_size`` (DDP averages over DP ranks); we multiply by the number of
    micro-batches because Megatron's schedule divides each micro-batch loss by it.
    """
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    loss_config = OmegaConf.create({
        "clip_ratio": cfg.actor.clip_ratio_low, "clip_ratio_low": cfg.actor.clip_ratio_low,
        "clip_ratio_high": cfg.actor.clip_ratio_high, "clip_ratio_c": 3.0,
        "global_batch_info": {"dp_size": dp_size, "batch_num_tokens": global_tokens},
    })
    vanilla = get_policy_loss_fn("vanilla")

    def loss_fn(log_probs: torch.Tensor, batch: dict[str, torch.Tensor]):
        mask = batch["loss_mask"].float()
        loss, metrics = vanilla(old_log_prob=batch["old_log_probs"], log_prob=log_probs, advantages=batch["advantages"],
                                response_mask=mask, loss_agg_mode=cfg.actor.loss_agg_mode, config=loss_config)
        tokens = mask.sum().clamp(min=1)
        metrics["actor/entropy_mc"] = float(-(log_probs.detach() * mask).sum() / tokens)
        return loss * num_micro_batches, metrics

    return loss_fn


def run(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Run the local training loop; returns the last step's metrics (rank 0; {} elsewhere)."""
    from transformers import AutoModelForCausalLM

    from rlec import megatron as meg
    from rlec.batch_reward import score_batch
    from rlec.local import update
    from rlec.local.logger import MetricsLogger
    from rlec.local.rollout import generate, inject_scripted
    from rlec.models import load_tokenizer
    from rlec.reward_metrics import reward_metrics
    from rlec.rewards import LinearSchedule

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
    model_path = resolve_model(cfg, out_dir)
    rows = load_rows(train_path)
    sampler = PromptSampler(len(rows), seed=int(cfg.trainer.seed))
    schedule = LinearSchedule(end_step=schedule_steps(cfg), start_value=cfg.reward.b_start, end_value=cfg.reward.b_end)

    t0 = time.perf_counter()
    policy = meg.build_model(model_path, layout, load_weights=True, wrap_ddp=True)
    optimizer = meg.build_optimizer(policy, lr=cfg.actor.lr, weight_decay=cfg.actor.weight_decay, clip_grad=cfg.actor.clip_grad)
    start_step = 0
    if cfg.trainer.resume:
        latest = ckpt.latest(out_dir)
        if latest is None:
            _log0(f"trainer.resume=true but no checkpoint in {out_dir / 'checkpoints'}: starting from step 0")
        else:
            state = meg.load_dist_checkpoint(policy, latest, optimizer=optimizer)
            start_step = int(state["step"])
            sampler.load_state_dict(state["user_state"]["sampler"])
            _log0(f"resumed from {latest} (step {start_step})")
    tokenizer = load_tokenizer(model_path)
    rollout_model = None
    if rank == 0:
        rollout_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        (out_dir / "config.yaml").write_text(to_yaml(cfg))
    update.sync_weights(policy, rollout_model)  # resumed weights reach the rollout model too
    logger = MetricsLogger(out_dir, resume_step=start_step if cfg.trainer.resume else None) if rank == 0 else None
    _log0(f"ready in {time.perf_counter() - t0:.1f}s: {len(rows)} prompts, layout {layout.as_dict()}, "
          f"{world} process(es) x {threads} thread(s), model {model_path}")
    scripted_fraction = cfg.rollout.scripted_fraction
    if scripted_fraction is None:
        scripted_fraction = 0.0 if cfg.model.path else 0.25
    if not cfg.model.path:
        _log0("the tiny model has random weights: its own answers are noise and it learns nothing useful")
    if scripted_fraction:
        _log0(f"rollout.scripted_fraction={scripted_fraction}: that share of each group is replaced by a scripted "
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
            payload["rollout_metrics"]["rollout/scripted_fraction"] = scripted / len(batch.texts)
        payload = update.broadcast(payload)
        t = time.perf_counter()
        step_metrics = update.update_policy(policy, optimizer, payload, cfg, policy_loss_fn)
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
            last = {**step_metrics, **times, **reward_metrics(payload["infos"]), **payload["rollout_metrics"],
                    "rlec/b": schedule(step), "weight_sync/exact": float(sync_ok)}
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
        _log0(f"final HF weights in {final}; metrics in {out_dir / 'metrics.jsonl'}")
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
