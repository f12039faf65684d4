# The two quick-start commands (README): `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup run test test-fast bench help
help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup:  ## create or reuse the CPU virtual environment (.venv)
	@VENV=$(VENV) bash tools/setup_env.sh

run: setup  ## set up, then run the main job on the embedded default (tiny model, sample data, CPU)
	@PATH=$(abspath $(VENV))/bin:$$PATH bash tools/run_megatron_rlec.sh

test: setup  ## set up, then run the whole test suite
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup  ## unit tests only (skips the slow end-to-end group)
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

bench: setup  ## set up, then run the throughput benchmark (measured on this machine + projected for the cluster)
	@PATH=$(abspath $(VENV))/bin:$$PATH $(PY) benchmarks/throughput.py
