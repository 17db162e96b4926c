"""Typed settings of ``cbm-icl`` (``conf/icl.yaml``), validated before any request."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

from cbm.config.safe_paths import check_component
from cbm.vlm.config import ClientConfig
from cbm.vlm.icl.episodes import EpisodeGrid
from cbm.vlm.icl.parse import CONDITION_TAGS
from cbm.vlm.icl.stats import CORRECTIONS

#: Prompt templates and the placeholders each may use.
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    "system": (),
    "support_user": ("index", "options"),
    "support_assistant": ("label",),
    "query": ("options", "instruction"),
    "judge": ("options", "condition", "description", "output", "rubric", "support_note"),
    "judge_global": ("classes", "response", "output"),
    "rubric": (),
}


@dataclass
class JudgeOptions:
    enabled: bool = True
    support_images: bool = False  # the judge also sees the support images with their labels
    global_discriminativeness: bool = False  # one more judge request per trial, with every class of the dataset
    reproducibility_repeats: int = 0  # extra sampled runs per trial (E3-E5) for Explanation Reproducibility
    reproducibility_temperature: float = 0.7

    def __post_init__(self) -> None:
        if self.reproducibility_repeats < 0 or self.reproducibility_repeats == 1:
            raise ValueError("judge_options.reproducibility_repeats: 0 (off) or >= 2 repeated runs")
        if not 0.0 < self.reproducibility_temperature <= 2.0:
            raise ValueError("judge_options.reproducibility_temperature: must lie in (0, 2]")


@dataclass
class StatsOptions:
    correction: str = "holm"  # multiple-testing correction of the Spearman p-values: holm | bonferroni
    human_scores: str | None = None  # CSV: trial, metric columns (1-5) -> judge vs human agreement

    def __post_init__(self) -> None:
        if self.correction not in CORRECTIONS:
            raise ValueError(f"statistics.correction: '{self.correction}' is not one of {', '.join(CORRECTIONS)}")


@dataclass
class ICLConfig:
    output_dir: str
    models: dict[str, dict[str, Any]]
    judge: dict[str, Any]
    datasets: dict[str, dict[str, Any]]
    prompts: dict[str, Any]
    conditions: list[str] = field(default_factory=lambda: list(CONDITION_TAGS))
    episodes: EpisodeGrid = field(default_factory=EpisodeGrid)
    episodes_dir: str | None = None  # null: <output_dir>/episodes
    judge_options: JudgeOptions = field(default_factory=JudgeOptions)
    statistics: StatsOptions = field(default_factory=StatsOptions)
    cache_dir: str | None = None  # dataset cache
    progress: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.episodes, dict):
            self.episodes = EpisodeGrid(**self.episodes)
        if isinstance(self.judge_options, dict):
            self.judge_options = JudgeOptions(**self.judge_options)
        if isinstance(self.statistics, dict):
            self.statistics = StatsOptions(**self.statistics)
        if not self.models:
            raise ValueError("models: at least one model under test (name: client settings)")
        for name in [*self.models, *self.datasets]:  # records/<model>/<dataset>/..., episodes/<dataset>.json
            check_component(name, "models" if name in self.models else "datasets")
        for role, settings in [*((f"models.{k}", v) for k, v in self.models.items()), ("judge", self.judge)]:
            try:
                ClientConfig.from_mapping(dict(settings))
            except ValueError as err:
                raise ValueError(f"{role}: {err}") from None
        unknown = [c for c in self.conditions if c not in CONDITION_TAGS]
        if unknown or not self.conditions:
            raise ValueError(f"conditions: unknown {unknown} (choose from {', '.join(CONDITION_TAGS)})")
        if not self.datasets:
            raise ValueError("datasets: at least one dataset")
        for name, spec in self.datasets.items():
            if not isinstance(spec, dict) or "kind" not in spec:
                raise ValueError(f"datasets.{name}: needs a kind (robot, sudoku, imagefolder, torchvision)")
        check_prompts(self.prompts, self.conditions)


def check_prompts(prompts: dict[str, Any], conditions: list[str]) -> None:
    """Every template is there, uses only its placeholders, and every condition has an instruction
    and a description."""
    missing = sorted(set(PROMPT_FIELDS) - set(prompts))
    if missing:
        raise ValueError(f"prompts: missing template(s) {missing}")
    checks = [(name, prompts[name], allowed) for name, allowed in PROMPT_FIELDS.items()]
    for part in ("instructions", "descriptions"):
        table = prompts.get(part) or {}
        absent = [c for c in conditions if c not in table]
        if absent:
            raise ValueError(f"prompts.{part}: no entry for {absent}")
        checks += [(f"{part}.{c}", table[c], ("options",)) for c in conditions]
    for name, text, allowed in checks:
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(str(text)) if f}
        except ValueError as err:
            raise ValueError(f"prompts.{name}: bad template ({err}); write literal braces as {{{{ }}}}") from None
        unknown = sorted(used - set(allowed))
        if unknown:
            raise ValueError(f"prompts.{name}: unknown placeholder(s) {unknown} (available: {', '.join(allowed) or 'none'})")
