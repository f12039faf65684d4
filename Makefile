# The two quick-start commands (README): `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup run demo test test-fast lint bench help
help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup:  ## create or reuse the CPU virtual environment (.venv)
	@VENV=$(VENV) bash tools/setup_env.sh

run: setup  ## set up, then the main job on the embedded default: RLEC on additions from a shipped warm start (CPU; TASK=sample: tiny random model, sample data)
	@PATH=$(abspath $(VENV))/bin:$$PATH bash tools/run_megatron_rlec.sh

demo: setup  ## set up, then the fuller learning demo, about an hour on 2 cores: warm start, 80 RLEC steps, evaluation before and after (docs/local_run.md)
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m rlec.demo $(DEMO_ARGS)

# pytest-xdist workers (CI has 2 cores); a file's tests stay in one worker, so its module fixtures run once;
# files go out in collection order, the longest first (@pytest.mark.minutes, tests/conftest.py)
TEST_WORKERS ?= 2
XDIST := $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: setup lint  ## set up, check lint and layer rules, then run the whole test suite (TEST_WORKERS=1: one process)
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-fast: setup lint  ## lint + unit tests only (skips the slow end-to-end group)
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

lint: setup  ## ruff (pyproject.toml [tool.ruff]), the layer rules (lint-imports, [tool.importlinter]), the docs link check
	@$(VENV)/bin/ruff check --quiet rlec tools benchmarks tests && echo "[lint] ruff: clean"
	@out=$$($(VENV)/bin/lint-imports --no-cache 2>&1); rc=$$?; \
	  echo "$$out" | grep -E "KEPT|BROKEN|is not allowed|^-   " | sed 's/^/[lint] /'; exit $$rc
	@$(PY) -m pytest -qq -p no:cacheprovider -o addopts=--import-mode=importlib tests/test_docs_links.py \
	  && echo "[lint] docs links: every module, function, path and config key named in docs exists"

bench: setup  ## set up, then run the throughput benchmark (measured on this machine + projected for the cluster)
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) benchmarks/throughput.py
