#!/usr/bin/env bash
# The QLoRA half of the GPU path on one CUDA GPU (`make qlora-check`); benchmarks/gpu_all.sh runs these steps
# with small sizes beside the CBM ones in one ~6-minute call. Each step is a function below:
#   vlm_finetune_tests  the fine-tuning tests (tiny VLM built from a config; they run the cbm-finetune script);
#   vlm_tiny + vlm_qlora_finetune   cbm-finetune finetune=qlora end to end on the robot counterfactual set (4-bit
#                       NF4, bf16 compute): evaluation before, training, evaluation after, table, heatmaps, adapter;
#   vlm_zoo_repair Q    cbm-vlm-zoo repair.quant=Q on a small zoo: the counterfactual fine-tuning of the shortcut
#                       member (Q=4bit: QLoRA; none: LoRA in full precision), cue reliance before/after, McNemar;
#                       the zoo's models come from ZOO_MODELS when carried (benchmarks/gpu_zoo.sh: `make gpu-zoo`);
#   vlm_throughput      benchmarks/qlora_gpu.py: tokens/s and peak memory, 4-bit and bf16 LoRA side by side.
# Then one table (benchmarks/gpu_summary.py); the exit status is non-zero if any step failed.
#
# Environment: the GPU machine's Python (torch, transformers, peft). The first second lists any missing runtime
# dependency (benchmarks/deps_check.py qlora); missing ones are installed from .whl/ (`make gpu-wheels` builds
# hydra-core, omegaconf, antlr4, highspy and bitsandbytes there), and the checkout into .gpu_venv
# (benchmarks/gpu_env.py: the tests run `cbm-finetune` from beside the interpreter). QLORA_CHECK_DIR (not OUT:
# the GPU machine's $OUT is its own) holds the runs; GPU_DRY_RUN=1 only checks every command line.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
# shellcheck source=benchmarks/gpu_lib.sh
source benchmarks/gpu_lib.sh

QLORA_CHECK_DIR=${QLORA_CHECK_DIR:-sweeps/qlora_check}
FINETUNE=(data.n=24 train.epochs=3)
# The zoo: what its models' stamps hold (members, data, model, training; benchmarks/gpu_zoo.sh trains the same
# models on any machine, to carry as ZOO_MODELS) and what the run adds (EDCT items, repair pairs).
ZOO_MODELS_CFG=("members={faithful: 0, shortcut: 1}" data.n_train=4000 data.n_test=200)
ZOO=("${ZOO_MODELS_CFG[@]}" edct_items=100 repair.pairs=1000)
# A folder of trained zoo models (base + members) to start from; a member whose stamp differs is retrained.
ZOO_MODELS=${ZOO_MODELS:-sweeps/gpu_zoo/models}
THROUGHPUT=(--sizes "tiny,1b" --quant "4bit,none" --batch-size "4,32")

vlm_finetune_tests() {
  step finetune-tests 600 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" -n "${TEST_WORKERS:-4}" tests/vlm/test_finetune.py
}

vlm_tiny() {
  step tiny-model 120 "$PY" -m cbm.vlm.tiny "$WORK/tiny"
}

vlm_qlora_finetune() {
  step qlora-finetune 300 "$BIN/cbm-finetune" finetune=qlora model.path="$WORK/tiny" data.cache_dir="$WORK/cache" \
    logger.wandb.enabled=false hydra.run.dir="$WORK/finetune" "${FINETUNE[@]}"
}

vlm_zoo_repair() {  # vlm_zoo_repair 4bit|none: the same zoo, trained once (carried in ZOO_MODELS, or by the first run)
  local q=$1 from=$ZOO_MODELS
  [ -d "$WORK/zoo_4bit/models" ] && from=$WORK/zoo_4bit/models
  if [ -d "$from" ] && [ ! -d "$WORK/zoo_$q/models" ]; then
    mkdir -p "$WORK/zoo_$q" && cp -r "$from" "$WORK/zoo_$q/models"
  fi
  step "zoo-$q" 600 "$BIN/cbm-vlm-zoo" "${ZOO[@]}" repair.quant="$q" repair.device=cuda logger.wandb.enabled=false \
    output_dir="$WORK/zoo_$q"
}

vlm_throughput() {
  step throughput 600 "$PY" benchmarks/qlora_gpu.py "${THROUGHPUT[@]}" --json "$WORK/throughput.json"
}

qlora_check_main() {
  [ "${1:-}" = --dry-run ] && export GPU_DRY_RUN=1
  gpu_env qlora || exit 2
  check_setup "$QLORA_CHECK_DIR"
  local start=$SECONDS
  vlm_finetune_tests
  vlm_tiny
  vlm_qlora_finetune
  vlm_zoo_repair 4bit
  vlm_zoo_repair none
  vlm_throughput
  "$PY" benchmarks/gpu_summary.py --steps "$STEPS_TSV" --work "$WORK" --logs "$STEP_LOGS" --seconds "$((SECONDS - start))"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  qlora_check_main "$@"
fi
