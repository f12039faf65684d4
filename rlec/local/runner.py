"""The local RLEC run: the whole training loop on CPU, with the real Megatron update.

    python -m rlec.local.runner [key=value ...]                                   # one process
    torchrun --nproc_per_node 4 -m rlec.local.runner \\
        actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \\
        actor_rollout_ref.actor.megatron.expert_model_parallel_size=2            # TP2 x EP2 (gloo)
    bash tools/run_megatron_rlec.sh                                               # what the launcher does without GPUs
    python -m rlec.local.runner --help                                            # every setting, with its value

The config is the cluster's (``megatron_configs/local.yaml`` composes ``recipe.yaml``, see
:mod:`rlec.local.config`). Per step (verl's trainer does the same on GPUs; every piece but the
orchestration is shared):

1. prompts: the next ``data.train_batch_size`` prompts from verl's dataset and stateful
   dataloader (:mod:`rlec.local.data`), rank 0;
2. rollout: ``n_i`` responses per prompt with rlec's generation engine on the HF rollout model
   (:mod:`rlec.local.rollout`), at the step's temperature (the enabled algorithms of
   :mod:`rlec.algorithms.registry` may plan both, as in verl's trainer);
3. score: ``rlec.reward.batch.score_batch`` (the verl reward manager's scoring) with b from
   ``rlec.reward.schedule.schedule_from_config``;
4. advantage: verl's ``compute_advantage`` with ``algorithm.adv_estimator``;
5. update: old log-probs and the exact entropy from the pre-update policy, then the configured
   verl policy loss per PPO mini-batch through Megatron's schedule and optimizer, each
   data-parallel rank on its slice (:mod:`rlec.local.update`);
6. weight sync: Megatron weights exported through mbridge into the HF rollout model, one tensor
   compared bit for bit every step;
7. log: progress bar, ``metrics.jsonl``, TensorBoard (verl's ``Tracking``); verl's metric names
   (``critic/score/mean``, ``actor/entropy``, ``timing_s/gen``, ...) plus ``rlec/...``.

Checkpoints (every ``trainer.save_freq`` steps and at the end) hold the Megatron dist checkpoint
with the optimizer, the step, the prompt loader's and the algorithms' state and the resolved config;
rerunning the same command resumes a compatible run (:mod:`rlec.local.setup` has the rule).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from rlec.config import select
from rlec.local import checkpoint as ckpt
from rlec.local.config import LocalConfigError, as_dict, load_config, settings_help, to_yaml
from rlec.local.setup import LocalRunError, ensure_data, ensure_model, log0, plan_start, preflight
from rlec.report import quiet_third_party
from rlec.settings import RlecSettings

def run(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Run the local training loop (then the final evaluation); returns the last step's metrics (rank 0)."""
    try:
        quiet_third_party()
    except ValueError as exc:  # a bad RLEC_VERBOSE spelling (rlec.flags): one line, exit 2, as every refusal
        raise LocalRunError(str(exc)) from None
    try:
        cfg = load_config(overrides)
    except LocalConfigError as exc:
        raise LocalRunError(str(exc)) from None
    world = int(os.environ.get("WORLD_SIZE", "1"))
    layout = preflight(cfg, world)  # before any work: bad layouts, models, data and output folders fail here
    out_dir = Path(str(cfg.trainer.default_local_dir))
    from rlec.io import LockHeld, output_lock
    from rlec.megatron.parallel import is_rank0

    lock = None
    if is_rank0():  # one run per output folder; a lock left by a killed run never blocks
        try:
            lock = output_lock(out_dir, what=f"OUTPUT_DIR {out_dir}").acquire()
        except LockHeld as exc:
            raise LocalRunError(str(exc)) from None
    try:
        return _start(cfg, layout, out_dir, world)
    finally:
        if lock is not None:
            lock.release()


def _start(cfg: Any, layout: Any, out_dir: Path, world: int) -> dict[str, Any]:
    settings = RlecSettings.from_config(cfg)  # read once; load_config has checked it
    threads = settings.local.threads or max(1, (os.cpu_count() or 1) // world)
    torch.set_num_threads(threads)

    from rlec import megatron as meg
    from rlec.megatron.checkpoint import remove_stale_partials
    from rlec.megatron.parallel import is_rank0

    meg.init_parallel(layout, seed=int(cfg.data.seed))
    start = plan_start(cfg, out_dir)
    for note in start.notes:
        log0(note)
    for folder in remove_stale_partials(out_dir / "checkpoints")[0] if (out_dir / "checkpoints").is_dir() else []:
        log0(f"removed {folder}, a checkpoint an interrupted run left half written")
    if start.schedule_end is not None:
        cfg = _with(cfg, {"rlec.schedule.end_step": start.schedule_end})
        settings = RlecSettings.from_config(cfg)  # the new config's (the resumed schedule's end)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ensure_data(cfg)  # every rank: rank 0 prepares missing sample data, the others wait
    if is_rank0():
        from rlec.local.data import check_parquet

        try:
            for train_path in files:
                check_parquet(train_path)  # before the model is built: a bad file leaves nothing behind
        except (FileNotFoundError, ValueError) as exc:
            raise LocalRunError(str(exc)) from None
    model_path = ensure_model(cfg, out_dir, settings)
    return _train(cfg, settings, layout, out_dir, model_path, start, world, threads)


def _with(cfg: Any, values: dict[str, Any]) -> Any:
    """A read-only copy of ``cfg`` with dotted keys set."""
    from omegaconf import OmegaConf

    new = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in values.items():
        OmegaConf.update(new, key, value, merge=False)
    OmegaConf.set_readonly(new, True)
    return new


def _train(cfg: Any, settings: RlecSettings, layout: Any, out_dir: Path, model_path: Path, start: Any, world: int,
           threads: int) -> dict[str, Any]:
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_timing_metrics

    from rlec import megatron as meg
    from rlec.generation import HFEngine
    from rlec.local import update
    from rlec.algorithms import registry
    from rlec.algorithms.base import RolloutPlan, StepRecord
    from rlec.local.data import PromptLoader
    from rlec.local.logger import MetricsLogger
    from rlec.local.rollout import inject_scripted, rollout, rollout_metrics
    from rlec.megatron.parallel import broadcast_object, is_rank0
    from rlec.models import load_tokenizer
    from rlec.reward.batch import score_batch
    from rlec.reward.metrics import reward_metrics
    from rlec.reward.schedule import schedule_from_config

    t0 = time.perf_counter()
    rank0 = is_rank0()
    tokenizer = load_tokenizer(model_path)
    try:
        loader = PromptLoader(cfg, tokenizer) if rank0 else None
        algorithms = registry.build(cfg, _algorithm_context(cfg, model_path, tokenizer, loader)) if rank0 else []
    except ValueError as exc:  # bad data or algorithm settings: one line, before the model is built
        raise LocalRunError(str(exc)) from None
    schedule = schedule_from_config(cfg, settings)
    from rlec.verl_plugin.typed_config import rollout_config

    config, sampling = update.actor_config(cfg), rollout_config(cfg)  # verl's typed sections: what its workers read
    actor = config
    router = {k: v for k, v in dict(actor.megatron.override_transformer_config or {}).items()
              if k.startswith("moe_router") or k == "moe_aux_loss_coeff"}
    policy = meg.build_model(model_path, layout, load_weights=True, wrap_ddp=True, config_overrides=router)
    optimizer = meg.build_optimizer(policy, lr=float(actor.optim.lr), weight_decay=float(actor.optim.weight_decay),
                                    clip_grad=float(actor.optim.clip_grad))
    start_step = 0
    if start.resume_from is not None:
        state = meg.load_dist_checkpoint(policy, start.resume_from, optimizer=optimizer)
        start_step = int(state["step"])
        if rank0:
            loader.load_state_dict(state["user_state"]["loader"])
            for algorithm in algorithms:
                saved = state["user_state"].get("algorithms", {})
                algorithm.load_state_dict(saved.get(algorithm.name, {}))
        log0(f"resumed from {start.resume_from} (step {start_step})")
    rollout_model = engine = None
    if rank0:
        rollout_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        engine = HFEngine(rollout_model, tokenizer)
        from rlec.io import atomic_write_text

        atomic_write_text(out_dir / "config.yaml", to_yaml(cfg))
    update.sync_weights(policy, rollout_model)  # resumed weights reach the rollout model too
    logger = None
    if rank0:
        logger = MetricsLogger(out_dir, resume_step=start_step if start.resume_from is not None else None,
                               backends=tuple(select(cfg, "trainer.logger", []) or []),
                               project=str(cfg.trainer.project_name), experiment=str(cfg.trainer.experiment_name))
        for note in logger.notes:
            log0(note)
    total = int(cfg.trainer.total_training_steps)
    n, prompts = int(sampling.n), int(cfg.data.train_batch_size)
    scripted_fraction = float(settings.local.scripted_fraction or 0.0)  # resolved by load_config
    timeout_s = settings.grading.timeout_s
    edges = settings.metrics.target_bucket_edges
    log0(f"ready in {time.perf_counter() - t0:.1f}s: {len(loader.dataset) if rank0 else '?'} prompts, layout {layout.as_dict()}, "
         f"{world} process(es) x {threads} thread(s), model {model_path}")
    if not select(cfg, "actor_rollout_ref.model.path"):
        log0("the tiny model has random weights: its own answers are noise and it learns nothing useful")
    if scripted_fraction:
        log0(f"rlec.local.scripted_fraction={scripted_fraction}: that share of each group is replaced by a scripted answer "
             "(gold or I don't know) so groups have reward variance and the update is non-zero; set it to 0 for real training")
    if start_step >= total:
        log0(f"the run in {out_dir} is complete (step {start_step} of {total}): no step to train; raise STEPS to train "
             "longer, or RESUME=disable to start over")

    last: dict[str, Any] = {}
    bar = tqdm(range(start_step + 1, total + 1), desc="rlec local", disable=not rank0, initial=start_step, total=total,
               file=sys.stdout, dynamic_ncols=True)
    for step in bar:
        _stop_if_interrupted()
        timing: dict[str, float] = {}
        data = None
        t_step = time.perf_counter()
        if rank0:
            t = time.perf_counter()
            batch = loader.next_batch()
            plan = RolloutPlan(float(sampling.temperature), [n] * prompts)
            for algorithm in algorithms:
                algorithm.plan_rollout(step, list(batch["extra_info"]), plan)
            data = rollout(engine, batch, n_per_prompt=plan.n_per_prompt, max_new_tokens=int(cfg.data.max_response_length),
                           temperature=plan.temperature, top_p=float(sampling.top_p), top_k=int(sampling.top_k),
                           seed=int(sampling.seed) * 100_003 + step,
                           uids=[f"s{step}p{i}" for i in range(prompts)],
                           chat_template_kwargs=dict(select(cfg, "data.apply_chat_template_kwargs", {}) or {}))
            gen = rollout_metrics(data)  # before scripted answers replace any row
            scripted = inject_scripted(data, tokenizer, scripted_fraction, seed=int(cfg.data.seed) * 7919 + step)
            timing["gen"] = time.perf_counter() - t
            t = time.perf_counter()
            ntb = data.non_tensor_batch
            scores, infos = score_batch(list(ntb["response_text"]), [rm["ground_truth"] for rm in ntb["reward_model"]],
                                        list(ntb["data_source"]), list(ntb["extra_info"]), step, schedule,
                                        timeout_s=timeout_s, edges=edges)
            fields = _response_fields(data, plan)
            if algorithms:
                lengths = data.batch["response_mask"].sum(dim=1).tolist()
                for row, (info, row_fields) in enumerate(zip(infos, fields)):
                    for algorithm in algorithms:
                        scores[row] = type(algorithm).adjust_reward(scores[row], info, row_fields, int(lengths[row]))
            timing["reward"] = time.perf_counter() - t
            t = time.perf_counter()
            update.set_rewards(data, scores)
            overrides = {key: value for algorithm in algorithms for key, value in algorithm.step_overrides(step).items()}
            update.compute_advantages(data, _with(cfg, overrides) if overrides else cfg)
            timing["adv"] = time.perf_counter() - t
            data.meta_info["rlec"] = {"infos": infos, "gen": gen, "scripted": scripted, "fields": fields}
        data = broadcast_object(data)
        t = time.perf_counter()
        step_metrics = update.old_log_probs(policy, data, cfg)
        timing["old_log_prob"] = time.perf_counter() - t
        t = time.perf_counter()
        step_metrics["actor/lr"] = update.set_learning_rate(optimizer, cfg, step)
        step_metrics.update(update.update_policy(policy, optimizer, data, cfg, config))
        timing["update_actor"] = time.perf_counter() - t
        check_finite_update(step, step_metrics)  # every rank: the same values, the same verdict, before any save
        t = time.perf_counter()
        sync_ok = update.sync_weights(policy, rollout_model, check_index=step)
        timing["update_weights"] = time.perf_counter() - t
        timing["step"] = time.perf_counter() - t_step
        if rank0:
            info = data.meta_info["rlec"]
            last = {**compute_data_metrics(data, use_critic=False), **compute_timing_metrics(data, timing), **step_metrics,
                    **reward_metrics(info["infos"], prefix="rlec"), **info["gen"],
                    "rollout/scripted_fraction": info["scripted"] / len(data), "weight_sync/exact": float(sync_ok)}
            record = StepRecord(info["fields"], [dict(e or {}) for e in data.non_tensor_batch["extra_info"]], info["infos"], last)
            for algorithm in algorithms:
                last.update(algorithm.observe(step, total, record))
        if step % int(cfg.trainer.save_freq) == 0 or step == total:
            t = time.perf_counter()
            user_state = {"loader": loader.state_dict(), "algorithms": {a.name: a.state_dict() for a in algorithms}} if rank0 else {}
            try:
                ckpt.save(policy, optimizer, out_dir, step, broadcast_object(user_state),
                          keep=int(cfg.trainer.max_actor_ckpt_to_keep), config=as_dict(cfg))
            except Exception as exc:
                raise _save_failed(step, exc, out_dir, logger, last) from exc
            if rank0:
                last["timing_s/save_checkpoint"] = time.perf_counter() - t
        if rank0:
            logger.log(step, last)
            bar.set_postfix(reward=f"{last.get('rlec/reward/mean', float('nan')):.3f}", b=f"{schedule(step):.2f}",
                            loss=f"{last.get('actor/pg_loss', float('nan')):.4f}")
            if not sync_ok:
                raise RuntimeError(f"step {step}: weight sync check failed: the rollout model differs from the Megatron policy")
    bar.close()
    _stop_if_interrupted()  # a Ctrl-C swallowed during the last step: no final weights, as for any interrupt
    final = out_dir / "hf_final"
    if rank0:
        logger.close()
        update.save_hf(rollout_model, tokenizer, final)
        log0(f"final HF weights in {final}; metrics in {out_dir / 'metrics.jsonl'}")
    meg.destroy_parallel()
    if rank0:
        from rlec.report import evaluate_final, print_training_summary

        print_training_summary(out_dir / "metrics.jsonl")
        if not select(cfg, "actor_rollout_ref.model.path"):
            print("\n(random tiny model: rewards are noise; the scripted share of each group is what moves the loss)")
        if settings.local.eval.at_end and evaluate_final(cfg, out_dir, final):
            raise RuntimeError("the final evaluation failed (see its output above)")
    return last


def _algorithm_context(cfg: Any, model_path: Path, tokenizer: Any, loader: Any) -> Any:
    """What the enabled algorithms need beyond the config: the policy's vocabulary size (its
    ``config.json``, else the tokenizer's) and the loader's environment source (RLVE); imports the
    verl registrations they need outside verl's trainer (:attr:`rlec.algorithms.base.Algorithm.registration`)."""
    import importlib

    from rlec.algorithms import registry
    from rlec.algorithms.base import AlgorithmContext
    from rlec.models import read_model_config

    try:
        vocab = read_model_config(model_path).get("vocab_size")
    except (OSError, ValueError):
        vocab = None
    for cls in registry.enabled(cfg):
        if cls.registration:
            importlib.import_module(cls.registration)
    return AlgorithmContext(vocab_size=int(vocab) if vocab else getattr(tokenizer, "vocab_size", None),
                            source=getattr(getattr(loader, "dataset", None), "rlve_source", None))


def _response_fields(data: Any, plan: Any) -> list[dict[str, Any]]:
    """Per response row, its prompt's planned fields (:attr:`rlec.algorithms.base.RolloutPlan.prompt_fields`);
    the prompt of a row is read from its uid ``s<step>p<i>``."""
    prompts = [int(str(uid).rsplit("p", 1)[1]) for uid in data.non_tensor_batch["uid"]]
    return [{name: values[i] for name, values in plan.prompt_fields.items()} for i in prompts]


def _save_failed(step: int, exc: Exception, out_dir: Path, logger: Any, last: dict[str, Any]) -> Exception:
    """The error to stop with when the checkpoint after ``step`` could not be written.

    The finished step's metrics line is written first (rank 0; a full disk may refuse it too, and
    the message then says so). A full disk (``ENOSPC``, :func:`rlec.io.no_space_error`) becomes one
    line naming "No space left on device" and the path; the "latest" tracker still names the
    previous checkpoint (it moves only after a complete save), so rerunning resumes from it.
    Any other error is returned unchanged (it propagates with its traceback).
    """
    from rlec.io import no_space_error

    path = ckpt.checkpoint_dir(out_dir, step)
    logged = "metrics.jsonl has the step"
    if logger is not None:
        try:
            logger.log(step, last)
        except OSError as log_exc:
            logged = f"its metrics line could not be written either ({log_exc.strerror})"
    full = exc if isinstance(exc, OSError) and exc.errno == errno.ENOSPC else no_space_error(exc, path)
    if full is None:
        return exc
    try:
        latest = f"global_step_{int((out_dir / 'checkpoints' / ckpt.LATEST_FILE).read_text())}"
    except (OSError, ValueError):
        latest = "none"
    return LocalRunError(f"step {step} finished ({logged}) but its checkpoint was not saved: {full}; the latest checkpoint "
                         f"is still {latest}: free space, then rerun the same command to resume")


FINITE_KEYS = ("actor/pg_loss", "actor/grad_norm")


def check_finite_update(step: int, metrics: dict[str, Any]) -> None:
    """Stop the run when a step's loss or gradient norm is not finite, before anything is saved.

    A NaN or infinite ``actor/pg_loss`` or ``actor/grad_norm`` means the update wrote non-finite
    weights (issue 26: a damaged checkpoint trained on gave ``loss=nan`` and a saved NaN model);
    saving would move the "latest" tracker onto them. The local run uses no loss scaler, so a
    skipped update never reports a missing (NaN) norm here.

    Args:
        step: the global step (from 1).
        metrics: the step's metrics from :func:`rlec.local.update.update_policy`.

    Raises:
        LocalRunError: a listed metric is missing a finite value; the message names each one and
            says the last checkpoint is kept.
    """
    import math

    bad = {key: metrics.get(key) for key in FINITE_KEYS if not math.isfinite(float(metrics.get(key, float("nan"))))}
    if bad:
        shown = ", ".join(f"{key}={value}" for key, value in bad.items())
        raise LocalRunError(f"step {step}: {shown} after the update: stopped before saving it; the last checkpoint "
                            "and metrics.jsonl up to the previous step are kept (a damaged input or checkpoint, or a "
                            "learning rate too high)")


_INTERRUPTED = {"flag": False}


def _on_sigint(signum: int, frame: Any) -> None:
    """Ctrl-C: remember it, then raise KeyboardInterrupt as Python's default handler does.

    The flag is checked again at every step boundary (:func:`_stop_if_interrupted`), so a
    KeyboardInterrupt swallowed by third-party code (seen once in the test suite: a SIGINT during
    the first step and the run finished all its steps with status 0) still stops the run.
    """
    _INTERRUPTED["flag"] = True
    raise KeyboardInterrupt


def _stop_if_interrupted() -> None:
    if _INTERRUPTED["flag"]:
        raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m rlec.local.runner [key=value ...]`` (``--help`` lists every setting)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        try:
            print(settings_help(load_config([a for a in args if a not in ("-h", "--help")])))
        except LocalConfigError as exc:
            print(f"rlec.local: error: {exc}", file=sys.stderr)
            return 2
        return 0
    _INTERRUPTED["flag"] = False
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not when started with SIGINT ignored
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        run(args)
    except LocalRunError as exc:
        print(f"rlec.local: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nrlec.local: interrupted; every finished step is in metrics.jsonl and the last checkpoint is kept: "
              "rerun the same command to resume", file=sys.stderr)
        return 130
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
