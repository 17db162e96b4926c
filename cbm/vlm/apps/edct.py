"""``cbm-edct``: explanation-driven counterfactual testing of a vision-language model.

    cbm-edct client@vlm=openrouter vlm.model=qwen/qwen2.5-vl-7b-instruct items.n=50
    cbm-edct client@vlm=local vlm.model=/models/tiny answer_by=score client@llm=openai
    cbm-edct stability_runs=[outputs/edct/a,outputs/edct/b]   # Table 5 over finished runs; no run made

Every stage's output is saved per item (``<output_dir>/items/<id>/record.json``); rerunning the
same command resumes where it stopped, and cached replies cost nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from cbm.core.cli import hydra_app, typed_app_config
from cbm.core.common import say
from cbm.tracking import wandb_run
from cbm.vlm.edct.config import EDCTConfig


def validate(cfg: DictConfig) -> EDCTConfig:
    """The typed config (one clear line for a bad value) and the files it names, read now: a bad
    human-scores file or stability run is refused before anything is written or sent."""
    from cbm.vlm.edct.agreement import read_human_scores
    from cbm.vlm.edct.stability import read_runs

    c = typed_app_config(cfg, EDCTConfig)
    if c.human_scores is not None:
        read_human_scores(c.human_scores)
    if c.stability_runs is not None:
        read_runs(list(c.stability_runs))
    return c


def run(cfg: DictConfig | EDCTConfig) -> dict[str, Any]:
    from cbm.vlm.edct.run import run as run_edct

    c = cfg if isinstance(cfg, EDCTConfig) else validate(cfg)
    root = Path(c.output_dir)
    out = run_edct(c)
    with wandb_run.finishing():  # after the run: a refused or failed run leaves no W&B files behind
        name = "edct-stability" if c.stability_runs else f"edct-{Path(str(c.vlm.get('model') or 'vlm')).name}"
        wb = wandb_run.start_command_run(c.logger, job_type="edct", name=name, out_dir=root, config=c, command="cbm-edct")
        if wb is not None:
            wandb_run.log_result_files(wb, root, "stability.json" if c.stability_runs else "results.json")
    if c.stability_runs:
        say((root / "stability.md").read_text(encoding="utf-8").rstrip())
        say(f"stability over {len(c.stability_runs)} runs: {root}/stability.md, {root}/stability.csv")
        return out
    say((root / "results.md").read_text(encoding="utf-8").rstrip())
    if c.human_scores is not None:
        say((root / "human_agreement.md").read_text(encoding="utf-8").rstrip())
    say(f"records: {c.output_dir}/items/<id>/record.json  results: {c.output_dir}/results.json")
    return out


main = hydra_app(
    "cbm-edct",
    "edct",
    run,
    validate,
    "Explanation-driven counterfactual testing: answer + explanation -> cited concepts -> edit chain ->\n"
    "verified counterfactuals -> re-query -> judge; writes results.md (CCS with CIs) and per-item records.",
    [
        "client@vlm=openrouter vlm.model=qwen/qwen2.5-vl-7b-instruct items.n=50",
        "client@vlm=local vlm.model=/models/tiny-vlm answer_by=score llm.base_url=http://localhost:8000/v1",
        "data=robot_paper items.n=100 items.sample=true k=3",
        "stability_runs=[outputs/edct/<run>,outputs/edct/<run2>]",
    ],
)


if __name__ == "__main__":
    main()
