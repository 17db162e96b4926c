"""Typed settings of ``cbm-icl`` (``conf/icl.yaml``), validated before any request: every field of
its type, every number in range, every prompt template with only its own placeholders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cbm.core.safe_paths import check_component
from cbm.core.validation import check_fields, nested
from cbm.vlm.config import ClientConfig
from cbm.vlm.icl.episodes import EpisodeGrid
from cbm.vlm.icl.parse import CONDITION_TAGS
from cbm.vlm.icl.stats import CORRECTIONS
from cbm.vlm.images import MAX_IMAGE_PIXELS, check_pixel_limit
from cbm.vlm.templates import check_template, placeholders

#: Prompt templates and the placeholders each may use.
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    "system": ("instruction", "options"),
    "support_user": ("index", "options"),
    "support_assistant": ("label",),
    "query": ("options", "instruction"),
    "judge": ("options", "condition", "description", "output", "response", "rubric", "support_note"),
    "judge_global": ("classes", "response", "output"),
    "rubric": (),
}
#: Templates that may be empty (no system prompt, no rubric).
OPTIONAL_PROMPTS = ("system", "rubric")
#: Where the condition's instruction may go: the system prompt (as the paper) or the query turn.
INSTRUCTION_PLACES = ("system", "query")
#: Per-condition tables of ``prompts`` (one entry per condition) and their placeholders.
PROMPT_TABLES: dict[str, tuple[str, ...]] = {"instructions": ("options",), "descriptions": ("options",)}


@dataclass
class JudgeOptions:
    #: Ask the judge to score each judged explanation; false: no judge requests (answers and parsing only).
    enabled: bool = True
    support_images: bool = False  # the judge also sees the support images with their labels
    global_discriminativeness: bool = False  # one more judge request per trial, with every class of the dataset
    reproducibility_repeats: int = 0  # extra sampled runs per trial (E3-E5) for Explanation Reproducibility
    #: Sampling temperature, in (0, 2], of those reruns (each with its own seed).
    reproducibility_temperature: float = 0.7
    #: Conditions whose explanations are judged: E1 asks for no explanation (the paper judges E2-E5)
    conditions: list[str] = field(default_factory=lambda: ["E2", "E3", "E4", "E5"])

    def __post_init__(self) -> None:
        check_fields(self, "judge_options.")
        odd = [c for c in self.conditions if c not in CONDITION_TAGS] if isinstance(self.conditions, list) else None
        if odd is None or odd or len(set(self.conditions)) != len(self.conditions):
            raise ValueError(f"judge_options.conditions: distinct conditions from {', '.join(CONDITION_TAGS)}, got {self.conditions!r}")
        if not (self.reproducibility_repeats == 0 or 2 <= self.reproducibility_repeats <= 100):
            raise ValueError("judge_options.reproducibility_repeats: 0 (off) or >= 2 repeated runs (at most 100)")
        if not 0.0 < self.reproducibility_temperature <= 2.0:
            raise ValueError("judge_options.reproducibility_temperature: must lie in (0, 2]")


@dataclass
class StatsOptions:
    correction: str = "holm"  # multiple-testing correction of the Spearman p-values: holm | bonferroni
    human_scores: str | None = None  # CSV: trial, metric columns (1-5) -> judge vs human agreement

    def __post_init__(self) -> None:
        check_fields(self, "statistics.")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"statistics.correction: '{self.correction}' is not one of {', '.join(CORRECTIONS)}")
        if self.human_scores is not None and not Path(self.human_scores).is_file():
            raise ValueError(f"statistics.human_scores: '{self.human_scores}' is not a file (a CSV: trial + metric columns)")


@dataclass
class ICLConfig:
    output_dir: str
    #: Models under test: name -> client settings (``ClientConfig``); every trial runs on each.
    models: dict[str, dict[str, Any]]
    #: Client settings of the judge model that scores the explanations.
    judge: dict[str, Any]
    #: Datasets: name -> ``{kind: robot | sudoku | imagefolder | torchvision, ...its settings}``.
    datasets: dict[str, dict[str, Any]]
    prompts: dict[str, Any]
    #: Explanation conditions run for every episode: E1 (label only), E2 (free text), E3 (features),
    #: E4 (features, IF-THEN rules, rule check), E5 (description-logic TBox / ABox).
    conditions: list[str] = field(default_factory=lambda: list(CONDITION_TAGS))
    episodes: EpisodeGrid = field(default_factory=EpisodeGrid)
    episodes_dir: str | None = None  # null: <output_dir>/episodes
    judge_options: JudgeOptions = field(default_factory=JudgeOptions)
    statistics: StatsOptions = field(default_factory=StatsOptions)
    cache_dir: str | None = None  # dataset cache
    progress: bool | None = None
    #: Re-asks (0 or 1) of an answer without a readable label or a judge reply without every score,
    #: in the same conversation, naming the problem (:data:`cbm.vlm.tags.REASK_PROMPT`); counted.
    reask: int = 1
    #: Largest image (pixels) read from an image folder or torchvision dataset; refused before decoding.
    max_image_pixels: int = MAX_IMAGE_PIXELS
    #: W&B (``logger.wandb``, as cbm-train's; the command line's default logs offline; a config built in code: none).
    logger: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.episodes = nested(EpisodeGrid, self.episodes, "episodes")
        if self.logger:
            from cbm.config.train import LoggerConfig
            from cbm.core.validation import to_dataclass

            to_dataclass(LoggerConfig, self.logger, "logger")
        self.judge_options = nested(JudgeOptions, self.judge_options, "judge_options")
        self.statistics = nested(StatsOptions, self.statistics, "statistics")
        for part in ("models", "datasets"):  # name each entry that is not a mapping
            table = getattr(self, part)
            for name, value in table.items() if isinstance(table, dict) else ():
                if not isinstance(value, dict):
                    raise ValueError(f"{part}.{name}: must be a mapping of settings, got {type(value).__name__} {repr(value)[:60]}")
        check_fields(self)
        for part in ("models", "datasets"):  # their names become record and episode file names
            for name in getattr(self, part):
                check_component(name, part)
        if not self.models:
            raise ValueError("models: at least one model under test (name: client settings)")
        for role, settings in [*((f"models.{k}", v) for k, v in self.models.items()), ("judge", self.judge)]:
            try:
                ClientConfig.from_mapping(dict(settings))
            except ValueError as err:
                raise ValueError(f"{role}: {err}") from None
        unknown = [c for c in self.conditions if c not in CONDITION_TAGS]
        if unknown or not self.conditions:
            raise ValueError(f"conditions: unknown {unknown} (choose from {', '.join(CONDITION_TAGS)})")
        if len(set(self.conditions)) != len(self.conditions):
            raise ValueError(f"conditions: each condition once, got {self.conditions}")
        if not self.datasets:
            raise ValueError("datasets: at least one dataset")
        for name, spec in self.datasets.items():
            if "kind" not in spec:
                raise ValueError(f"datasets.{name}: needs a kind (robot, sudoku, imagefolder, torchvision)")
        check_pixel_limit(self.max_image_pixels)
        if isinstance(self.reask, bool) or self.reask not in (0, 1):
            raise ValueError(f"reask: must be 0 or 1 (re-asks of an unreadable reply), got {self.reask!r}")
        if self.episodes_dir is not None and not self.episodes_dir.strip():
            raise ValueError("episodes_dir: empty (null: <output_dir>/episodes)")
        check_prompts(self.prompts, self.conditions)


def check_prompts(prompts: dict[str, Any], conditions: list[str]) -> None:
    """Every template is there, is a string and uses only its placeholders, written plainly; the
    condition's instruction is placed once (system prompt or query turn); every condition has an
    instruction and a description; no unknown template."""
    missing = sorted(set(PROMPT_FIELDS) - set(prompts))
    if missing:
        raise ValueError(f"prompts: missing template(s) {missing}")
    extra = sorted(set(prompts) - set(PROMPT_FIELDS) - set(PROMPT_TABLES))
    if extra:
        raise ValueError(f"prompts: unknown template(s) {extra} (known: {', '.join([*PROMPT_FIELDS, *PROMPT_TABLES])})")
    for name, allowed in PROMPT_FIELDS.items():
        check_template(name, prompts[name], allowed, may_be_empty=name in OPTIONAL_PROMPTS)
    placed = [name for name in INSTRUCTION_PLACES if "instruction" in placeholders(prompts[name])]
    if len(placed) != 1:
        where = "both have it" if placed else "neither has it"
        raise ValueError(f"prompts: {{instruction}} (the condition's instruction) must appear in exactly one of prompts.system, "
                         f"prompts.query; {where}")
    for part, allowed in PROMPT_TABLES.items():
        table = prompts.get(part)
        if not isinstance(table, dict):
            raise ValueError(f"prompts.{part}: must be a mapping condition -> text, got {type(table).__name__}")
        absent = [c for c in conditions if c not in table]
        if absent:
            raise ValueError(f"prompts.{part}: no entry for {absent}")
        odd = sorted(str(c) for c in table if c not in CONDITION_TAGS)
        if odd:
            raise ValueError(f"prompts.{part}: unknown condition(s) {odd} (choose from {', '.join(CONDITION_TAGS)})")
        for c, text in table.items():
            check_template(f"{part}.{c}", text, allowed, may_be_empty=part == "descriptions")
