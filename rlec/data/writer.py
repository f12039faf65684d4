"""The verl parquet schema of rlec's data, and the atomic, byte-reproducible write.

One row (the project's data contract, shared with the verl plugin and the
evaluator)::

    data_source   "math_dapo" | "hotpotqa"            (keys of rlec.grading.TASKS)
    prompt        [{"role": "user", "content": ...}]  = rlec.prompts.build_messages(task_text, p or None)
    ability       "math" | "qa"
    reward_model  {"style": "rule", "ground_truth": gold}
    extra_info    {index, split, question_id, source, target_p, objective, repeat, task_text,
                   drop_scheme, dropped_titles}

The arrow schema is fixed (:data:`SCHEMA`), not inferred, so every file has the same column
types (an all-math file still has ``dropped_titles: list<string>``). Same rows in, same bytes
out: no timestamps, fixed compression and row-group size.

Output folders are written whole to a temporary sibling and renamed into place
(:func:`atomic_output_dir`): an interrupted run leaves the previous output as it was.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlec.data.mix import Sample
from rlec.io import atomic_dir, check_writable
from rlec.prompts import build_messages

DATA_SOURCE = {"math": "math_dapo", "hotpotqa": "hotpotqa"}
ABILITY = {"math": "math", "hotpotqa": "qa"}
TRAIN_FILE, TEST_FILE, SUMMARY_FILE = "train.parquet", "test.parquet", "summary.json"
OUTPUT_FILES = frozenset({TRAIN_FILE, TEST_FILE, SUMMARY_FILE})
COMPRESSION = "zstd"
ROW_GROUP_ROWS = 16_384

EXTRA_INFO = pa.struct(
    [
        ("index", pa.int64()),
        ("split", pa.string()),
        ("question_id", pa.string()),
        ("source", pa.string()),
        ("target_p", pa.float64()),
        ("objective", pa.string()),
        ("repeat", pa.int64()),
        ("task_text", pa.string()),
        ("drop_scheme", pa.string()),
        ("dropped_titles", pa.list_(pa.string())),
    ]
)
SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", EXTRA_INFO),
    ]
)


def to_table(samples: Sequence[Sample]) -> pa.Table:
    """The verl table of ``samples``; ``extra_info.index`` is the row position (0..N-1).

    Built column by column (arrow struct and list arrays from flat columns), which is several
    times faster than converting one Python dict per row.

    Raises:
        KeyError: a sample's source is not "math" or "hotpotqa".
    """
    n = len(samples)
    q = [s.question for s in samples]
    messages = [build_messages(x.task_text, s.prompt_target) for x, s in zip(q, samples)]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum([len(m) for m in messages], out=offsets[1:])
    flat = [msg for m in messages for msg in m]
    msg_type = SCHEMA.field("prompt").type.value_type
    text = pa.string()  # every array typed: an empty column must still be a string column, not a null one
    prompt = pa.ListArray.from_arrays(
        pa.array(offsets),
        pa.StructArray.from_arrays([pa.array([m["role"] for m in flat], type=text), pa.array([m["content"] for m in flat], type=text)],
                                   fields=list(msg_type)),
        type=SCHEMA.field("prompt").type,
    )
    extra_columns = {
        "index": np.arange(n, dtype=np.int64),
        "split": [s.split for s in samples],
        "question_id": [x.question_id for x in q],
        "source": [x.source for x in q],
        "target_p": np.array([s.target_p for s in samples], dtype=np.float64),
        "objective": [s.objective for s in samples],
        "repeat": np.array([s.repeat for s in samples], dtype=np.int64),
        "task_text": [x.task_text for x in q],
        "drop_scheme": [x.drop_scheme for x in q],
        "dropped_titles": [list(x.dropped_titles) for x in q],
    }
    extra_info = pa.StructArray.from_arrays([pa.array(extra_columns[f.name], type=f.type) for f in EXTRA_INFO], fields=list(EXTRA_INFO))
    reward_type = SCHEMA.field("reward_model").type
    reward_model = pa.StructArray.from_arrays([pa.array(["rule"] * n, type=text), pa.array([x.gold for x in q], type=text)],
                                              fields=list(reward_type))
    columns = {
        "data_source": pa.array([DATA_SOURCE[x.source] for x in q], type=pa.string()),
        "prompt": prompt,
        "ability": pa.array([ABILITY[x.source] for x in q], type=pa.string()),
        "reward_model": reward_model,
        "extra_info": extra_info,
    }
    return pa.Table.from_arrays([columns[name] for name in SCHEMA.names], schema=SCHEMA)


def rows_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Verl rows as dicts (an environment's :func:`rlec.environments.problem_row`, a pool's) in :data:`SCHEMA`, the
    static data's columns; ``extra_info`` keys beyond the contract are left out.

    Raises:
        KeyError: a row lacks one of the contract's ``extra_info`` keys.
    """
    keep = [f.name for f in EXTRA_INFO]
    plain = [{**r, "extra_info": {k: r["extra_info"][k] for k in keep}} for r in rows]
    return pa.Table.from_pylist(plain, schema=SCHEMA)


def write_parquet(samples: Sequence[Sample], path: str | os.PathLike[str]) -> int:
    """Write ``samples`` as a verl parquet file (deterministic bytes). Returns the row count."""
    table = to_table(samples)
    pq.write_table(table, path, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    return table.num_rows


def check_output_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Check that ``out_dir`` may be (re)written by data preparation, before any work.

    Returns:
        ``Path(out_dir)``.

    Raises:
        NotADirectoryError: ``out_dir`` (or a folder above it) exists and is a file.
        PermissionError: the folder cannot be written.
        FileExistsError: ``out_dir`` holds anything but this command's outputs
            (:data:`OUTPUT_FILES`): it is never silently replaced.
    """
    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise NotADirectoryError(f"output path {out} exists and is not a folder")
        foreign = sorted(p.name for p in out.iterdir() if p.name not in OUTPUT_FILES)
        if foreign:
            raise FileExistsError(
                f"refusing to replace {out}: it holds files this command did not write ({', '.join(foreign[:5])}); "
                "choose another --output-dir or move them"
            )
    check_writable(out, label="--output-dir")
    return out


@contextmanager
def atomic_output_dir(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder; on clean exit it replaces ``out_dir`` as a whole.

    The temporary folder is a hidden sibling (``.<name>.tmp-*``), so the final renames stay on
    one filesystem. On an exception (or interrupt) it is removed and ``out_dir`` is untouched;
    one left by a killed earlier run is removed first (:func:`rlec.io.atomic_dir`).
    The old folder is renamed aside before the new one is renamed in (two ``rename`` calls
    milliseconds apart), then deleted.

    Raises:
        see :func:`check_output_dir` (checked again here, right before writing).
    """
    with atomic_dir(check_output_dir(out_dir)) as tmp:
        yield tmp
