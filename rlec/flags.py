"""Boolean environment variables: one parser, the same spellings everywhere.

Every on/off variable of rlec (``EVAL_AT_END``, ``RESUME``'s boolean spellings, ``RLEC_VERBOSE``, and
the launcher's ``DRY_RUN``, ``SKIP_PATH_CHECKS``, ``PRINT_CONFIG`` through ``python -m rlec.flags``)
accepts :data:`TRUE` and :data:`FALSE`, case-insensitive, surrounding blanks ignored; anything else is
refused naming the variable, its value and the spellings.

``RESUME`` is verl's ``trainer.resume_mode`` (:func:`resume_mode`): ``auto`` / ``disable`` / ``resume_path``, or a
boolean spelling (on = ``auto``, off = ``disable``).

``python -m rlec.flags NAME ...`` prints ``NAME=1`` or ``NAME=0`` per variable read from the
environment (unset or empty: 0), for the shell to ``eval``; ``--resume NAME`` prints ``NAME=<mode>``; exit
status 2 and one line on a bad value.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")

__all__ = ["FALSE", "RESUME_MODES", "TRUE", "flag", "main", "parse_flag", "resume_mode"]

RESUME_MODES = ("auto", "disable", "resume_path")  # verl's trainer.resume_mode


def parse_flag(name: str, value: str) -> bool:
    """``value`` of the variable ``name`` as a bool.

    Raises:
        ValueError: ``value`` is none of :data:`TRUE` / :data:`FALSE` (the message names the variable).
    """
    low = str(value).strip().lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise ValueError(f"{name}={value!r}: expected one of {'/'.join(TRUE)} (on) or {'/'.join(FALSE)} (off)")


def flag(name: str, default: bool = False, env: Mapping[str, str] | None = None) -> bool:
    """The variable ``name`` of ``env`` (default ``os.environ``) as a bool; ``default`` when unset or empty.

    Raises:
        ValueError: a value :func:`parse_flag` refuses.
    """
    value = (os.environ if env is None else env).get(name, "")
    return default if value.strip() == "" else parse_flag(name, value)


def resume_mode(name: str, value: str) -> str:
    """verl's ``trainer.resume_mode`` from the variable ``name`` (``RESUME``): empty = ``auto``; one of
    :data:`RESUME_MODES` as is; a boolean spelling of :func:`parse_flag`: on = ``auto``, off = ``disable``.

    Raises:
        ValueError: anything else (the message names the variable, its value and what is accepted).
    """
    low = str(value).strip().lower()
    if low in RESUME_MODES or not low:
        return low or "auto"
    try:
        return "auto" if parse_flag(name, value) else "disable"
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected one of {'/'.join(RESUME_MODES)} (verl's trainer.resume_mode) or "
                         f"{'/'.join(TRUE)} (auto) or {'/'.join(FALSE)} (disable)") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Print ``NAME=1`` / ``NAME=0`` for each variable named, ``NAME=<mode>`` for ``--resume NAME`` (module docstring);
    2 on a bad value."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        lines = []
        while args:
            name = args.pop(0)
            if name == "--resume":
                if not args:
                    raise ValueError("--resume: expected the variable's name (python -m rlec.flags --resume RESUME)")
                name = args.pop(0)
                lines.append(f"{name}={resume_mode(name, os.environ.get(name, ''))}")
            else:
                lines.append(f"{name}={int(flag(name))}")
    except ValueError as exc:
        print(f"rlec.flags: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
