"""Fixtures of the data-preparation tests: the shipped samples and one shared prepared run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import pytest

from rlec.data.mix import MixConfig
from rlec.data.prepare import SAMPLE_FILES, PrepareOptions, prepare


@pytest.fixture(scope="session")
def sample_files() -> dict[str, Path]:
    """The shipped sample inputs: keys dapo, hotpot_train, hotpot_test."""
    return dict(SAMPLE_FILES)


@pytest.fixture(scope="session")
def run_prepare(qwen_tokenizer) -> Callable[..., dict[str, Any]]:
    """``run_prepare(out_dir, mix=MixConfig(), **PrepareOptions fields)`` -> summary (bundled tokenizer, no bars)."""

    def run(out_dir: Path, mix: MixConfig | None = None, **opts: Any) -> dict[str, Any]:
        opts.setdefault("progress", False)
        return prepare(out_dir, mix or MixConfig(), PrepareOptions(**opts), tokenizer=qwen_tokenizer)

    return run


@pytest.fixture(scope="session")
def prepared(run_prepare, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """The default run on the shipped samples: (output folder, summary)."""
    out = tmp_path_factory.mktemp("prepared") / "processed"
    return out, run_prepare(out)


def read_rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="session")
def rows() -> Callable[[Path], list[dict[str, Any]]]:
    """Read a parquet file as a list of row dicts."""
    return read_rows


@pytest.fixture
def write_json() -> Callable[[Path, Any], Path]:
    """Write an object as JSON (a list -> JSON file; ``jsonl=True`` -> one record per line)."""

    def write(path: Path, obj: Any, jsonl: bool = False) -> Path:
        path.write_text("\n".join(json.dumps(r) for r in obj) + "\n" if jsonl else json.dumps(obj))
        return path

    return write
