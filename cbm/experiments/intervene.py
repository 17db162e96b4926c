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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from cbm.config import ConfigError
from cbm.config.intervene import InterveneConfig, validate
from cbm.experiments.cli import hydra_app
from cbm.experiments.common import one_line, resolve_device, say

if TYPE_CHECKING:  # heavy (torch) modules load only once the config is valid
    import torch

    from cbm.interventions.engine import ResultsGrid

log = logging.getLogger("cbm.intervene")

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
    if not callable(factory):
        raise ValueError(f"llm.client: '{spec}' is not callable")
    try:
        client = factory(**kwargs)
    except TypeError as err:
        raise ValueError(f"llm.client: '{spec}'(**llm.client_kwargs) failed: {one_line(err)}") from None
    if not callable(getattr(client, "ask", None)):
        raise ValueError(f"llm.client: '{spec}' returned a {type(client).__name__}, not a client with ask(prompt, image=None)")
    return client


def build_interveners(cfg: InterveneConfig, concept_names: list[str]) -> dict[str, Any]:
    from cbm.interventions.base import OracleIntervener
    from cbm.interventions.interveners import ExpertIntervener, LLMIntervener

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
    from cbm.interventions.policies import build_policy

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
    import torch

    from cbm.interventions.engine import blackbox_accuracy, run_grid
    from cbm.interventions.evaluate import resolve_ks
    from cbm.interventions.interveners import LLMIntervener
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
    say(grid.table())
    if bb is not None:
        say(f"black-box accuracy: {100 * bb:.2f}%")
    say(f"results: {paths['csv']}  plot: {paths['plot']}")
    return grid


main = hydra_app(
    "cbm-intervene",
    "intervene",
    run,
    validate,
    "Test-time concept interventions on a trained run: every intervener x policy x budget k;\nwrites results.csv / results.json / accuracy_vs_k.png.",
    ['checkpoint=outputs/robot-cbm/<time>', "checkpoint=<run> 'policies=[random,responsiveness]' 'ks=[0,1,2,3,max]' blackbox=<black-box run>", 'checkpoint=<run> interveners=[expert] expert.accuracy=0.9 device=cuda'],
)


if __name__ == "__main__":
    main()

__all__ = ["ConfigError", "InterveneConfig", "main", "run", "validate"]
