#!/usr/bin/env bash
# One-GPU smoke test of the cluster path: what a maintainer runs first on any GPU box.
#
#   bash tools/gpu_smoke.sh            # set up (cached), run every step, print one summary table
#   bash tools/gpu_smoke.sh --check    # no GPU needed: validate every command it would run (DRY_RUN),
#                                      # the scripts' syntax, the pytest selection; installs nothing
#
# Steps (each with a time limit; logs in outputs/gpu_smoke/<UTC time>/<step>.log):
#   setup      tools/setup_gpu_env.sh: the locked GPU set, Transformer Engine, flash-attn (cached by its stamp;
#              the first run on a machine builds flash-attn, 20-40 min, outside the 8-minute budget)
#   gpu-tests  pytest -m "gpu and not slow": TE conversions, vLLM generation, compat shims on CUDA
#   train-bf16 2 steps of verl's Megatron trainer on the tiny Qwen3-MoE with vLLM rollout (LAYOUT=tiny_1gpu)
#   train-fp8  the same in FP8 (TE blockwise training, FP8 vLLM rollout) on the FP8-capable tiny model
#              (megatron_configs/model/tiny_qwen3_moe_fp8.json); skipped below compute capability 9.0
#   convert    tools/convert_hf_to_mcore.py with the Transformer Engine spec, bf16, --verify
# Target: under 8 minutes on one H100/H200 once the set-up is cached. Exit status 1 if any step failed.
#
# Environment: VENV [.venv-gpu]  OUT [outputs/gpu_smoke/<UTC time>]  SMOKE_STEPS (comma list) [all]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
CHECK_ONLY=0
case "${1:-}" in
  --check) CHECK_ONLY=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "gpu_smoke.sh: unknown argument: $1 (use --check or --help)" >&2; exit 2 ;;
esac
VENV=${VENV:-.venv-gpu}
OUT=${OUT:-outputs/gpu_smoke/$(date -u +%Y%m%dT%H%M%SZ)}
SMOKE_STEPS=${SMOKE_STEPS:-setup,gpu-tests,inputs,train-bf16,train-fp8,convert}
PYTEST_SELECTION=(-m "gpu and not slow" tests)
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
MODELS="$OUT/models"
DATA="$OUT/data"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [[ "$CHECK_ONLY" == 1 ]]; then
  PY=${PYTHON:-python3}
else
  PY="$VENV/bin/python"
fi
ROWS=()
FAILED=0

# run_step NAME LIMIT_S COMMAND...: time a step, keep its log, record one summary row.
run_step() {
  local name=$1 limit=$2 start=$SECONDS rc=0
  shift 2
  [[ ",$SMOKE_STEPS," == *",$name,"* ]] || { ROWS+=("$name|not selected|-|-"); return 0; }
  echo "[gpu_smoke] $name: $*" >&2
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  local secs=$((SECONDS - start)) result=ok
  if (( rc == 124 )); then result="FAILED (over ${limit}s)"; FAILED=1
  elif (( rc != 0 )); then result="FAILED (exit $rc)"; FAILED=1; fi
  ROWS+=("$name|$result|$secs|$OUT/$name.log")
  [[ "$result" == ok ]] || tail -n 15 "$OUT/$name.log" >&2
}

skip_step() { ROWS+=("$1|skipped: $2|-|-"); }

# TRAIN: the training command of one precision (the launcher with the tiny layout, 2 steps, no
# validation); DRY_RUN=1 as the first argument makes it the launcher's check of that command.
train_cmd() {
  local dry=$1 precision=$2 model=$3
  TRAIN=(env DRY_RUN="$dry" LAYOUT=tiny_1gpu PRECISION="$precision" MODEL_PATH="$model" PYTHON="$PY"
         TRAIN_FILES="$DATA/train.parquet" VAL_FILES="$DATA/test.parquet" CHECKPOINT_DIR="$OUT/ckpt_$precision"
         EXPERIMENT_NAME="smoke_$precision" TOTAL_TRAINING_STEPS=2 SAVE_FREQ=2 TEST_FREQ=-1 LOGGER="[console]"
         DRY_RUN_CONFIG="$OUT/train-$precision.config.yaml"
         bash tools/run_megatron_rlec.sh trainer.val_before_train=false actor_rollout_ref.rollout.enforce_eager=true
         data.max_response_length=128)
}

# The two tiny models (the FP8 one has 128-wide slices) and the sample data, on CPU in seconds.
prepare_inputs() {
  "$PY" - "$MODELS" <<'EOF_PY' || return 1
import json, sys
from pathlib import Path
from rlec.config import CONFIG_DIR
from rlec.models import build_tiny_model
models = Path(sys.argv[1])
for name in ("tiny_qwen3_moe", "tiny_qwen3_moe_fp8"):
    if not (models / name).exists():
        spec = {k: v for k, v in json.loads((CONFIG_DIR / "model" / f"{name}.json").read_text()).items() if not k.startswith("_")}
        build_tiny_model(models / name, overrides=spec)
EOF_PY
  [[ -f "$DATA/train.parquet" ]] || "$PY" -m rlec.data.prepare --output-dir "$DATA" --no-progress
}
export -f prepare_inputs
export PY MODELS DATA

gpu_capability() { "$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || echo 0.0; }

if [[ "$CHECK_ONLY" == 1 ]]; then
  # Everything that can be checked without a GPU: syntax, help texts, the pytest selection, and each
  # training command it composes, run through DRY_RUN (verl's and rlec's checks, paths included).
  run_step setup 120 bash -c "bash -n tools/gpu_smoke.sh && bash -n tools/setup_gpu_env.sh && bash tools/setup_gpu_env.sh --check"
  run_step gpu-tests 600 "$PY" -m pytest --collect-only -q -p no:cacheprovider "${PYTEST_SELECTION[@]}"
  run_step inputs 900 bash -c prepare_inputs
  train_cmd 1 bf16 "$MODELS/tiny_qwen3_moe" && run_step train-bf16 900 "${TRAIN[@]}"
  train_cmd 1 fp8 "$MODELS/tiny_qwen3_moe_fp8" && run_step train-fp8 900 "${TRAIN[@]}"
  run_step convert 120 "$PY" tools/convert_hf_to_mcore.py --help
else
  run_step setup 3600 env VENV="$VENV" bash tools/setup_gpu_env.sh
  [[ -x "$PY" ]] || { echo "gpu_smoke.sh: $PY missing: the setup step failed" >&2; exit 1; }
  run_step gpu-tests 420 "$PY" -m pytest -q -p no:cacheprovider "${PYTEST_SELECTION[@]}"
  run_step inputs 300 bash -c prepare_inputs
  train_cmd 0 bf16 "$MODELS/tiny_qwen3_moe" && run_step train-bf16 420 "${TRAIN[@]}"
  if awk -v c="$(gpu_capability)" 'BEGIN { exit !(c >= 9.0) }'; then
    train_cmd 0 fp8 "$MODELS/tiny_qwen3_moe_fp8" && run_step train-fp8 420 "${TRAIN[@]}"
  else
    skip_step train-fp8 "compute capability $(gpu_capability) < 9.0 (FP8 blockwise needs Hopper or newer)"
  fi
  run_step convert 300 "$PY" tools/convert_hf_to_mcore.py --hf-model-path "$MODELS/tiny_qwen3_moe" \
    --output-path "$OUT/ckpt_convert" --spec te --dtype bf16 --verify --overwrite
fi

echo
echo "| step | result | seconds | log |"
echo "|---|---|---|---|"
for row in "${ROWS[@]}"; do echo "| ${row//|/ | } |"; done
echo "total $SECONDS s; outputs in $OUT"
exit "$FAILED"
