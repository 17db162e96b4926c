#!/usr/bin/env bash
# make test-stress: the fast suite with both cores busy (two CPU hogs), with 1 and then 3 pytest workers,
# in the random order TEST_SEED names. A test that passes only on an idle machine, or only with one
# worker per core, fails here rather than on someone else's machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SEED=${TEST_SEED:-1}
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in 1 2; do
  "$PY" -c "while True: pass" &
  hogs+=("$!")
done
for workers in 1 3; do
  echo "== fast suite, $workers worker(s), both cores busy, seed $SEED"
  start=$(date +%s)
  "$PY" -m pytest -n "$workers" -q -p randomly -p no:cacheprovider --randomly-seed="$SEED"
  echo "== passed in $(( $(date +%s) - start )) s"
done
