"""Atomic outputs: a result appears complete under its final name, or not at all.

Every writer in rlec writes into a temporary sibling (same folder, so the final ``rename`` stays
on one filesystem) and renames it into place. Replacing an existing folder renames the old one
aside first and deletes it only after the new one is in place, so a crash at any moment leaves
either the old or the new folder under the final name, never neither.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator


def replace_dir(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Move the complete folder ``tmp`` to ``out``, replacing an existing ``out`` safely.

    Returns:
        ``Path(out)``.
    """
    tmp, out = Path(tmp), Path(out)
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    if out.exists():
        os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def temp_sibling(out: str | os.PathLike[str], kind: str = "tmp") -> Path:
    """A fresh hidden path next to ``out`` (``.<name>.<kind>-<pid>-<random>``), not created."""
    out = Path(out)
    return out.parent / f".{out.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder; on clean exit it replaces ``out`` (see :func:`replace_dir`).

    On an exception (or interrupt) the temporary folder is removed and ``out`` is untouched.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary sibling and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
