"""``cbm-finetune``: counterfactual fine-tuning of a local VLM (LoRA on CPU, 4-bit QLoRA on a GPU),
evaluated before and after on originals vs counterfactuals (loss, accuracy, attention localisation).

    cbm-finetune model.path=/models/tiny
    cbm-finetune finetune=qlora model.path=/models/Qwen2.5-VL-3B-Instruct data.n=500
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from cbm.core.cli import hydra_app, typed_app_config
from cbm.core.common import say
from cbm.tracking import wandb_run
from cbm.vlm.finetune.checks import preflight
from cbm.vlm.finetune.config import FinetuneConfig


def validate(cfg: DictConfig) -> FinetuneConfig:
    """The typed config and every check that needs no model (the JSONL rows and their images, the
    EDCT run, generator settings, the GPU asked for): the command line refuses before Hydra starts."""
    c = typed_app_config(cfg, FinetuneConfig)
    preflight(c)
    return c


def run(cfg: DictConfig | FinetuneConfig) -> dict[str, Any]:
    from cbm.vlm.finetune.run import run as run_finetune

    c = cfg if isinstance(cfg, FinetuneConfig) else typed_app_config(cfg, FinetuneConfig)  # the run re-checks its rows itself
    with wandb_run.finishing():
        out = run_finetune(c)
    say((Path(c.output_dir) / "results.md").read_text(encoding="utf-8").rstrip())
    say(f"adapter: {c.output_dir}/adapter  heatmaps: {c.output_dir}/heatmaps  per row: {c.output_dir}/per_row.csv")
    return out["result"]


main = hydra_app(
    "cbm-finetune",
    "finetune",
    run,
    validate,
    "Counterfactual fine-tuning of a local vision-language model (LoRA on CPU, 4-bit QLoRA on CUDA), with\n"
    "loss, accuracy and attention localisation on originals vs counterfactuals before and after.",
    [
        "model.path=/models/tiny-vlm data.n=32",
        "finetune=qlora model.path=/models/Qwen2.5-VL-3B-Instruct data.n=500 train.epochs=2",
        "model.path=/models/tiny-vlm data.jsonl=pairs.jsonl data.on_bad=error",
        "model.path=/models/tiny-vlm data.build=edct 'data.source={run_dir: outputs/edct/<run>}'",
    ],
)


if __name__ == "__main__":
    main()
