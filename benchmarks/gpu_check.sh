#!/usr/bin/env bash
# The CBM half of the GPU path on one CUDA GPU (`make gpu-check`); benchmarks/gpu_all.sh runs these steps
# with small sizes beside the QLoRA ones in one ~6-minute call. Each step is a function below:
#   cbm_cuda_tests     every CUDA test (tests/models/test_cuda.py: CPU/GPU equivalence of encode / intervene /
#                      predict and of a training step, short deterministic GPU trainings, same-seed repeats,
#                      bf16) and the same comparisons on the CPU (test_device_paths.py), the determinism audit;
#   cbm_robot_sweep    every architecture on the default robot data (SEEDS, + a same-seed repeat with REPEAT=1),
#                      trainer=gpu, compared with the CPU figures (benchmarks/results/seeds_robot*_cpu.json);
#   cbm_intervene_learned / cbm_intervene   cbm-intervene device=cuda (robot IntCEM with the learned policies,
#                      robot CEM);
#   cbm_sudoku_sweep   every architecture on Sudoku 50 px, seed 0 (trainer=gpu);
#   cbm_automate       cbm-automate device=cuda (the Sudoku CBM);
#   cbm_solo           the default robot CBM run alone (trainer.accelerator=gpu): its training + evaluation time.
# Then one table (benchmarks/gpu_summary.py); the exit status is non-zero if any step failed.
#
# Environment: a Python with torch (CUDA), lightning, torchmetrics, scipy, matplotlib, pytest. The first
# second lists any missing runtime dependency (benchmarks/deps_check.py gpu); missing ones are installed
# from .whl/ (`make gpu-wheels` on a machine with a package index; carry .whl/). The checkout is installed
# into .gpu_venv (benchmarks/gpu_env.py), so the console scripts exist. GPU_CHECK_DIR (not OUT: the GPU
# machine's $OUT is its own) holds the runs; PY picks the base interpreter; GPU_DRY_RUN=1 only checks every
# command line (benchmarks/gpu_lib.sh).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
# shellcheck source=benchmarks/gpu_lib.sh
source benchmarks/gpu_lib.sh

GPU_CHECK_DIR=${GPU_CHECK_DIR:-sweeps/gpu_check}
SEEDS=${SEEDS:-0,1,2}
REPEAT=${REPEAT:-1}
JOBS=${JOBS:-8}
TEST_WORKERS=${TEST_WORKERS:-4}
ROBOT_ARCHS=${ROBOT_ARCHS:-blackbox,cbm,cem,probcbm,ecbm,hybrid_cbm,scbm,intcem,dcr}
SUDOKU_ARCHS=${SUDOKU_ARCHS:-blackbox,cbm,cem,probcbm,ecbm}
SUDOKU_JOBS=${SUDOKU_JOBS:-5}
CUDA_TESTS=(tests/models/test_cuda.py tests/models/test_device_paths.py tests/models/test_determinism.py)
# Extra cbm-train overrides of each sweep (gpu_all.sh sets small sizes here).
ROBOT_OVERRIDES=()
SUDOKU_OVERRIDES=()

cbm_cuda_tests() {
  step cuda-tests 300 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" -n "$TEST_WORKERS" "${CUDA_TESTS[@]}"
}

cbm_robot_sweep() {
  local repeat=()
  [ "$REPEAT" = 1 ] && repeat=(--repeat)
  step robot-sweep 600 "$PY" benchmarks/seed_sweep.py --archs "$ROBOT_ARCHS" --seeds "$SEEDS" "${repeat[@]}" --jobs "$JOBS" \
    --out "$WORK/robot" --json "$WORK/robot.json" --reference benchmarks/results/seeds_robot_cpu.json \
    --reference benchmarks/results/seeds_robot_new_archs_cpu.json -- trainer=gpu "${ROBOT_OVERRIDES[@]}"
}

cbm_intervene_learned() {  # the robot IntCEM of seed 0: its own psi, and a fit one
  step intervene-learned 180 "$BIN/cbm-intervene" checkpoint="$WORK/robot/robot-intcem-s0" device=cuda \
    cache_dir="$WORK/robot/cache" "hydra.run.dir=$WORK/intervene_intcem" 'ks=[0,1,3,max]' \
    'policy=[random,intcem,global_order,coop,gradient]'
}

cbm_intervene() {
  step intervene 120 "$BIN/cbm-intervene" checkpoint="$WORK/robot/robot-cem-s0" device=cuda cache_dir="$WORK/robot/cache" \
    "hydra.run.dir=$WORK/intervene" 'ks=[0,1,3,max]'
}

cbm_sudoku_sweep() {
  step sudoku-sweep 600 "$PY" benchmarks/seed_sweep.py --data sudoku_50px --archs "$SUDOKU_ARCHS" --seeds 0 --jobs "$SUDOKU_JOBS" \
    --out "$WORK/sudoku" --json "$WORK/sudoku.json" -- trainer=gpu "${SUDOKU_OVERRIDES[@]}"
}

cbm_automate() {
  step automate 180 "$BIN/cbm-automate" checkpoint="$WORK/sudoku/sudoku_50px-cbm-s0" device=cuda \
    cache_dir="$WORK/sudoku/cache" "hydra.run.dir=$WORK/automate"
}

cbm_solo() {  # alone on the machine: its time is the figure (target <= 10 s, benchmarks/gpu_summary.py)
  rm -rf "$WORK/solo"
  step solo 120 "$BIN/cbm-train" trainer.accelerator=gpu logger=csv_only trainer.enable_progress_bar=false \
    cache_dir="$WORK/robot/cache" "hydra.run.dir=$WORK/solo"
}

cbm_device() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  "$PY" -c "import torch, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'lightning', lightning.__version__, torch.cuda.get_device_name(0))"
}

gpu_check_main() {
  [ "${1:-}" = --dry-run ] && export GPU_DRY_RUN=1
  gpu_env gpu || exit 2
  check_setup "$GPU_CHECK_DIR"
  cbm_device
  local start=$SECONDS
  cbm_cuda_tests
  cbm_robot_sweep
  cbm_intervene_learned
  cbm_intervene
  cbm_sudoku_sweep
  cbm_automate
  cbm_solo
  "$PY" benchmarks/gpu_summary.py --steps "$STEPS_TSV" --work "$WORK" --logs "$STEP_LOGS" --seconds "$((SECONDS - start))"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gpu_check_main "$@"
fi
