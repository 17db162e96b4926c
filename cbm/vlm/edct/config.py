"""Typed settings of ``cbm-edct`` (``conf/edct.yaml``), validated before any request."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

from cbm.vlm.config import ClientConfig

ANSWER_MODES = ("generate", "score")
#: ``synthetic``: the exact editor of the item source (robot parts, Sudoku cells).
EDITOR_KINDS = ("synthetic", "synthetic_robot", "synthetic_sudoku", "hosted", "diffusers")
ITEM_SOURCES = ("robot", "sudoku")
#: Prompt templates every run needs, and the placeholders each may use.
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    "answer": ("question", "options"),
    "extract": ("question", "options", "answer", "explanation", "k"),
    "chain": ("question", "answer", "explanation", "concepts", "n"),
    "judge": ("question", "options", "answer", "explanation", "edit", "new_answer", "new_explanation"),
}


@dataclass
class ItemsConfig:
    source: str = "robot"
    split: str = "test"
    n: int = 20  # items (the first n positions of the split, or a seeded sample)
    sample: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.source not in ITEM_SOURCES:
            raise ValueError(f"items.source: unknown source '{self.source}' (choose from: {', '.join(ITEM_SOURCES)})")
        if self.n < 1:
            raise ValueError(f"items.n: must be >= 1, got {self.n}")


@dataclass
class BootstrapConfig:
    n_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_resamples < 100:
            raise ValueError(f"bootstrap.n_resamples: must be >= 100, got {self.n_resamples}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"bootstrap.confidence: must lie in (0.5, 1), got {self.confidence}")


@dataclass
class EDCTConfig:
    output_dir: str
    vlm: dict[str, Any]
    llm: dict[str, Any]
    judge: dict[str, Any]
    prompts: dict[str, str]
    judge2: dict[str, Any] | None = None
    data: dict[str, Any] = field(default_factory=lambda: {"name": "robot"})
    cache_dir: str | None = None
    items: ItemsConfig = field(default_factory=ItemsConfig)
    question: str = "Is this robot a Glorp or a Drent?"
    options: list[str] | None = None  # null: the dataset's class names
    answer_by: str = "generate"
    k: int = 2
    editor: dict[str, Any] = field(default_factory=lambda: {"kind": "synthetic"})
    verify: dict[str, Any] = field(default_factory=dict)
    #: Masks for editors that report none (hosted, diffusion): ``{target: module:callable, kwargs: {...}}``
    #: building a :class:`cbm.vlm.verify.Segmenter` (a detector + segmenter); null: such edits go unverified.
    segmenter: dict[str, Any] | None = None
    verify_retries: int = 1
    gate_exact_edits: bool = False  # exact (synthetic) edits: record the verifier's verdict, or stop the chain on a fail
    workers: int = 4
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    progress: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.items, dict):
            self.items = ItemsConfig(**self.items)
        if isinstance(self.bootstrap, dict):
            self.bootstrap = BootstrapConfig(**self.bootstrap)
        for role in ("vlm", "llm", "judge", "judge2"):
            settings = getattr(self, role)
            if settings is None:
                continue
            try:
                ClientConfig.from_mapping(dict(settings))
            except ValueError as err:
                raise ValueError(f"{role}: {err}") from None
        if self.answer_by not in ANSWER_MODES:
            raise ValueError(f"answer_by: '{self.answer_by}' is not one of {', '.join(ANSWER_MODES)}")
        if self.answer_by == "score" and dict(self.vlm).get("backend") != "local":
            raise ValueError("answer_by=score needs vlm.backend=local (hosted endpoints return text, not option log-probabilities)")
        if not 1 <= self.k <= 10:
            raise ValueError(f"k: must lie in [1, 10], got {self.k}")
        if self.verify_retries < 0 or self.workers < 1:
            raise ValueError("verify_retries must be >= 0 and workers >= 1")
        kind = dict(self.editor).get("kind")
        if kind not in EDITOR_KINDS:
            raise ValueError(f"editor.kind: unknown editor '{kind}' (choose from: {', '.join(EDITOR_KINDS)})")
        if kind in ("synthetic_robot", "synthetic_sudoku") and kind != f"synthetic_{self.items.source}":
            raise ValueError(f"editor.kind={kind} cannot edit items.source={self.items.source} (use editor.kind=synthetic)")
        if self.items.source != dict(self.data).get("name", "").split("_")[0]:
            raise ValueError(f"items.source={self.items.source} needs data={self.items.source} (got data.name={dict(self.data).get('name')})")
        if self.options is not None and len(self.options) < 2:
            raise ValueError("options: at least two answer options (or null for the class names)")
        if self.segmenter is not None and not str(dict(self.segmenter).get("target", "")).count(":") == 1:
            raise ValueError("segmenter.target: must look like 'module:callable' (a factory returning a Segmenter)")
        check_prompts(self.prompts)
        from cbm.vlm.verify import VerifyConfig

        try:
            VerifyConfig(**dict(self.verify))
        except TypeError as err:
            raise ValueError(f"verify: {err}") from None


def check_prompts(prompts: dict[str, str]) -> None:
    """Every stage has a template, and each template uses only its stage's placeholders."""
    missing = sorted(set(PROMPT_FIELDS) - set(prompts))
    if missing:
        raise ValueError(f"prompts: missing template(s) {missing}")
    for name, allowed in PROMPT_FIELDS.items():
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(prompts[name]) if f}
        except ValueError as err:
            raise ValueError(f"prompts.{name}: bad template ({err}); write literal braces as {{{{ }}}}") from None
        unknown = sorted(used - set(allowed))
        if unknown:
            raise ValueError(f"prompts.{name}: unknown placeholder(s) {unknown} (available: {', '.join(allowed)})")
