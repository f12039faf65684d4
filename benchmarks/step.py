"""One RL step of verl's trainer on CPU beside plain PyTorch doing the same work, side by side in one run.

    python benchmarks/step.py --preset demo                 # the demo's compact warm start on its addition data
    python benchmarks/step.py --preset quick algorithm.rollout_correction.bypass_mode=true   # make run's addition task
    python benchmarks/step.py --preset moe                  # TASK=sample's tiny random Qwen3-MoE on the sample data
    python benchmarks/step.py --preset demo --plain-only    # the plain-PyTorch half alone (seconds, no launch)

Two halves, the same model folder, batch and settings (``--preset`` sets them, flags override):

- **verl**: ``tools/run_megatron_rlec.sh`` (the launcher ``make run`` and the demo use, through
  :mod:`rlec.demo.verl_run`) for ``--steps`` steps: the wall time from the launch to the first step's start
  (the first ``metrics.jsonl`` row's arrival less that step's ``timing_s/step``), step 1 (agent-loop workers, first
  calls) and the steady steps (median of steps 2 .. ``--steps``-1; the last step also saves a checkpoint), each of
  verl's phases (``timing_s/*``) as verl logs it;
- **plain PyTorch**: the same Hugging Face model in fp32 in one process at Ray's worker niceness (``--nice``, Ray
  starts its workers at nice 15), each step: rollout sampling (``generate``, KV cache, the prompts x ``n`` rows at
  once, rlec's sampler :class:`rlec.generation.RaceSampler` as the CPU rollout uses), the old log-probs and entropy
  (a forward per micro-batch, as verl's ``old_log_prob``), the PPO update (clipped policy loss, token-mean, one
  optimizer step per mini-batch, grad-norm clip 1.0, AdamW); the vocabulary projection at the response positions
  only, as verl's trainer on CPU. It also reports the largest difference between the sampler's log-probs (logits /
  T of the sampled tokens, kept as it samples) and the recomputed ones: on-policy, the same weights and temperature
  in fp32, they are the same numbers up to float rounding.

The prompts are the first ``--batch`` rows of ``--train`` (chat template, ``enable_thinking=False`` as rlec's recipe).
Output: a Markdown table (phase, verl s, plain s) with the load average (``os.getloadavg``) at each half's start
and end, and ``--out`` JSON with every figure. Run it under the heavy-job lock on a shared box.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP, as the launcher sets for its workers
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """What one RL step does (verl's keys in brackets).

    Attributes:
        batch: prompts per step [data.train_batch_size].
        n: responses per prompt [actor_rollout_ref.rollout.n].
        max_response: generated tokens per response at most [data.max_response_length].
        mini_batch: prompts per optimizer step [actor.ppo_mini_batch_size] (x n rows).
        micro_batch: rows per forward of the update [actor.ppo_micro_batch_size_per_gpu].
        log_prob_micro_batch: rows per forward of the old log-probs [rollout.log_prob_micro_batch_size_per_gpu].
        top_k: sampling top-k, -1 for none [rollout.top_k].
        temperature: sampling temperature [rollout.temperature].
        lr: AdamW learning rate [actor.optim.lr].
    """

    batch: int = 8
    n: int = 8
    max_response: int = 24
    mini_batch: int = 4
    micro_batch: int = 32
    log_prob_micro_batch: int = 4
    top_k: int = -1
    temperature: float = 1.0
    lr: float = 1e-4

    def __post_init__(self) -> None:
        for name in ("batch", "n", "max_response", "mini_batch", "micro_batch", "log_prob_micro_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')}={getattr(self, name)}: must be >= 1")
        if self.batch % self.mini_batch:
            raise ValueError(f"--mini-batch={self.mini_batch} must divide --batch={self.batch} (verl's rule)")
        if self.temperature <= 0:
            raise ValueError(f"--temperature={self.temperature}: must be > 0 (sampling)")

    def overrides(self) -> list[str]:
        """verl's Hydra overrides for these settings."""
        return [f"data.train_batch_size={self.batch}", f"actor_rollout_ref.rollout.n={self.n}",
                f"data.max_response_length={self.max_response}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={self.mini_batch}",
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={self.micro_batch}",
                f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={self.log_prob_micro_batch}",
                f"actor_rollout_ref.rollout.top_k={self.top_k}", f"actor_rollout_ref.rollout.temperature={self.temperature}",
                f"actor_rollout_ref.actor.optim.lr={self.lr}"]


# the issue-54 workloads: the demo / experiment model (the demo's warm start: dense Qwen3, hidden 64, 2 layers, the
# compact vocabulary), make run's addition task (that warm start upcycled to Qwen3-MoE, rlec.demo.quick's batch) and
# the sample task's tiny random Qwen3-MoE (TASK=sample)
PRESETS: dict[str, StepSettings] = {
    "demo": StepSettings(batch=8, n=8, max_response=24, mini_batch=4, micro_batch=32, log_prob_micro_batch=4, lr=1e-4),
    "quick": StepSettings(batch=16, n=8, max_response=24, mini_batch=4, micro_batch=32, log_prob_micro_batch=4, lr=2e-4),
    "moe": StepSettings(batch=8, n=4, max_response=64, mini_batch=4, micro_batch=4, log_prob_micro_batch=4, lr=1e-5),
}

PLAIN_PHASES = ("gen", "old_log_prob", "update_actor", "step")
# verl's metrics of the rollout's log-probs against the trainer's old log-probs (decoupled mode; absent in bypass mode,
# where the old log-probs are the rollout's)
SAMENESS = ("rollout_corr/kl", "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean", "actor/entropy")


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def read_prompts(train: Path, tokenizer: Any, count: int) -> list[list[int]]:
    """Token ids of the first ``count`` prompts of a data-contract parquet (``prompt``: chat messages), rendered
    with the chat template and a generation prompt (``enable_thinking=False``, rlec's recipe)."""
    import pandas as pd

    frame = pd.read_parquet(train, columns=["prompt"])
    if len(frame) < count:
        raise ValueError(f"{train}: {len(frame)} rows, fewer than --batch={count}")
    out = []
    for messages in frame["prompt"].iloc[:count]:
        text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False,
                                             enable_thinking=False)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def _token_log_probs(model: Any, ids: Any, mask: Any, targets: Any, temperature: float,
                     entropy: bool) -> tuple[Any, Any]:
    """Log-probs (and entropy) of ``targets`` (rows, R), the last R tokens of a left-padded batch ``ids``.

    The vocabulary projection at the R positions that predict them only (``logits_to_keep``), as verl's trainer on
    CPU computes it (``response_only_logits``).
    """
    import torch

    width = targets.shape[1]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1).logits
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1) if entropy else None
    return picked, ent


class _SamplerLogProbs:
    """A logits processor around rlec's sampler (:class:`rlec.generation.RaceSampler`, what the CPU rollout samples
    with) that keeps the sampled token's log-prob under ``softmax(logits / T)`` (one logsumexp a token)."""

    def __init__(self, sampler: Any, temperature: float) -> None:
        self.sampler, self.temperature, self.log_probs = sampler, temperature, []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        out = self.sampler(input_ids, scores)
        token = out.argmax(-1, keepdim=True)
        scaled = scores.float() / self.temperature
        self.log_probs.append((scaled.gather(-1, token) - scaled.logsumexp(-1, keepdim=True)).squeeze(-1))
        return out


def plain_step(model_dir: Path, prompts: Sequence[Sequence[int]], settings: StepSettings, *, steps: int = 3,
               seed: int = 0) -> dict[str, Any]:
    """Plain PyTorch doing one RL step's work ``steps`` times on the Hugging Face model in ``model_dir`` (fp32).

    Each step: sample ``n`` responses per prompt (``generate``, at most ``max_response`` tokens, ``top_k`` /
    ``temperature``), the old log-probs and entropy of the response tokens (``log_prob_micro_batch`` rows per
    forward, no grad), then one PPO update (advantages: each response's length z-scored within its prompt's group,
    a stand-in reward; clipped ratio 0.2 / 0.28, token-mean, ``micro_batch`` rows per forward, one AdamW step of
    ``lr`` per mini-batch, grad norm clipped to 1.0).

    Args:
        prompts: ``settings.batch`` prompts' token ids.
        steps: steps to time (the first includes the first calls' warm-up).

    Returns:
        ``{"steps": [{phase: seconds} ...], "sampler_logprob_max_diff": float}``: per step the seconds of
        :data:`PLAIN_PHASES`; the largest |sampler log-prob - recomputed old log-prob| over the response tokens of
        all steps (the sampler's: log-softmax of its raw logits / T at the sampled token).

    Raises:
        ValueError: ``prompts`` is not ``settings.batch`` long, or ``steps`` < 1.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if len(prompts) != settings.batch or steps < 1:
        raise ValueError(f"plain_step: {len(prompts)} prompts for batch {settings.batch}, steps={steps} (need >= 1)")
    torch.manual_seed(seed)
    from transformers import GenerationConfig, LogitsProcessorList

    from rlec.generation import RaceSampler

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = model.generation_config.eos_token_id
    eos_ids = torch.tensor(eos if isinstance(eos, list) else [eos if eos is not None else pad])
    # greedy over the sampler's output (0 at the drawn token, -inf elsewhere): rlec_hf's generate, every field set
    config = GenerationConfig(do_sample=False, max_new_tokens=settings.max_response, pad_token_id=pad,
                              eos_token_id=eos_ids.tolist(), repetition_penalty=1.0, top_k=None, top_p=None,
                              temperature=None, use_cache=True)
    rows = [list(p) for p in prompts for _ in range(settings.n)]
    width = max(map(len, rows))
    prompt_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    prompt_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    timings, worst = [], 0.0
    for _ in range(steps):
        times: dict[str, float] = {}
        t_step = time.perf_counter()
        model.eval()
        recorder = _SamplerLogProbs(RaceSampler(settings.temperature, 1.0, settings.top_k), settings.temperature)
        with torch.no_grad():
            out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config,
                                 logits_processor=LogitsProcessorList([recorder]))
        responses = out[:, width:]
        if responses.shape[1] < settings.max_response:  # every row ended early
            fill = torch.full((len(rows), settings.max_response - responses.shape[1]), pad, dtype=responses.dtype)
            responses = torch.cat([responses, fill], 1)
        sampler_lp = torch.stack(recorder.log_probs, 1)
        sampler_lp = torch.cat([sampler_lp, sampler_lp.new_zeros(len(rows), responses.shape[1] - sampler_lp.shape[1])], 1)
        ended = torch.isin(responses, eos_ids).long()
        resp_mask = ((ended.cumsum(-1) - ended) == 0).long()  # up to and including the first end token
        ids = torch.cat([prompt_ids, responses], 1)
        mask = torch.cat([prompt_mask, resp_mask], 1)
        times["gen"] = time.perf_counter() - t_step

        t0 = time.perf_counter()
        with torch.no_grad():
            parts = [_token_log_probs(model, ids[i:i + settings.log_prob_micro_batch], mask[i:i + settings.log_prob_micro_batch],
                                      responses[i:i + settings.log_prob_micro_batch], settings.temperature, True)
                     for i in range(0, len(rows), settings.log_prob_micro_batch)]
        old_lp = torch.cat([p[0] for p in parts])
        times["old_log_prob"] = time.perf_counter() - t0
        valid = resp_mask.bool()
        worst = max(worst, float((old_lp - sampler_lp).abs()[valid].max()))

        t0 = time.perf_counter()
        model.train()
        length = resp_mask.sum(-1).float().view(settings.batch, settings.n)
        adv = ((length - length.mean(-1, keepdim=True)) / (length.std(-1, keepdim=True) + 1e-6)).view(-1, 1)
        mini_rows = settings.mini_batch * settings.n
        for m0 in range(0, len(rows), mini_rows):
            optimizer.zero_grad(set_to_none=True)
            tokens = resp_mask[m0:m0 + mini_rows].sum().clamp(min=1)
            for i in range(m0, min(m0 + mini_rows, len(rows)), settings.micro_batch):
                j = min(i + settings.micro_batch, m0 + mini_rows)
                lp, _ = _token_log_probs(model, ids[i:j], mask[i:j], responses[i:j], settings.temperature, False)
                ratio = torch.exp(lp - old_lp[i:j])
                loss_tok = -torch.minimum(adv[i:j] * ratio, adv[i:j] * ratio.clamp(1 - 0.2, 1 + 0.28))
                (loss_tok * resp_mask[i:j]).sum().div(tokens).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        times["update_actor"] = time.perf_counter() - t0
        times["step"] = time.perf_counter() - t_step
        timings.append(times)
    return {"steps": timings, "sampler_logprob_max_diff": worst}


def _plain_child(args: argparse.Namespace, settings: StepSettings) -> dict[str, Any]:
    """The plain half in a child process at ``--nice`` (Ray's worker niceness), its result read back as JSON."""
    cmd = [sys.executable, __file__, "--plain-only", "--json", "--model", str(args.model), "--train", str(args.train),
           "--plain-steps", str(args.plain_steps), *_settings_argv(settings)]
    proc = subprocess.run(["nice", "-n", str(args.nice), *cmd], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"the plain-PyTorch half failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return plain_from_child(proc.stdout)


def plain_from_child(stdout: str) -> dict[str, Any]:
    """The plain half's figures from a ``--plain-only --json`` run's stdout (its last line)."""
    return json.loads(stdout.strip().splitlines()[-1])["plain"]


def _settings_argv(s: StepSettings) -> list[str]:
    return [f"--{f.name.replace('_', '-')}={getattr(s, f.name)}" for f in dataclasses.fields(s)]


def verl_steps(folder: Path, settings: StepSettings, *, model: Path, train: Path, test: Path, steps: int,
               extra: Sequence[str] = ()) -> dict[str, Any]:
    """``steps`` steps of verl's trainer through the launcher (:mod:`rlec.demo.verl_run`'s command) into ``folder``.

    Returns:
        ``{"launch_to_first_step_s", "first_row_s", "total_s", "rows": [{step, timing_s/*}], "rc"}``: seconds from
        the launch to step 1's start (its ``metrics.jsonl`` row's arrival, polled every 0.2 s, less its
        ``timing_s/step``), to that arrival, and to the launcher's exit.

    Raises:
        ValueError: ``folder`` already holds a run (a rerun would resume, not launch).
    """
    from rlec.demo import verl_run

    if (folder / "metrics.jsonl").exists():
        raise ValueError(f"{folder}: holds a run already (metrics.jsonl): choose an empty --out-dir")
    folder.mkdir(parents=True, exist_ok=True)
    env = verl_run.launcher_env(folder, model=model, train=train, test=test, steps=steps)
    argv = ["bash", str(verl_run.LAUNCHER), *verl_run.launcher_args(folder, [*settings.overrides(), *extra], steps=steps)]
    t0 = time.perf_counter()
    arrivals: list[float] = []
    with open(folder / "launch.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        metrics = folder / "metrics.jsonl"
        while True:
            done = proc.poll() is not None
            rows = len(metrics.read_text().splitlines()) if metrics.exists() else 0
            arrivals += [time.perf_counter() - t0] * (rows - len(arrivals))
            if done:
                break
            time.sleep(0.2)
    total = time.perf_counter() - t0
    rows = [{"step": int(r["step"]), **{k: float(v) for k, v in r.items() if k.startswith("timing_s/") or k in SAMENESS}}
            for r in map(json.loads, metrics.read_text().splitlines())] if metrics.exists() else []
    first = arrivals[0] if arrivals else float("nan")
    step1 = rows[0].get("timing_s/step", float("nan")) if rows else float("nan")
    return {"rc": proc.returncode, "total_s": total, "first_row_s": first, "launch_to_first_step_s": first - step1,
            "rows": rows, "log": str(folder / "launch.log")}


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(result: dict[str, Any]) -> str:
    """The Markdown side-by-side table of a :func:`main` result."""
    verl, plain = result.get("verl"), result.get("plain")
    lines = [f"model {result['model']}, settings {result['settings']}", ""]
    steady_plain = {p: _median([s[p] for s in plain["steps"][1:]] or [plain["steps"][0][p]]) for p in PLAIN_PHASES} if plain else {}
    if verl:
        rows = verl["rows"]
        steady = rows[1:-1] or rows[1:] or rows
        keys = sorted({k for r in rows for k in r if k.startswith("timing_s/")})
        lines += [f"verl: launch to step 1's start {verl['launch_to_first_step_s']:.1f} s, whole run {verl['total_s']:.1f} s "
                  f"({len(rows)} steps, exit {verl['rc']}); steady = median of steps {[r['step'] for r in steady]}", ""]
        lines += ["| phase | verl step 1 s | verl steady s | plain PyTorch steady s |", "|---|---|---|---|"]
        for key in keys:
            phase = key[len("timing_s/"):]
            lines.append(f"| {phase} | {rows[0].get(key, float('nan')):.2f} | {_median([r[key] for r in steady if key in r]):.2f} | "
                         + (f"{steady_plain[phase]:.2f}" if phase in steady_plain else "") + " |")
        same = {k: max(abs(r[k]) for r in rows if k in r) for k in SAMENESS if any(k in r for r in rows)}
        lines += ["", "rollout vs trainer log-probs, largest over the steps: " + (
            ", ".join(f"{k} {v:.2e}" for k, v in same.items()) or "not logged (bypass mode: old log-probs = rollout's)")]
        if plain:
            reference, note = steady_plain["step"], ""
            if "timing_s/old_log_prob" not in keys:  # bypass mode: verl takes the sampler's; plain's pass is not work verl does
                reference, note = reference - steady_plain["old_log_prob"], " (plain without its old_log_prob pass, as verl's bypass mode)"
            ratio = _median([r["timing_s/step"] for r in steady if "timing_s/step" in r]) / reference
            lines += ["", f"steady step, verl / plain PyTorch: {ratio:.2f}x{note}"]
    elif plain:
        lines += ["| phase | plain PyTorch step 1 s | steady s |", "|---|---|---|"]
        lines += [f"| {p} | {plain['steps'][0][p]:.2f} | {steady_plain[p]:.2f} |" for p in PLAIN_PHASES]
    if plain:
        lines.append(f"plain PyTorch at nice {result.get('nice', 0)}: sampler vs recomputed log-probs, "
                     f"max |diff| {plain['sampler_logprob_max_diff']:.2e}")
    lines.append(f"load average (1/5/15 min): {result['load']}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="moe", help="the step's settings [moe]")
    p.add_argument("--model", type=Path, help="Hugging Face model folder [outputs/bench/{tiny_moe,demo_model}, built if absent]")
    p.add_argument("--train", type=Path, help="training parquet [outputs/bench/{data,demo_data}/train.parquet, written if absent]")
    p.add_argument("--test", type=Path, help="validation parquet [beside --train]")
    p.add_argument("--steps", type=int, default=5, help="verl steps (step 1, steady 2 .. steps-1, the last saves) [5]")
    p.add_argument("--plain-steps", type=int, default=3, help="plain PyTorch steps [3]")
    p.add_argument("--nice", type=int, default=15, help="the plain half's niceness (Ray's workers: 15) [15]")
    p.add_argument("--out-dir", type=Path, default=REPO / "outputs" / "bench_step", help="verl's run folder (empty)")
    p.add_argument("--out", type=Path, help="write every figure here as JSON")
    p.add_argument("--plain-only", action="store_true", help="the plain-PyTorch half only (no launch)")
    p.add_argument("--verl-only", action="store_true", help="the verl half only (A/B runs of verl settings)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line (the child's protocol)")
    for f in dataclasses.fields(StepSettings):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=None)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="more verl overrides for the verl half")
    return p


def _defaults(args: argparse.Namespace) -> None:
    """The preset's default model and data, built once into outputs/bench: ``demo``: the demo's warm start (shipped
    compact weights, :func:`rlec.demo.warm_start.build`: dense Qwen3, hidden 64, 2 layers, the compact tokenizer's 223
    rows) and the demo's addition data (:func:`rlec.demo.data.write_demo_data`); ``quick``: that warm start upcycled
    to Qwen3-MoE (:data:`rlec.demo.quick.EXPERTS` experts) as make run trains it, the same data; ``moe``: the tiny random
    Qwen3-MoE and the sample data (``TASK=sample``)."""
    bench = REPO / "outputs" / "bench"
    if args.model is None:
        args.model = bench / {"moe": "tiny_moe", "demo": "demo_compact", "quick": "quick_moe"}[args.preset]
        if not (args.model / "config.json").is_file():
            if args.preset == "moe":
                from rlec.models import build_tiny_model

                build_tiny_model(args.model)
            else:
                from rlec.demo import quick, warm_start

                experts = quick.EXPERTS if args.preset == "quick" else 0
                warm_start.build(args.model, warm_start.WarmStartConfig(), experts=experts, progress=False)
    if args.train is None:
        args.train = bench / ("data" if args.preset == "moe" else "demo_data") / "train.parquet"
        if not args.train.is_file():
            if args.preset == "moe":
                from rlec.data.prepare import main as prepare

                prepare(["--output-dir", str(args.train.parent)])
            else:
                from rlec.demo.data import write_demo_data

                write_demo_data(args.train.parent, binary_fraction=0.0)
    args.test = args.test or args.train.with_name("test.parquet")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = dataclasses.replace(PRESETS[args.preset], **{f.name: getattr(args, f.name) for f in dataclasses.fields(StepSettings)
                                                                if getattr(args, f.name) is not None})
    except ValueError as exc:
        print(f"benchmarks/step.py: error: {exc}", file=sys.stderr)
        return 2
    _defaults(args)
    for path in (args.model / "config.json", args.train):
        if not path.is_file():
            print(f"benchmarks/step.py: error: {path}: not found", file=sys.stderr)
            return 2
    result: dict[str, Any] = {"model": str(args.model), "settings": dataclasses.asdict(settings), "load": [load()],
                              "nice": args.nice}
    if args.plain_only:
        from transformers import AutoTokenizer

        prompts = read_prompts(args.train, AutoTokenizer.from_pretrained(args.model), settings.batch)
        result["plain"] = plain_step(args.model, prompts, settings, steps=args.plain_steps)
        result["nice"] = os.nice(0)
    else:
        if not args.verl_only:
            result["plain"] = _plain_child(args, settings)
            result["load"].append(load())
        result["verl"] = verl_steps(args.out_dir, settings, model=args.model, train=args.train, test=args.test,
                                    steps=args.steps, extra=args.overrides)
    result["load"].append(load())
    if args.out:  # first: the figures survive a failing table
        from rlec.io import atomic_write_text

        atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(result) if args.json else table(result))
    return 0 if not result.get("verl") or result["verl"]["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
