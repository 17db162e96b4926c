#!/usr/bin/env bash
# The QLoRA path on one CUDA GPU (`make qlora-check`), a few minutes:
#   1. the fine-tuning tests (tiny VLM built from a config);
#   2. cbm-finetune finetune=qlora end to end on the robot counterfactual set (4-bit NF4, bf16 compute):
#      evaluation before, training, evaluation after, table, heatmaps, adapter;
#   3. benchmarks/qlora_gpu.py: step time, tokens/s and peak memory for the tiny and a ~1B model.
# Environment: the GPU machine's Python (torch, transformers, peft). The first second lists any
# missing runtime dependency (benchmarks/deps_check.py qlora); missing ones are installed from .whl/
# (`make gpu-wheels` builds hydra-core, omegaconf, antlr4, highspy and bitsandbytes there).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-sweeps/qlora_check}
PY=${PY:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
source benchmarks/gpu_deps.sh qlora || exit 2
export WANDB_MODE=disabled
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'qlora_gpu_check: torch sees no CUDA device')" || exit 2
status=0
mkdir -p "$OUT"
echo "== fine-tuning tests"
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/vlm/test_finetune.py 2>&1 | tail -n 15 || status=1
echo "== cbm-finetune finetune=qlora (tiny model)"
"$PY" -m cbm.vlm.tiny "$OUT/tiny" >/dev/null || status=1
"$PY" -m cbm.experiments.finetune_cli finetune=qlora model.path="$OUT/tiny" data.n=24 data.cache_dir="$OUT/cache" \
  train.epochs=3 logger.wandb.enabled=false hydra.run.dir="$OUT/run" 2>&1 | tail -n 12 || status=1
test -f "$OUT/run/adapter/adapter_config.json" || { echo "no adapter written"; status=1; }
echo "== benchmarks/qlora_gpu.py"
"$PY" benchmarks/qlora_gpu.py --sizes tiny,1b || status=1
exit $status
