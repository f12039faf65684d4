"""Two per-sample costs of the CPU rollout's gen phase, before and after, side by side (no launch, seconds).

    python benchmarks/rollout_overheads.py --config outputs/experiments/e3/grpo/seed0/launches/<ts>/config.yaml \
        --model outputs/experiments/e3/shared/warm_start

- **settings read** (implemented): verl's agent-loop worker builds a new agent loop per sample, and rlec's
  :class:`rlec.cpu.agent_loops.ScriptedAnswersMixin` read ``rlec.cpu``'s settings on every one of them (its cache lived
  on the loop). Before: ``RlecSettings.from_config`` per sample; after: the read kept per config object
  (``rlec.run_config.worker_run_config``). Same settings, so the same scripts, tokens and metrics.
- **rollout scoring** (measured, not changed): with ``rollout.calculate_log_probs`` the server scores every response in
  its own batch-1 teacher-forced forward (:func:`rlec.cpu.rollout_scores.score_tokens`). The alternative measured:
  one forward per group of responses of equal prompt and response length (no padding); the script counts the
  responses whose log-probs differ from batch-1's in any bit, and the largest difference.

``--samples`` requests of ``--prompts`` prompts (the e3 gate's 16 x 8), responses sampled by rlec's engine with one
seed per row, up to ``--max-new-tokens`` tokens. Run it at ``nice -n 19`` on a shared box; the load average is
printed beside the figures. CPU seconds (``time.process_time``) are the figures to compare on a loaded box; wall
seconds are printed too.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from typing import Any, Callable


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """(wall s, CPU s, last result) of ``repeats`` calls of ``fn``."""
    out = None
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def settings_read(config_path: str, samples: int) -> dict[str, float]:
    """Seconds to read ``rlec.cpu``'s settings for ``samples`` agent loops: per loop (before) and per config (after)."""
    from omegaconf import OmegaConf

    from rlec import run_config
    from rlec.settings import RlecSettings

    config = OmegaConf.load(config_path)
    RlecSettings.from_config(config)  # imports and first-call costs out of both figures
    before = _timed(lambda: RlecSettings.from_config(config).cpu, samples)
    run_config._WORKER_RUN = None
    after = _timed(lambda: run_config.worker_run_config(config).rlec.cpu, samples)
    assert before[2] == after[2], "the cached read must give the same settings"
    return {"before_wall": before[0], "before_cpu": before[1], "after_wall": after[0], "after_cpu": after[1]}


def scoring(model_path: str, prompts: int, samples: int, max_new_tokens: int) -> dict[str, float]:
    """Seconds to score ``samples`` responses batch-1 (what the server does) and grouped by equal lengths."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlec.cpu.rollout_scores import score_tokens
    from rlec.generation import HFEngine

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    engine = HFEngine(model, tokenizer)
    ids = []
    for i in range(prompts):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Solve the following math problem step by step.\n\nWhat is {i % 9 + 1} + "
                                         f"{(i * 7) % 9 + 10 * (i % 3)}?\n\nPut your final answer within \\boxed{{}}."}],
            tokenize=False, add_generation_prompt=True, enable_thinking=False)
        ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    rows = [ids[i % prompts] for i in range(samples)]
    out = engine.sample(rows, n=1, max_new_tokens=max_new_tokens, temperature=1.0, row_seeds=list(range(samples)))
    responses = [out.responses[i, : int(out.response_mask[i].sum())].tolist() for i in range(samples)]

    def batch_one() -> list[list[float]]:
        return [score_tokens(model, rows[i], responses[i]).log_probs for i in range(samples)]

    def grouped() -> list[list[float]]:
        groups: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
        for i in range(samples):
            groups[(len(rows[i]), len(responses[i]))].append(i)
        result: list[list[float]] = [[] for _ in range(samples)]
        for (n, m), members in groups.items():
            batch = torch.tensor([rows[i] + responses[i] for i in members])
            with torch.inference_mode():
                logits = model(input_ids=batch, logits_to_keep=m + 1).logits
            lp = torch.log_softmax(logits[:, :m].float(), dim=-1).gather(-1, batch[:, n:, None])[..., 0]
            for k, i in enumerate(members):
                result[i] = lp[k].tolist()
        return result

    t0 = time.perf_counter()
    engine.sample(rows, n=1, max_new_tokens=max_new_tokens, temperature=1.0, row_seeds=list(range(samples)))
    gen = time.perf_counter() - t0
    b_wall, b_cpu, one = _timed(batch_one, 1)
    g_wall, g_cpu, many = _timed(grouped, 1)
    differ = sum(a != b for a, b in zip(one, many))
    diff = max((abs(x - y) for a, b in zip(one, many) for x, y in zip(a, b)), default=0.0)
    return {"generate_wall": gen, "before_wall": b_wall, "before_cpu": b_cpu, "after_wall": g_wall, "after_cpu": g_cpu,
            "rows_differing": float(differ), "max_abs_diff": diff, "threads": float(torch.get_num_threads()),
            "mean_response_tokens": sum(map(len, responses)) / samples}


def main(argv: list[str] | None = None) -> int:
    """Print both comparisons as Markdown tables with the load average."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="a launch's resolved config.yaml (settings read); skipped when absent")
    ap.add_argument("--model", help="a Hugging Face model folder (scoring); skipped when absent")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=1, help="settings read: passes over --samples")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}")
    if args.config:
        r = settings_read(args.config, args.samples * args.repeats)
        print(f"\n| settings read, {args.samples * args.repeats} agent loops | before (per loop) | after (per config) |\n|---|---|---|")
        print(f"| CPU s | {r['before_cpu']:.3f} | {r['after_cpu']:.4f} |\n| wall s | {r['before_wall']:.3f} | {r['after_wall']:.4f} |")
    if args.model:
        r = scoring(args.model, args.prompts, args.samples, args.max_new_tokens)
        print(f"\n| rollout scoring, {args.samples} responses ({r['mean_response_tokens']:.1f} tokens mean), "
              f"{int(r['threads'])} threads | batch-1 (server) | grouped by length (not adopted) |\n|---|---|---|")
        print(f"| CPU s | {r['before_cpu']:.3f} | {r['after_cpu']:.3f} |\n| wall s | {r['before_wall']:.3f} | {r['after_wall']:.3f} |")
        print(f"| responses whose log-probs differ in any bit | - | {int(r['rows_differing'])} (max {r['max_abs_diff']:.2e}) |")
        print(f"\n(the whole batch's generation for scale: {r['generate_wall']:.3f} s wall)")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
