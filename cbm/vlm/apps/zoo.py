"""``cbm-vlm-zoo``: the known-faithfulness testbed -- train tiny VLMs whose reliance is planted,
measure it exactly, and check that EDCT with the exact judge recovers it.

    cbm-vlm-zoo                                   # the default zoo of five members
    cbm-vlm-zoo 'members={faithful: 0, shortcut: 1}' output_dir=outputs/zoo/small
    cbm-vlm-zoo task=sudoku                       # 4x4 boards: a digit reader against a shaded-cell counter

Models are cached under ``<output_dir>/models`` (a rerun with the same settings trains nothing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from cbm.core.cli import hydra_app, typed_app_config
from cbm.core.common import say
from cbm.tracking import wandb_run
from cbm.vlm.zoo.config import ZooConfig


def validate(cfg: DictConfig) -> ZooConfig:
    """The typed config (one clear line for a bad value; a QLoRA repair asked of a machine without
    a GPU is refused here, before any model trains)."""
    c = typed_app_config(cfg, ZooConfig)
    if c.repair.member is not None:
        from cbm.vlm.zoo.study import check_repair_device

        check_repair_device(c.repair.quant, c.repair.device)
    return c


def run(cfg: DictConfig | ZooConfig) -> dict[str, Any]:
    from cbm.vlm.zoo.study import run_study

    c = cfg if isinstance(cfg, ZooConfig) else validate(cfg)
    root = Path(c.output_dir)
    out = run_study(c, say)
    with wandb_run.finishing():
        wb = wandb_run.start_command_run(c.logger, job_type="zoo", name="zoo", out_dir=root, config=c, command="cbm-vlm-zoo")
        if wb is not None:
            wandb_run.log_result_files(wb, root, "results.json", images=["zoo.png"])
    say((root / "results.md").read_text(encoding="utf-8").rstrip())
    records = f"  EDCT records: {root}/edct/<member>.jsonl" if c.task == "robot" else ""
    say(f"results: {root}/results.json  figure: {root}/zoo.png{records}")
    return out


main = hydra_app(
    "cbm-vlm-zoo",
    "zoo",
    run,
    validate,
    "The faithfulness testbed: tiny VLMs with planted reliance (faithful, shortcut, a dial between), their true\n"
    "reliance from exact counterfactuals, and EDCT with the exact judge; writes results.md and zoo.png.",
    [
        "members='{faithful: 0, shortcut: 1}' edct_items=100",
        "data.n_train=2000 train.base_epochs=2 output_dir=outputs/zoo/small",
        "task=sudoku output_dir=outputs/zoo/sudoku",
    ],
)


if __name__ == "__main__":
    main()
