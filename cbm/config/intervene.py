"""Typed schema of ``conf/intervene.yaml`` (``cbm-intervene``); torch-free, so a bad value is
reported before anything heavy is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from cbm.config.names import (
    DEVICES,
    FAST_PATH_MODES,
    INTERVENERS,
    POLICIES,
    SEARCH_METHODS,
    SPLITS,
    UNCERTAINTY_SOURCES,
)
from cbm.config.paths import resolve_blackbox, resolve_checkpoint
from cbm.config.validate import to_dataclass


@dataclass
class ExpertConfig:
    #: Probability that the simulated expert gives the true value.
    accuracy: float = 0.8
    #: Per-concept overrides, by concept name.
    per_concept: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, a in {"accuracy": self.accuracy, **self.per_concept}.items():
            if not 0.0 <= a <= 1.0:
                raise ValueError(f"expert accuracy for {name} must be in [0, 1], got {a}")


@dataclass
class UncertaintyConfig:
    #: auto (architecture's own uncertainty when it has one) | probs (closest to 0.5) | state
    source: str = "auto"

    def __post_init__(self) -> None:
        if self.source not in UNCERTAINTY_SOURCES:
            raise ValueError(f"uncertainty.source must be one of {UNCERTAINTY_SOURCES}, got '{self.source}'")


@dataclass
class ResponsivenessConfig:
    threshold: float = 0.2
    #: independent (model probabilities) | empirical (joint of the training concept labels)
    prior: str = "independent"
    #: auto | exact | greedy
    search: str = "auto"
    exact_max_candidates: int = 100_000
    max_assignments: int = 256
    chunk_mb: float = 256.0
    #: auto | off (off forces the generic intervene+predict path)
    fast_path: str = "auto"

    def __post_init__(self) -> None:
        if self.prior not in ("independent", "empirical"):
            raise ValueError(f"responsiveness.prior must be 'independent' or 'empirical', got '{self.prior}'")
        if self.search not in SEARCH_METHODS:
            raise ValueError(f"responsiveness.search must be one of {SEARCH_METHODS}, got '{self.search}'")
        if self.fast_path not in FAST_PATH_MODES:
            raise ValueError(f"responsiveness.fast_path must be one of {FAST_PATH_MODES}, got '{self.fast_path}'")
        if not 0.0 <= self.threshold < 1.0:
            raise ValueError(f"responsiveness.threshold must be in [0, 1), got {self.threshold}")
        if self.exact_max_candidates < 0 or self.max_assignments < 2 or self.chunk_mb <= 0:
            raise ValueError("responsiveness: exact_max_candidates >= 0, max_assignments >= 2, chunk_mb > 0")


@dataclass
class LLMConfig:
    #: ``module:callable`` returning an object with ``ask(prompt, image=None) -> str``.
    client: str | None = None
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    #: error | model (keep the model's probability, counted and logged)
    on_unparseable: str = "error"
    retries: int = 1
    questions: dict[str, str] = field(default_factory=dict)
    subject: str = "example"

    def __post_init__(self) -> None:
        if self.on_unparseable not in ("error", "model"):
            raise ValueError(f"llm.on_unparseable must be 'error' or 'model', got '{self.on_unparseable}'")
        if self.retries < 0:
            raise ValueError("llm.retries must be >= 0")


@dataclass
class InterveneConfig:
    #: A cbm-train run directory or a ``.ckpt``.
    checkpoint: str = MISSING
    split: str = "test"
    interveners: list[str] = field(default_factory=lambda: ["oracle", "expert"])
    policies: list[str] = field(default_factory=lambda: ["random", "uncertainty", "responsiveness"])
    #: Budgets: integers or ``max`` (all requestable concepts).
    ks: list[Any] = field(default_factory=lambda: [0, 1, 2, 3, "max"])
    #: Names of the concepts policies may request (default all).
    concepts: list[str] | None = None
    #: Black-box baseline for the gain: run directory, ``.ckpt`` or ``metrics.json``.
    blackbox: str | None = None
    seed: int = 0
    batch_size: int = 1024
    #: auto | cpu | cuda
    device: str = "auto"
    per_example: bool = False
    cache_dir: str | None = ".cache/cbm"
    output_dir: str = "."
    #: Overrides of the data config stored in the checkpoint (e.g. test size); concepts must not change.
    data: dict[str, Any] = field(default_factory=dict)
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    uncertainty: UncertaintyConfig = field(default_factory=UncertaintyConfig)
    responsiveness: ResponsivenessConfig = field(default_factory=ResponsivenessConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got '{self.split}'")
        for name in self.interveners:
            if name not in INTERVENERS:
                raise ValueError(f"unknown intervener '{name}', expected one of {list(INTERVENERS)}")
        for name in self.policies:
            if name not in POLICIES:
                raise ValueError(f"unknown policy '{name}', expected one of {list(POLICIES)}")
        if not self.interveners or not self.policies or not self.ks:
            raise ValueError("interveners, policies and ks must be non-empty")
        for k in self.ks:
            if not (k == "max" or (isinstance(k, int) and not isinstance(k, bool) and k >= 0)):
                raise ValueError(f"ks entries must be integers >= 0 or 'max', got {k!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got '{self.device}'")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if "llm" in self.interveners and not self.llm.client:
            raise ValueError("intervener 'llm' needs llm.client (a 'module:callable' that returns the client)")


def validate(cfg: DictConfig | dict, check_paths: bool = True) -> InterveneConfig:
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    c = to_dataclass(InterveneConfig, raw, "config")
    if check_paths:  # before any work: a missing file is one line, not a half-made run
        resolve_checkpoint(c.checkpoint)
        if c.blackbox:
            resolve_blackbox(c.blackbox)
    return c
