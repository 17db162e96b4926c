# shellcheck shell=bash
# Shared by the GPU checks (benchmarks/gpu_all.sh, gpu_check.sh, qlora_gpu_check.sh); sourced from the
# repository root. It gives them:
#
#   gpu_env GROUP        the interpreter: the machine's Python with the carried wheels (gpu_deps.sh) and this
#                        checkout installed into $GPU_VENV (benchmarks/gpu_env.py: console scripts beside the
#                        interpreter, as the tests expect); sets PY and BIN; stops unless torch sees CUDA.
#   step NAME SECS CMD.. one check: CMD's output to $STEP_LOGS/NAME.log, at most SECS seconds and never past
#                        $DEADLINE; a row (name, state, seconds) in $STEPS_TSV; the log's last lines shown.
#                        GPU_ONLY=REGEX runs only the steps whose name matches (the others are left out).
#
# Dry run (GPU_DRY_RUN=1, e.g. `gpu_all.sh --dry-run`, what tests/core/test_gpu_scripts.py runs on the CPU):
# every command line runs as written, but stops once it is validated: the Hydra apps after their
# command-line checks (CBM_DRY_RUN=1), pytest after collecting (PYTEST_ADDOPTS), seed_sweep.py after
# checking its runs' overrides, qlora_gpu.py after parsing; torch reports one CUDA device
# (benchmarks/stub_cuda/sitecustomize.py) so command lines naming cuda pass those checks. A quoting
# mistake, a missing console script or a bad override fails it as it would on the GPU.

GPU_DRY_RUN=${GPU_DRY_RUN:-0}
GPU_VENV=${GPU_VENV:-.gpu_venv}
DEADLINE=${DEADLINE:-$((SECONDS + 86400))}

# The base interpreter: $PY when given; else this checkout's .venv when its torch works (and sees CUDA,
# unless this is a dry run); else python3 (the GPU machine's own).
base_python() {
  if [ -n "${PY:-}" ]; then
    echo "$PY"
  elif [ -x .venv/bin/python ] && .venv/bin/python -c "import sys, torch; sys.exit(not (torch.cuda.is_available() or '$GPU_DRY_RUN' == '1'))" 2>/dev/null; then
    echo .venv/bin/python
  else
    echo python3
  fi
}

gpu_env() {
  local group=$1
  PY=$(base_python)
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  export WANDB_MODE=disabled
  if [ "$GPU_DRY_RUN" = 1 ]; then
    "$PY" benchmarks/deps_check.py "$group" || echo "gpu_env: (dry run) the GPU machine needs the wheels listed above"
    export GPU_DRY_RUN CBM_DRY_RUN=1 PYTEST_ADDOPTS="--collect-only -q" PYTHONPATH="$PWD/benchmarks/stub_cuda:$PYTHONPATH"
  else
    # shellcheck source=benchmarks/gpu_deps.sh
    source benchmarks/gpu_deps.sh "$group" || return 2
  fi
  PY=$("$PY" benchmarks/gpu_env.py "$GPU_VENV") || { echo "gpu_env: could not install the project into $GPU_VENV" >&2; return 2; }
  # shellcheck disable=SC2034  # BIN: read by the scripts that source this file
  BIN=$(dirname "$PY")
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_env: torch sees no CUDA device')" || return 2
}

# step NAME SECONDS CMD... (see the top of this file). Returns CMD's exit status (124: out of time).
step() {
  local name=$1 limit=$2
  shift 2
  if [ -n "${GPU_ONLY:-}" ] && ! [[ $name =~ $GPU_ONLY ]]; then
    return 0
  fi
  local left=$((DEADLINE - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    printf '%s\tSKIPPED\t0\n' "$name" >>"$STEPS_TSV"
    echo "== $name: skipped (the time budget is spent)"
    return 1
  fi
  echo "== $name ($(date +%T), at most ${limit} s)"
  local t0=$SECONDS rc=0 state=ok log="$STEP_LOGS/$name.log"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    state=TIMEOUT
  elif ((rc != 0)); then
    state=FAIL
  fi
  printf '%s\t%s\t%s\n' "$name" "$state" "$((SECONDS - t0))" >>"$STEPS_TSV"
  tail -n "${STEP_TAIL:-4}" "$log" | sed 's/^/   /'
  return "$rc"
}

# check_setup WORK: the folders a check writes (WORK: runs and caches; STEP_LOGS; STEPS_TSV).
check_setup() {
  WORK=$1
  STEP_LOGS=${STEP_LOGS:-$WORK/logs}
  STEPS_TSV=${STEPS_TSV:-$WORK/steps.tsv}
  mkdir -p "$WORK" "$STEP_LOGS"
  : >"$STEPS_TSV"
}
