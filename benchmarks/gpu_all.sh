#!/usr/bin/env bash
# Everything that needs a GPU, in one call of at most 6 minutes on one H200 (`make gpu-all`), with small
# explicit sizes: the steps of benchmarks/gpu_check.sh (CBM) and benchmarks/qlora_gpu_check.sh (QLoRA),
# reused, not copied. Two lanes run side by side (the GPU and 16 cores have room), then the two timed steps
# run alone:
#   lane CBM   CUDA tests (test_cuda.py + test_device_paths.py) -> every architecture on robot data, seed 0
#              (trainer=gpu) -> cbm-intervene device=cuda with the learned policies (robot IntCEM) -> every
#              architecture on Sudoku 50 px (small split, 4 epochs) -> cbm-automate device=cuda;
#   lane QLoRA the tiny VLM -> cbm-finetune finetune=qlora (4-bit) -> cbm-vlm-zoo repair.quant=4bit (a small zoo:
#              the shortcut member repaired by QLoRA, cue reliance before -> after; its models carried in
#              ZOO_MODELS, default sweeps/gpu_zoo/models from `make gpu-zoo`: trained there they would not fit);
#   alone      the default robot run (its time: target <= 10 s) -> benchmarks/qlora_gpu.py (tokens/s and peak
#              memory, tiny and 1b, 4-bit and bf16 LoRA).
# Every step has a time limit and none runs past the budget (BUDGET_S, 345 s; --quick: 170 s): a step that
# would is cut (TIMEOUT) or skipped (SKIPPED), and the table says so.
#
#   bash benchmarks/gpu_all.sh             # the whole GPU path, <= 6 min
#   bash benchmarks/gpu_all.sh --quick     # ~3 min: CUDA tests, robot sweep, learned-policy interventions,
#                                          # the QLoRA fine-tune, the solo run, the 1b's throughput
#   bash benchmarks/gpu_all.sh --dry-run   # any machine, ~1 min: every command line checked, nothing trained
#
# Output: GPU_LOGS (default sweeps/gpu_all_logs; on the lent GPU machine pass GPU_LOGS=$OUT/gpu: that
# machine's $OUT is its own, and only 8 files come back) gets summary.md, summary.json, console.log and
# steps.tar.gz (every step's log and result files); the runs, caches and models stay in GPU_WORK
# (default sweeps/gpu_all). Carry and run: docs/guides/gpus.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
QUICK=0
for arg in "$@"; do
  case $arg in
    --quick) QUICK=1 ;;
    --dry-run) export GPU_DRY_RUN=1 ;;
    *) echo "gpu_all: unknown argument '$arg' (--quick, --dry-run)" >&2; exit 2 ;;
  esac
done
# shellcheck source=benchmarks/gpu_check.sh
source benchmarks/gpu_check.sh
# shellcheck source=benchmarks/qlora_gpu_check.sh
source benchmarks/qlora_gpu_check.sh

GPU_WORK=${GPU_WORK:-sweeps/gpu_all}
GPU_LOGS=${GPU_LOGS:-sweeps/gpu_all_logs}
STEP_LOGS=$GPU_WORK/steps
BUDGET_S=${BUDGET_S:-$([ "$QUICK" = 1 ] && echo 170 || echo 345)}
# Small explicit sizes (the steps' own defaults are the long checks').
SEEDS=0
REPEAT=0
JOBS=${JOBS:-9}
TEST_WORKERS=${TEST_WORKERS:-6}
CUDA_TESTS=(tests/models/test_cuda.py tests/models/test_device_paths.py)
SUDOKU_ARCHS=blackbox,cbm,cem,probcbm,ecbm,hybrid_cbm,scbm,intcem,dcr
SUDOKU_JOBS=9
SUDOKU_OVERRIDES=(data.n_train=1000 data.n_val=200 data.n_calib=500 data.n_test=500 trainer.max_epochs=4)
FINETUNE=(data.n=16 train.epochs=2 eval.heatmaps=2)
ZOO=("${ZOO_MODELS_CFG[@]}" edct_items=40 repair.pairs=200 bootstrap=200 train.threads=4)
THROUGHPUT=(--sizes "tiny,1b" --quant "4bit,none" --batch-size "8,32" --steps 6 --warmup 2)
if [ "$QUICK" = 1 ]; then
  THROUGHPUT=(--sizes 1b --quant "4bit,none" --batch-size 32 --steps 5 --warmup 2)
fi

mkdir -p "$GPU_LOGS"
exec > >(tee "$GPU_LOGS/console.log") 2>&1
echo "gpu_all: $([ "$QUICK" = 1 ] && echo quick || echo full)$([ "${GPU_DRY_RUN:-0}" = 1 ] && echo ', dry run'), budget ${BUDGET_S} s, $(date)"
start=$SECONDS
gpu_env qlora || exit 2
check_setup "$GPU_WORK"
DEADLINE=$((start + BUDGET_S))
cbm_device

lane_cbm() {
  cbm_cuda_tests
  cbm_robot_sweep
  cbm_intervene_learned
  [ "$QUICK" = 1 ] && return 0
  cbm_sudoku_sweep
  cbm_automate
}

lane_qlora() {
  vlm_tiny && vlm_qlora_finetune
  [ "$QUICK" = 1 ] && return 0
  vlm_zoo_repair 4bit
}

# The lanes' last steps must leave room for the two timed ones (~25 s and ~80 s, ~45 s quick).
DEADLINE_ALL=$DEADLINE
DEADLINE=$((DEADLINE_ALL - $([ "$QUICK" = 1 ] && echo 55 || echo 105)))
lane_cbm > >(sed -u 's/^/[cbm]   /') 2>&1 &
cbm_pid=$!
lane_qlora > >(sed -u 's/^/[qlora] /') 2>&1 &
qlora_pid=$!
wait "$cbm_pid" "$qlora_pid"
DEADLINE=$DEADLINE_ALL
cbm_solo
vlm_throughput

echo
"$PY" benchmarks/gpu_summary.py --steps "$STEPS_TSV" --work "$WORK" --logs "$STEP_LOGS" --seconds "$((SECONDS - start))" \
  --md "$GPU_LOGS/summary.md" --json "$GPU_LOGS/summary.json"
status=$?
# Every step's log and result file in one archive (at most 8 files come back from the GPU machine).
(cd "$WORK" && find . -type f \( -name '*.json' -o -name '*.md' -o -name '*.csv' -o -name '*.log' -o -name '*.tsv' \) \
  -not -path '*/cache/*' -not -path '*/models/*' -not -path './tiny/*' | tar -czf - -T -) >"$GPU_LOGS/steps.tar.gz"
echo "gpu_all: logs in $GPU_LOGS ($(find "$GPU_LOGS" -type f | wc -l) files), runs in $GPU_WORK"
exit "$status"
