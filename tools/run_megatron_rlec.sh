#!/usr/bin/env bash
# Train RLEC with verl 0.9.1's Megatron backend (megatron_configs/rlec.yaml), or check the config.
#
#   MODEL_PATH=/models/Qwen3-30B-A3B NNODES=4 NGPUS_PER_NODE=8 bash tools/run_megatron_rlec.sh [hydra overrides...]
#   DRY_RUN=1 LAYOUT=qwen3_30b_a3b_1x8 PRECISION=fp8 bash tools/run_megatron_rlec.sh   # validate, start nothing
#
# Run it on the Ray head node of a running cluster (docs/cluster.md), or on one GPU node (it
# starts a local Ray). Without a CUDA GPU it runs the same verl trainer on CPU (`make run`: layout=cpu).
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
#                        TRAINER=verl without a GPU: TASK's model, built in OUTPUT_DIR/warm_start or OUTPUT_DIR/tiny_model]
#   TASK                 without a GPU, what the default model and data are: addition (the demo's warm start upcycled to
#                        Qwen3-MoE with the compact tokenizer, RLEC on additions with rlec.demo.quick's settings, 30 steps,
#                        the demo's goal checked at the end; data in DATA_DIR [data/addition]) or sample (the tiny random
#                        Qwen3-MoE on the DAPO + HotpotQA samples, data in DATA_DIR [data/processed])       [addition]
#   DIST_CKPT_PATH       optional Megatron dist checkpoint (tools/convert_hf_to_mcore.py) to load instead
#   TRAIN_FILES VAL_FILES  parquet files from rlec's data preparation   [data/processed/{train,test}.parquet]
#   CHECKPOINT_DIR       checkpoints, launch records, TensorBoard logs    [checkpoints/<EXPERIMENT_NAME>]
#   EXPERIMENT_NAME      [rlec_<LAYOUT>_<PRECISION>]
#   RESUME               verl's resume_mode: auto|disable|resume_path, or on/off spellings (1/true/yes/on = auto,
#                        0/false/no/off = disable)                                                    [auto]
#   GPU_ARCH             compute capability of the GPUs (sm_90: H100/H200; sm_100: B200), checked by rlec's rules
#                        (Blackwell + MoE is refused: verl#7978)   [from nvidia-smi at launch; sm_90 for DRY_RUN]
#   NNODES NGPUS_PER_NODE GPU_MEMORY_GIB TRAIN_BATCH_SIZE ROLLOUT_N MAX_PROMPT_LENGTH
#   MAX_RESPONSE_LENGTH LR TOTAL_EPOCHS TOTAL_TRAINING_STEPS SAVE_FREQ TEST_FREQ LOGGER
#   NPROC                without a GPU: verl's Megatron worker processes over gloo (trainer.n_gpus_per_node =
#                        ray_init.num_gpus = NPROC logical GPUs; one rlec_hf rollout replica over them, rollout
#                        data_parallel_size = NPROC) [1]
#   TP EP ETP PP         without a GPU: actor_rollout_ref.{actor,ref}.megatron.{tensor_model,expert_model,
#                        expert_tensor,pipeline_model}_parallel_size; TP > 1 also turns on sequence_parallel (Megatron needs
#                        it with MoE). Values that are not integers >= 1, TP x PP not dividing NPROC, EP or ETP not dividing
#                        the model are refused before Ray starts, naming key, value and rule [layout/cpu.yaml: 1]
#   TRAINER              verl, the only trainer (the local loop, TRAINER=local, retired with issue 31). Without a GPU
#                        it runs verl's own trainer on CPU (`make run`: layout=cpu, precision=fp32, the rlec_hf rollout,
#                        TASK's model and data; STEPS, OUTPUT_DIR [outputs/verl_run], ENVIRONMENTS, RESUME,
#                        EVAL_AT_END; progress, step table, curves, OUTPUT_DIR/hf_final and the final evaluation:
#                        rlec.verl_report; docs/local_run.md). With DRY_RUN=1 only an explicit TRAINER=verl selects
#                        the CPU layout (otherwise DRY_RUN checks the cluster's)                                  [verl]
#   RLEC_WAIT_PREVIOUS_S seconds a launch waits for the processes a killed launch into the same CHECKPOINT_DIR left
#                        behind (Ray's trainer and workers) to end before refusing, naming them [120]
#   RAY_ADDRESS          without a GPU: connect verl's driver to this running Ray cluster (one an experiment starts
#                        for all its launches: rlec.cluster.ray_cluster) instead of starting one; unset: a cluster of
#                        the launch's own, stopped at its end                                         [unset]
#   RLEC_VERBOSE=1       keep third-party output on the console (otherwise in OUTPUT_DIR/launches/<time>/verl.log) [0]
#   PYTHON               interpreter [python3]
#
# Every setting of a run with its value (verl's keys and rlec's, after the layout, precision and overlays):
#   DRY_RUN=1 PRINT_CONFIG=1 SKIP_PATH_CHECKS=1 [TRAINER=verl] bash tools/run_megatron_rlec.sh [overrides...]
set -euo pipefail

# -h / --help: this header, before anything is built or started
for arg in "$@"; do
  if [[ "$arg" == -h || "$arg" == --help ]]; then
    sed -n '2,/^set -euo pipefail$/p' "${BASH_SOURCE[0]}" | sed '$d' | sed -E 's/^# ?//'
    exit 0
  fi
done

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
# RESUME: verl's resume_mode (auto|disable|resume_path) or a boolean spelling (on = auto, off = disable)
FLAGS=$(PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m rlec.flags DRY_RUN SKIP_PATH_CHECKS PRINT_CONFIG \
  --resume RESUME) || exit 2
eval "$FLAGS"
TRAINER_SET=${TRAINER:+1}
TRAINER=${TRAINER:-verl}
# torch's answer costs a 4 s import; a machine without an NVIDIA (or ROCm, or WSL) device node has no CUDA to find
# (RLEC_PROBE_CUDA=1 asks torch regardless: the launcher's tests stand in for a CUDA machine that way)
has_cuda() {
  [[ "${RLEC_PROBE_CUDA:-0}" == 1 ]] || compgen -G '/dev/nvidia[0-9]*' >/dev/null || [[ -e /dev/kfd || -e /dev/dxg ]] || return 1
  "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
}
case "$TRAINER" in
  verl) ;;
  local) echo "run_megatron_rlec.sh: TRAINER=local: the local loop is retired; verl's trainer is the one loop on CPU too" \
              "(unset TRAINER; docs/local_run.md)" >&2; exit 2 ;;
  *) echo "run_megatron_rlec.sh: TRAINER=$TRAINER: expected verl (the one trainer)" >&2; exit 2 ;;
esac
VERL_ON_CPU=0
# a DRY_RUN checks the cluster's layout unless TRAINER=verl is asked for by name
if [[ "$TRAINER" == verl && ( "$DRY_RUN" != 1 || -n "$TRAINER_SET" ) ]] && ! has_cuda; then
  # verl's own trainer on this machine: the CPU layout, fp32, the tiny model and sample data by default
  VERL_ON_CPU=1
  # the retired local loop's own variable names (it ran on CPU): refused with the name that does it now, never
  # silently ignored (not checked on GPU machines, where such generic names mean nothing to rlec)
  for pair in SEED:data.seed=N SAVE_EVERY:SAVE_FREQ PROMPTS_PER_STEP:TRAIN_BATCH_SIZE MAX_NEW_TOKENS:MAX_RESPONSE_LENGTH; do
    if [[ -n "$(printenv "${pair%%:*}" || true)" ]]; then
      echo "run_megatron_rlec.sh: ${pair%%:*} is not read (a name of the retired local loop): use ${pair#*:}" >&2; exit 2
    fi
  done
  # the report's on/off variables (rlec.verl_report): a bad spelling exits 2 before anything starts
  PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m rlec.flags EVAL_AT_END RLEC_VERBOSE >/dev/null || exit 2
  export VERL_PLATFORM=cpu OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  # Transformer Engine's attention selectors mean nothing here, and Megatron refuses local attention with them set
  unset NVTE_FLASH_ATTN NVTE_FUSED_ATTN NVTE_UNFUSED_ATTN
  OUTPUT_DIR=${OUTPUT_DIR:-${CHECKPOINT_DIR:-outputs/verl_run}}
  CHECKPOINT_DIR=$OUTPUT_DIR
  LAYOUT=${LAYOUT:-cpu}
  PRECISION=${PRECISION:-fp32}
  # what make run trains: addition (the demo's warm start, upcycled to Qwen3-MoE, RLEC on additions: rlec.demo.quick)
  # or sample (the tiny random Qwen3-MoE with Qwen3's tokenizer on the DAPO + HotpotQA sample data)
  TASK=${TASK:-addition}
  case "$TASK" in
    addition) DATA_DIR=${DATA_DIR:-data/addition} ;;
    sample) DATA_DIR=${DATA_DIR:-data/processed} ;;
    *) echo "run_megatron_rlec.sh: TASK=$TASK: expected addition (the default) or sample" >&2; exit 2 ;;
  esac
  TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-${STEPS:-}}
  TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
  VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
  EXPERIMENT_NAME=${EXPERIMENT_NAME:-verl_cpu}
fi
LAYOUT=${LAYOUT:-qwen3_30b_a3b_4x8}
PRECISION=${PRECISION:-bf16}
case "$LAYOUT" in tiny*) DEFAULT_MODEL=$REPO_ROOT/models/tiny_qwen3_moe ;; *) DEFAULT_MODEL=$REPO_ROOT/models/Qwen3-30B-A3B ;; esac
# verl on CPU: the task's model built beside the run's outputs (the upcycled warm start, or the tiny random model)
if [[ "$VERL_ON_CPU" == 1 ]]; then
  DEFAULT_MODEL=$(abspath "$OUTPUT_DIR")/tiny_model
  [[ "$TASK" == addition ]] && DEFAULT_MODEL=$(abspath "$OUTPUT_DIR")/warm_start
fi
MODEL_PATH=${MODEL_PATH:-$DEFAULT_MODEL}
DIST_CKPT_PATH=${DIST_CKPT_PATH:-}
TRAIN_FILES=${TRAIN_FILES:-$REPO_ROOT/data/processed/train.parquet}
VAL_FILES=${VAL_FILES:-$REPO_ROOT/data/processed/test.parquet}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-rlec_${LAYOUT}_${PRECISION}}
# the overlays on the command line name the resolved file, so a DRY_RUN with algorithm=[e3,passk] keeps the plain one
ALGO_TAG=$(printf '%s\n' "$@" | sed -n 's/^algorithm=//p' | tr -d '[] ' | tr ',' '_' | tail -n 1)
DRY_RUN_CONFIG=${DRY_RUN_CONFIG:-$REPO_ROOT/outputs/dry_run/$EXPERIMENT_NAME${ALGO_TAG:+_$ALGO_TAG}.yaml}
CHECKPOINT_DIR=${CHECKPOINT_DIR:-$REPO_ROOT/checkpoints/$EXPERIMENT_NAME}
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
# rlec's plugin; verl on CPU: the CPU wing first (verl's platform cpu, its engine, shims and rollout: rlec/cpu/,
# docs/cpu.md), as layout/cpu.yaml names it; a GPU launch never imports it
case "$VERL_ON_CPU" in 1) PLUGIN_MODULE=rlec.cpu,rlec.verl_plugin ;; *) PLUGIN_MODULE=rlec.verl_plugin ;; esac


export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

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
# finds what a killed launch left behind and waits for it (rlec.rules.resume.launch_processes).
export RLEC_RUN_FOLDER
RLEC_RUN_FOLDER="$(realpath -m "$CHECKPOINT_DIR")"
WAIT_ARGS=(--wait-previous "${RLEC_WAIT_PREVIOUS_S:-120}")  # a real launch waits for them; DRY_RUN reports at once
# Ray workers on other nodes inherit `ray start`'s environment, not this shell's: pass ours on.
RAY_ARGS=(++ray_kwargs.ray_init.runtime_env.env_vars.RLEC_RUN_FOLDER="$RLEC_RUN_FOLDER"
          ++ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES="'$VERL_USE_EXTERNAL_MODULES'"  # quoted: a list has commas
          ++ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH="$PYTHONPATH"
          ++ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR="$(abspath "$TENSORBOARD_DIR")")
# the routers' replay log (rlec.cpu.padded_forward router_replay_bshd: one JSON line per router call), for debugging
[[ -n "${RLEC_ROUTER_REPLAY_LOG:-}" ]] && RAY_ARGS+=(
  ++ray_kwargs.ray_init.runtime_env.env_vars.RLEC_ROUTER_REPLAY_LOG="$(abspath "$RLEC_ROUTER_REPLAY_LOG")")
CPU_ARGS=()
if [[ "$VERL_ON_CPU" == 1 ]]; then
  # physical cores (TransferQueue's own cap), at most its default of 8; nproc where lscpu cannot tell
  TQ_THREADS=$( (lscpu -p=Core,Socket 2>/dev/null || true) | grep -v '^#' | sort -u | wc -l)
  [[ "$TQ_THREADS" -ge 1 ]] 2>/dev/null || TQ_THREADS=$(nproc)
  (( TQ_THREADS > 8 )) && TQ_THREADS=8
  # Ray gives an actor without num_cpus OMP_NUM_THREADS=1; the phases of a sync step run one at a time, so
  # the trainer worker and the rollout server each use every core
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
  # (rlec.cluster.ray_cluster.cpu_launch_resources has the same rule for a cluster shared by several launches)
  CPU_ARGS+=(trainer.n_gpus_per_node="${NPROC:-1}" actor_rollout_ref.rollout.data_parallel_size="${NPROC:-1}")
  if [[ -n "${RAY_ADDRESS:-}" ]]; then
    # an existing cluster (an experiment's, rlec.cluster.ray_cluster): verl's ray.init connects to it, and Ray refuses
    # num_cpus / num_gpus when connecting; the cluster declared them when it started
    CPU_ARGS+=(ray_kwargs.ray_init.num_cpus=null ray_kwargs.ray_init.num_gpus=null)
  else
    CPU_ARGS+=(ray_kwargs.ray_init.num_gpus="${NPROC:-1}")
    [[ "${NPROC:-1}" =~ ^[1-9][0-9]{0,2}$ ]] && CPU_ARGS+=(ray_kwargs.ray_init.num_cpus=$((5 + 3 * ${NPROC:-1})))
  fi
  for SIZE in tensor_model:TP expert_model:EP expert_tensor:ETP pipeline_model:PP; do
    SIZE_VAR=${SIZE#*:}
    [[ -z "${!SIZE_VAR:-}" ]] && continue
    CPU_ARGS+=("actor_rollout_ref.actor.megatron.${SIZE%%:*}_parallel_size=${!SIZE_VAR}"
               "actor_rollout_ref.ref.megatron.${SIZE%%:*}_parallel_size=${!SIZE_VAR}")
  done
  # Megatron needs sequence parallel with TP > 1 and MoE layers (rlec's rules refuse it off)
  [[ -n "${TP:-}" && "${TP:-}" != 1 ]] && CPU_ARGS+=(actor_rollout_ref.actor.megatron.sequence_parallel=true
                                                    actor_rollout_ref.ref.megatron.sequence_parallel=true)
  if [[ -n "${ENVIRONMENTS:-}" ]]; then  # RLVE on these environments only
    ENV_LIST=$(printf '%s' "$ENVIRONMENTS" | tr ',' '\n' | sed 's/^ *//; s/ *$//' | grep -v '^$' | paste -sd, - || true)
    if [[ -z "$ENV_LIST" ]]; then
      echo "run_megatron_rlec.sh: ENVIRONMENTS='$ENVIRONMENTS' names no environment: list them (maze,sorting) or all" >&2
      exit 2
    fi
    CPU_ARGS+=(algorithm=rlve "rlec.rlve.environments=[${ENV_LIST}]")
  fi
  # the task's model and data, built once
  # the tiny random model is never right: a quarter of each group answers by script (rlec.cpu.scripted_fraction)
  [[ "$TASK" == sample && "$MODEL_PATH" == "$DEFAULT_MODEL" ]] && CPU_ARGS+=(rlec.cpu.scripted_fraction=0.25)
  # the addition task's own warm start trains with its RLEC settings (rlec.demo.quick: steps, batch, learning rate, the
  # goal check), placed before the variables' (STEPS, LR, ...) and the command line's, which win; any MODEL_PATH: the
  # layout's settings
  if [[ "$TASK" == addition && "$MODEL_PATH" == "$DEFAULT_MODEL" ]]; then
    TASK_OUT=$("$PYTHON" -m rlec.demo.quick --overrides) || exit 2
    mapfile -t TASK_ARGS <<< "$TASK_OUT"
    CONFIG_ARGS+=("${TASK_ARGS[@]}")
  fi
  BUILD_MODEL=0
  [[ "$MODEL_PATH" == "$DEFAULT_MODEL" && ! -f "$MODEL_PATH/config.json" ]] && BUILD_MODEL=1
  if [[ "$BUILD_MODEL" == 1 || ! -f "$TRAIN_FILES" || ! -f "$VAL_FILES" ]]; then
    # every check but the paths (the model and data are built next; the output folder they go in is checked), so a
    # refused setting writes nothing
    PRE_RC=0
    PRE_VERDICT=$("$PYTHON" -m rlec.cluster.config_check --skip-path-checks --check-checkpoint-folder "${WAIT_ARGS[@]}" "${CONFIG_ARGS[@]}" "${MODEL_ARGS[@]}" \
      "${DATA_ARGS[@]}" "${CLUSTER_ARGS[@]}" "${ALGO_ARGS[@]}" "${TRAINER_ARGS[@]}" "${RAY_ARGS[@]}" "${CPU_ARGS[@]}" \
      "$@" 2>&1) || PRE_RC=$?
    if [[ "$PRE_RC" != 0 ]]; then
      echo "$PRE_VERDICT" >&2
      echo "run_megatron_rlec.sh: refused before building the model and data: nothing written to $OUTPUT_DIR" >&2
      exit "$PRE_RC"
    fi
  fi
  if [[ "$TASK" == addition ]]; then
    if [[ "$BUILD_MODEL" == 1 || ! -f "$TRAIN_FILES" || ! -f "$VAL_FILES" ]]; then
      echo "run_megatron_rlec.sh: building the warm start (shipped weights, upcycled to Qwen3-MoE) in $MODEL_PATH" \
           "and the addition data in $DATA_DIR" >&2
      QUICK_ARGS=()
      [[ "$BUILD_MODEL" == 1 ]] && QUICK_ARGS+=(--model "$MODEL_PATH")
      [[ ! -f "$TRAIN_FILES" || ! -f "$VAL_FILES" ]] && QUICK_ARGS+=(--data "$DATA_DIR")
      HF_HUB_DISABLE_PROGRESS_BARS=1 "$PYTHON" -m rlec.demo.quick "${QUICK_ARGS[@]}" >/dev/null
    fi
  else
    if [[ "$BUILD_MODEL" == 1 ]]; then
      echo "run_megatron_rlec.sh: building the tiny Qwen3-MoE in $MODEL_PATH" >&2
      HF_HUB_DISABLE_PROGRESS_BARS=1 \
        "$PYTHON" -c "import sys; from rlec.models import build_tiny_model; build_tiny_model(sys.argv[1])" "$MODEL_PATH" >/dev/null
    fi
    if [[ ! -f "$TRAIN_FILES" || ! -f "$VAL_FILES" ]]; then
      echo "run_megatron_rlec.sh: preparing the sample data in $DATA_DIR" >&2
      DATA_DIR="$DATA_DIR" "$PYTHON" -m rlec.data.prepare >/dev/null
    fi
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
# is refused with both named (rlec.rules.resume).
RUN_DIR="$(abspath "$CHECKPOINT_DIR")/launches/$(date -u +%Y%m%dT%H%M%SZ)"
RECORD="commit: $(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
dirty: $([[ -n "$(git -C "$REPO_ROOT" status --porcelain 2>/dev/null)" ]] && echo yes || echo no)
command:$(printf ' %q' "$0" "$@")"
ENTRY=rlec.cluster.main_ppo
if [[ "$VERL_ON_CPU" == 1 ]]; then
  # the same main_ppo inside rlec.verl_report: progress, step table, curves, hf_final and the final evaluation;
  # third-party output to verl.log
  ENTRY=rlec.verl_report
  export RLEC_VERL_LOG="$RUN_DIR/verl.log"
fi
# One process: the checks (rlec.cluster.config_check, exit 2 refused / 1 failed, nothing written), then the launch's
# folder (config.yaml, git.txt, and train.log: a copy of the console, tee -a, which keeps the console going when its
# file fails on a full disk), then verl's trainer; the exit status is the trainer's (rlec.cluster.main_ppo.launch_check)
"$PYTHON" -m "$ENTRY" --launch-check --launch-dir "$RUN_DIR" --launch-record "$RECORD" \
  --launch-note "run_megatron_rlec.sh: config, commit and log in $RUN_DIR; checkpoints in $CHECKPOINT_DIR" --record-layout "${WAIT_ARGS[@]}" \
  "${CHECK_ARGS[@]}" -- --config-path "$REPO_ROOT/megatron_configs" --config-name rlec "${OVERRIDES[@]}" "$@"
