"""Typed schema of ``conf/intervene.yaml`` (``cbm-intervene``); torch-free, so a bad value is
reported before anything heavy is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from cbm.config.budgets import check_budgets, check_costs
from cbm.config.names import (
    DEVICES,
    SPLITS,
)
from cbm.config.train import LoggerConfig, follow_logger
from cbm.core.paths import group_defaults, resolve_blackbox, resolve_checkpoint
from cbm.core.validation import to_dataclass

ENCODINGS = ("binary", "percentile", "binary_revealed")


@dataclass
class EncodingConfig:
    """``encoding`` of cbm-intervene: the kind, its percentiles and the split its levels come from."""

    kind: str = "binary"
    #: ``percentile``: the (absent, present) percentiles of the detector's training outputs.
    percentiles: list[float] = field(default_factory=lambda: [5.0, 95.0])
    #: Split the levels are measured on (the annotations of that split for ``binary_revealed``).
    split: str = "train"

    def __post_init__(self) -> None:
        if self.kind not in ENCODINGS:
            raise ValueError(f"encoding.kind must be one of {list(ENCODINGS)}, got '{self.kind}'")
        p = list(self.percentiles)
        if len(p) != 2 or not all(isinstance(v, int | float) and 0 <= v <= 100 for v in p) or not p[0] < p[1]:
            raise ValueError(f"encoding.percentiles must be [low, high] with 0 <= low < high <= 100, got {p}")
        self.percentiles = [float(v) for v in p]
        if self.split not in SPLITS:
            raise ValueError(f"encoding.split must be one of {SPLITS}, got '{self.split}'")


@dataclass
class CostConfig:
    """``costs`` of cbm-intervene: per-concept costs, so budgets ``ks`` count cost units
    (:mod:`cbm.interventions.costs`). Costs belong to the intervention study, not to the data: one
    trained model can be studied under several cost models (as concept-benchmark 0.4.1's Sudoku cost
    table does)."""

    #: ``{concept or glob: cost}`` plus ``rest`` (the others' cost, default 1); ``null``: no costs,
    #: ``ks`` count concepts.
    concepts: dict[str, Any] | None = None
    #: Policies with values (uncertainty) rank by value per cost; false: by value alone.
    per_cost: bool = True

    def __post_init__(self) -> None:
        self.concepts = check_costs(self.concepts, "costs.concepts")


@dataclass
class HierarchyConfig:
    """``hierarchy`` of cbm-intervene: the implications between the data's concepts (derived from
    their definitions, :mod:`synthetic.robot.hierarchy`); violations of the model are always counted."""

    #: An answer also sets the concepts it implies (revealing ``foot_block = 1`` reveals
    #: ``foot_pointy = 0``), its cost counted once. Off by default: concept-benchmark 0.4.1's tables
    #: reveal one concept per answer.
    propagate: bool = False


@dataclass
class ExchangeConfig:
    """``exchange`` of cbm-intervene: two interveners answer the same requests and one concept's answers
    are swapped between them (concept-benchmark 0.4.1's answer-exchange table), rows ``first+second``
    (the first's answers, the second's on ``concept``) and ``second+first``; all three null: off."""

    #: Name of an intervener of the grid (``intervener``).
    first: str | None = None
    #: Another intervener of the grid.
    second: str | None = None
    #: The concept whose answers are exchanged (a column, or a categorical concept: all its columns).
    concept: str | None = None

    def __post_init__(self) -> None:
        given = [v is not None for v in (self.first, self.second, self.concept)]
        if any(given) and not all(given):
            raise ValueError("exchange needs first, second and concept together (or none of them)")
        if all(given) and self.first == self.second:
            raise ValueError(f"exchange.first and exchange.second must be two different interveners, got '{self.first}' twice")

    @property
    def enabled(self) -> bool:
        """Whether an exchange is asked for."""
        return self.concept is not None


@dataclass
class InterveneConfig:
    #: A cbm-train run directory or a ``.ckpt``.
    checkpoint: str = MISSING
    split: str = "test"
    #: Selected policies, ``{name: settings}`` (the config group ``policy``; see conf/policy/).
    policy: dict[str, Any] = field(default_factory=dict)
    #: Selected interveners, ``{name: settings}`` (the config group ``intervener``).
    intervener: dict[str, Any] = field(default_factory=dict)
    #: Budgets: integers or ``max`` (all requestable concepts); cost units with ``costs.concepts``.
    ks: list[Any] = field(default_factory=lambda: [0, 1, 2, 3, "max"])
    #: Per-concept costs (``costs.concepts``) and value-per-cost ranking (``costs.per_cost``).
    costs: CostConfig = field(default_factory=lambda: CostConfig())
    #: Concept structure: ``hierarchy.propagate`` answers along implications.
    hierarchy: HierarchyConfig = field(default_factory=lambda: HierarchyConfig())
    #: Reveal the data's concept groups (CUB's 28 attribute groups): asking one concept of a group asks
    #: the group (one request, every concept of it answered) and ``ks`` count groups.
    groups: bool = False
    #: Answer exchange between two interveners on one concept (``exchange.first / second / concept``).
    exchange: ExchangeConfig = field(default_factory=lambda: ExchangeConfig())
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
    #: What the model reads for an answer: {kind: binary | percentile | binary_revealed, percentiles, split}
    #: (cbm.interventions.encodings).
    encoding: EncodingConfig = field(default_factory=lambda: EncodingConfig())
    #: W&B (``logger.wandb``; default ``enabled: null``: as the training run read, in its group).
    logger: LoggerConfig = field(default_factory=follow_logger)

    def __post_init__(self) -> None:
        # No selection given (a config built in code): the command line's defaults, from intervene.yaml.
        self.policy = self.policy or {n: {} for n in group_defaults("intervene", "policy")}
        self.intervener = self.intervener or {n: {} for n in group_defaults("intervene", "intervener")}
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got '{self.split}'")
        check_budgets(self.ks, "ks")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got '{self.device}'")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        missing = [n for n in (self.exchange.first, self.exchange.second) if self.exchange.enabled and n not in self.intervener]
        if missing:
            raise ValueError(f"exchange: {missing} not among the selected interveners {list(self.intervener)}")


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
