"""benchmarks/launch.py: a launch's actors and their times read from Ray's logs (a hand-built session folder)."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("launch_benchmark", REPO / "benchmarks" / "launch.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _session(root: Path, name: str, folder: Path, job: str, actors: list[tuple[str, int, str, str, str]]) -> None:
    """A Ray session folder: per actor (class, pid, actor id, registered, created) its worker .out, core-worker log and
    the GCS lines; the TaskRunner's .out prints ``folder`` as verl's pprint does."""
    logs = root / name / "logs"
    logs.mkdir(parents=True)
    gcs = []
    for cls, pid, actor_id, registered, created in actors:
        text = f":actor_name:{cls}\n" + (f"{{'default_local_dir': '{folder}',\n" if cls == "TaskRunnerV1" else "")
        (logs / f"worker-{pid:040x}-{job}-{pid}.out").write_text(text)
        (logs / f"python-core-worker-{pid:040x}_{pid}.log").write_text(
            f"[{registered}] core_worker.cc:1 Creating actor actor_id={actor_id}\n")
        gcs += [f"[{registered} I 1 1] (gcs_server) gcs_actor_manager.cc:341: Registering actor job_id={job} actor_id={actor_id}",
                f"[{created} I 1 1] (gcs_server) gcs_actor_manager.cc:1723: Actor created successfully job_id={job} "
                f"actor_id={actor_id}"]
    (logs / "gcs_server.out").write_text("\n".join(gcs) + "\n")


def test_the_launchs_job_and_its_actors_in_registration_order(tmp_path) -> None:
    folder = tmp_path / "run"
    other = tmp_path / "other_run"
    _session(tmp_path, "session_2026-12-07_08-00-00_1_1", other, "01000000",
             [("TaskRunnerV1", 11, "aa01", "2026-12-07 08:00:01,000", "2026-12-07 08:00:02,000")])
    _session(tmp_path, "session_2026-12-07_09-00-00_1_1", folder, "02000000",
             [("WorkerDict", 30, "cc03", "2026-12-07 09:00:10,250", "2026-12-07 09:00:17,000"),
              ("TaskRunnerV1", 20, "bb02", "2026-12-07 09:00:01,500", "2026-12-07 09:00:06,750")])
    actors = bench.ray_job_actors(folder, tmp_path)
    t0 = dt.datetime(2026, 12, 7, 9, 0, 0).timestamp()
    assert [(a["name"], a["pid"], round(a["registered"] - t0, 3), round(a["created"] - t0, 3)) for a in actors] == [
        ("TaskRunnerV1", 20, 1.5, 6.75), ("WorkerDict", 30, 10.25, 17.0)]
    assert bench.ray_job_actors(tmp_path / "never_launched", tmp_path) == []


def test_the_table_puts_each_launch_in_its_own_column() -> None:
    run = {"marks": {"ray.init called": 10.1, "ray.init returned": 14.4}, "step1_start": 70.6, "step1_s": 1.8,
           "actors": [{"name": "TaskRunnerV1", "registered": 15.1, "created": 20.4}], "load_start": [3.3], "load_end": [9.1]}
    lines = bench.table([run, {**run, "marks": {"ray.init called": 14.8}}]).splitlines()
    assert lines[0] == "| phase (s from the launcher's start) | launch 1 | launch 2 |"
    assert "| ray.init returned | 14.4 | - |" in lines
    assert "| TaskRunnerV1 registered -> created | 15.1 -> 20.4 | 15.1 -> 20.4 |" in lines
    assert "| step 1 start | 70.6 | 70.6 |" in lines
