"""Typed schema of ``conf/experiment.yaml`` (``cbm-experiment``); torch-free.

An experiment is a grid of training cells (data setting x architecture x seed), each a
``cbm-train`` run given by command-line overrides, followed by analysis cells on every trained
concept model (``cbm-intervene`` and/or ``cbm-automate``), then one report. Presets live in
``conf/experiment/`` and are selected with ``cbm-experiment +experiment=<name>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cbm.config.budgets import check_budgets, check_costs
from cbm.config.names import CALIBRATION_METHODS
from cbm.config.train import WandbSettings
from cbm.core.safe_paths import check_component
from cbm.core.validation import ConfigError, to_dataclass

#: How cells start (``launcher``).
LAUNCHERS = ("fork", "spawn")
#: ``data_seed``: what every cell's ``data.seed`` is.
DATA_SEEDS = ("fixed", "seed")
#: Setting and model names become directory names (and :func:`check_component` holds for them).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve_seeds(seeds: Any) -> list[int]:
    """``seeds``: a count ``n >= 1`` (seeds ``0..n-1``) or a list of distinct integers ``>= 0``."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds: a count must be >= 1 (seeds=10 runs seeds 0..9), got {seeds}")
        return list(range(seeds))
    ok = isinstance(seeds, list | tuple) and seeds and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    if not ok or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ValueError(f"seeds must be a count (seeds=10) or distinct integers >= 0 ('seeds=[0,1,2]'), got {seeds!r}")
    return list(seeds)


@dataclass
class InterveneStage:
    """The ``cbm-intervene`` run on every concept model (black box paired for Gain)."""

    intervener: list[str] = field(default_factory=lambda: ["oracle", "expert", "llm"])
    policy: list[str] = field(default_factory=lambda: ["random", "uncertainty", "responsiveness"])
    #: Concept budgets k passed as cbm-intervene ``ks``: integers or ``max`` (all requestable concepts).
    ks: list[Any] = field(default_factory=lambda: [0, 1, 3, "max"])
    #: Further cbm-intervene overrides, e.g. ``intervener.expert.accuracy=0.8``.
    overrides: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_budgets(self.ks, "intervene.ks")
        if not self.intervener or not self.policy:
            raise ValueError("intervene: needs at least one intervener and one policy")


@dataclass
class AutomateStage:
    """The ``cbm-automate`` run on every model (the black box at k = 0)."""

    #: Target selective accuracy in (0, 1] the abstention threshold is calibrated to.
    target_accuracy: float = 0.90
    #: Concept budgets k: integers or ``max`` (all concepts); the black box runs k = 0 only.
    ks: list[Any] = field(default_factory=lambda: [0, 3, "max"])
    #: The one policy that picks the concepts to ask (a ``conf/policy/`` name, e.g. ``uncertainty``).
    policy: str = "random"
    #: The one intervener that answers them (a ``conf/intervener/`` name: ``oracle``, ``expert``, ``llm``).
    intervener: str = "oracle"
    #: Threshold calibration: ``empirical`` (no guarantee), ``sgr`` or ``ltt`` (guaranteed w.p. 1 - delta).
    method: str = "ltt"
    #: Further cbm-automate overrides, e.g. ``delta=0.05``.
    overrides: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_budgets(self.ks, "automate.ks")
        if not 0.0 < self.target_accuracy <= 1.0:
            raise ValueError(f"automate.target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.method not in CALIBRATION_METHODS:
            raise ValueError(f"automate.method must be one of {CALIBRATION_METHODS}, got '{self.method}'")


@dataclass
class Select:
    """Run only these entries of ``settings`` / ``models`` (``None``: all); a smoke preset narrows
    its full preset this way, and ``select.models=[blackbox,cbm]`` does on the command line."""

    #: Names of ``settings`` entries to run; ``null``: all.
    settings: list[str] | None = None
    #: Names of ``models`` entries to run; ``null``: all (without the black box entry: no Gain column).
    models: list[str] | None = None


@dataclass
class Compare:
    """Paired differences over seeds in the report (mean and 95% CI of the per-seed differences).

    Gain (a concept model minus its black box) is always paired. ``models``: pairs ``[a, b]`` of
    ``models`` entries compared on the same setting and seed (e.g. ``[cbm_aligned, cbm]``: constrained
    minus unconstrained). ``policies``: pairs ``[a, b]`` of intervene policies on the same trained
    model (``null``: every policy minus ``random`` when the grid has it)."""

    models: list[list[str]] = field(default_factory=list)
    policies: list[list[str]] | None = None

    def check(self, models: dict[str, Any], policies: list[str]) -> None:
        for where, pairs, have in (("models", self.models, list(models)), ("policies", self.policies or [], policies)):
            for pair in pairs:
                if len(pair) != 2 or pair[0] == pair[1]:
                    raise ValueError(f"compare.{where}: each entry is a pair of two different names [a, b], got {pair}")
                unknown = [n for n in pair if n not in have]
                if unknown:
                    raise ValueError(f"compare.{where}: unknown {unknown} (the experiment has {have})")

    def policy_pairs(self, policies: list[str]) -> list[list[str]]:
        if self.policies is not None:
            return [list(p) for p in self.policies]
        return [[p, "random"] for p in policies if p != "random"] if "random" in policies else []


@dataclass
class ExperimentConfig:
    """Typed schema of ``conf/experiment.yaml`` merged with a preset."""

    name: str = ""
    #: Free text shown under the report's title (and stored in the experiment's manifest).
    description: str = ""
    #: Where every cell's run lives; stable per experiment, so a rerun skips finished cells.
    output_dir: str = "experiments"
    cache_dir: str | None = ".cache/cbm"
    #: Seeds of every cell: a count (``seeds=10``: 0..9) or a list (``'seeds=[0,3,7]'``).
    seeds: Any = field(default_factory=lambda: [0])
    #: ``fixed``: every seed trains on the data the settings give (``data.seed`` as set there; the
    #: SE over seeds is training noise only); ``seed``: each cell's ``data.seed`` is its seed (new
    #: labels, splits and renders per seed, as concept-benchmark 0.4.1 redraws them).
    data_seed: str = "fixed"
    #: Training cells run side by side (each gets cores // jobs threads).
    jobs: int = 1
    #: How a cell starts: ``fork`` from one interpreter that imported torch and Lightning once (a
    #: cell then starts in milliseconds instead of 10-20 s; Linux only, elsewhere ``spawn``), or
    #: ``spawn``: a fresh ``python -m`` process per cell.
    launcher: str = "fork"
    #: cbm-train overrides every training cell gets (e.g. ``trainer.max_epochs=10``).
    train: list[str] = field(default_factory=list)
    #: Data settings: name -> cbm-train overrides (``data=robot_paper``, ``data.concept_noise=0.2``).
    settings: dict[str, list[str]] = field(default_factory=dict)
    #: Architectures: name -> cbm-train overrides (``model=cem``, ``model.training=joint``); they come
    #: after ``settings`` and ``train``, so a model's own value of a key wins.
    models: dict[str, list[str]] = field(default_factory=dict)
    #: The entry of ``models`` that is the black box, trained once per setting and seed and paired
    #: with every concept model of that setting and seed for Gain (``null``: none).
    blackbox: str | None = "blackbox"
    select: Select = field(default_factory=Select)
    intervene: InterveneStage | None = None
    automate: AutomateStage | None = None
    #: Paired differences over seeds shown in the report (Gain is always paired with its black box).
    compare: Compare = field(default_factory=Compare)
    #: The paper's numbers shown beside ours: ``{table: {setting: {model: {column: value}}}}``; the
    #: ``interventions`` numbers stand beside the oracle rows of ``policy`` (default ``random``); ``null``
    #: drops the numbers a preset inherits (another rule's, say).
    paper: dict[str, Any] | None = field(default_factory=dict)
    #: Prices of the report's "Cost of a check" table: ``{name: cost spec}`` (the spec of
    #: ``cbm-intervene costs.concepts``: ``{concept or glob: cost, rest: 1}``); every automation cell's
    #: NWA is recomputed under each, ``coverage - sum_j cost_j * share asked for j / m`` (0.4.1).
    cost_models: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Log every cell and the report to Weights & Biases, one group (the experiment's name).
    wandb: bool = False
    #: Project, mode, tags ... of those runs (``logger.wandb.*`` of every cell).
    wandb_settings: WandbSettings = field(default_factory=WandbSettings)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("no experiment chosen: cbm-experiment +experiment=<name> (see conf/experiment/)")
        self.paper = self.paper or {}
        check_component(self.name, "name")  # the default output_dir is experiments/<name>
        for where, names in (("settings", self.settings), ("models", self.models)):
            if not names:
                raise ValueError(f"{where}: the experiment needs at least one entry")
            for n in names:
                check_component(n, where)
                if not NAME.match(str(n)):
                    raise ValueError(f"{where}: '{n}' is not usable as a directory name (letters, digits, _ . -)")
        for name, spec in self.cost_models.items():
            check_costs(spec, f"cost_models.{name}")
        self.seeds = resolve_seeds(self.seeds)
        if self.data_seed not in DATA_SEEDS:
            raise ValueError(f"data_seed must be one of {list(DATA_SEEDS)}, got '{self.data_seed}'")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {list(LAUNCHERS)}, got '{self.launcher}'")
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {self.jobs}")
        for where, chosen, have in (("settings", self.select.settings, self.settings), ("models", self.select.models, self.models)):
            unknown = sorted(set(chosen or []) - set(have))
            if unknown:
                raise ValueError(f"select.{where}: unknown {unknown} (the preset has {list(have)})")
        if self.select.settings is not None:
            self.settings = {k: v for k, v in self.settings.items() if k in self.select.settings}
        if self.select.models is not None:
            self.models = {k: v for k, v in self.models.items() if k in self.select.models}
        if not self.settings or not self.models:
            raise ValueError("select: nothing left to run")
        if self.blackbox is not None and self.blackbox not in self.models:
            self.blackbox = None  # not run here: no Gain column
        self.compare.models = [p for p in self.compare.models if all(n in self.models for n in p) or not self.select.models]
        self.compare.check(self.models, self.intervene.policy if self.intervene else [])


def validate(cfg: DictConfig | dict) -> ExperimentConfig:
    """Typed config; raises ConfigError with one clear line."""
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    if not raw.get("name"):
        raise ConfigError("no experiment chosen: cbm-experiment +experiment=<name> (see conf/experiment/)")
    return to_dataclass(ExperimentConfig, raw, "experiment")
