"""verl's per-micro-batch preparation in its Megatron engine against the CPU wing's, side by side (no launch).

    python benchmarks/micro_batches.py                      # the e3 premise gate's step: 128 sequences
    python benchmarks/micro_batches.py --steps 3 --prompt-tokens 30-45 --response-tokens 1-24

What one training step of the CPU layout pays per micro-batch (``docs/speed.md``, lever 3), for

- ``old_log_prob``: ``--sequences`` rows in micro-batches of ``--log-prob-micro-batch`` (the gate: 128 in 32 of 4);
  log-probs and entropy (verl's trainer asks for the entropy there);
- ``update_actor``: the same rows in micro-batches of ``--update-micro-batch`` (the gate: 8 of 16); log-probs only
  (entropy only with ``actor.entropy_coeff`` != 0 or ``actor.calculate_entropy``; the gate has neither).

1. **BSHD padding**, in a one-process Megatron world (TP = CP = 1, as the CPU layout): per micro-batch, three
   paddings (input ids; labels, rolled; temperatures) and an unpadding of each per-position output. Before: verl
   0.9.1's ``preprocess_bshd_engine`` / ``postprocess_bshd_engine`` (a Python loop over the rows of nested tensors).
   After: :mod:`rlec.cpu.bshd_padding` (the ``bshd_padding_vectorized`` shim). Every call's tensors are checked
   equal first.
2. **Device move**: verl's ``forward_step`` starts each micro-batch with ``batch.to(device)``. Before: the
   micro-batches verl's ``prepare_micro_batches`` splits off a batch without a device (each move rebuilds it).
   After: the batch moved once (:mod:`rlec.cpu.batch_device`, the ``batch_device_once`` shim), its micro-batches
   then returned as they are. The batch is a stand-in for the actor's (``--fields`` nested per-token fields, two
   per-row tensors, ``--notes`` non-tensor notes), not the gate's exact key set.

Sequence lengths: a prompt and a response length drawn uniformly from the two ranges (the gate: prompts ~38 tokens,
responses 6-8 of at most 24; 45 tokens a sequence on average). Run it at ``nice -n 19`` on a shared box; the load
average is printed beside the figures. CPU seconds (``time.process_time``) are the figures to compare on a loaded
box; wall seconds are printed too.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable


def _span(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _micro_batches(sequences: int, size: int, prompt: tuple[int, int], response: tuple[int, int], seed: int) -> list:
    """``sequences`` random token rows (prompt + response lengths from the ranges) as jagged micro-batches of ``size``:
    (input ids, labels, temperatures) per micro-batch, as verl's Megatron forward pads them (labels: a clone of the
    ids)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    lengths = (torch.randint(prompt[0], prompt[1] + 1, (sequences,), generator=g)
               + torch.randint(response[0], response[1] + 1, (sequences,), generator=g)).tolist()
    rows = [torch.randint(0, 151_936, (n,), generator=g) for n in lengths]
    out = []
    for start in range(0, sequences, size):
        chunk = rows[start:start + size]
        ids = torch.nested.as_nested_tensor(chunk, layout=torch.jagged)
        temperature = torch.nested.as_nested_tensor([torch.ones(len(r)) for r in chunk], layout=torch.jagged)
        out.append((ids, ids.clone(), temperature))
    return out


def _phase(micro_batches: list, pre: Callable[..., Any], post: Callable[..., Any], outputs: int) -> list:
    """One phase's padding work, as verl's BSHD forward does it per micro-batch (``outputs`` per-position outputs
    unpadded); returns the last micro-batch's tensors."""
    import torch

    result: list = []
    for ids, labels, temperature in micro_batches:
        padded, valid, positions = pre(ids, pre_process=True)
        label = pre(labels, pre_process=True, need_roll=True)[0]
        temp = pre(temperature, pre_process=True)[0]
        # stand-ins for the logits processor's outputs (log-probs, entropy)
        result = [padded, valid, positions, label, temp,
                  *(post(torch.full(padded.shape, -float(k), dtype=torch.float32), valid) for k in range(outputs))]
    return result


def _same(a: Any, b: Any) -> bool:
    import torch

    if a.is_nested:
        return torch.equal(a.offsets(), b.offsets()) and torch.equal(a.values(), b.values())
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def compare(sequences: int, log_prob_micro_batch: int, update_micro_batch: int, prompt: tuple[int, int],
            response: tuple[int, int], steps: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """Seconds (CPU and wall) of ``steps`` steps' padding work per phase, verl's and the vectorised one."""
    import torch

    from rlec.cpu.bshd_padding import postprocess_bshd, preprocess_bshd
    from rlec.layout import ParallelLayout
    from rlec.megatron.parallel import init_parallel

    init_parallel(ParallelLayout())  # verl's functions read Megatron's TP / CP sizes (1 here, as the CPU layout)
    from verl.models.mcore import util

    verl = (util.preprocess_bshd_engine, util.postprocess_bshd_engine)
    ours = (preprocess_bshd, postprocess_bshd)
    figures: dict[str, dict[str, float]] = {}
    for phase, size, outputs in (("old_log_prob", log_prob_micro_batch, 2), ("update_actor", update_micro_batch, 1)):
        batches = _micro_batches(sequences, size, prompt, response, seed)
        for a, b in zip(_phase(batches, *verl, outputs), _phase(batches, *ours, outputs), strict=True):  # also: first calls out of the figures
            assert _same(a, b), f"{phase}: the vectorised padding differs from verl's"
        for name, (pre, post) in (("verl", verl), ("rlec", ours)):
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                _phase(batches, pre, post, outputs)
            figures.setdefault(phase, {})[f"{name}_cpu"] = (time.process_time() - cpu) / steps
            figures[phase][f"{name}_wall"] = (time.perf_counter() - wall) / steps
        figures[phase]["micro_batches"] = float(len(batches))
    figures["threads"] = {"torch": float(torch.get_num_threads())}
    return figures


def _actor_batch(rows: int, micro_batch: int, prompt: tuple[int, int], response: tuple[int, int], fields: int,
                 notes: int, seed: int) -> Any:
    """A stand-in for the batch verl's actor worker hands its engine: ``fields`` nested per-token fields, two per-row
    tensors, ``notes`` non-tensor notes (the micro-batch size among them); no device, as it arrives."""
    import torch
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(seed)
    lengths = (torch.randint(prompt[0], prompt[1] + 1, (rows,), generator=g)
               + torch.randint(response[0], response[1] + 1, (rows,), generator=g)).tolist()
    nested = {f"field{k}": torch.nested.as_nested_tensor(
        [torch.randint(0, 100, (n,), generator=g).to(torch.float32 if k % 2 else torch.long) for n in lengths],
        layout=torch.jagged) for k in range(fields)}
    settings = {"micro_batch_size_per_gpu": micro_batch, "use_dynamic_bsz": False,
                **{f"note{k}": k for k in range(max(0, notes - 2))}}
    return tu.get_tensordict({**nested, "temperature": torch.ones(rows), "uid": torch.arange(rows)},
                             non_tensor_dict=settings)


def _moves(batches: list, move_once: bool) -> list:
    """verl's split of each batch into micro-batches and its per-micro-batch ``to("cpu")``; with ``move_once`` the
    batch is first moved as the ``batch_device_once`` shim does. Returns the last batch's micro-batches."""
    from verl.workers.engine.utils import prepare_micro_batches

    from rlec.cpu.batch_device import moved_once

    micro: list = []
    for batch in batches:
        micro = prepare_micro_batches(moved_once(batch, "cpu") if move_once else batch, dp_group=None,
                                      same_micro_num_in_dp=False)[0]
        micro = [mb.to("cpu") for mb in micro]
    return micro


def compare_moves(sequences: int, log_prob_micro_batch: int, update_micro_batch: int, update_mini_batches: int,
                  prompt: tuple[int, int], response: tuple[int, int], fields: int, notes: int, steps: int,
                  seed: int = 0) -> dict[str, dict[str, float]]:
    """Seconds (CPU and wall) of ``steps`` steps' micro-batch split and device moves per phase, verl's and once."""
    import torch

    figures: dict[str, dict[str, float]] = {}
    update_rows = sequences // update_mini_batches
    for phase, batches in (
            ("old_log_prob", [_actor_batch(sequences, log_prob_micro_batch, prompt, response, fields, notes, seed)]),
            ("update_actor", [_actor_batch(update_rows, update_micro_batch, prompt, response, fields, notes, seed + k)
                              for k in range(update_mini_batches)])):
        for a, b in zip(_moves(batches, False), _moves(batches, True), strict=True):  # the same micro-batches
            assert sorted(a.keys()) == sorted(b.keys()), f"{phase}: the micro-batches' keys differ"
            assert all(_same(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a.keys()), phase
        for name, once in (("verl", False), ("rlec", True)):
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                _moves(batches, once)
            figures.setdefault(phase, {})[f"{name}_cpu"] = (time.process_time() - cpu) / steps
            figures[phase][f"{name}_wall"] = (time.perf_counter() - wall) / steps
        figures[phase]["micro_batches"] = float(sum(len(b) for b in batches) // (
            log_prob_micro_batch if phase == "old_log_prob" else update_micro_batch))
    return figures


def _table(title: str, before: str, after: str, r: dict[str, dict[str, float]]) -> None:
    print(f"\n| {title} | {before} | {after} |\n|---|---|---|")
    for phase in ("old_log_prob", "update_actor"):
        f = r[phase]
        label = f"{phase} ({int(f['micro_batches'])} micro-batches)"
        print(f"| {label}: CPU s | {f['verl_cpu']:.3f} | {f['rlec_cpu']:.3f} |")
        print(f"| {label}: wall s | {f['verl_wall']:.3f} | {f['rlec_wall']:.3f} |")


def main(argv: list[str] | None = None) -> int:
    """Print both comparisons as Markdown tables with the load average."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=128, help="rows per step (prompts x responses per prompt)")
    ap.add_argument("--log-prob-micro-batch", type=int, default=4)
    ap.add_argument("--update-micro-batch", type=int, default=16)
    ap.add_argument("--prompt-tokens", default="34-42", help="prompt length range, tokens")
    ap.add_argument("--response-tokens", default="6-8", help="response length range, tokens")
    ap.add_argument("--update-mini-batches", type=int, default=2, help="update_actor's batches per step (the gate: 2)")
    ap.add_argument("--fields", type=int, default=8, help="device move: nested per-token fields of the batch")
    ap.add_argument("--notes", type=int, default=16, help="device move: non-tensor notes of the batch")
    ap.add_argument("--steps", type=int, default=5, help="steps timed (the figures are per step)")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}")
    prompt, response = _span(args.prompt_tokens), _span(args.response_tokens)
    r = compare(args.sequences, args.log_prob_micro_batch, args.update_micro_batch, prompt, response, args.steps)
    shape = f"{args.sequences} sequences (prompt {args.prompt_tokens}, response {args.response_tokens} tokens)"
    _table(f"BSHD pad + unpad per step, {shape}, {int(r['threads']['torch'])} threads", "verl 0.9.1 (row loop)",
           "rlec.cpu.bshd_padding", r)
    m = compare_moves(args.sequences, args.log_prob_micro_batch, args.update_micro_batch, args.update_mini_batches,
                      prompt, response, args.fields, args.notes, args.steps)
    _table(f"micro-batch split + device move per step, {shape}, {args.fields} nested fields, {args.notes} notes",
           "verl 0.9.1 (a move per micro-batch)", "rlec.cpu.batch_device (one per batch)", m)
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
