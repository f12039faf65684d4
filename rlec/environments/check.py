"""``python -m rlec.environments list`` and ``check``: what each environment is, and that it works.

``check`` generates every (environment, difficulty, seed) asked for and requires, per problem:

1. gold: the verifier accepts the problem's own answer, written as a model would (``\\boxed{}``);
   environments without a reference answer (66 of RLVE-Gym's) report ``none``, not a failure;
2. perturbed: of three wrong answers derived from the gold (:func:`perturbations`) at least one is
   rejected (environments with several right answers, SAT assignments, colourings, constraint
   systems, "any valid index", answers within a tolerance, rightly accept some nearby ones);
3. deterministic: the same problem comes out of a second, separate pool of worker processes.

Any failure (or a problem that cannot be generated) makes the exit status 1. Built-in environments
are checked the same way (their generation runs in the caller, the second time in a worker).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from tqdm.auto import tqdm

from rlec.environments.registry import ENVIRONMENTS, builtin_names, get_environment, parse_environment_names

__all__ = ["CheckRow", "check_environments", "format_check", "main_check", "main_list", "perturb", "perturbations",
           "cost_markdown"]

_LAST_DIGIT = re.compile(r"(\d)(?!.*\d)", re.DOTALL)
_FIRST_DIGIT = re.compile(r"\d")


def perturbations(answer: str) -> list[str]:
    """Wrong answers close to ``answer`` (distinct, non-empty, never ``answer`` itself).

    An integer n: n + 1, n - 1, 10 n + 3. Anything else: the last digit changed, the first digit
    changed, the last token (or character) dropped.
    """
    text = answer.strip()
    if re.fullmatch(r"-?\d+", text):
        n = int(text)
        out = [str(n + 1), str(n - 1), str(10 * n + 3)]
    else:
        bump = lambda m: str((int(m.group(0)[-1]) + 1) % 10)  # noqa: E731
        tokens = text.split()
        out = [_LAST_DIGIT.sub(bump, text, count=1), _FIRST_DIGIT.sub(bump, text, count=1),
               " ".join(tokens[:-1]) if len(tokens) > 1 else text[:-1]]
    return [x for x in dict.fromkeys(out) if x.strip() and x != text] or [text + " X"]


def perturb(answer: str) -> str:
    """The first of :func:`perturbations`."""
    return perturbations(answer)[0]


@dataclass
class CheckRow:
    """The check of one environment over its difficulties and seeds.

    Attributes:
        name: the environment.
        problems: problems generated.
        gold_ok, gold_none, perturbed_ok, same_ok: counts of passed checks / problems without gold.
        skipped: (difficulty, reason) not checked (above the cap).
        failures: one text per failed check.
        gen_ms, verify_ms: mean milliseconds per problem (generation as seen by the caller).
        costs: per difficulty ``(generation ms, verification ms)`` per problem.
    """

    name: str
    problems: int = 0
    gold_ok: int = 0
    gold_none: int = 0
    perturbed_ok: int = 0
    same_ok: int = 0
    skipped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    gen_ms: float = 0.0
    verify_ms: float = 0.0
    costs: dict[int, tuple[float, float]] = field(default_factory=dict)


def _builtin_json(name: str, seed: int, difficulty: int) -> str:
    """A built-in environment's problem, generated in a worker (the determinism check)."""
    return get_environment(name).generate(seed, difficulty).to_json()


def _difficulties(env: Any, spec: str) -> tuple[list[int], list[str]]:
    from rlec.environments.testset import parse_difficulties

    cap = env.cap(None)  # at the default prompt budget
    wanted = sorted({0} | ({cap} if cap is not None else set())) if spec == "cap" else list(parse_difficulties(spec) or [0])
    keep = [d for d in wanted if cap is None or d <= cap]
    return keep, [f"d{d} > cap {cap}" for d in wanted if d not in keep]


def check_environments(names: Sequence[str], difficulties: str = "0", seeds: Sequence[int] = (1,), *,
                       determinism: bool = True, second: Any | None = None, progress: bool = True) -> list[CheckRow]:
    """Check environments (module docstring); returns one :class:`CheckRow` per environment.

    Args:
        names: registered (or namespaced) environment names.
        difficulties: ``"0,3"``, ``"0-2"`` or ``"cap"`` (0 and each environment's cap).
        seeds: problem seeds (ints >= 0).
        determinism: also generate every problem in a second pool and compare.
        second: that pool (a :class:`~rlec.environments.gym_pool.GymPool`; default a new one, closed at the end).
    """
    from rlec.environments.gym_pool import GenerationFailed, GymPool
    from rlec.environments.rlve_gym import GymEnvironment

    own = determinism and second is None
    second = (second or GymPool(max_workers=1)) if determinism else None
    rows = []
    try:
        for name in tqdm(list(names), desc="check", unit="env", disable=not progress):
            env, row = get_environment(name), CheckRow(name)
            rows.append(row)
            ds, row.skipped = _difficulties(env, difficulties)
            jobs = [(s, d) for d in ds for s in seeds]
            problems, gen_s = [], {}
            for d in ds:  # one difficulty at a time: its cost
                start = time.perf_counter()
                problems += env.generate_many([(s, d) for s in seeds], raise_failed=False)
                gen_s[d] = (time.perf_counter() - start) / max(1, len(seeds))
            row.gen_ms = 1000 * sum(gen_s.values()) / max(1, len(gen_s))
            if second is not None:
                if isinstance(env, GymEnvironment):
                    again = [r if isinstance(r, GenerationFailed) else (r["prompt"], r["answer"], r["gym_seed"])
                             for r in second.generate_many([(env.identifier, s, d) for s, d in jobs])]
                    first = [p if isinstance(p, Exception) else (p.prompt, p.answer, p.data["gym_seed"]) for p in problems]
                else:
                    again = [second._schedule(_builtin_json, (name, s, d)).result() for s, d in jobs]
                    first = [p if isinstance(p, Exception) else p.to_json() for p in problems]
            verify_s, verify_d = 0.0, {d: [] for d in ds}
            for i, ((seed, d), problem) in enumerate(zip(jobs, problems)):
                where = f"d{d} seed {seed}"
                if isinstance(problem, Exception):
                    row.failures.append(f"{where}: not generated ({problem})")
                    continue
                row.problems += 1
                if second is not None:
                    if first[i] == again[i]:
                        row.same_ok += 1
                    elif isinstance(env, GymEnvironment) and not isinstance(again[i], Exception) and again[i][2] != first[i][2]:
                        row.failures.append(f"{where}: a second process needed another attempt (a timeout under load)")
                    else:
                        row.failures.append(f"{where}: a second process generated another problem")
                if not problem.answer:
                    row.gold_none += 1
                    continue
                t = time.perf_counter()
                gold = env.verify(f"\\boxed{{{problem.answer}}}", problem)
                wrongs = perturbations(problem.answer)
                accepted = [w for w in wrongs if env.verify(f"\\boxed{{{w}}}", problem).correct]
                verify_s += (time.perf_counter() - t) / (1 + len(wrongs))
                verify_d[d].append((time.perf_counter() - t) / (1 + len(wrongs)))
                if gold.correct:
                    row.gold_ok += 1
                else:
                    row.failures.append(f"{where}: gold rejected ({gold.reason}, shaped {gold.shaped})")
                if len(accepted) < len(wrongs):
                    row.perturbed_ok += 1
                else:
                    row.failures.append(f"{where}: perturbed answer accepted ({accepted[0][:60]!r})")
            if row.problems == 0 and not row.failures:  # a check that checked nothing does not pass
                row.failures.append("nothing checked: " + ("; ".join(row.skipped) or "no problem generated"))
            checked = row.problems - row.gold_none
            row.verify_ms = 1000 * verify_s / max(1, checked)
            row.costs = {d: (1000 * gen_s[d], 1000 * sum(v) / len(v) if v else float("nan")) for d, v in verify_d.items()}
    finally:
        if own and second is not None:
            second.close()
    return rows


def format_check(rows: Sequence[CheckRow], determinism: bool = True) -> str:
    """The summary table: per environment problems, gold / perturbed / same counts, costs, status."""
    lines = [f"{'environment':<44} {'problems':>8} {'gold':>7} {'perturbed':>9} {'same':>6} {'gen ms':>8} {'verify ms':>9}  status"]
    for r in rows:
        graded = r.problems - r.gold_none
        same = f"{r.same_ok}/{r.problems}" if determinism else "-"
        status = "ok" if not r.failures else "FAIL: " + r.failures[0] + (f" (+{len(r.failures) - 1})" if len(r.failures) > 1 else "")
        if r.skipped:
            status += "; skipped " + ", ".join(r.skipped)
        gold = f"{r.gold_ok}/{graded}" if graded else "none"
        lines.append(f"{r.name:<44} {r.problems:>8} {gold:>7} {f'{r.perturbed_ok}/{graded}':>9} {same:>6} "
                     f"{r.gen_ms:>8.1f} {r.verify_ms:>9.1f}  {status}")
    failed = sum(1 for r in rows if r.failures)
    lines.append(f"{len(rows)} environments, {sum(r.problems for r in rows)} problems, {failed} failed")
    return "\n".join(lines)


COST_TITLE = "# Environment costs at d = 0 and at the cap (2048-token prompt budget)"
COST_NOTE = ("Milliseconds per problem as seen by the caller (RLVE-Gym's: a round trip to the worker pool included), "
             "mean over the seeds; prompt tokens from the level table (rlec's template at the longest target, Qwen3 "
             "tokenizer). Measured on a shared 2-core box: read them as upper bounds. Written by `check --markdown`.")


def cost_markdown(rows: Sequence[CheckRow], command: str) -> str:
    """The cost table of a ``check --difficulties cap`` run as Markdown: per environment its cap,
    prompt tokens (level table), and generation / verification ms per problem at d = 0 and at the cap."""
    from rlec.environments.rlve_gym import PREFIX, levels

    table = levels().get("environments", {})
    lines = [COST_TITLE, "", COST_NOTE, "", f"Regenerate: `{command}`", "",
             "| environment | cap | tokens d0 | tokens cap | gen ms d0 | gen ms cap | verify ms d0 | verify ms cap |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ds = sorted(r.costs)
        if not ds:
            continue
        lo, hi = r.costs[ds[0]], r.costs[ds[-1]]
        tokens = table.get(r.name[len(PREFIX):], {}).get("tokens", []) if r.name.startswith(PREFIX) else []
        tok = (f"{tokens[ds[0]]} | {tokens[ds[-1]]}" if len(tokens) > ds[-1] else "- | -")
        lines.append(f"| {r.name} | {ds[-1]} | {tok} | {lo[0]:.1f} | {hi[0]:.1f} | {lo[1]:.1f} | {hi[1]:.1f} |")
    return "\n".join(lines) + "\n"


def main_check(args: argparse.Namespace) -> int:
    """``check``: run :func:`check_environments` and print the table; 1 on any failure, 2 on bad input."""
    try:
        names = parse_environment_names(args.environments)
        seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
        if str(args.difficulties).strip() != "cap":
            from rlec.environments.testset import parse_difficulties

            parse_difficulties(str(args.difficulties))  # e.g. -1: one line, exit 2, before any work
        if any(s < 0 for s in seeds):
            raise ValueError(f"--seeds {args.seeds!r}: seeds must be integers >= 0")
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    if args.sample and args.sample < len(names):
        picked = set(random.Random(args.sample_seed).sample(names, args.sample))
        names = [n for n in names if n in picked]
    start = time.perf_counter()
    rows = check_environments(names, args.difficulties, seeds, determinism=not args.no_determinism)
    print(format_check(rows, not args.no_determinism))
    print(f"check took {time.perf_counter() - start:.1f} s")
    if args.markdown:
        from rlec.io import atomic_write_text

        command = "python -m rlec.environments check " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["check"] else [])
        atomic_write_text(args.markdown, cost_markdown(rows, command.strip()))
    return 1 if any(r.failures for r in rows) else 0


def main_list(spec: str, max_prompt_tokens: int) -> int:
    """``list``: one line per environment: name, source, cap at ``max_prompt_tokens``, generation cost."""
    from rlec.environments.rlve_gym import PREFIX, cap_for, levels, refusal

    print(f"{'environment':<44} {'source':<9} {'cap':>4}  {'gen ms d0 / cap':>16}  note")
    names = [n for item in spec.split(",") if item.strip() for n in _listed(item.strip())]
    table = levels().get("environments", {})
    for name in names:
        if name in builtin_names():
            print(f"{name:<44} {'builtin':<9} {ENVIRONMENTS[name].cap(max_prompt_tokens)!s:>4}  {'<10':>16}")
            continue
        identifier = name[len(PREFIX):]
        entry, reason = table.get(identifier, {}), refusal(identifier)
        cap = cap_for(identifier, max_prompt_tokens)
        gen = entry.get("gen_ms") or []
        cost = f"{gen[0]:.1f} / {gen[cap]:.1f}" if gen and cap >= 0 else "-"
        note = f"refused: {reason}" if reason else ("" if cap >= 0 else f"d0 prompt > {max_prompt_tokens} tokens")
        print(f"{name:<44} {'rlve_gym':<9} {'-' if reason else cap:>4}  {'-' if reason else cost:>16}  {note}")
    print(f"{len(names)} environments")
    return 0


def _listed(item: str) -> list[str]:
    from rlec.environments.rlve_gym import PREFIX, gym_identifiers

    if item == PREFIX + "all":  # refused ones too, with the reason
        return [PREFIX + i for i in gym_identifiers()]
    if item.startswith(PREFIX) and item[len(PREFIX):] in gym_identifiers():
        return [item]
    return parse_environment_names(item)
