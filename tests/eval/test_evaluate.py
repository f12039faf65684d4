"""The evaluator: reading the evaluation parquet, prompts per target, the CPU engine, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlec.generation import HFEngine, SamplingSettings
from rlec.eval.records import read_records, record_key
from rlec.eval.evaluate import load_eval_items, main, plan_jobs, run, sample_seed
from rlec.models import load_tokenizer
from rlec.prompts import build_messages, render

GREEDY = SamplingSettings(temperature=0.0, top_p=1.0, max_new_tokens=6, seed=0)
TARGETS = [None, 0.0, 0.5]


@pytest.fixture(scope="module")
def tokenizer(tiny_moe_dir: Path):
    return load_tokenizer(tiny_moe_dir)


@pytest.fixture(scope="module")
def greedy_engine(tiny_moe_dir: Path, tokenizer) -> HFEngine:
    return HFEngine(str(tiny_moe_dir), tokenizer, GREEDY, device="cpu")


def test_items_carry_the_contract_fields(eval_parquet: Path) -> None:
    items = load_eval_items(eval_parquet)
    assert [i.source for i in items] == ["math"] * 6 + ["hotpotqa"] * 6
    first, qa = items[0], items[6]
    assert (first.question_id, first.data_source, first.ground_truth) == ("m-101", "math_dapo", "42")
    assert first.task_text.startswith("Solve the following math problem")
    assert qa.drop_scheme == "keep_all" and "Question:" in qa.task_text
    # --limit takes questions round-robin over the sources (the file lists one source, then the other)
    limited = load_eval_items(eval_parquet, limit=3)
    assert [i.question_id for i in limited[:2]] == ["m-101", "m-102"] and limited[2].source == "hotpotqa"
    assert [i.question_id for i in load_eval_items(eval_parquet, limit=2)] == ["m-101", items[6].question_id]
    assert load_eval_items(eval_parquet, limit=99) == items
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        load_eval_items(eval_parquet, limit=0)


def test_limit_is_round_robin_over_uneven_interleaved_sources(tmp_path: Path, base_rows, parquet_writer) -> None:
    """Sources interleaved in the file and of unequal size: each source gives its k-th question
    before any source gives its (k+1)-th; the result keeps file order."""
    math_rows = [r for r in base_rows if r["data_source"] == "math_dapo"]
    qa_rows = [r for r in base_rows if r["data_source"] == "hotpotqa"][:2]
    rows = [math_rows[0], qa_rows[0], math_rows[1], math_rows[2], qa_rows[1], math_rows[3]]
    path = parquet_writer(tmp_path / "mixed.parquet", rows)
    ids = [r["extra_info"]["question_id"] for r in rows]
    assert [i.question_id for i in load_eval_items(path, limit=3)] == [ids[0], ids[1], ids[2]]
    assert [i.question_id for i in load_eval_items(path, limit=4)] == [ids[0], ids[1], ids[2], ids[4]]  # not the first 4 rows


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["extra_info"].pop("task_text"), "row 1: key 'extra_info.task_text' must be a non-empty string, got None"),
        (lambda r: r["reward_model"].update(ground_truth="  "), "row 1: key 'reward_model.ground_truth' must be a non-empty string"),
        (lambda r: r.update(data_source="gsm8k"), "row 1: data_source 'gsm8k' has no grader"),
        (lambda r: r["extra_info"].update(question_id="m-101"), "row 1: question .* repeats row 0 with a different task_text"),
    ],
)
def test_bad_rows_name_file_row_and_key(tmp_path: Path, base_rows, parquet_writer, edit, message: str) -> None:
    edit(base_rows[1])
    path = parquet_writer(tmp_path / "bad.parquet", base_rows)
    with pytest.raises(ValueError, match=rf"bad\.parquet: {message}"):
        load_eval_items(path)


def test_a_key_missing_from_the_file_is_named(tmp_path: Path, base_rows, parquet_writer) -> None:
    for row in base_rows:
        del row["reward_model"]
    with pytest.raises(ValueError, match=r"nogold\.parquet: row 0: missing key 'reward_model.ground_truth'"):
        load_eval_items(parquet_writer(tmp_path / "nogold.parquet", base_rows))


def test_identical_repeats_are_evaluated_once(tmp_path: Path, base_rows, parquet_writer) -> None:
    path = parquet_writer(tmp_path / "rep.parquet", base_rows + base_rows[:3])
    assert len(load_eval_items(path)) == 12


def test_jobs_cover_every_question_target_and_sample_with_stable_seeds(eval_parquet: Path) -> None:
    jobs = plan_jobs(load_eval_items(eval_parquet), TARGETS, n_samples=2)
    assert len(jobs) == 12 * 3 * 2 == len({j.key for j in jobs})
    assert jobs[0].key == ("math", "m-101", "binary", 0) and jobs[5].key == ("math", "m-101", "0.5", 1)
    seeds = [sample_seed(0, j.key) for j in jobs]
    assert len(set(seeds)) == len(seeds) and seeds == [sample_seed(0, j.key) for j in jobs]
    assert sample_seed(1, jobs[0].key) != seeds[0]


def test_records_hold_the_exact_prompt_for_each_target(tmp_path: Path, eval_parquet: Path, greedy_engine, tokenizer, tiny_moe_dir) -> None:
    items = load_eval_items(eval_parquet)[5:7]  # one math, one QA
    out = tmp_path / "r.jsonl"
    counts = run(items, greedy_engine, tokenizer, out, model=str(tiny_moe_dir), sampling=GREEDY, targets=TARGETS, progress=False)
    assert counts == {"planned": 6, "existing": 0, "generated": 6}
    records, _ = read_records(out)
    for rec in records:
        item = items[0] if rec["source"] == "math" else items[1]
        p = rec["target_p"]
        assert rec["prompt"] == render(tokenizer, build_messages(item.task_text, p))
        assert ("Confidence target" in rec["prompt"]) == (p is not None)
        assert rec["objective"] == ("binary" if p is None else "rlec")
        assert rec["ground_truth"] == item.ground_truth and rec["engine"] == "transformers"
        assert 1 <= rec["response_tokens"] <= 6 and rec["finish_reason"] in ("stop", "length")
        assert rec["prompt_tokens"] == len(tokenizer(rec["prompt"], add_special_tokens=False)["input_ids"])
        assert rec["sampling"] == GREEDY.to_dict()


def test_sampling_is_seeded(tiny_moe_dir: Path, tokenizer) -> None:
    settings = SamplingSettings(temperature=1.0, top_p=0.9, max_new_tokens=3, seed=0)
    engine = HFEngine(str(tiny_moe_dir), tokenizer, settings, device="cpu")
    prompts = [render(tokenizer, build_messages("Solve the following math problem step by step.\n\n1+1?", 0.5))] * 2
    a, b, c = engine.generate(prompts, [11, 11]), engine.generate(prompts, [11, 11]), engine.generate(prompts, [12, 12])
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.text for g in a] != [g.text for g in c]
    assert a[0].sample_seed == 11


class InterruptAfter:
    """Wraps a real engine; raises KeyboardInterrupt on call number ``n + 1`` (after n batches)."""

    def __init__(self, engine, n: int) -> None:
        self.engine, self.n, self.calls = engine, n, 0
        self.name, self.version, self.default_batch_size = engine.name, engine.version, engine.default_batch_size

    def generate(self, prompts, seeds):
        self.calls += 1
        if self.calls > self.n:
            raise KeyboardInterrupt
        return self.engine.generate(prompts, seeds)


def test_interrupted_run_resumes_without_duplicates_or_loss(tmp_path: Path, eval_parquet: Path, greedy_engine, tokenizer, tiny_moe_dir) -> None:
    items = load_eval_items(eval_parquet, limit=3)
    out = tmp_path / "r.jsonl"
    kwargs = dict(model=str(tiny_moe_dir), sampling=GREEDY, targets=TARGETS, batch_size=4, progress=False)
    with pytest.raises(KeyboardInterrupt):
        run(items, InterruptAfter(greedy_engine, 1), tokenizer, out, **kwargs)
    first, _ = read_records(out)
    assert len(first) == 4  # the completed batch is on disk, nothing of the interrupted one
    with pytest.raises(FileExistsError):
        run(items, greedy_engine, tokenizer, out, **kwargs)
    counts = run(items, greedy_engine, tokenizer, out, resume=True, **kwargs)
    assert counts == {"planned": 9, "existing": 4, "generated": 5}
    records, _ = read_records(out)
    keys = [record_key(r) for r in records]
    assert len(keys) == len(set(keys)) == 9
    assert {j.key for j in plan_jobs(items, TARGETS, 1)} == set(keys)
    assert records[:4] == first  # earlier records untouched
    assert run(items, greedy_engine, tokenizer, out, resume=True, **kwargs)["generated"] == 0


def test_resume_drops_a_partial_last_line(tmp_path: Path, eval_parquet: Path, greedy_engine, tokenizer, tiny_moe_dir) -> None:
    items = load_eval_items(eval_parquet, limit=1)
    out = tmp_path / "r.jsonl"
    kwargs = dict(model=str(tiny_moe_dir), sampling=GREEDY, targets=TARGETS, batch_size=2, progress=False)
    with pytest.raises(KeyboardInterrupt):
        run(items, InterruptAfter(greedy_engine, 1), tokenizer, out, **kwargs)
    with out.open("a") as f:  # a write cut mid-line by a crash
        f.write(json.dumps(read_records(out)[0][0])[:50])
    assert run(items, greedy_engine, tokenizer, out, resume=True, **kwargs)["generated"] == 1
    assert len(read_records(out)[0]) == 3


def test_resume_refuses_records_of_another_run(tmp_path: Path, eval_parquet: Path, greedy_engine, tokenizer, tiny_moe_dir) -> None:
    items = load_eval_items(eval_parquet, limit=1)
    out = tmp_path / "r.jsonl"
    run(items, greedy_engine, tokenizer, out, model=str(tiny_moe_dir), sampling=GREEDY, targets=[None], progress=False)
    other = SamplingSettings(temperature=0.0, top_p=1.0, max_new_tokens=7, seed=0)
    with pytest.raises(ValueError, match="records of another run"):
        run(items, greedy_engine, tokenizer, out, model=str(tiny_moe_dir), sampling=other, targets=TARGETS, resume=True, progress=False)


def test_cli_rejects_bad_arguments_and_an_existing_output(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path, capsys) -> None:
    base = ["--model", str(tiny_moe_dir), "--data", str(eval_parquet), "--engine", "hf"]
    assert main(base + ["--out", str(tmp_path / "a.jsonl"), "--targets", "binary,1.5"]) == 2
    assert "target grid entry '1.5'" in capsys.readouterr().err
    existing = tmp_path / "b.jsonl"
    existing.write_text("{}\n")
    assert main(base + ["--out", str(existing)]) == 2
    assert "pass --resume" in capsys.readouterr().err


@pytest.mark.gpu
def test_vllm_engine_generates_on_gpu(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path, tokenizer) -> None:
    pytest.importorskip("vllm", reason="vLLM is installed only on GPU machines (requirements-gpu.txt)")
    from rlec.generation import VLLMEngine

    settings = SamplingSettings(temperature=1.0, top_p=0.9, max_new_tokens=8, seed=0)
    engine = VLLMEngine(str(tiny_moe_dir), tokenizer, settings, gpu_memory_utilization=0.3, max_model_len=2048)
    items = load_eval_items(eval_parquet, limit=2)
    out = tmp_path / "r.jsonl"
    run(items, engine, tokenizer, out, model=str(tiny_moe_dir), sampling=settings, targets=TARGETS, progress=False)
    records, _ = read_records(out)
    assert len(records) == 6 and all(r["engine"] == "vllm" for r in records)
    assert all(1 <= r["response_tokens"] <= 8 for r in records)
    again = engine.generate([records[0]["prompt"]], [records[0]["sample_seed"]])[0]
    assert again.text == records[0]["response"]  # per-request seeds reproduce a sample


def test_cli_refuses_a_bad_model_folder_before_loading(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path, capsys) -> None:
    """One line naming --model and what is missing; no traceback, no record file."""
    empty = tmp_path / "empty"
    empty.mkdir()
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((tiny_moe_dir / "config.json").read_text())
    cases = [(tmp_path / "absent", "does not exist"), (empty, "config.json: missing"), (no_weights, "no weight files")]
    for folder, message in cases:
        out = tmp_path / f"{folder.name}.jsonl"
        assert main(["--model", str(folder), "--data", str(eval_parquet), "--out", str(out), "--engine", "hf"]) == 2
        err = capsys.readouterr().err
        assert f"--model {folder}" in err and message in err and "Traceback" not in err, err
        assert not out.exists()


def test_cli_resume_reports_a_bad_record_line_with_the_right_hint(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path, capsys) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text("{not json}\n")
    args = ["--model", str(tiny_moe_dir), "--data", str(eval_parquet), "--out", str(out), "--engine", "hf", "--resume"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{out}:1: invalid JSON" in err and "fix or delete that line" in err and "--skip-invalid" not in err
    assert out.read_text() == "{not json}\n"  # nothing lost


# ---- faults: one line on stderr, exit status 2, nothing written, before the model loads -------------


def _truncated_model(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).symlink_to(f)
    data = (src / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[: len(data) // 2])
    return dst


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("truncated_weights", "model.safetensors: not a readable safetensors file"),
        ("out_is_a_folder", "is a folder; expected a record file"),
        ("out_below_a_file", "is a file, not a folder"),
        ("out_unwritable", "cannot write in /sys"),
        ("batch_size_negative", "--batch-size must be >= 1, got -1"),
        ("batch_size_zero", "--batch-size must be >= 1, got 0"),
        ("n_samples_zero", "--n-samples must be >= 1, got 0"),
        ("gpu_memory_utilization", "--gpu-memory-utilization must be in (0, 1], got 1.5"),
        ("data_is_a_folder", "is a folder; expected a file"),
        ("data_not_parquet", "not a readable parquet file"),
        ("records_not_utf8", ":2: not UTF-8 text (byte 0xc3 at column 1)"),
    ],
)
def test_cli_faults_are_one_line_and_write_nothing(case: str, message: str, tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path,
                                                   capsys) -> None:
    model, data, out, extra = tiny_moe_dir, eval_parquet, tmp_path / "r.jsonl", []
    if case == "truncated_weights":
        model = _truncated_model(tiny_moe_dir, tmp_path / "model")
    elif case == "out_is_a_folder":
        out.mkdir()
    elif case == "out_below_a_file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "r.jsonl"
    elif case == "out_unwritable":
        out = Path("/sys/rlec-test/r.jsonl")
    elif case.startswith(("batch_size", "n_samples", "gpu")):
        flag = {"batch_size_negative": ["--batch-size", "-1"], "batch_size_zero": ["--batch-size", "0"],
                "n_samples_zero": ["--n-samples", "0"], "gpu_memory_utilization": ["--gpu-memory-utilization", "1.5"]}[case]
        extra = flag
    elif case == "data_is_a_folder":
        data = tmp_path
    elif case == "data_not_parquet":
        data = tmp_path / "eval.parquet.txt"
        data.write_text("question,answer\n")
    elif case == "records_not_utf8":
        out.write_bytes(b"\n\xc3\x28 latin-1 or worse\n")
        extra = ["--resume"]
    before = out.read_bytes() if out.is_file() else None
    code = main(["--model", str(model), "--data", str(data), "--out", str(out), "--engine", "hf", *extra])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    if case == "out_is_a_folder":
        assert list(out.iterdir()) == []
    elif before is not None:
        assert out.read_bytes() == before
    elif not case.startswith("out_"):
        assert not out.exists()
    assert not any(p.name.endswith(".lock") for p in tmp_path.iterdir())


def test_model_folder_spellings_are_one_model(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path) -> None:
    """`--model X/` resumes a file written with `--model X` (and the records name the model without the slash)."""
    out = tmp_path / "r.jsonl"
    base = ["--data", str(eval_parquet), "--out", str(out), "--engine", "hf", "--limit", "1", "--targets", "binary,0.5",
            "--temperature", "0", "--max-new-tokens", "2"]
    assert main(["--model", str(tiny_moe_dir), *base]) == 0
    assert main(["--model", f"{tiny_moe_dir}/", *base, "--resume"]) == 0
    records, _ = read_records(out)
    assert len(records) == 2 and {r["model"] for r in records} == {str(tiny_moe_dir)}
    from rlec.eval.evaluate import same_model

    assert same_model(f"{tiny_moe_dir}/", str(tiny_moe_dir)) and same_model(os.path.relpath(tiny_moe_dir), str(tiny_moe_dir))
    assert not same_model(str(tmp_path), str(tiny_moe_dir))


def test_a_second_writer_of_the_same_records_is_refused_naming_the_holder(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path,
                                                                         capsys) -> None:
    out = tmp_path / "r.jsonl"
    ready = tmp_path / "ready"
    code = (f"import time, pathlib\nfrom rlec.io import output_lock\nlock = output_lock({str(out)!r}).acquire()\n"
            f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        deadline = time.time() + 60
        while not ready.exists():
            assert holder.poll() is None and time.time() < deadline
            time.sleep(0.05)
        args = ["--model", str(tiny_moe_dir), "--data", str(eval_parquet), "--out", str(out), "--engine", "hf", "--resume"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"error: --out {out}: in use by pid {holder.pid} " in err and "wait for it to finish or stop it" in err
        assert not out.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    from rlec.io import output_lock

    with output_lock(out) as lock:  # the killed holder's lock does not block
        assert lock.previous["pid"] == holder.pid


def test_cpu_thread_default_is_one_unless_the_environment_says_otherwise(monkeypatch) -> None:
    from rlec.eval.evaluate import default_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_threads() == 1  # this test machine has no GPU (GPU tests are marked)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert default_threads() is None


def _full_disk(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_lock_names_the_file_and_leaves_no_empty_lock(tmp_path: Path, eval_parquet: Path, tiny_moe_dir: Path,
                                                                         capsys, monkeypatch) -> None:
    """Issue 26, item 2: it named no file and left a 0-byte lock."""
    from rlec.io import lock_path

    out = tmp_path / "out" / "records.jsonl"
    out.parent.mkdir()
    monkeypatch.setattr(os, "pwrite", _full_disk)  # the lock's holder line is the first byte written
    assert main(["--model", str(tiny_moe_dir), "--data", str(eval_parquet), "--out", str(out), "--engine", "hf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: [Errno 28] No space left on device: '{lock_path(out)}'"
    assert list(out.parent.iterdir()) == []


def test_a_full_disk_while_writing_records_names_the_file_and_releases_the_lock(tmp_path: Path, eval_parquet: Path,
                                                                                tiny_moe_dir: Path, capsys, monkeypatch) -> None:
    from rlec.eval import records as rec
    from rlec.io import lock_path

    out = tmp_path / "records.jsonl"
    real = rec.RecordWriter.write_batch

    def write_on_a_full_disk(self, records):
        with monkeypatch.context() as patch:
            patch.setattr(os, "fsync", _full_disk)
            return real(self, records)

    monkeypatch.setattr(rec.RecordWriter, "write_batch", write_on_a_full_disk)
    code = main(["--model", str(tiny_moe_dir), "--data", str(eval_parquet), "--out", str(out), "--engine", "hf", "--limit", "1",
                 "--max-new-tokens", "2", "--targets", "binary"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: [Errno 28] No space left on device: '{out}'; every completed batch is in {out}"), err
    assert not lock_path(out).exists()
