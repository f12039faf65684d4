"""Every module, function, file path and config key the docs name exists.

Read: README.md, docs/*.md, the docstrings and comments of rlec/, the comments of megatron_configs/,
tools/ and benchmarks/, and the Makefile. A renamed module or moved test leaves docs pointing at
nothing (e.g. ``rlec.verl_plugin.schedule_length`` or ``tests/verl/...`` were named long after they
were gone), and a config file named as the home of a section must hold it ("every E3 setting is in
rlec.yaml (rlec.e3)" while they were in recipe.yaml). This reads text only: no module is imported.
Run by ``make lint``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SOURCES = sorted((REPO / "rlec").rglob("*.py"))
# comments and help text outside rlec/ that name modules and paths
OTHER_TEXT = sorted([*(REPO / "megatron_configs").rglob("*.yaml"), *(REPO / "tools").rglob("*.md"), *(REPO / "tools").rglob("*.py"),
                     *(REPO / "tools").rglob("*.sh"), *(REPO / "benchmarks").rglob("*.py"), *(REPO / "benchmarks").rglob("*.md"),
                     REPO / "Makefile"])
DOTTED = re.compile(r"(?<![\w./-])(rlec(?:\.[A-Za-z_]\w*)+)(?![\w/])")
PATH = re.compile(r"(?<![\w./-])((?:rlec|tests|tools|benchmarks|megatron_configs|docs)/[\w./*-]*[\w*])")
# "<file>.yaml (rlec.<key>)": the config file named as the home of a section or setting
SETTING_IN_FILE = re.compile(r"(?<![\w./-])([\w/]+\.yaml)`? \(`?(rlec(?:\.\w+)+)`?\)")
# "rlec.<key> in <file>.yaml": the same claim, the other way round
SETTING_IN_FILE_AFTER = re.compile(r"(?<![\w./-])`?(rlec(?:\.\w+)+)`? in `?([\w/]+\.yaml)(?![\w/])")
# outputs and placeholders a doc may name that are not in the repository
NOT_FILES = ("<", "*", "{")


def _module_file(parts: list[str]) -> tuple[Path | None, list[str]]:
    """The longest prefix of ``parts`` that is a module of the repository, and the rest."""
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, parts[cut:]
    return None, parts


def _defines(module: Path, name: str) -> bool:
    """A def, class, assignment, import or ``__all__`` / lazy-export string of ``name`` in the module."""
    text = module.read_text()
    n = re.escape(name)
    pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{n}\b|^\s*{n}\s*[:=]|import[^\n]*\b{n}\b|^\s+{n},?$|[\"']{n}[\"']"
    return re.search(pattern, text, re.M) is not None


def _config_sections() -> set[str]:
    """Top-level keys of the ``rlec:`` config section (``rlec.e3.budget.n_min`` is a setting, not a module)."""
    text = (REPO / "megatron_configs" / "recipe.yaml").read_text()
    text += "".join(p.read_text() for p in sorted((REPO / "megatron_configs").glob("*/*.yaml")))
    out, inside = set(), False
    for line in text.splitlines():
        if re.match(r"^rlec:\s*$", line):
            inside = True
        elif re.match(r"^\S", line):
            inside = False
        elif inside and (m := re.match(r"^  (\w+):", line)):
            out.add(m.group(1))
    return out


SECTIONS = _config_sections()
# rlec.passk.* settings prefix, [rlec.demo] log prefix, rlec.step metric, rlec.length_decay.* settings of the worked
# example of docs/adding_an_algorithm.md (a hypothetical algorithm, run by tests/algorithms/test_adding_an_algorithm.py)
NOT_MODULES = {"passk", "demo", "step", "length_decay"}
FILE_SUFFIXES = ("v1", "jsonl", "json", "yaml", "md", "png", "py", "parquet", "txt", "pt", "log")


def _holds(config: str, key: str) -> bool:
    """Whether the YAML file ``config`` (a repository path, or a file name under megatron_configs/) has ``key``."""
    candidates = [REPO / config] if "/" in config else sorted((REPO / "megatron_configs").rglob(config))
    for path in candidates:
        if not path.is_file():
            continue
        node = yaml.safe_load(path.read_text())
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return True
    return False


def dangling(text: str) -> list[str]:
    """The dotted ``rlec.*`` names, repository paths and ``<file>.yaml (rlec.<key>)`` homes in ``text``
    that name nothing."""
    homes = {*SETTING_IN_FILE.findall(text), *((config, key) for key, config in SETTING_IN_FILE_AFTER.findall(text))}
    out = [f"{config} ({key})" for config, key in sorted(homes) if not _holds(config, key)]
    for name in sorted(set(DOTTED.findall(text))):
        parts = name.rstrip(".").split(".")
        if parts[1] in SECTIONS or parts[1] in NOT_MODULES or parts[-1] in FILE_SUFFIXES:
            # a setting, a log prefix or schema / metric name, or a file name such as rlec.jsonl
            continue
        module, rest = _module_file(parts)
        if module is None:
            out.append(name)
        elif rest and not _defines(module, rest[0]):
            out.append(name)
    for path in sorted(set(PATH.findall(text))):
        if any(c in path for c in NOT_FILES) or (path.startswith("rlec/") and "." not in path.rsplit("/", 1)[-1]
                                                 and not (REPO / path).is_dir()):
            continue  # a placeholder, or a metric name such as rlec/reward/mean
        if not (REPO / path).exists() and not (REPO / path.rstrip("/")).exists():
            out.append(path)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_docs_name_only_what_exists(doc: Path) -> None:
    assert dangling(doc.read_text()) == []


def test_docstrings_and_comments_name_only_what_exists() -> None:
    found = {str(p.relative_to(REPO)): bad for p in SOURCES if (bad := dangling(p.read_text()))}
    assert found == {}


@pytest.mark.parametrize("path", OTHER_TEXT, ids=[str(p.relative_to(REPO)) for p in OTHER_TEXT])
def test_config_tool_and_benchmark_comments_name_only_what_exists(path: Path) -> None:
    assert dangling(path.read_text()) == []


def test_the_check_catches_a_removed_module_and_a_missing_test_path() -> None:
    assert dangling("see rlec.verl_plugin.schedule_length and tests/verl/test_x.py") == [
        "rlec.verl_plugin.schedule_length", "tests/verl/test_x.py"]
    assert dangling("rlec.reward.formula and tests/test_io.py") == []


def test_the_check_catches_a_config_file_named_as_the_home_of_a_section_it_lacks() -> None:
    assert dangling("Every E3 setting and its default is in rlec.yaml (rlec.e3)") == ["rlec.yaml (rlec.e3)"]
    assert dangling("Every E3 setting and its default is in recipe.yaml (`rlec.e3.budget`)") == []
    assert dangling("## Settings (`rlec.e3` in `megatron_configs/rlec.yaml`)") == ["megatron_configs/rlec.yaml (rlec.e3)"]
    assert dangling("in megatron_configs/recipe.yaml (rlec.e3.no_such_key)") == [
        "megatron_configs/recipe.yaml (rlec.e3.no_such_key)"]
