#!/usr/bin/env bash
# Train RLEC with verl 0.9.1's Megatron backend (megatron_configs/rlec.yaml), or check the config.
#
#   MODEL_PATH=/models/Qwen3-30B-A3B NNODES=4 NGPUS_PER_NODE=8 bash tools/run_megatron_rlec.sh [hydra overrides...]
#   DRY_RUN=1 LAYOUT=qwen3_30b_a3b_1x8 PRECISION=fp8 bash tools/run_megatron_rlec.sh   # validate, start nothing
#
# Run it on the Ray head node of a running cluster (docs/cluster.md), or on one GPU node (it
# starts a local Ray). Without a CUDA GPU and without DRY_RUN it runs the local CPU profile.
#
# Environment (empty = the value in megatron_configs/; command-line overrides win over all):
#   DRY_RUN=1            compose and validate the resolved config (verl's checks + rlec's: layout, vLLM, memory,
#                        paths), print a short verdict, write the config to DRY_RUN_CONFIG, then exit
#   SKIP_PATH_CHECKS=1   do not check the model folder, data files and checkpoint folder (on a login node where
#                        they exist only on the cluster); the verdict says they were skipped          [0]
#   PRINT_CONFIG=1       also print the resolved config (YAML) to stdout                              [0]
#   DRY_RUN_CONFIG       where DRY_RUN writes the resolved config   [outputs/dry_run/<EXPERIMENT_NAME>.yaml]
#   LAYOUT               megatron_configs/layout/<LAYOUT>.yaml            [qwen3_30b_a3b_4x8]
#   PRECISION            megatron_configs/precision/<PRECISION>.yaml      [bf16]
#   MODEL_PATH           Hugging Face model folder (or hub id), loaded via mbridge [models/Qwen3-30B-A3B; tiny*: models/tiny_qwen3_moe;
#                        TRAINER=verl without a GPU: the tiny random model, built in OUTPUT_DIR/tiny_model]
#   DIST_CKPT_PATH       optional Megatron dist checkpoint (tools/convert_hf_to_mcore.py) to load instead
#   TRAIN_FILES VAL_FILES  parquet files from rlec's data preparation   [data/processed/{train,test}.parquet]
#   CHECKPOINT_DIR       checkpoints, launch records, TensorBoard logs    [checkpoints/<EXPERIMENT_NAME>]
#   EXPERIMENT_NAME      [rlec_<LAYOUT>_<PRECISION>]      RESUME  verl resume_mode: auto|disable [auto]
#   GPU_ARCH             compute capability of the GPUs (sm_90: H100/H200; sm_100: B200), checked by rlec's rules
#                        (Blackwell + MoE is refused: verl#7978)   [from nvidia-smi at launch; sm_90 for DRY_RUN]
#   NNODES NGPUS_PER_NODE GPU_MEMORY_GIB TRAIN_BATCH_SIZE ROLLOUT_N MAX_PROMPT_LENGTH
#   MAX_RESPONSE_LENGTH LR TOTAL_EPOCHS TOTAL_TRAINING_STEPS SAVE_FREQ TEST_FREQ LOGGER
#   NPROC                processes of the local CPU profile (no GPU, no DRY_RUN); with TRAINER=verl without a GPU, verl's
#                        Megatron worker processes over gloo (trainer.n_gpus_per_node = ray_init.num_gpus = NPROC logical
#                        GPUs; one rlec_hf rollout replica over them, rollout data_parallel_size = NPROC) [1]
#   TP EP ETP PP         TRAINER=verl without a GPU: actor_rollout_ref.{actor,ref}.megatron.{tensor_model,expert_model,
#                        expert_tensor,pipeline_model}_parallel_size; TP > 1 also turns on sequence_parallel (Megatron needs
#                        it with MoE). Values that are not integers >= 1, TP x PP not dividing NPROC, EP or ETP not dividing
#                        the model are refused before Ray starts, naming key, value and rule [layout/cpu.yaml: 1]
#   TRAINER              without a GPU: verl (verl's own trainer on CPU, `make run`: layout=cpu, precision=fp32, the
#                        rlec_hf rollout, the tiny model and sample data; STEPS, OUTPUT_DIR [outputs/verl_run],
#                        ENVIRONMENTS, RESUME, EVAL_AT_END; progress, step table, curves, OUTPUT_DIR/hf_final and the
#                        final evaluation: rlec.verl_report; docs/local_run.md) or local (the local loop,
#                        rlec.local.runner). With DRY_RUN=1 only an explicit TRAINER=verl selects the CPU layout [verl]
#   RLEC_WAIT_PREVIOUS_S seconds a launch waits for the processes a killed launch into the same CHECKPOINT_DIR left
#                        behind (Ray's trainer and workers) to end before refusing, naming them [120]
#   RLEC_VERBOSE=1       keep third-party output on the console (otherwise in OUTPUT_DIR/launches/<time>/verl.log) [0]
#   PYTHON               interpreter [python3]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Ray actors do not run in this directory: make existing relative paths absolute.
abs_if_exists() { if [[ -e "$1" && "$1" != /* ]]; then echo "$PWD/$1"; else echo "$1"; fi; }
abspath() { if [[ "$1" == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
PYTHON=${PYTHON:-python3}
DRY_RUN=${DRY_RUN:-0}
SKIP_PATH_CHECKS=${SKIP_PATH_CHECKS:-0}
PRINT_CONFIG=${PRINT_CONFIG:-0}
# on/off variables: the spellings of rlec.flags (1/true/yes/on, 0/false/no/off), the one parser of every
# boolean variable of rlec (EVAL_AT_END, RESUME, ...); they read 1 or 0 from here on, a bad one exits 2
FLAGS=$(PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m rlec.flags DRY_RUN SKIP_PATH_CHECKS PRINT_CONFIG) || exit 2
eval "$FLAGS"
NPROC=${NPROC:-1}
TRAINER_SET=${TRAINER:+1}
TRAINER=${TRAINER:-verl}
has_cuda() { "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
case "$TRAINER" in local|verl) ;; *) echo "run_megatron_rlec.sh: TRAINER=$TRAINER: expected local or verl" >&2; exit 2 ;; esac
VERL_ON_CPU=0
# a DRY_RUN checks the cluster's layout unless TRAINER=verl is asked for by name
if [[ "$TRAINER" == verl && ( "$DRY_RUN" != 1 || -n "$TRAINER_SET" ) ]] && ! has_cuda; then
  # verl's own trainer on this machine: the CPU layout, fp32, the tiny model and sample data by default
  VERL_ON_CPU=1
  # the report's on/off variables (rlec.verl_report): a bad spelling exits 2 before anything starts
  PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m rlec.flags EVAL_AT_END RLEC_VERBOSE >/dev/null || exit 2
  export VERL_PLATFORM=cpu OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  # Transformer Engine's attention selectors mean nothing here, and Megatron refuses local attention with them set
  unset NVTE_FLASH_ATTN NVTE_FUSED_ATTN NVTE_UNFUSED_ATTN
  OUTPUT_DIR=${OUTPUT_DIR:-${CHECKPOINT_DIR:-outputs/verl_run}}
  CHECKPOINT_DIR=$OUTPUT_DIR
  LAYOUT=${LAYOUT:-cpu}
  PRECISION=${PRECISION:-fp32}
  TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-${STEPS:-}}
  DATA_DIR=${DATA_DIR:-data/processed}
  TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
  VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
  EXPERIMENT_NAME=${EXPERIMENT_NAME:-verl_cpu}
fi
LAYOUT=${LAYOUT:-qwen3_30b_a3b_4x8}
PRECISION=${PRECISION:-bf16}
case "$LAYOUT" in tiny*) DEFAULT_MODEL=$REPO_ROOT/models/tiny_qwen3_moe ;; *) DEFAULT_MODEL=$REPO_ROOT/models/Qwen3-30B-A3B ;; esac
# verl on CPU: the tiny random model built beside the run's outputs, as the local run does
[[ "$VERL_ON_CPU" == 1 ]] && DEFAULT_MODEL=$(abspath "$OUTPUT_DIR")/tiny_model
MODEL_PATH=${MODEL_PATH:-$DEFAULT_MODEL}
DIST_CKPT_PATH=${DIST_CKPT_PATH:-}
TRAIN_FILES=${TRAIN_FILES:-$REPO_ROOT/data/processed/train.parquet}
VAL_FILES=${VAL_FILES:-$REPO_ROOT/data/processed/test.parquet}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-rlec_${LAYOUT}_${PRECISION}}
# the overlays on the command line name the resolved file, so a DRY_RUN with algorithm=[e3,passk] keeps the plain one
ALGO_TAG=$(printf '%s\n' "$@" | sed -n 's/^algorithm=//p' | tr -d '[] ' | tr ',' '_' | tail -n 1)
DRY_RUN_CONFIG=${DRY_RUN_CONFIG:-$REPO_ROOT/outputs/dry_run/$EXPERIMENT_NAME${ALGO_TAG:+_$ALGO_TAG}.yaml}
CHECKPOINT_DIR=${CHECKPOINT_DIR:-$REPO_ROOT/checkpoints/$EXPERIMENT_NAME}
RESUME=${RESUME:-auto}
NNODES=${NNODES:-}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-}
GPU_MEMORY_GIB=${GPU_MEMORY_GIB:-}
GPU_ARCH=${GPU_ARCH:-}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-}
ROLLOUT_N=${ROLLOUT_N:-}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-}
LR=${LR:-}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-}
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-}
SAVE_FREQ=${SAVE_FREQ:-}
TEST_FREQ=${TEST_FREQ:-}
LOGGER=${LOGGER:-}
TENSORBOARD_DIR=${TENSORBOARD_DIR:-$CHECKPOINT_DIR/tensorboard}
PLUGIN_MODULE=rlec.verl_plugin


export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

# No GPU and no DRY_RUN: the local CPU profile (rlec.local.runner, docs/local_run.md). It composes
# megatron_configs/local.yaml (the cluster's recipe at toy scale), reads the variables of
# rlec.local.config.ENV_OVERRIDES (MODEL_PATH, STEPS / TOTAL_TRAINING_STEPS, RESUME, OUTPUT_DIR or
# CHECKPOINT_DIR, SAVE_FREQ, TP, EP, ETP, PP, ROLLOUT_N, TRAIN_BATCH_SIZE, MAX_RESPONSE_LENGTH, LR,
# SEED, DATA_DIR, TRAIN_FILES, VAL_FILES, EVAL_AT_END) and takes the same hydra overrides;
# NPROC > 1 runs it under torchrun (gloo).
if [[ "$DRY_RUN" != 1 && "$VERL_ON_CPU" != 1 ]] && ! has_cuda; then
  echo "run_megatron_rlec.sh: no CUDA GPU here, running the local CPU profile (rlec.local.runner, $NPROC process(es))" >&2
  for name in LAYOUT PRECISION TEST_FREQ NNODES NGPUS_PER_NODE GPU_MEMORY_GIB DIST_CKPT_PATH LOGGER; do
    if [[ -n "$(printenv "$name" || true)" ]]; then
      echo "run_megatron_rlec.sh: warning: $name applies to cluster runs only; the local profile ignores it" \
           "(its settings: python -m rlec.local.runner --help)" >&2
    fi
  done
  # OpenMP threads that sleep instead of spinning while they wait: on a few shared cores the
  # default active waiting made transformers generate 6x slower (docs/throughput.md).
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  if [[ "$NPROC" -gt 1 ]]; then
    exec "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" -m rlec.local.runner "$@"
  fi
  exec "$PYTHON" -m rlec.local.runner "$@"
fi

export VERL_USE_EXTERNAL_MODULES="$PLUGIN_MODULE${VERL_USE_EXTERNAL_MODULES:+,$VERL_USE_EXTERNAL_MODULES}"
export HYDRA_FULL_ERROR=1

# Overrides grouped by concern; empty variables leave the YAML value.
CONFIG_ARGS=(layout="$LAYOUT" precision="$PRECISION")
MODEL_ARGS=(actor_rollout_ref.model.path="$(abs_if_exists "$MODEL_PATH")")
if [[ -n "$DIST_CKPT_PATH" ]]; then
  MODEL_ARGS+=(actor_rollout_ref.actor.megatron.use_dist_checkpointing=true
               actor_rollout_ref.actor.megatron.dist_checkpointing_path="$(abs_if_exists "$DIST_CKPT_PATH")")
fi
DATA_ARGS=(data.train_files="$(abs_if_exists "$TRAIN_FILES")" data.val_files="$(abs_if_exists "$VAL_FILES")")
CLUSTER_ARGS=()
[[ -n "$NNODES" ]] && CLUSTER_ARGS+=(trainer.nnodes="$NNODES")
[[ -n "$NGPUS_PER_NODE" ]] && CLUSTER_ARGS+=(trainer.n_gpus_per_node="$NGPUS_PER_NODE")
[[ -n "$GPU_MEMORY_GIB" ]] && CLUSTER_ARGS+=(rlec.check.gpu_memory_gib="$GPU_MEMORY_GIB")
if [[ -z "$GPU_ARCH" && "$DRY_RUN" != 1 ]] && command -v nvidia-smi >/dev/null; then
  # e.g. "9.0" on H100 -> sm_90; the first GPU stands for the node
  GPU_ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)"
  [[ -n "$GPU_ARCH" ]] && GPU_ARCH="sm_$GPU_ARCH"
fi
[[ -n "$GPU_ARCH" ]] && CLUSTER_ARGS+=(rlec.check.gpu_arch="$GPU_ARCH")
ALGO_ARGS=()
[[ -n "$TRAIN_BATCH_SIZE" ]] && ALGO_ARGS+=(data.train_batch_size="$TRAIN_BATCH_SIZE")
[[ -n "$ROLLOUT_N" ]] && ALGO_ARGS+=(actor_rollout_ref.rollout.n="$ROLLOUT_N")
[[ -n "$MAX_PROMPT_LENGTH" ]] && ALGO_ARGS+=(data.max_prompt_length="$MAX_PROMPT_LENGTH")
[[ -n "$MAX_RESPONSE_LENGTH" ]] && ALGO_ARGS+=(data.max_response_length="$MAX_RESPONSE_LENGTH")
[[ -n "$LR" ]] && ALGO_ARGS+=(actor_rollout_ref.actor.optim.lr="$LR")
[[ -n "$TOTAL_EPOCHS" ]] && ALGO_ARGS+=(trainer.total_epochs="$TOTAL_EPOCHS")
[[ -n "$TOTAL_TRAINING_STEPS" ]] && ALGO_ARGS+=(trainer.total_training_steps="$TOTAL_TRAINING_STEPS")
TRAINER_ARGS=(trainer.experiment_name="$EXPERIMENT_NAME" trainer.default_local_dir="$(abspath "$CHECKPOINT_DIR")"
              trainer.resume_mode="$RESUME")
[[ -n "$SAVE_FREQ" ]] && TRAINER_ARGS+=(trainer.save_freq="$SAVE_FREQ")
[[ -n "$TEST_FREQ" ]] && TRAINER_ARGS+=(trainer.test_freq="$TEST_FREQ")
[[ -n "$LOGGER" ]] && TRAINER_ARGS+=(trainer.logger="$LOGGER")
# Every process of this launch (this shell, Ray's raylet and workers) carries the checkpoint folder: a rerun
# finds what a killed launch left behind and waits for it (rlec.cluster.resume.launch_processes).
export RLEC_RUN_FOLDER
RLEC_RUN_FOLDER="$(realpath -m "$CHECKPOINT_DIR")"
WAIT_ARGS=(--wait-previous "${RLEC_WAIT_PREVIOUS_S:-120}")  # a real launch waits for them; DRY_RUN reports at once
# Ray workers on other nodes inherit `ray start`'s environment, not this shell's: pass ours on.
RAY_ARGS=(++ray_kwargs.ray_init.runtime_env.env_vars.RLEC_RUN_FOLDER="$RLEC_RUN_FOLDER"
          ++ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES="$VERL_USE_EXTERNAL_MODULES"
          ++ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH="$PYTHONPATH"
          ++ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR="$(abspath "$TENSORBOARD_DIR")")
# the routers' replay log (rlec.verl_plugin.cpu router_replay_bshd: one JSON line per router call), for debugging
[[ -n "${RLEC_ROUTER_REPLAY_LOG:-}" ]] && RAY_ARGS+=(
  ++ray_kwargs.ray_init.runtime_env.env_vars.RLEC_ROUTER_REPLAY_LOG="$(abspath "$RLEC_ROUTER_REPLAY_LOG")")
CPU_ARGS=()
if [[ "$VERL_ON_CPU" == 1 ]]; then
  # physical cores (TransferQueue's own cap), at most its default of 8; nproc where lscpu cannot tell
  TQ_THREADS=$( (lscpu -p=Core,Socket 2>/dev/null || true) | grep -v '^#' | sort -u | wc -l)
  [[ "$TQ_THREADS" -ge 1 ]] 2>/dev/null || TQ_THREADS=$(nproc)
  (( TQ_THREADS > 8 )) && TQ_THREADS=8
  # Ray gives an actor without num_cpus OMP_NUM_THREADS=1; the phases of a sync step run one at a time, so
  # the trainer worker and the rollout server each use every core, as the local run does
  RAY_ARGS+=(++ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM=cpu
             ++ray_kwargs.ray_init.runtime_env.env_vars.OMP_WAIT_POLICY="$OMP_WAIT_POLICY"
             ++ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS="'${OMP_NUM_THREADS:-$(nproc)}'"  # quoted: Ray wants a string
             # TransferQueue's threads (8 by default) capped at the physical cores, as TransferQueue itself caps them, without
             # its warning per call, which Ray forwards to the console after the run (issue 31 item 2: quiet logs)
             ++ray_kwargs.ray_init.runtime_env.env_vars.TQ_NUM_THREADS="'${TQ_NUM_THREADS:-$TQ_THREADS}'")
  # NPROC Megatron worker processes (one logical GPU each; gloo), split by TP / EP / ETP / PP; the early rules and
  # DRY_RUN's refuse bad values (not integers, TP x PP not dividing NPROC, EP not dividing the experts, ...) before
  # Ray starts. The rollout: one rlec_hf replica over all of them (rollout DP = NPROC); Ray's logical CPUs: 3 per worker
  # bundle + TransferQueue (2) + actor creation and headroom (3), 8 at NPROC=1 as layout/cpu.yaml declares
  CPU_ARGS+=(trainer.n_gpus_per_node="${NPROC:-1}" ray_kwargs.ray_init.num_gpus="${NPROC:-1}"
             actor_rollout_ref.rollout.data_parallel_size="${NPROC:-1}")
  [[ "${NPROC:-1}" =~ ^[1-9][0-9]{0,2}$ ]] && CPU_ARGS+=(ray_kwargs.ray_init.num_cpus=$((5 + 3 * ${NPROC:-1})))
  for SIZE in tensor_model:TP expert_model:EP expert_tensor:ETP pipeline_model:PP; do
    SIZE_VAR=${SIZE#*:}
    [[ -z "${!SIZE_VAR:-}" ]] && continue
    CPU_ARGS+=("actor_rollout_ref.actor.megatron.${SIZE%%:*}_parallel_size=${!SIZE_VAR}"
               "actor_rollout_ref.ref.megatron.${SIZE%%:*}_parallel_size=${!SIZE_VAR}")
  done
  # Megatron needs sequence parallel with TP > 1 and MoE layers (rlec's rules refuse it off)
  [[ -n "${TP:-}" && "${TP:-}" != 1 ]] && CPU_ARGS+=(actor_rollout_ref.actor.megatron.sequence_parallel=true
                                                    actor_rollout_ref.ref.megatron.sequence_parallel=true)
  if [[ -n "${ENVIRONMENTS:-}" ]]; then  # RLVE on these environments only, as in the local run
    CPU_ARGS+=(algorithm=rlve "rlec.rlve.environments=[${ENVIRONMENTS}]")
  fi
  # the tiny model and the sample data, built once (what the local run builds on first use)
  # the tiny random model is never right: a quarter of each group answers by script (rlec.cpu, as the local run)
  [[ "$MODEL_PATH" == "$DEFAULT_MODEL" ]] && CPU_ARGS+=(rlec.cpu.scripted_fraction=0.25)
  BUILD_MODEL=0
  [[ "$MODEL_PATH" == "$DEFAULT_MODEL" && ! -f "$MODEL_PATH/config.json" ]] && BUILD_MODEL=1
  if [[ "$BUILD_MODEL" == 1 || ! -f "$TRAIN_FILES" || ! -f "$VAL_FILES" ]]; then
    # every check but the paths (the model and data are built next), so a refused setting writes nothing
    PRE_RC=0
    PRE_VERDICT=$("$PYTHON" -m rlec.cluster.config_check --skip-path-checks "${WAIT_ARGS[@]}" "${CONFIG_ARGS[@]}" "${MODEL_ARGS[@]}" \
      "${DATA_ARGS[@]}" "${CLUSTER_ARGS[@]}" "${ALGO_ARGS[@]}" "${TRAINER_ARGS[@]}" "${RAY_ARGS[@]}" "${CPU_ARGS[@]}" \
      "$@" 2>&1) || PRE_RC=$?
    if [[ "$PRE_RC" != 0 ]]; then
      echo "$PRE_VERDICT" >&2
      echo "run_megatron_rlec.sh: refused before building the model and data: nothing written to $OUTPUT_DIR" >&2
      exit "$PRE_RC"
    fi
  fi
  if [[ "$BUILD_MODEL" == 1 ]]; then
    echo "run_megatron_rlec.sh: building the tiny Qwen3-MoE in $MODEL_PATH" >&2
    HF_HUB_DISABLE_PROGRESS_BARS=1 \
      "$PYTHON" -c "import sys; from rlec.models import build_tiny_model; build_tiny_model(sys.argv[1])" "$MODEL_PATH" >/dev/null
  fi
  if [[ ! -f "$TRAIN_FILES" || ! -f "$VAL_FILES" ]]; then
    echo "run_megatron_rlec.sh: preparing the sample data in $DATA_DIR" >&2
    DATA_DIR="$DATA_DIR" "$PYTHON" -m rlec.data.prepare >/dev/null
  fi
  DATA_ARGS=(data.train_files="$(abs_if_exists "$TRAIN_FILES")" data.val_files="$(abs_if_exists "$VAL_FILES")")
fi
OVERRIDES=("${CONFIG_ARGS[@]}" "${MODEL_ARGS[@]}" "${DATA_ARGS[@]}" "${CLUSTER_ARGS[@]}" "${ALGO_ARGS[@]}"
           "${TRAINER_ARGS[@]}" "${RAY_ARGS[@]}" "${CPU_ARGS[@]}")

CHECK_ARGS=()
[[ "$SKIP_PATH_CHECKS" == 1 ]] && CHECK_ARGS+=(--skip-path-checks)
[[ "$PRINT_CONFIG" == 1 ]] && CHECK_ARGS+=(--print)

if [[ "$DRY_RUN" == 1 ]]; then
  exec "$PYTHON" -m rlec.cluster.config_check --output "$(abspath "$DRY_RUN_CONFIG")" "${CHECK_ARGS[@]}" "${OVERRIDES[@]}" "$@"
fi

# Refuse an impossible layout or a missing path before anything starts; keep the resolved config,
# the commit and the command beside the checkpoints (one folder per launch, so resumed runs keep
# their history). The check writes config.yaml, creating the folder, only when it passes, and then
# records the layout beside the checkpoints (rlec_layout.json): a later launch under another layout
# is refused with both named (rlec.cluster.resume).
RUN_DIR="$(abspath "$CHECKPOINT_DIR")/launches/$(date -u +%Y%m%dT%H%M%SZ)"
"$PYTHON" -m rlec.cluster.config_check --output "$RUN_DIR/config.yaml" --record-layout "${WAIT_ARGS[@]}" "${CHECK_ARGS[@]}" \
  "${OVERRIDES[@]}" "$@"
{
  echo "commit: $(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $([[ -n "$(git -C "$REPO_ROOT" status --porcelain 2>/dev/null)" ]] && echo yes || echo no)"
  printf 'command:'; printf ' %q' "$0" "$@"; echo
} > "$RUN_DIR/git.txt"
echo "run_megatron_rlec.sh: config, commit and log in $RUN_DIR; checkpoints in $CHECKPOINT_DIR" >&2
ENTRY=rlec.cluster.main_ppo
if [[ "$VERL_ON_CPU" == 1 ]]; then
  # the same main_ppo inside rlec.verl_report: progress, step table, curves, hf_final and the final evaluation;
  # third-party output to verl.log
  ENTRY=rlec.verl_report
  export RLEC_VERL_LOG="$RUN_DIR/verl.log"
fi
"$PYTHON" -m "$ENTRY" --config-path "$REPO_ROOT/megatron_configs" --config-name rlec \
  "${OVERRIDES[@]}" "$@" 2>&1 | tee -a "$RUN_DIR/train.log"
