#!/usr/bin/env bash
# Real data on one CUDA GPU: CUB-200-2011 mounted at CBM_CUB_ROOT (the folder holding CUB_200_2011/) and
# torchvision's ResNet-50 weights in torch's hub cache ($TORCH_HOME/hub/checkpoints/resnet50-11ad3fa6.pth;
# nothing is downloaded). Each step is a function below:
#   real_features     cbm-train on ResNet-50 embeddings of 224 px photos (data.features.kind=precompute):
#                     the first run computes and caches them, the second (another seed) reads them back;
#   real_finetune     cbm-train with the ResNet-50 as the CBM's backbone, fine-tuned (trainer=gpu);
#   real_intervene    cbm-intervene device=cuda by attribute group (groups=true, k = 0 ... 28 groups);
#   real_experiment   the real_cbm preset on the embeddings (black box, CBM, CEM, ProbCBM; 3 seeds);
#   real_celeba       with CBM_CELEBA_ROOT set (the folder holding img_align_celeba/): the real_celeba preset,
#                     the CEM paper's composite CelebA task (black box, joint CBM, hybrid CBM, CEM; 3 seeds).
# Koh et al.'s Table 2 to compare with (Inception-v3 at 299 px): independent CBM 76.0%, standard model 82.5%,
# concepts about 97%; the CEM paper's Table 1 (ResNet-34): CUB CEM 77.11%; CelebA no concepts 26.80%,
# joint CBM 25.07%, hybrid CBM 30.24%, CEM 30.63%. GPU_DRY_RUN=1 only checks every command line (benchmarks/gpu_lib.sh).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
# shellcheck source=benchmarks/gpu_lib.sh
source benchmarks/gpu_lib.sh

REAL_CHECK_DIR=${REAL_CHECK_DIR:-sweeps/real_data_check}
EPOCHS=${EPOCHS:-30}
FEATURES=(data=cub data.image_size=224 data.features.kind=precompute data.features.encoder=resnet50 data.features.weights=torchvision)

real_features() {
  for seed in 0 1; do
    step "features-seed$seed" 1800 "$BIN/cbm-train" "${FEATURES[@]}" model=cbm trainer=gpu seed="$seed" trainer.max_epochs="$EPOCHS" \
      logger=csv_only cache_dir="$WORK/cache" "hydra.run.dir=$WORK/features_s$seed"
  done
}

real_finetune() {
  step finetune 3600 "$BIN/cbm-train" data=cub data.image_size=224 model=cbm model.backbone.name=resnet50 \
    model.backbone.weights=torchvision trainer=gpu trainer.max_epochs="$EPOCHS" logger=csv_only cache_dir="$WORK/cache" \
    "hydra.run.dir=$WORK/finetune"
}

real_intervene() {
  if [ "$GPU_DRY_RUN" = 1 ]; then  # nothing was trained: a stand-in run directory for the command-line check
    mkdir -p "$WORK/features_s0/checkpoints" && : >"$WORK/features_s0/checkpoints/best.ckpt"
  fi
  step intervene 600 "$BIN/cbm-intervene" checkpoint="$WORK/features_s0" device=cuda groups=true cache_dir="$WORK/cache" \
    'ks=[0,1,2,4,8,16,max]' "hydra.run.dir=$WORK/intervene"
}

real_experiment() {
  step experiment 3600 "$BIN/cbm-experiment" +experiment=real_cbm jobs=1 output_dir="$WORK/real_cbm" cache_dir="$WORK/cache" \
    "settings.cub=[$(IFS=,; echo "${FEATURES[*]}")]" "train=[trainer=gpu,trainer.max_epochs=$EPOCHS]"
}

real_celeba() {
  [ -n "${CBM_CELEBA_ROOT:-}" ] || return 0
  step celeba 3600 "$BIN/cbm-experiment" +experiment=real_celeba jobs=1 output_dir="$WORK/real_celeba" cache_dir="$WORK/cache" \
    "train=[trainer=gpu,trainer.max_epochs=$EPOCHS]"
}

real_data_main() {
  [ "${1:-}" = --dry-run ] && export GPU_DRY_RUN=1
  if [ -z "${CBM_CUB_ROOT:-}" ]; then
    echo "real_data_gpu_check: set CBM_CUB_ROOT to the folder holding CUB_200_2011/ (docs/guides/real-data.md)" >&2
    exit 2
  fi
  gpu_env gpu || exit 2
  check_setup "$REAL_CHECK_DIR"
  local failed=0
  real_features || failed=1
  real_finetune || failed=1
  real_intervene || failed=1
  real_experiment || failed=1
  real_celeba || failed=1
  column -t -s $'\t' "$STEPS_TSV"
  exit "$failed"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  real_data_main "$@"
fi
