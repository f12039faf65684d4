"""``python -m rlec.environments {list,check,measure}``: the environments rlec knows, checked and measured.

- ``list``: one line per environment: name, source (builtin / rlve_gym), cap at the prompt-token
  budget, generation cost (ms per problem at d = 0 and at the cap).
- ``check [--sample N] [--difficulties 0,3] [--seeds 1,3] [--environments ...]``: the gold answer is
  accepted, a perturbed answer rejected, and generation is identical in two separate worker pools;
  a summary table; exit status 1 on any failure (:mod:`rlec.environments.check`).
- ``measure``: rewrite RLVE-Gym's level table (prompt tokens and costs per level; the caps)
  (:mod:`rlec.environments.gym_levels`).
"""

from __future__ import annotations

import argparse
import sys

from rlec.environments.check import main_check, main_list


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one subcommand; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m rlec.environments", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lst = sub.add_parser("list", help="one line per environment: name, source, cap, cost")
    lst.add_argument("--environments", default="all,rlve_gym:all")
    lst.add_argument("--max-prompt-tokens", type=int, default=2048, help="the budget the caps are for (data.max_prompt_length)")
    chk = sub.add_parser("check", help="gold accepted, perturbed rejected, deterministic across processes")
    chk.add_argument("--environments", default="all,rlve_gym:all", help="names, all, rlve_gym:all, globs (comma-separated)")
    chk.add_argument("--sample", type=int, default=0, help="check N environments drawn with --sample-seed (0: all named)")
    chk.add_argument("--sample-seed", type=int, default=0)
    chk.add_argument("--difficulties", default="0", help="e.g. 0,3 or 0-2, or 'cap' for 0 and each environment's cap")
    chk.add_argument("--seeds", default="1", help="problem seeds, comma-separated")
    chk.add_argument("--no-determinism", action="store_true", help="skip the second pool (half the time)")
    chk.add_argument("--markdown", default=None, help="also write the cost table (per environment, d = 0 and the cap) here")
    mea = sub.add_parser("measure", help="rewrite RLVE-Gym's level table (rlec/environments/rlve_gym_levels.json)")
    mea.add_argument("--identifiers", default="", help="comma-separated RLVE-Gym identifiers (default: all 400)")
    mea.add_argument("--max-tokens", type=int, default=4096)
    mea.add_argument("--max-level", type=int, default=20)
    mea.add_argument("--timeout-s", type=float, default=10.0)
    mea.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.command == "list":
        return main_list(args.environments, args.max_prompt_tokens)
    if args.command == "check":
        return main_check(args)
    from rlec.environments.gym_levels import measure_levels
    from rlec.environments.gym_pool import GymPool
    from rlec.environments.rlve_gym import LEVELS_FILE

    pool = GymPool(timeout_s=args.timeout_s, attempts=1)
    try:
        measure_levels([i for i in args.identifiers.split(",") if i] or None, max_tokens=args.max_tokens,
                       max_level=args.max_level, pool=pool, out=args.out or LEVELS_FILE)
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
