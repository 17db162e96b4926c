#!/usr/bin/env bash
# The small zoo that benchmarks/gpu_all.sh repairs in 4-bit, trained on this machine's CPU (`make gpu-zoo`):
# the base and its two members (faithful, shortcut) on 4,000 robots, into sweeps/gpu_zoo/models (~9 MB). Carry
# that folder to the GPU machine beside .whl (docs/guides/gpus.md): the zoo there reuses each model whose stamp
# matches its config (data, model and training settings: ZOO_MODELS_CFG in benchmarks/qlora_gpu_check.sh), so
# the GPU's minutes go to EDCT and the QLoRA repair, not to training the zoo on the CPU. No GPU needed here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
# shellcheck source=benchmarks/qlora_gpu_check.sh
source benchmarks/qlora_gpu_check.sh
PY=$(base_python)
out=${GPU_ZOO_DIR:-sweeps/gpu_zoo}
WANDB_MODE=disabled "$PY" -m cbm.vlm.apps.zoo "${ZOO_MODELS_CFG[@]}" repair.member=null edct_items=20 bootstrap=100 \
  logger.wandb.enabled=false output_dir="$out"
echo "gpu_zoo: models in $out/models ($(du -sh "$out/models" | cut -f1)): carry them, e.g. run(..., carry=[\".whl\", \"$out/models\"])"
