"""Markdown tables, the step-time chart and baseline ratios for ``benchmarks/throughput.py``'s JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pm(s: dict[str, Any]) -> str:
    return f"{s['median']:.3g} ±{100 * s['spread'] / 2:.0f}%"


def _mem(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def update_table(section: dict[str, Any], cpu: bool) -> list[str]:
    """Measured update rows (median ±half the relative min-max spread)."""
    lines = ["| layout | procs | precision | logits | tokens/step | log-prob s | fwd-bwd s | optimizer s | "
             f"update tokens/s | per device | {'GFLOP/s/device' if cpu else 'TFLOP/s/device | MFU'} | peak mem GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("" if cpu else "---|") + "---|"]
    for r in section.get("rows", []):
        head = f"| {r.get('layout')} | {r.get('processes', '-')} | {r.get('precision', '-')} | {r.get('logits', '-')} |"
        if "update_s" not in r:
            why = r.get("skipped") or r.get("error", "not measured")
            lines.append(f"{head} {why} |" + " |" * (8 if cpu else 9))
            continue
        flops = (f"{r['achieved_gflops_per_device']:.1f}" if cpu else
                 f"{r['achieved_gflops_per_device'] / 1e3:.1f} | {100 * r['mfu']:.1f}%")
        lines.append(f"{head} {r['tokens_per_step']} | {_pm(r['logprob_s'])} | {_pm(r['fwd_bwd_s'])} | {_pm(r['optimizer_s'])} | "
                     f"{r['tokens_per_s']:.0f} | {r['tokens_per_s_per_device']:.0f} | {flops} | {_mem(r.get('peak_memory_bytes'))} |")
    return lines


def rollout_table(section: dict[str, Any]) -> list[str]:
    lines = ["| engine | version | device | prompts | max new tokens | seconds | generated tokens/s | requests/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in section.get("rows", []):
        lines.append(f"| {r['engine']} | {r['version']} | {r['device']} | {r['prompts']} | {r['max_new_tokens']} | "
                     f"{_pm(r['seconds'])} | {r['tokens_per_s']:.1f} | {r['requests_per_s']:.2f} |")
    return lines


def reward_table(section: dict[str, Any]) -> list[str]:
    lines = ["| grader | responses | workers | seconds | responses/s | agreement (3-way) |", "|---|---|---|---|---|---|"]
    for r in section.get("rows", []):
        lines.append(f"| {r['grader']} | {r['responses']} | {r['pool_workers']} | {_pm(r['seconds'])} | "
                     f"{r['responses_per_s']:.0f} | {r['agreement_3way']:.3f} |")
    return lines


def projection_table(section: dict[str, Any]) -> list[str]:
    """Projected rows, then the assumptions and the anchors."""
    lines = ["| layout | GPUs | GPU | TP/EP/ETP/PP | train GFLOP/token | update GiB/GPU (params+grads+optim+act+logits) | "
             "rollout GiB/GPU | EP a2a GB/GPU/step | update tok/s/GPU | rollout tok/s/GPU | step s | RL tok/s/GPU | gen share |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in section.get("rows", []):
        p, m = r["parallel"], r["memory_gib"]
        lines.append(
            f"| {r['layout']} | {r['gpus']} | {r['device']} | {p['tp']}/{p['ep']}/{p['etp']}/{p['pp']} | "
            f"{r['flops_per_token']['train'] / 1e9:.2f} | {m['params']}+{m['grads']}+{m['optimizer']}+{m['activations']}+"
            f"{m['logits']} = {m['train_total']} | {m['rollout_total']} | {r['alltoall_bytes_per_gpu'] / 1e9:.0f} "
            f"({r['alltoall_s']:.1f} s) | {r['update_tokens_per_s_per_gpu']:.0f} | {r['rollout_tokens_per_s_per_gpu']:.0f} | "
            f"{r['step_s']:.1f} | {r['tokens_per_s_per_gpu']:.0f} | {100 * r['generation_share']:.0f}% |")
    compared = [(r["layout"], x) for r in section.get("rows", []) for x in r.get("anchors", [])]
    if compared:
        lines += ["", "| layout | metric | projected | published anchor | projected / anchor | anchor |", "|---|---|---|---|---|---|"]
        for name, x in compared:
            fmt = "{:.2f}" if x["anchor"] < 10 else "{:,.0f}"
            setup = "" if x["same_setup"] else " (another set-up)"
            lines.append(f"| {name} | {x['metric']} | {fmt.format(x['projected'])} | {fmt.format(x['anchor'])} | "
                         f"{x['ratio']:.2f}{setup} | {x['source']} |")
    skipped = section.get("not_projected", [])
    if skipped:
        lines += ["", "Not projected: " + "; ".join(f"{x['layout']} ({x['reason']})" for x in skipped)]
    a = section.get("assumptions", {})
    lines += ["", "Assumptions: " + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in a.items()),
              "Not modelled: " + "; ".join(section.get("not_modelled", []))]
    lines += ["", "Anchors (published, not measured here):"]
    for x in section.get("anchors", []):
        value = "-".join(f"{v:g}" for v in x["value"]) if isinstance(x["value"], list) else f"{x['value']:g}"
        lines.append(f"- {x['metric']}: {value} ({x['name']}{'; ' + x['note'] if x['note'] else ''})")
    return lines


def markdown(result: dict[str, Any]) -> str:
    """The whole console report."""
    env, s = result["environment"], result["sections"]
    cpu = not env.get("gpu")
    out = [f"## rlec throughput ({result['profile']} profile) on {env.get('gpu') or env.get('cpu')} "
           f"({env['cores']} cores), load average at start {env['loadavg_start'][0]:.2f}", ""]
    if "update" in s and s["update"].get("rows"):
        model = s["update"].get("model", "")
        out += [f"### Update (Megatron, {model})", "", *update_table(s["update"], cpu), ""]
        if cpu:
            out += ["MFU is not meaningful on CPU (no defined peak): achieved GFLOP/s/device uses verl's FLOPs formula "
                    "(the window row counts the output layer on the window only). Timings share 2 cores with other work.", ""]
    for key, title, fn in (("rollout", "Rollout", rollout_table), ("reward", "Reward", reward_table)):
        if key in s and s[key].get("rows"):
            out += [f"### {title}", "", *fn(s[key]), ""]
    if "projection" in s and s["projection"].get("rows"):
        out += ["### Projected (cost model, Qwen3-30B-A3B at the committed layouts; not measured)", "",
                *projection_table(s["projection"]), ""]
    for key, sec in s.items():
        if sec.get("error"):
            out.append(f"section {key} failed: {sec['error']}")
    return "\n".join(out)


def headline(result: dict[str, Any]) -> dict[str, float]:
    """``{key: figure}`` of the measured throughputs, keyed for :func:`compare`."""
    s, out = result["sections"], {}
    for r in s.get("update", {}).get("rows", []):
        if "tokens_per_s" in r:
            out[f"update {r['layout']} {r['precision']} {r['logits']} tokens/s"] = r["tokens_per_s"]
    for r in s.get("rollout", {}).get("rows", []):
        out[f"rollout {r['engine']} tokens/s"] = r["tokens_per_s"]
    for r in s.get("reward", {}).get("rows", []):
        out[f"reward {r['grader']} responses/s"] = r["responses_per_s"]
    return out


def _figure(value: float | None) -> str:
    """A throughput figure as the table shows it (one decimal), ``-`` when the run lacks it."""
    return "-" if value is None else f"{value:.1f}"


def compare(result: dict[str, Any], baseline: dict[str, Any]) -> str:
    """Markdown table of current / baseline for every measured figure both runs have."""
    now, base = headline(result), headline(baseline)
    env, base_env = result["environment"], baseline["environment"]
    lines = [f"### Compared with the baseline ({base_env.get('gpu') or base_env.get('cpu')}, {baseline.get('created', '?')}; "
             f"load average at start: now {env['loadavg_start'][0]:.2f}, baseline {base_env['loadavg_start'][0]:.2f})", "",
             "| figure | now | baseline | ratio |", "|---|---|---|---|"]
    for key in sorted(now.keys() & base.keys()):
        lines.append(f"| {key} | {now[key]:.1f} | {base[key]:.1f} | {now[key] / base[key]:.2f}x |")
    for key in sorted(now.keys() ^ base.keys()):
        lines.append(f"| {key} | {_figure(now.get(key))} | {_figure(base.get(key))} | only in one run |")
    return "\n".join(lines)


def chart(result: dict[str, Any], path: Path) -> Path | None:
    """PNG: measured update step split per layout (s) and projected RL step split per layout (share)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["sections"]
    measured = [r for r in s.get("update", {}).get("rows", []) if "update_s" in r]
    projected = s.get("projection", {}).get("rows", [])
    if not measured and not projected:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    labels = [f"{r['layout']}\n{r['precision']} {r['logits']}" for r in measured]
    bottom = [0.0] * len(measured)
    for key, name in (("logprob_s", "log-prob forward"), ("fwd_bwd_s", "forward-backward"), ("optimizer_s", "optimizer")):
        values = [r[key]["median"] for r in measured]
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("seconds per step (median)")
    ax.set_title("Measured update step")
    ax.legend(fontsize=8)
    ax = axes[1]
    labels = [r["layout"] for r in projected]
    bottom = [0.0] * len(projected)
    for key, name in (("rollout_s", "rollout"), ("logprob_s", "log-prob"), ("update_s", "update")):
        values = [r[key] / r["step_s"] for r in projected]
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.axhline(0.70, color="k", ls="--", lw=1, label="verl: generation 70%")
    ax.set_ylabel("share of projected RL step")
    ax.set_title("Projected RL step (cost model)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    fig.tight_layout()
    from rlec.io import save_figure

    return save_figure(fig, path, dpi=110)
