"""DRY_RUN's resolved config for every committed layout x precision x algorithm, as a golden snapshot (issue 59).

    python -m tools.resolved_configs            # recompose every combination, list what differs from the snapshot
    python -m tools.resolved_configs --update   # rewrite the snapshot (atomically) from the current files

A change to the resolved config of any run the launcher can start (a YAML default, an overlay, a launcher
override, a rule that now refuses a combination) shows up as a difference in ``tests/tools/test_resolved_configs.py``.
Such a change of behaviour is its own commit, with its reason, made with ``--update`` (issue 59).

How a combination is resolved, as ``DRY_RUN=1 SKIP_PATH_CHECKS=1 LAYOUT=<l> PRECISION=<p> bash
tools/run_megatron_rlec.sh [algorithm=<a>]`` does it on a machine with or without a GPU (DRY_RUN checks the cluster's
layout unless TRAINER=verl is named):

1. the launcher itself builds the overrides: it runs once per layout x precision with ``PYTHON`` a stand-in that
   hands ``python -m rlec.flags`` to this interpreter and records the arguments of ``python -m
   rlec.cluster.config_check`` instead of running it (the launcher's command line ``"$@"`` is a marker, replaced by
   each algorithm's ``algorithm=<a>``, so it sits where the launcher puts it);
2. :func:`rlec.config.compose` composes them (what ``config_check`` does) and the rules run in ``config_check``'s
   order: the early rules (:func:`override_rules`, :func:`settings_rules`: exit 2) then :func:`run_checks` without
   path checks (SKIP_PATH_CHECKS=1: exit 1). A refused combination is recorded with its first refusal line; DRY_RUN
   writes no config for it. The checks see the checkpoint folder as a fresh one (a folder that does not exist):
   an earlier run's checkpoints in this checkout are the machine's state, not the config's.
3. the resolved config, flattened (``a.b.c: leaf``, lists are leaves), with the checkout's absolute path (the
   launcher's ``REPO_ROOT``: model, data and checkpoint paths, ``PYTHONPATH``) written as :data:`REPO`.

Not covered: the CPU run's layout (``layout=cpu precision=fp32``, ``TRAINER=verl``), whose launcher branch builds a model
and data and sizes Ray by the machine's cores.

The snapshot (:data:`SNAPSHOT`): the base combination (:data:`BASE`, the launcher's defaults) in full, then every other
combination as its key differences from the same layout and precision without an overlay (that one's from the base),
so an overlay's lines are its own effect; values are JSON. See :func:`render`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a file or imported by path (tests): rlec from this checkout
    sys.path.insert(0, str(REPO_ROOT))

from rlec.config import CLUSTER_CONFIG, CONFIG_DIR, compose, flatten  # noqa: E402
from rlec.config import cluster_layouts, gpu_precisions, options  # noqa: E402

LAUNCHER = REPO_ROOT / "tools" / "run_megatron_rlec.sh"
SNAPSHOT = REPO_ROOT / "tests" / "tools" / "resolved_configs.txt"
UPDATE_COMMAND = "python -m tools.resolved_configs --update"
REPO = "<repo>"  # the placeholder of the checkout's absolute path
_ARGS_MARK = "@@RLEC_COMMAND_LINE@@"
_NONE = "none"

__all__ = ["BASE", "Combination", "SNAPSHOT", "UPDATE_COMMAND", "combinations", "compare", "current", "failure_message",
           "launcher_overrides", "main", "parse", "render", "resolve"]


@dataclass(frozen=True)
class Combination:
    """One launch: ``LAYOUT``, ``PRECISION`` and the ``algorithm=`` overlay on the command line (None: no overlay)."""

    layout: str
    precision: str
    algorithm: str | None = None

    @property
    def name(self) -> str:
        """``layout=<l> precision=<p> algorithm=<a|none>``: the combination's heading in the snapshot."""
        return f"layout={self.layout} precision={self.precision} algorithm={self.algorithm or _NONE}"

    @property
    def command_line(self) -> list[str]:
        """What follows the launcher's name: the algorithm overlay, if any."""
        return [f"algorithm={self.algorithm}"] if self.algorithm else []


BASE = Combination("qwen3_30b_a3b_4x8", "bf16")  # the launcher's defaults (LAYOUT, PRECISION, no overlay)


def combinations() -> list[Combination]:
    """Every committed cluster layout x GPU precision x (no overlay, each ``megatron_configs/algorithm/`` overlay, and
    ``[e3,passk]``, the one combined overlay the docs name), :data:`BASE` first."""
    algorithms = [None, *options("algorithm"), "[e3,passk]"]
    every = [Combination(lay, prec, algo) for lay in cluster_layouts() for prec in gpu_precisions() for algo in algorithms]
    return [BASE] + [c for c in every if c != BASE]


_STAND_IN = """#!/usr/bin/env bash
# python -m rlec.cluster.config_check: print its arguments (NUL-separated) instead of running it
if [[ "${1:-}" == -m && "${2:-}" == rlec.cluster.config_check ]]; then shift 2; printf '%s\\0' "$@"; exit 0; fi
exec "$RLEC_REAL_PYTHON" "$@"
"""


def launcher_overrides(layout: str, precision: str) -> list[str]:
    """The Hydra overrides ``DRY_RUN=1 SKIP_PATH_CHECKS=1 LAYOUT=layout PRECISION=precision`` makes the launcher hand to
    ``rlec.cluster.config_check``, with :data:`_ARGS_MARK` where its command line goes.

    The launcher runs from a clean environment (``PATH`` with this interpreter first, ``HOME``), so no variable of
    the caller's shell reaches it. Raises RuntimeError when the launcher fails or passes other options.
    """
    with tempfile.TemporaryDirectory(prefix="rlec-resolved-") as tmp:
        stand_in = Path(tmp) / "python"
        stand_in.write_text(_STAND_IN)
        stand_in.chmod(0o755)
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", tmp),
               "PYTHON": str(stand_in), "RLEC_REAL_PYTHON": sys.executable, "DRY_RUN": "1", "SKIP_PATH_CHECKS": "1",
               "LAYOUT": layout, "PRECISION": precision}
        proc = subprocess.run(["bash", str(LAUNCHER), _ARGS_MARK], env=env, capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{LAUNCHER.name} (LAYOUT={layout} PRECISION={precision}) exited {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace')[-2000:]}")
    args = [a.decode() for a in proc.stdout.split(b"\0")[:-1]]
    options_ = {"--output": 1, "--skip-path-checks": 0}  # what DRY_RUN=1 SKIP_PATH_CHECKS=1 passes (and its values)
    out, i = [], 0
    while i < len(args):
        if args[i].startswith("--"):
            if args[i] not in options_:
                raise RuntimeError(f"{LAUNCHER.name} passes {args[i]!r} to config_check: not known to {__name__}")
            i += 1 + options_[args[i]]
            continue
        out.append(args[i])
        i += 1
    if out.count(_ARGS_MARK) != 1:
        raise RuntimeError(f"{LAUNCHER.name}'s command line reached config_check {out.count(_ARGS_MARK)} times: {out}")
    return out


def _masked(value: Any) -> Any:
    """``value`` with the checkout's absolute path written as :data:`REPO` (in strings, also inside lists and dicts)."""
    if isinstance(value, str):
        return value.replace(str(REPO_ROOT), REPO)
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    return value


def resolve(combo: Combination, overrides: Sequence[str]) -> dict[str, Any] | str:
    """The combination's resolved config, flat and masked, or the line that refuses it (``refused (exit N): ...``).

    ``overrides``: :func:`launcher_overrides` of the combination's layout and precision.
    """
    from rlec.cluster.config_check import layout_name, run_checks
    from rlec.io import held_back_console
    from rlec.rules.settings_rules import override_rules, settings_rules
    from rlec.run_config import RunConfig

    args = [a for o in overrides for a in (combo.command_line if o == _ARGS_MARK else [o])]
    with held_back_console():  # Hydra imports verl, which prints
        cfg = compose(args, CLUSTER_CONFIG, CONFIG_DIR)
    checked = copy.deepcopy(cfg)
    with tempfile.TemporaryDirectory(prefix="rlec-resolved-") as tmp:  # a fresh checkpoint folder for the checks
        checked.trainer.default_local_dir = str(Path(tmp) / "absent")
        run = RunConfig(checked)  # read once, as config_check's main does: the early rules, then run_checks
        early = override_rules(args) + settings_rules(run)
        if early:
            return f"refused (exit 2): {str(early[0]).splitlines()[0]}"
        findings, _, _ = run_checks(run, check_paths=False, layout=layout_name(args))
    errors = [f for f in findings if f.level == "error"]
    if errors:
        return f"refused (exit 1): {str(errors[0]).splitlines()[0]}"
    return {key: _masked(value) for key, value in sorted(flatten(cfg).items())}


def current(combos: Sequence[Combination] | None = None) -> dict[str, dict[str, Any] | str]:
    """``{combination name: resolved flat config or refusal line}`` for ``combos`` (default: :func:`combinations`)."""
    combos = combinations() if combos is None else list(combos)
    launches: dict[tuple[str, str], list[str]] = {}
    out = {}
    for combo in combos:
        key = (combo.layout, combo.precision)
        if key not in launches:
            launches[key] = launcher_overrides(*key)
        out[combo.name] = resolve(combo, launches[key])
    return out


# --- the snapshot's text ------------------------------------------------------------------------------------------
_HEADER = f"""\
# DRY_RUN's resolved config for every committed layout x precision x algorithm (tools/resolved_configs.py, issue 59).
# Written by `{UPDATE_COMMAND}`; compared by tests/tools/test_resolved_configs.py. Do not edit by hand:
# a change of behaviour is its own commit, with its reason.
# [combination] base: every key of the base combination (the launcher's defaults), `key: value`.
# [combination] from [reference]: its differences from the reference (the same layout and precision without an
#   algorithm overlay, or the base): `+ key: value` added, `~ key: reference value -> value` changed,
#   `- key: reference value` removed; `refused (exit N): <first refusal line>` for a combination DRY_RUN refuses.
# Values are JSON. {REPO} stands for the checkout's absolute path (the launcher's REPO_ROOT).
"""


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _reference(name: str, results: dict[str, dict[str, Any] | str], base_name: str) -> str:
    """What ``name`` is written against: its layout and precision without an overlay when that resolves, else the base."""
    plain = name.rpartition(" algorithm=")[0] + f" algorithm={_NONE}"
    return plain if plain != name and isinstance(results.get(plain), dict) else base_name


def render(results: dict[str, dict[str, Any] | str]) -> str:
    """The snapshot's text: the first combination (it must resolve) in full, every other one as its differences from
    its reference (:func:`_reference`: an overlay's lines are then the overlay's own effect).

    ``results`` lists each no-overlay combination before its layout and precision's overlays (:func:`combinations`).
    Raises ValueError when the first combination is refused (there would be no base to diff against).
    """
    names = list(results)
    base_name, base = names[0], results[names[0]]
    if isinstance(base, str):
        raise ValueError(f"the base combination {base_name} is {base}")
    lines = [_HEADER, f"[{base_name}] base"] + [f"{key}: {_dump(value)}" for key, value in base.items()]
    for name in names[1:]:
        result, ref_name = results[name], _reference(name, results, base_name)
        ref = results[ref_name]
        lines += ["", f"[{name}] from [{ref_name}]"]
        if isinstance(result, str):
            lines.append(result)
            continue
        for key in sorted(set(ref) | set(result)):
            if key not in ref:
                lines.append(f"+ {key}: {_dump(result[key])}")
            elif key not in result:
                lines.append(f"- {key}: {_dump(ref[key])}")
            elif _dump(ref[key]) != _dump(result[key]):
                lines.append(f"~ {key}: {_dump(ref[key])} -> {_dump(result[key])}")
    return "\n".join(lines) + "\n"


def _key_value(line: str, where: str) -> tuple[str, str]:
    key, sep, value = line.partition(": ")
    if not sep or not key:
        raise ValueError(f"{where}: expected `key: value`, got {line!r}")
    return key, value


def parse(text: str) -> dict[str, dict[str, Any] | str]:
    """The results :func:`render` wrote (each combination's full flat config, or its refusal line).

    Raises ValueError naming the line for a line it cannot read, a reference not written before, or a `~`/`-` line
    whose reference value is not the reference's.
    """
    results: dict[str, dict[str, Any] | str] = {}
    name = ref = None
    decoder = json.JSONDecoder()
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{SNAPSHOT.name}:{number}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            name, _, rest = line[1:].partition("] ")
            if rest == "base" and not results:
                ref = None
                results[name] = {}
            elif rest.startswith("from [") and rest.endswith("]") and isinstance(results.get(rest[6:-1]), dict):
                ref = results[rest[6:-1]]
                results[name] = dict(ref)
            else:
                raise ValueError(f"{where}: expected `[name] base` first, then `[name] from [a resolved name above]`, "
                                 f"got {line!r}")
            continue
        if name is None:
            raise ValueError(f"{where}: a line before the first [combination]")
        if line.startswith("refused ("):
            results[name] = line
            continue
        entry = results[name]
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: a line after {name}'s refusal")
        if ref is None:
            key, value = _key_value(line, where)
            entry[key] = json.loads(value)
            continue
        op, rest = line[:2], line[2:]
        key, value = _key_value(rest, where)
        if op == "+ ":
            entry[key] = json.loads(value)
        elif op in ("~ ", "- "):
            old, end = decoder.raw_decode(value)
            if key not in ref or _dump(old) != _dump(ref[key]):
                raise ValueError(f"{where}: {key}'s reference value is {_dump(ref.get(key, '<absent>'))}, the line says "
                                 f"{_dump(old)}")
            if op == "- ":
                del entry[key]
            elif not value[end:].startswith(" -> "):
                raise ValueError(f"{where}: expected `~ key: old -> new`, got {line!r}")
            else:
                entry[key] = json.loads(value[end + 4:])
        else:
            raise ValueError(f"{where}: expected `+ `, `~ ` or `- ` before a key, got {line!r}")
    return results


def compare(expected: dict[str, dict[str, Any] | str], actual: dict[str, dict[str, Any] | str]) -> dict[str, list[str]]:
    """``{combination: ["key: old -> new", ...]}`` for every combination whose resolved config or refusal differs
    (``<absent>`` for a key one side lacks); a combination only one side has is one line saying so."""
    out: dict[str, list[str]] = {}
    for name in [*expected, *(n for n in actual if n not in expected)]:
        if name not in actual:
            out[name] = ["in the snapshot, no longer composed (a layout, precision or algorithm file gone?)"]
        elif name not in expected:
            out[name] = ["composed now, not in the snapshot (a new layout, precision or algorithm file?)"]
        else:
            old, new = expected[name], actual[name]
            if isinstance(old, str) or isinstance(new, str):
                if old != new:
                    out[name] = [f"{old if isinstance(old, str) else 'resolves'} -> {new if isinstance(new, str) else 'resolves'}"]
                continue
            lines = [f"{key}: {_dump(old[key]) if key in old else '<absent>'} -> {_dump(new[key]) if key in new else '<absent>'}"
                     for key in sorted(set(old) | set(new))
                     if key not in old or key not in new or _dump(old[key]) != _dump(new[key])]
            if lines:
                out[name] = lines
    return out


def failure_message(differences: dict[str, list[str]]) -> str:
    """What differs, per combination, and what to do about it."""
    lines = [f"DRY_RUN's resolved config differs from {SNAPSHOT.relative_to(REPO_ROOT)} in {len(differences)} "
             "combination(s) (snapshot -> now):"]
    for name, diff in differences.items():
        lines += [f"  [{name}]"] + [f"    {line}" for line in diff]
    lines += [f"If the change is meant, regenerate the snapshot with `{UPDATE_COMMAND}` and commit it as its own "
              "commit that says why the behaviour changed (issue 59); otherwise the change above is a regression."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring): exit 0 when the snapshot matches (or was rewritten), 1 when it differs."""
    parser = argparse.ArgumentParser(prog="python -m tools.resolved_configs", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true",
                        help=f"rewrite {SNAPSHOT.relative_to(REPO_ROOT)} from the current files (temporary file + rename)")
    args = parser.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")
    results = current()
    if args.update:
        from rlec.io import atomic_write_text

        text = render(results)
        if parse(text) != results:  # the file must read back as what was composed
            raise RuntimeError("the snapshot does not read back as written: a value JSON cannot hold?")
        atomic_write_text(SNAPSHOT, text)
        refused = sum(isinstance(r, str) for r in results.values())
        print(f"{SNAPSHOT.relative_to(REPO_ROOT)}: {len(results)} combinations ({len(results) - refused} resolve, "
              f"{refused} refused), {len(text.splitlines())} lines")
        return 0
    if not SNAPSHOT.is_file():
        print(f"{SNAPSHOT.relative_to(REPO_ROOT)}: missing; write it with `{UPDATE_COMMAND}`")
        return 1
    differences = compare(parse(SNAPSHOT.read_text()), results)
    if differences:
        print(failure_message(differences))
        return 1
    print(f"{SNAPSHOT.relative_to(REPO_ROOT)}: all {len(results)} combinations as recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
