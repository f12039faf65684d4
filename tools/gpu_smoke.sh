#!/usr/bin/env bash
# GPU smoke test of the cluster path (one GPU; one node of 8 with --gpus 8): what a maintainer runs first on a GPU box.
#
#   bash tools/gpu_smoke.sh            # set up (cached), run every step, print one summary table
#   bash tools/gpu_smoke.sh --check    # no GPU needed: validate every command it would run (DRY_RUN),
#                                      # the scripts' syntax, the pytest selection; installs nothing
#   bash tools/gpu_smoke.sh --gpus 8   # one node of 8 GPUs: the qwen3_30b_a3b_1x8 layout (TP 4 + sequence
#                                      # parallel, EP 8; rollout TP 4, and EP 4 in FP8) on a tiny model
#   bash tools/gpu_smoke.sh --gpus 8 --check   # no GPU: those two 8-GPU commands through DRY_RUN's rules
#   bash tools/gpu_smoke.sh --offline WHEELHOUSE            # an air-gapped node (its own Python 3.12, torch 2.11+cu130,
#                                      # transformers 5.17; no registry): installs only what the node lacks from a
#                                      # wheelhouse of tools/wheelhouse.sh (a folder or its parts) into GPU_SITE
#                                      # [outputs/gpu_smoke/site] beside the node's torch, then the offline steps below
#   bash tools/gpu_smoke.sh --offline WHEELHOUSE --dry-run  # any machine: checks the wheelhouse against this Python
#                                      # (parts, checksums, Python, tags), prints the install plan and every step's
#                                      # command and time limit; installs and runs nothing
#
# Steps (each with a time limit; logs in outputs/gpu_smoke/<UTC time>/<step>.log):
#   setup      tools/setup_gpu_env.sh: the locked GPU set, Transformer Engine, flash-attn (cached by its stamp;
#              the first run on a machine builds flash-attn, 20-40 min, outside the 8-minute budget)
#   gpu-tests  pytest -m "gpu and not slow": TE conversions, vLLM generation, compat shims on CUDA
#   train-bf16 2 steps of verl's Megatron trainer on the tiny Qwen3-MoE with vLLM rollout (LAYOUT=tiny_1gpu)
#   train-fp8  the same in FP8 (TE blockwise training, FP8 vLLM rollout) on the FP8-capable tiny model
#              (megatron_configs/model/tiny_qwen3_moe_fp8.json); skipped below compute capability 9.0
#   convert    tools/convert_hf_to_mcore.py with the Transformer Engine spec, bf16, --verify
# With --offline (steps install, gpu-tests, inputs, convert, train-bf16, train-resume, router-replay, throughput; target
# under 10 minutes on one H100/H200 once the wheelhouse is on the node; docs/cluster.md section 8b has the expected figures):
#   install      tools/setup_gpu_env.sh --offline: refuses a missing or damaged part, another Python, a node without CUDA
#   gpu-tests    pytest -m "gpu and not slow" -k "not _te_ and not vllm": the GPU tests that need neither TE nor vLLM
#   convert      tools/convert_hf_to_mcore.py --spec local --dtype bf16 --verify on the tiny Qwen3-MoE
#   train-bf16   2 steps of verl's main_ppo (LAYOUT=tiny_1gpu, rollout rlec_hf, NCCL, weight sync, checkpoint at step 2);
#                without TE Megatron's local spec on padded batches (RLEC_LAYER_SPEC=local, rlec.verl_plugin.local_spec)
#   train-resume the same command with 3 steps: resumes global_step_2 and trains step 3
#   router-replay R3's replayed top-k = the rollout's: skipped on GPU (verl 0.9.1 replays packed sequences, which need TE;
#                rlec's padded-batch replay shim is CPU-only)
#   throughput   benchmarks/throughput.py --sections update --spec local --layers 2 --precisions bf16: the Megatron
#                update's tokens/s and TFLOP/s on Qwen3-30B-A3B's widths with 2 layers (1.87e9 parameters)
# With --gpus 8 (steps setup, inputs, train-1x8-bf16, train-1x8-fp8): 2 steps each of verl's trainer
# on LAYOUT=qwen3_30b_a3b_1x8 with the tiny model shaped for it (megatron_configs/model/tiny_qwen3_moe_1x8.json:
# 4 query / 4 KV heads, 8 experts, 128-wide slices), in BF16 and in FP8 (TE blockwise training at
# TP 4 with sequence parallel, FP8 vLLM rollout with expert parallel 4), 16 prompts x 4 responses.
# Target: under 8 minutes on one H100/H200 once the set-up is cached. Exit status 1 if any step failed.
#
# Environment: VENV [.venv-gpu]  OUT [outputs/gpu_smoke/<UTC time>]  SMOKE_STEPS (comma list) [all]
#   with --offline: PYTHON [python3, the node's]  GPU_SITE [outputs/gpu_smoke/site]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
CHECK_ONLY=0
GPUS=1
OFFLINE=""
DRY_RUN_PLAN=0
while (( $# )); do
  case "$1" in
    --check) CHECK_ONLY=1 ;;
    --offline) OFFLINE=${2:-}; shift; [[ -n "$OFFLINE" ]] || { echo "gpu_smoke.sh: --offline needs a wheelhouse folder" >&2; exit 2; } ;;
    --dry-run) DRY_RUN_PLAN=1 ;;
    --gpus) GPUS=${2:-}; shift ;;
    --gpus=*) GPUS=${1#--gpus=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_smoke.sh: unknown argument: $1 (use --check, --gpus 8, --offline WHEELHOUSE [--dry-run] or --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -n "$OFFLINE" && ( "$GPUS" != 1 || "$CHECK_ONLY" == 1 ) ]]; then
  echo "gpu_smoke.sh: --offline runs on one GPU and takes --dry-run, not --check or --gpus" >&2; exit 2
fi
(( DRY_RUN_PLAN == 0 )) || [[ -n "$OFFLINE" ]] || { echo "gpu_smoke.sh: --dry-run goes with --offline WHEELHOUSE" >&2; exit 2; }
case "$GPUS" in
  1) DEFAULT_STEPS=setup,gpu-tests,inputs,train-bf16,train-fp8,convert
     [[ -z "$OFFLINE" ]] || DEFAULT_STEPS=install,gpu-tests,inputs,convert,train-bf16,train-resume,router-replay,throughput ;;
  8) DEFAULT_STEPS=setup,inputs,train-1x8-bf16,train-1x8-fp8 ;;
  *) echo "gpu_smoke.sh: --gpus takes 1 (the tiny_1gpu layout) or 8 (qwen3_30b_a3b_1x8 on one node), got '$GPUS'" >&2; exit 2 ;;
esac
VENV=${VENV:-.venv-gpu}
OUT=${OUT:-outputs/gpu_smoke/$(date -u +%Y%m%dT%H%M%SZ)}
SMOKE_STEPS=${SMOKE_STEPS:-$DEFAULT_STEPS}
PYTEST_SELECTION=(-m "gpu and not slow" tests)
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
MODELS="$OUT/models"
DATA="$OUT/data"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [[ "$CHECK_ONLY" == 1 || -n "$OFFLINE" ]]; then
  PY=${PYTHON:-python3}
else
  PY="$VENV/bin/python"
fi
ROWS=()
FAILED=0

# mismatch_of LOG: the train-inference mismatch of the last training step verl logged in LOG (its console
# line `step:N - key:value - ...`): rollout_corr/kl, rollout_corr/k3_kl and training/rollout_probs_diff_max
# (rollout vs. trainer log-probs of the same tokens, before the update), or "-" (no step, e.g. DRY_RUN).
mismatch_of() {
  local line out="" key value
  line=$(grep -E 'step:[0-9]+ - ' "$1" 2>/dev/null | tail -n 1)
  [[ -n "$line" ]] || { echo "-"; return 0; }
  for key in rollout_corr/kl rollout_corr/k3_kl training/rollout_probs_diff_max; do
    value=$(grep -oE "(^| )${key}:[^ ]+" <<<"$line" | head -n 1 | sed -E 's/^ ?[^:]+:(np\.float[0-9]+\()?([^)]*)\)?$/\2/')
    [[ -n "$value" ]] && out+="${key##*/} $value, "
  done
  if [[ -n "$out" ]]; then echo "${out%, }"; else echo "-"; fi
}

# run_step NAME LIMIT_S COMMAND...: time a step, keep its log, record one summary row (training steps: with
# the mismatch metrics of their last step).
run_step() {
  local name=$1 limit=$2 start=$SECONDS rc=0
  shift 2
  [[ ",$SMOKE_STEPS," == *",$name,"* ]] || { ROWS+=("$name|not selected|-|-|-"); return 0; }
  echo "[gpu_smoke] $name: $*" >&2
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  local secs=$((SECONDS - start)) result=ok mismatch=-
  if (( rc == 124 )); then result="FAILED (over ${limit}s)"; FAILED=1
  elif (( rc != 0 )); then result="FAILED (exit $rc)"; FAILED=1; fi
  [[ "$name" == train-* ]] && mismatch=$(mismatch_of "$OUT/$name.log")
  ROWS+=("$name|$result|$secs|$mismatch|$OUT/$name.log")
  [[ "$result" == ok ]] || tail -n 15 "$OUT/$name.log" >&2
}

skip_step() { ROWS+=("$1|skipped: $2|-|-|-"); }

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

# TRAIN for --gpus 8: the committed one-node layout as it is (TP 4 + sequence parallel, EP 8, ETP 1,
# rollout TP 4; precision/fp8.yaml sets rollout EP 4 and blockwise FP8), at toy batch sizes
# (16 prompts x 4 responses, mini-batch 8: 32 responses per mini-batch over attention DP 2).
train_1x8_cmd() {
  local dry=$1 precision=$2
  TRAIN=(env DRY_RUN="$dry" LAYOUT=qwen3_30b_a3b_1x8 PRECISION="$precision" MODEL_PATH="$MODELS/tiny_qwen3_moe_1x8"
         PYTHON="$PY" NNODES=1 NGPUS_PER_NODE=8 TRAIN_FILES="$DATA/train.parquet" VAL_FILES="$DATA/test.parquet"
         CHECKPOINT_DIR="$OUT/ckpt_1x8_$precision" EXPERIMENT_NAME="smoke_1x8_$precision" TOTAL_TRAINING_STEPS=2
         SAVE_FREQ=2 TEST_FREQ=-1 LOGGER="[console]" TRAIN_BATCH_SIZE=16 ROLLOUT_N=4
         DRY_RUN_CONFIG="$OUT/train-1x8-$precision.config.yaml"
         bash tools/run_megatron_rlec.sh trainer.val_before_train=false actor_rollout_ref.rollout.enforce_eager=true
         data.max_response_length=128 actor_rollout_ref.actor.ppo_mini_batch_size=8)
}

# The tiny models of the mode (1 GPU: tiny_qwen3_moe and the FP8 one with 128-wide slices; 8 GPUs: the
# one shaped for the 1x8 layout) and the sample data, on CPU in seconds.
prepare_inputs() {
  "$PY" - "$MODELS" $SMOKE_MODELS <<'EOF_PY' || return 1
import json, sys
from pathlib import Path
from rlec.config import CONFIG_DIR
from rlec.models import build_tiny_model
models = Path(sys.argv[1])
for name in sys.argv[2:]:
    if not (models / name).exists():
        spec = {k: v for k, v in json.loads((CONFIG_DIR / "model" / f"{name}.json").read_text()).items() if not k.startswith("_")}
        build_tiny_model(models / name, overrides=spec)
EOF_PY
  [[ -f "$DATA/train.parquet" ]] || "$PY" -m rlec.data.prepare --output-dir "$DATA" --no-progress
}
if [[ "$GPUS" == 8 ]]; then SMOKE_MODELS=tiny_qwen3_moe_1x8; else SMOKE_MODELS="tiny_qwen3_moe tiny_qwen3_moe_fp8"; fi
export -f prepare_inputs
export PY MODELS DATA SMOKE_MODELS

gpu_capability() { "$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || echo 0.0; }

gpu_count() { { nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true; } | wc -l; }

if [[ -n "$OFFLINE" ]]; then
  # An air-gapped node: the node's own Python, torch and CUDA, plus what the wheelhouse carries (GPU_SITE).
  SITE=${GPU_SITE:-$REPO_ROOT/outputs/gpu_smoke/site}
  mkdir -p "$(dirname "$SITE")"
  SITE="$(cd "$(dirname "$SITE")" && pwd)/$(basename "$SITE")"
  OFFLINE_PYTEST=(-m "gpu and not slow" -k "not _te_ and not vllm" tests)
  # the rollout rlec_hf (transformers, no vLLM) on the tiny_1gpu layout, as layout/cpu.yaml sets it
  HF_ROLLOUT=(actor_rollout_ref.rollout.name=rlec_hf actor_rollout_ref.rollout.calculate_log_probs=true
              actor_rollout_ref.rollout.free_cache_engine=false actor_rollout_ref.rollout.checkpoint_engine.backend=naive
              actor_rollout_ref.rollout.agent.num_workers=1 actor_rollout_ref.rollout.agent.default_agent_loop=rlec_scripted_agent
              "+actor_rollout_ref.rollout.custom.rlec_weight_noise=0.0" "+actor_rollout_ref.rollout.custom.rlec_noise_seed=0")
  # without Transformer Engine: Megatron's local spec in verl's engine (rlec.verl_plugin.local_spec) on padded batches
  LOCAL_SPEC=(actor_rollout_ref.model.use_remove_padding=false actor_rollout_ref.actor.megatron.use_remove_padding=false
              "++actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=local"
              "++ray_kwargs.ray_init.runtime_env.env_vars.RLEC_LAYER_SPEC=local")
  offline_train() {  # offline_train STEPS SPEC: the train command, 2 steps then a resume to 3, into one checkpoint folder
    local spec_args=() spec_env=RLEC_LAYER_SPEC=
    [[ "$2" == local ]] && { spec_args=("${LOCAL_SPEC[@]}"); spec_env=RLEC_LAYER_SPEC=local; }
    TRAIN=(env LAYOUT=tiny_1gpu PRECISION=bf16 MODEL_PATH="$MODELS/tiny_qwen3_moe" PYTHON="$PY" "$spec_env"
           TRAIN_FILES="$DATA/train.parquet" VAL_FILES="$DATA/test.parquet" CHECKPOINT_DIR="$OUT/ckpt_offline"
           EXPERIMENT_NAME=smoke_offline TOTAL_TRAINING_STEPS="$1" SAVE_FREQ=2 TEST_FREQ=-1 LOGGER="[console]" RESUME=auto
           bash tools/run_megatron_rlec.sh trainer.val_before_train=false data.max_response_length=128 "${HF_ROLLOUT[@]}"
           "${spec_args[@]}")
  }
  if "$PY" -c "import transformer_engine.pytorch" >/dev/null 2>&1; then TRAIN_SPEC=te; else TRAIN_SPEC=local; fi
  THROUGHPUT=("$PY" benchmarks/throughput.py --profile gpu --sections update --spec local --layers 2 --precisions bf16
              --layouts tp1 --window-layouts none --warmup 1 --repeats 3 --models-dir "$MODELS" --out "$OUT/throughput" --name smoke)
  R3_REASON="verl 0.9.1 replays routes on packed sequences, which need TE's attention; rlec's padded-batch replay (router_replay_bshd) is CPU-only"
  if [[ "$DRY_RUN_PLAN" == 1 ]]; then
    echo "[gpu_smoke] --dry-run: the wheelhouse against $PY, then the plan; nothing is installed or run"
    PYTHON="$PY" bash tools/setup_gpu_env.sh --offline "$OFFLINE" --target "$SITE" --check || exit 1
    offline_train 2 "$TRAIN_SPEC"
    plan_row() { ROWS+=("$1|planned (limit $2 s)|-|-|${*:3}"); }
    plan_row install 240 "bash tools/setup_gpu_env.sh --offline $OFFLINE --target $SITE"
    plan_row gpu-tests 180 "$PY -m pytest -q ${OFFLINE_PYTEST[*]}"
    plan_row inputs 120 "prepare_inputs (tiny_qwen3_moe, sample data)"
    plan_row convert 120 "$PY tools/convert_hf_to_mcore.py --spec local --dtype bf16 --verify"
    plan_row train-bf16 300 "${TRAIN[*]}"
    plan_row train-resume 240 "the same with TOTAL_TRAINING_STEPS=3"
    ROWS+=("router-replay|will be skipped: $R3_REASON|-|-|-")
    plan_row throughput 240 "${THROUGHPUT[*]}"
  else
    run_step install 240 env PYTHON="$PY" bash tools/setup_gpu_env.sh --offline "$OFFLINE" --target "$SITE"
    if [[ "${ROWS[-1]}" != install\|ok* && ",$SMOKE_STEPS," == *",install,"* ]]; then
      echo "gpu_smoke.sh: the install step failed (refused or broke); nothing else runs: $OUT/install.log" >&2
      FAILED=1
    else
      export PYTHONPATH="$SITE:$PYTHONPATH"
      SMOKE_MODELS=tiny_qwen3_moe
      export PYTHONPATH SMOKE_MODELS
      run_step gpu-tests 180 "$PY" -m pytest -q -p no:cacheprovider "${OFFLINE_PYTEST[@]}"
      run_step inputs 120 bash -c prepare_inputs
      run_step convert 120 "$PY" tools/convert_hf_to_mcore.py --hf-model-path "$MODELS/tiny_qwen3_moe" \
        --output-path "$OUT/ckpt_convert" --spec local --dtype bf16 --verify --overwrite
      if "$PY" -c "import transformer_engine.pytorch" >/dev/null 2>&1; then TRAIN_SPEC=te; else TRAIN_SPEC=local; fi
      offline_train 2 "$TRAIN_SPEC" && run_step train-bf16 300 "${TRAIN[@]}"
      offline_train 3 "$TRAIN_SPEC" && run_step train-resume 240 "${TRAIN[@]}"
      skip_step router-replay "$R3_REASON"
      run_step throughput 240 "${THROUGHPUT[@]}"
    fi
  fi
elif [[ "$GPUS" == 8 ]]; then
  # One node of 8 GPUs: the one-node cluster layout in BF16 and FP8 (--check: the same commands through DRY_RUN).
  if [[ "$CHECK_ONLY" == 1 ]]; then
    run_step setup 120 bash -c "bash -n tools/gpu_smoke.sh && bash -n tools/setup_gpu_env.sh && bash tools/setup_gpu_env.sh --check"
    run_step inputs 900 bash -c prepare_inputs
    train_1x8_cmd 1 bf16 && run_step train-1x8-bf16 900 "${TRAIN[@]}"
    train_1x8_cmd 1 fp8 && run_step train-1x8-fp8 900 "${TRAIN[@]}"
  else
    if (( $(gpu_count) < 8 )); then
      echo "gpu_smoke.sh: --gpus 8 needs 8 GPUs on this node; nvidia-smi lists $(gpu_count)" >&2; exit 1
    fi
    run_step setup 3600 env VENV="$VENV" bash tools/setup_gpu_env.sh
    [[ -x "$PY" ]] || { echo "gpu_smoke.sh: $PY missing: the setup step failed" >&2; exit 1; }
    run_step inputs 300 bash -c prepare_inputs
    train_1x8_cmd 0 bf16 && run_step train-1x8-bf16 600 "${TRAIN[@]}"
    if awk -v c="$(gpu_capability)" 'BEGIN { exit !(c >= 9.0) }'; then
      train_1x8_cmd 0 fp8 && run_step train-1x8-fp8 600 "${TRAIN[@]}"
    else
      skip_step train-1x8-fp8 "compute capability $(gpu_capability) < 9.0 (FP8 blockwise needs Hopper or newer)"
    fi
  fi
elif [[ "$CHECK_ONLY" == 1 ]]; then
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
echo "| step | result | seconds | mismatch (last step) | log |"
echo "|---|---|---|---|---|"
for row in "${ROWS[@]}"; do echo "| ${row//|/ | } |"; done
echo "total $SECONDS s; outputs in $OUT"
exit "$FAILED"
