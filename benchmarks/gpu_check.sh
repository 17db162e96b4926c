#!/usr/bin/env bash
# The whole GPU path on one CUDA GPU in a few minutes (`make gpu-check`):
#   1. every CUDA test (CPU/GPU equivalence of encode / intervene / predict and of a training step,
#      short deterministic GPU trainings, same-seed repeats, bf16) and the determinism audit;
#   2. every architecture on the default robot data, seeds 0 1 2 plus a same-seed repeat, with
#      trainer=gpu (deterministic kernels), compared with the CPU figures in
#      benchmarks/results/seeds_robot_cpu.json (the newer architectures with
#      seeds_robot_new_archs_cpu.json); every architecture on Sudoku 50 px;
#   3. cbm-intervene (also with the learned policies) and cbm-automate with device=cuda;
#   4. the default robot CBM run alone (10 epochs, test, oracle table): its training+evaluation time.
# It prints one table per dataset and exits non-zero if any check fails.
#
# Environment: a Python with torch (CUDA), lightning, torchmetrics, scipy, matplotlib, pytest. The
# first second lists any missing runtime dependency (benchmarks/deps_check.py gpu); missing ones
# are installed from .whl/ into .gpu_deps/ (the project's GPU machine has no package index):
# build them on a connected machine with `make gpu-wheels` and carry .whl/.
# PY=... picks the interpreter (default: .venv/bin/python when it sees a GPU, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-sweeps/gpu_check}
JOBS=${JOBS:-8}

PY=${PY:-}
if [ -z "$PY" ]; then
  PY=python3
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    PY=.venv/bin/python
  fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# First, in well under a second: is every runtime dependency there? (benchmarks/deps_check.py)
source benchmarks/gpu_deps.sh gpu || exit 2
export WANDB_MODE=disabled
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA device')" || exit 2

status=0
step() { echo; echo "== $1 ($(date +%T))"; }
mkdir -p "$OUT"
start=$SECONDS

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
"$PY" -c "import torch, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'lightning', lightning.__version__)"

step "CUDA tests and the determinism audit"
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" -n 4 tests/models/test_cuda.py tests/models/test_determinism.py \
  2>&1 | tail -n 25 || status=1

step "robot: every architecture, seeds 0 1 2 + a same-seed repeat (trainer=gpu)"
"$PY" benchmarks/seed_sweep.py --jobs "$JOBS" --repeat --out "$OUT/robot" --json "$OUT/robot.json" \
  --reference benchmarks/results/seeds_robot_cpu.json -- trainer=gpu || status=1

step "robot: the architectures beyond the benchmark's four, seeds 0 1 2 (trainer=gpu)"
"$PY" benchmarks/seed_sweep.py --archs hybrid_cbm,scbm,intcem,dcr --jobs "$JOBS" --out "$OUT/robot" \
  --json "$OUT/robot_new_archs.json" --reference benchmarks/results/seeds_robot_new_archs_cpu.json -- trainer=gpu || status=1

step "cbm-intervene on the GPU with the learned policies (robot IntCEM, seed 0: its own psi; a fit one)"
"$PY" -m cbm.experiments.intervene checkpoint="$OUT/robot/robot-intcem-s0" device=cuda cache_dir="$OUT/robot/cache" \
  "hydra.run.dir=$OUT/intervene_intcem" 'ks=[0,1,3,max]' 'policy=[random,intcem,global_order,coop,gradient]' || status=1

step "Sudoku 50 px: every architecture, seed 0 (trainer=gpu)"
"$PY" benchmarks/seed_sweep.py --data sudoku_50px --seeds 0 --jobs 5 --out "$OUT/sudoku" --json "$OUT/sudoku.json" \
  -- trainer=gpu || status=1

step "cbm-intervene on the GPU (robot CEM, seed 0)"
"$PY" -m cbm.experiments.intervene checkpoint="$OUT/robot/robot-cem-s0" device=cuda cache_dir="$OUT/robot/cache" \
  "hydra.run.dir=$OUT/intervene" 'ks=[0,1,3,max]' || status=1

step "cbm-automate on the GPU (Sudoku 50 px CBM, seed 0)"
"$PY" -m cbm.experiments.automate checkpoint="$OUT/sudoku/sudoku_50px-cbm-s0" device=cuda \
  cache_dir="$OUT/sudoku/cache" "hydra.run.dir=$OUT/automate" || status=1

step "the default robot CBM run alone (trainer.accelerator=gpu, 10 epochs + test + oracle table)"
rm -rf "$OUT/solo"
"$PY" -m cbm.experiments.train trainer.accelerator=gpu logger=csv_only trainer.enable_progress_bar=false \
  cache_dir="$OUT/robot/cache" "hydra.run.dir=$OUT/solo" | tail -n 3 || status=1
"$PY" - "$OUT/solo/timing.json" <<'EOF' || status=1
import json, sys
t = json.load(open(sys.argv[1]))
total = sum(t.values())
print(f"training + evaluation: {total:.1f} s ({', '.join(f'{k} {v:.1f}' for k, v in t.items())}); target <= 10 s")
sys.exit(0 if total <= 10 else 1)
EOF

step "done in $((SECONDS - start)) s: $([ $status -eq 0 ] && echo 'all checks passed' || echo 'SOME CHECKS FAILED')"
exit $status
