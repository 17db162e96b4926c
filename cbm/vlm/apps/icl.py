"""``cbm-icl``: few-shot in-context classification with explanations (E1-E5), an LLM judge, a
Description-Logic checker and statistics.

    cbm-icl models.vlm.model=qwen/qwen2.5-vl-7b-instruct client@models.vlm=openrouter judge.model=gpt-4o
    cbm-icl +datasets.sudoku='{kind: sudoku, per_class: 40}' judge_options.support_images=true

Episodes are made once (seed 42) and saved under ``<output_dir>/episodes``; every trial's record is
saved under ``<output_dir>/records``; rerunning the same command resumes, and cached replies cost
nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from cbm.core.cli import hydra_app, typed_app_config
from cbm.core.common import say
from cbm.tracking import wandb_run
from cbm.vlm.icl.config import ICLConfig


def validate(cfg: DictConfig) -> ICLConfig:
    """The typed config (one clear line for a bad value)."""
    return typed_app_config(cfg, ICLConfig)


def run(cfg: DictConfig | ICLConfig) -> dict[str, Any]:
    from cbm.vlm.icl.run import run as run_icl

    c = cfg if isinstance(cfg, ICLConfig) else validate(cfg)
    o = Path(c.output_dir)
    out = run_icl(c)
    with wandb_run.finishing():  # after the run: a refused or failed run leaves no W&B files behind
        wb = wandb_run.start_command_run(c.logger, job_type="icl", name=f"icl-{'-'.join(c.models)}", out_dir=o, config=c, command="cbm-icl")
        if wb is not None:
            wandb_run.log_result_files(wb, o, "stats.json", images=["radar.png"])
    say("accuracy (per model x dataset x condition):\n" + (o / "accuracy.md").read_text(encoding="utf-8").rstrip())
    say("judge (mean 1-5 scores):\n" + (o / "judge.md").read_text(encoding="utf-8").rstrip())
    say((o / "losses.md").read_text(encoding="utf-8").rstrip())
    if (o / "checker.md").exists():
        say("E5 checker:\n" + (o / "checker.md").read_text(encoding="utf-8").rstrip())
    say(f"tables: {o}/*.md, *.csv  statistics: {o}/stats.md  radar chart: {o}/radar.png  records: {o}/records/")
    return out


main = hydra_app(
    "cbm-icl",
    "icl",
    run,
    validate,
    "Few-shot in-context explanation study: N-way K-shot episodes x conditions E1-E5 -> accuracy, parse errors,\n"
    "judge scores (nine metrics), Description-Logic checker (E5), statistics, radar chart.",
    [
        "client@models.vlm=openrouter models.vlm.model=qwen/qwen2.5-vl-7b-instruct judge.model=gpt-4o",
        "conditions=[E1,E5] episodes.k_shots=[1] judge_options.support_images=true",
        "+datasets.sudoku='{kind: sudoku, per_class: 40}' statistics.correction=bonferroni",
    ],
)


if __name__ == "__main__":
    main()
