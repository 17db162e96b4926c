"""``cbm-intervene``: test-time concept interventions on a trained checkpoint.

Loads a ``cbm-train`` run (model + the data it was trained on), evaluates every
intervener x policy x budget ``k`` on one split and writes into the Hydra run
directory: ``results.csv``, ``results.json`` (rows + black-box accuracy + config),
``accuracy_vs_k.png`` and, with ``per_example=true``, ``per_example.pt``.

    cbm-intervene checkpoint=outputs/robot-cbm/2025-01-01_12-00-00 \\
        'policies=[random,responsiveness]' 'ks=[0,1,2,3,max]' blackbox=outputs/robot-blackbox/...
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import MISSING, DictConfig, OmegaConf

from cbm.config import ConfigError, to_dataclass
from cbm.experiments.common import CONF_DIR, DEVICES, clean_errors, resolve_device
from cbm.interventions.base import OracleIntervener
from cbm.interventions.engine import ResultsGrid, blackbox_accuracy, run_grid
from cbm.interventions.evaluate import resolve_ks
from cbm.interventions.interveners import ExpertIntervener, LLMIntervener
from cbm.interventions.policies import POLICIES, UNCERTAINTY_SOURCES, build_policy
from cbm.interventions.responsiveness import FAST_PATH_MODES, SEARCH_METHODS

log = logging.getLogger("cbm.intervene")

INTERVENERS = ("oracle", "expert", "llm")
SPLITS = ("train", "val", "calib", "test")


# ----------------------------------------------------------------------------- typed config
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


def validate(cfg: DictConfig | dict) -> InterveneConfig:
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    return to_dataclass(InterveneConfig, raw, "config")


# ----------------------------------------------------------------------------- building blocks
def concept_indices(names: list[str] | None, concept_names: list[str]) -> list[int] | None:
    """Indices of the requestable concepts; an unknown name is an error."""
    if names is None:
        return None
    unknown = [n for n in names if n not in concept_names]
    if unknown:
        raise ValueError(f"concepts: unknown concept name(s) {unknown} (the model has {concept_names})")
    if not names:
        raise ValueError("concepts: the list of requestable concepts is empty")
    return sorted({concept_names.index(n) for n in names})


def load_client(spec: str, kwargs: dict[str, Any]) -> Any:
    """Import ``module:callable`` and call it with ``kwargs``."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"llm.client must look like 'module:callable', got '{spec}'")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"llm.client: cannot import '{spec}' ({type(err).__name__}: {err})") from None
    return factory(**kwargs)


def build_interveners(cfg: InterveneConfig, concept_names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in cfg.interveners:
        if name == "oracle":
            out[name] = OracleIntervener()
        elif name == "expert":
            out[name] = ExpertIntervener.from_names(concept_names, cfg.expert.accuracy, cfg.expert.per_concept, cfg.seed)
        else:
            llm = cfg.llm
            out[name] = LLMIntervener(
                load_client(llm.client or "", llm.client_kwargs), concept_names, llm.questions,
                llm.on_unparseable, llm.retries, subject=llm.subject,
            )
    return out


def build_policies(cfg: InterveneConfig, allowed: list[int] | None, train_labels: torch.Tensor | None) -> dict[str, Any]:
    r = cfg.responsiveness
    resp = {
        "threshold": r.threshold, "prior": r.prior, "search": r.search, "exact_max_candidates": r.exact_max_candidates,
        "max_assignments": r.max_assignments, "chunk_mb": r.chunk_mb, "fast_path": r.fast_path,
    }
    return {
        name: build_policy(
            name, seed=cfg.seed, allowed=allowed, uncertainty_source=cfg.uncertainty.source,
            responsiveness=resp, labels=train_labels if r.prior == "empirical" else None,
        )
        for name in cfg.policies
    }


# ----------------------------------------------------------------------------- the app
def run(cfg: DictConfig | dict | InterveneConfig) -> ResultsGrid:
    """Evaluate the configured grid; write results into ``output_dir`` and return them."""
    from cbm.training.checkpoint import load_run

    c = cfg if isinstance(cfg, InterveneConfig) else validate(cfg)
    out_dir = Path(c.output_dir)
    torch.manual_seed(c.seed)
    model, dm, data_cfg = load_run(c.checkpoint, c.cache_dir, eval_batch_size=c.batch_size, data_overrides=c.data)
    if not model.has_concepts:
        raise ValueError(f"{c.checkpoint} is a black-box model: there are no concepts to intervene on")
    device = resolve_device(c.device)
    model.to(device).eval()
    dm.to_device(device)  # batches are gathered where the model runs
    names = list(model.info.concept_names)
    allowed = concept_indices(c.concepts, names)
    ks = resolve_ks(c.ks, len(allowed) if allowed is not None else len(names))
    interveners = build_interveners(c, names)
    train_labels = dm.split("train").tensors["c"] if c.responsiveness.prior == "empirical" and "responsiveness" in c.policies else None
    if train_labels is not None and len(train_labels) == 0:
        raise ValueError("responsiveness.prior=empirical needs training concept labels, but the train split is empty")
    policies = build_policies(c, allowed, train_labels)
    loader = dm.loader(c.split)
    bb = None
    if c.blackbox:
        bb = blackbox_accuracy(c.blackbox, model, loader, split=c.split)
    grid = run_grid(model, loader, interveners, policies, ks, per_example=c.per_example, blackbox_accuracy=bb)
    grid.meta.update(
        checkpoint=str(c.checkpoint),
        dataset=model.info.dataset,
        model=model.cfg.name,
        split=c.split,
        concepts=[names[j] for j in allowed] if allowed is not None else names,
        device=str(device),
        config=OmegaConf.to_container(OmegaConf.structured(c)),
        title=f"{model.info.dataset} / {model.cfg.name} ({c.split})",
    )
    for name, iv in interveners.items():
        if isinstance(iv, LLMIntervener):
            grid.meta[f"{name}_queries"], grid.meta[f"{name}_fallbacks"] = iv.n_queries, iv.n_fallbacks
    paths = grid.save(out_dir)
    print(grid.table())
    if bb is not None:
        print(f"black-box accuracy: {100 * bb:.2f}%")
    print(f"results: {paths['csv']}  plot: {paths['plot']}")
    return grid


@hydra.main(config_path=CONF_DIR, config_name="intervene", version_base="1.3")
@clean_errors("cbm-intervene")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()

__all__ = ["ConfigError", "InterveneConfig", "main", "run", "validate"]
