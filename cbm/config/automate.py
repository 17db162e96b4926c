"""Typed schema of ``conf/automate.yaml`` (``cbm-automate``); torch-free, so a bad value is
reported before anything heavy is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cbm.config.budgets import check_budgets, check_costs
from cbm.config.names import CALIBRATION_METHODS as METHODS
from cbm.config.names import DEVICES, SCORES
from cbm.config.train import LoggerConfig, follow_logger
from cbm.core.paths import group_defaults, resolve_checkpoint
from cbm.core.validation import ConfigError, to_dataclass

#: One abstention threshold, or one per predicted class (:mod:`cbm.selective.classwise`).
THRESHOLDS = ("global", "classwise")
#: Splits ``cbm-automate`` may calibrate on (the test split never).
CALIBRATION_SPLITS = ("calib", "val")


@dataclass
class AutomateConfig:
    """Typed schema of ``conf/automate.yaml``."""

    checkpoint: str = ""
    target_accuracy: float = 0.90
    #: Further targets (the accuracy-target sweep, concept-benchmark 0.4.1's tau = 0.90 / 0.95 / 0.99):
    #: each calibrated on the same split's predictions and run through the same flow; the results
    #: are ``automation.json``'s ``sweep`` and ``automation_sweep.csv``.
    sweep_targets: list[float] = field(default_factory=list)
    #: Further threshold rules (``classwise`` beside ``threshold=global``, or back), each calibrated on
    #: the same split's predictions at ``target_accuracy`` and run through the same flow: 0.4.1's
    #: class-wise thresholds side by side with its global one, ``automation.json``'s
    #: ``threshold_sweep`` and ``automation_thresholds.csv``.
    sweep_thresholds: list[str] = field(default_factory=list)
    delta: float = 0.1
    method: str = "ltt"
    #: ``global``: one threshold for every prediction; ``classwise``: one per predicted class, each
    #: calibrated on that class's predictions (concept-benchmark 0.4.1's ``classwise_thresholds``).
    threshold: str = "global"
    score: str = "probability"
    #: Split the threshold (and Platt scaling) is fitted on: ``calib``, or ``val`` (concept-benchmark
    #: 0.4.1 fits both on its validation boards, which also chose the model's epoch).
    calib_split: str = "calib"
    #: Platt-scale a two-class model's ``P(y=1)`` on that split before the threshold, as 0.4.1 does
    #: (``sigmoid(a logit(p) + b)``, sklearn ``LogisticRegression(C=1e6)``); the same scaling is applied
    #: to every prediction the flow scores, before and after interventions.
    platt: bool = False
    #: The policy, ``{name: settings}`` (the config group ``policy``; exactly one).
    policy: dict[str, Any] = field(default_factory=dict)
    #: The intervener, ``{name: settings}`` (the config group ``intervener``; exactly one).
    intervener: dict[str, Any] = field(default_factory=dict)
    ks: list[Any] = field(default_factory=lambda: [0, 1, 3, "max"])
    costs: dict[str, float] | None = None
    data_overrides: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    batch_size: int = 256
    eval_batch_size: int = 1024
    #: auto | cpu | cuda: where calibration and the automation flow run.
    device: str = "auto"
    cache_dir: str | None = ".cache/cbm"
    output_dir: str = "."
    #: W&B (``logger.wandb``; default ``enabled: null``: as the training run read, in its group).
    logger: LoggerConfig = field(default_factory=follow_logger)

    def __post_init__(self) -> None:
        # No selection given (a config built in code): the command line's defaults, from automate.yaml.
        self.policy = self.policy or {n: {} for n in group_defaults("automate", "policy")}
        self.intervener = self.intervener or {n: {} for n in group_defaults("automate", "intervener")}
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got '{self.device}'")
        if not self.checkpoint or self.checkpoint == "???":
            raise ValueError(
                "checkpoint is required: cbm-automate checkpoint=<cbm-train run dir or .ckpt file>"
            )
        if not 0.0 < self.target_accuracy <= 1.0:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        bad = [t for t in self.sweep_targets if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 < t <= 1.0]
        if bad:
            raise ValueError(f"sweep_targets must be accuracies in (0, 1], got {bad}")
        if len({float(t) for t in self.sweep_targets} | {float(self.target_accuracy)}) != len(self.sweep_targets) + 1:
            raise ValueError(f"sweep_targets lists a target twice or repeats target_accuracy={self.target_accuracy}: {self.sweep_targets}")
        self.sweep_targets = [float(t) for t in self.sweep_targets]
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got '{self.method}'")
        if self.threshold not in THRESHOLDS:
            raise ValueError(f"threshold must be one of {THRESHOLDS}, got '{self.threshold}'")
        bad = [t for t in self.sweep_thresholds if t not in THRESHOLDS]
        if bad:
            raise ValueError(f"sweep_thresholds must be rules from {THRESHOLDS}, got {bad}")
        if len(set(self.sweep_thresholds) | {self.threshold}) != len(self.sweep_thresholds) + 1:
            raise ValueError(f"sweep_thresholds lists a rule twice or repeats threshold={self.threshold}: {self.sweep_thresholds}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got '{self.score}'")
        if self.calib_split not in CALIBRATION_SPLITS:
            raise ValueError(f"calib_split must be one of {CALIBRATION_SPLITS}, got '{self.calib_split}'")
        if self.platt and self.score != "probability":
            raise ValueError("platt=true scales the predicted probability: it needs score=probability")
        check_budgets(self.ks, "ks")
        check_costs(self.costs, "costs")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("batch_size and eval_batch_size must be >= 1")


def validate(cfg: DictConfig | dict, check_paths: bool = True) -> AutomateConfig:
    """Typed config; raises ConfigError with one clear line."""
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    if raw.get("checkpoint") in (None, "", "???"):
        raise ConfigError("checkpoint is required: cbm-automate checkpoint=<cbm-train run dir or .ckpt file>")
    c = to_dataclass(AutomateConfig, raw, "config")
    if check_paths:  # before any work: a missing file is one line, not a half-made run
        resolve_checkpoint(c.checkpoint)
    return c
