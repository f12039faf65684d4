"""The documented commands work in the order written (issue 26, item 9).

A new user ran the README's commands one after the other: `python -m ...` failed without the
virtual environment (the README never said to activate it), and `ENVIRONMENTS=arithmetic,maze make
run` after `make run` was refused because both wrote the same output folder with other settings.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/local_run.md"]
VERL_OUTPUT = "outputs/verl_run"  # make run: verl's trainer on CPU, the launcher's default without CUDA
RESUMABLE = ("STEPS", "TOTAL_TRAINING_STEPS")
RUNNERS = ("make run", "tools/run_megatron_rlec.sh")


def bash_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks, continuation lines joined, comments removed."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def local_runs(commands: list[str]) -> list[tuple[str, str, str]]:
    """``(command, output folder, settings)`` of each command that starts a training run on this machine."""
    runs = []
    for command in commands:
        if not any(r in command for r in RUNNERS) or "DRY_RUN=1" in command or "--help" in command:
            continue
        if "NNODES=" in command:  # a cluster launch (GPU nodes): checkpoints/<experiment>, not a CPU run
            continue
        words = shlex.split(command)
        env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
        if env.get("TRAINER") == "verl":  # the default: the same run as without it
            env.pop("TRAINER")
        output = env.pop("OUTPUT_DIR", env.pop("CHECKPOINT_DIR", VERL_OUTPUT))
        for key in RESUMABLE:  # a rerun with more steps resumes (documented), it is not another run
            env.pop(key, None)
        args = [w for w in words if not re.match(r"^[A-Z_]+=", w) and w not in ("make", "run", "bash", "python", "-m")
                and not w.endswith("run_megatron_rlec.sh")]
        runs.append((command, output, " ".join([*sorted(f"{k}={v}" for k, v in env.items()), *args])))
    return runs


@pytest.mark.parametrize("doc", DOCS)
def test_runs_with_other_settings_use_their_own_output_folder(doc: str) -> None:
    runs = local_runs(bash_commands((REPO / doc).read_text()))
    assert runs, f"{doc}: no training-run command found"
    seen: dict[str, tuple[str, str]] = {}
    for command, output, settings in runs:
        if output in seen:
            other_command, other_settings = seen[output]
            assert settings == other_settings, (f"{doc}: `{command}` after `{other_command}` is refused: both use "
                                                f"{output} with other settings")
        seen[output] = (command, settings)


def test_the_readme_says_to_activate_the_environment_before_commands_outside_make() -> None:
    text = (REPO / "README.md").read_text()
    first_outside_make = re.search(r"^(?:[A-Z_]+=\S+ )*(?:python -m rlec|bash tools/)", text, flags=re.M).start()
    assert "source .venv/bin/activate" in text[:first_outside_make]
    assert "No module named 'omegaconf'" in text


def test_the_checker_catches_the_reported_order() -> None:
    """The exact pair from the issue: refused, so the check above would fail on it."""
    runs = local_runs(["make run", "ENVIRONMENTS=arithmetic,maze make run"])
    assert [r[1] for r in runs] == [VERL_OUTPUT, VERL_OUTPUT] and runs[0][2] != runs[1][2]
