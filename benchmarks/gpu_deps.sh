# shellcheck shell=bash
# Sourced by gpu_check.sh / qlora_gpu_check.sh with $PY set: `source benchmarks/gpu_deps.sh <group>`.
# Lists missing runtime dependencies at once (benchmarks/deps_check.py, no imports), installs the
# carried wheels (.whl/, from `make gpu-wheels`) into .gpu_deps/ when something is missing, and
# checks again; returns non-zero with the list when the wheels do not cover it.
group=$1
[ -d .gpu_deps ] && export PYTHONPATH="$PWD/.gpu_deps:$PYTHONPATH"
if ! "$PY" benchmarks/deps_check.py "$group"; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "gpu_deps: no .whl/ to install from: run 'make gpu-wheels' on a machine with a package index and carry .whl/" >&2
    return 2
  fi
  "$PY" -m pip install -q --no-deps --target .gpu_deps .whl/*.whl || return 2
  export PYTHONPATH="$PWD/.gpu_deps:$PYTHONPATH"
  "$PY" benchmarks/deps_check.py "$group" || return 2
fi
