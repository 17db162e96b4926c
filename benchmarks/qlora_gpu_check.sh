#!/usr/bin/env bash
# The QLoRA path on one CUDA GPU (`make qlora-check`), a few minutes:
#   1. the fine-tuning tests (tiny VLM built from a config);
#   2. cbm-finetune finetune=qlora end to end on the robot counterfactual set (4-bit NF4, bf16 compute):
#      evaluation before, training, evaluation after, table, heatmaps, adapter;
#   3. cbm-vlm-zoo repair.quant=4bit on a small zoo: the counterfactual fine-tuning of the shortcut member
#      as QLoRA (cue reliance before/after, McNemar), beside the same repair in full precision;
#   4. benchmarks/qlora_gpu.py: step time, tokens/s and peak memory for the tiny and a ~1B model.
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
echo "== cbm-vlm-zoo: the shortcut member repaired by QLoRA (4-bit) and by LoRA (full precision) on the GPU"
ZOO="members={faithful: 0, shortcut: 1} data.n_train=4000 edct_items=100 repair.pairs=1000 logger.wandb.enabled=false"
for q in 4bit none; do
  [ $q = none ] && mkdir -p "$OUT/zoo_none" && cp -r "$OUT/zoo_4bit/models" "$OUT/zoo_none/" 2>/dev/null  # the same zoo, trained once
  "$PY" -m cbm.experiments.zoo_cli $ZOO repair.quant=$q repair.device=cuda output_dir="$OUT/zoo_$q" 2>&1 | tail -n 14 || status=1
  "$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['repair']; c=r['cue_reliance']; print('zoo repair', sys.argv[2], 'cue reliance', c['before'], '->', c['after'], 'McNemar p', r['mcnemar']['p_value'])" \
    "$OUT/zoo_$q/results.json" $q || status=1
done
echo "== benchmarks/qlora_gpu.py"
"$PY" benchmarks/qlora_gpu.py --sizes tiny,1b || status=1
exit $status
