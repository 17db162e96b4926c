"""``cbm-intervene``: test-time concept interventions on a trained checkpoint.

Loads a ``cbm-train`` run (model + the data it was trained on), evaluates every
intervener x policy x budget ``k`` on one split and writes into the Hydra run
directory: ``results.csv``, ``results.json`` (rows + black-box accuracy + config),
``accuracy_vs_k.png`` and, with ``per_example=true``, ``per_example.pt``.

    cbm-intervene checkpoint=outputs/robot-cbm/2025-01-01_12-00-00 \\
        'policy=[random,responsiveness]' 'ks=[0,1,2,3,max]' blackbox=outputs/robot-blackbox/...
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from cbm.config.intervene import InterveneConfig
from cbm.config.intervene import validate as validate_schema
from cbm.core.cli import hydra_app
from cbm.core.common import say
from cbm.core.validation import ConfigError
from cbm.tracking import wandb_run
from cbm.training.device import resolve_device

if TYPE_CHECKING:  # heavy (torch) modules load only once the config is valid

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


def validate(cfg: DictConfig | dict, check_paths: bool = True) -> InterveneConfig:
    """The typed config, every selected policy and intervener validated by its own schema."""
    from cbm.interventions import registry

    c = validate_schema(cfg, check_paths)
    registry.validate_all("policy", c.policy)
    registry.validate_all("intervener", c.intervener)
    if c.device == "cuda":  # refused before any data is made, not after
        resolve_device(c.device)
    return c


def build_components(c: InterveneConfig, ctx) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(interveners, policies)`` by name, built through the registry."""
    from cbm.interventions import registry

    interveners = {name: registry.build("intervener", name, s, ctx) for name, s in c.intervener.items()}
    policies = {name: registry.build("policy", name, s, ctx) for name, s in c.policy.items()}
    return interveners, policies


def text_describer(dm: Any) -> Any:
    """``(batch, i) -> str`` for token-id data with a vocabulary (the text modality): the
    example's words, so an LLM intervener reads the description the model was trained on."""
    data = getattr(dm, "data", None)
    vocab = (getattr(data, "info", None) or {}).get("vocab") if data is not None else None
    if not vocab:
        return None

    def describe(batch: dict, i: int) -> str:
        ids = batch["x"][i].tolist()
        return "Description: " + " ".join(vocab[t] for t in ids if t)

    return describe


def reveal_units(c: InterveneConfig, model: Any, dm: Any, names: list[str]) -> Any:
    """The units one answer reveals (``long [m]``), ``None`` for single concepts: the data's concept
    groups with ``groups=true`` (``info['intervention_groups']``), else the model's categorical concepts."""
    from cbm.models.concept_types import ConceptTypes

    if not c.groups:
        return model.types.unit_of if model.types.groups else None
    declared = (getattr(getattr(dm, "data", None), "info", None) or {}).get("intervention_groups")
    if not declared:
        raise ValueError("groups=true: this data declares no concept groups (data=cub has its attribute groups)")
    if model.types.groups:
        raise ValueError("groups=true: the model has categorical concepts, already asked whole; use groups=false")
    kept = {g: [n for n in cols if n in names] for g, cols in declared.items()}
    return ConceptTypes.build(names, {g: cols for g, cols in kept.items() if cols}, None).unit_of


def exchange_columns(c: InterveneConfig, model: Any) -> tuple[str, str, list[int]] | None:
    """``(first, second, columns)`` of ``c.exchange`` for ``run_grid`` (``None``: off); the concept is a
    column of the model or a categorical concept (all its columns); an unknown name is one error."""
    if not c.exchange.enabled:
        return None
    names = list(model.info.concept_names)
    groups = dict(getattr(model.info, "concept_groups", None) or {})
    name = str(c.exchange.concept)
    if name in names:
        cols = [names.index(name)]
    elif name in groups:
        cols = [names.index(n) for n in groups[name]]
    else:
        raise ValueError(f"exchange.concept: unknown concept '{name}' (the model has {names + sorted(groups)})")
    return str(c.exchange.first), str(c.exchange.second), cols


# ----------------------------------------------------------------------------- the app
def run(cfg: DictConfig | dict | InterveneConfig) -> ResultsGrid:
    """Evaluate the configured grid; write results into ``output_dir`` and return them."""
    import torch

    from cbm.interventions.context import BuildContext
    from cbm.interventions.costs import budget_total, cost_vector
    from cbm.interventions.encodings import fit_levels
    from cbm.interventions.engine import blackbox_accuracy
    from cbm.interventions.evaluate import resolve_ks
    from cbm.interventions.hierarchy import Implications
    from cbm.training.checkpoint import load_run
    from synthetic.registry import concept_implications

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
    costs = cost_vector(names, c.costs.concepts)
    requestable = list(allowed if allowed is not None else range(len(names)))
    unit_of = reveal_units(c, model, dm, names)  # a categorical concept / a group of the data is asked once
    k_max = budget_total(costs, requestable, unit_of)
    ks = resolve_ks(c.ks, k_max)
    ctx = BuildContext(seed=c.seed, concept_names=tuple(names), allowed=allowed, costs=None if costs is None else costs.tolist(),
                       labels=lambda: dm.split("train").tensors["c"],
                       describe=text_describer(dm), model=model, validation=lambda: dm.whole("val"))  # fmt: skip
    interveners, policies = build_components(c, ctx)
    loader = dm.loader(c.split)
    bb = None
    if c.blackbox:
        bb = blackbox_accuracy(c.blackbox, model, loader, split=c.split)
    levels = fit_levels(model, dm.loader(c.encoding.split), c.encoding)
    with wandb_run.finishing():
        config = wandb_run.run_config(OmegaConf.to_container(OmegaConf.structured(c)), "cbm-intervene")  # type: ignore[arg-type]
        wb = wandb_run.start_follower(c.logger.wandb, job_type="intervene", checkpoint=c.checkpoint, run_dir=out_dir, config=config)
        implied = concept_implications(data_cfg)
        structure = None if implied is None else Implications.build(names, implied)
        grid = _grid(model, loader, interveners, policies, ks, c, bb, levels, names, allowed, device, costs, structure, unit_of, k_max)
        paths = grid.save(out_dir)
        if wb is not None:
            wandb_run.log_intervention_results(wb, grid.rows, bb)
    say(grid.table())
    if "hierarchy" in grid.meta:
        h = grid.meta["hierarchy"]
        say(f"hierarchy: {h['implications']} implications between the concepts; the model's predictions break them on "
            f"{h['violating_rows']} of {grid.rows[0]['n_examples']} rows ({h['violations']} violations)")  # fmt: skip
    if bb is not None:
        say(f"black-box accuracy: {100 * bb:.2f}%")
    say(f"results: {paths['csv']}  plot: {paths['plot']}")
    return grid


def _grid(model, loader, interveners, policies, ks, c: InterveneConfig, bb, levels, names, allowed, device, costs=None, structure=None,
          unit_of=None, k_max=0) -> ResultsGrid:  # fmt: skip
    """The grid of every intervener x policy x k, with what the results file records about the run."""
    from cbm.interventions.engine import run_grid
    from cbm.interventions.interveners.llm import LLMIntervener

    grid = run_grid(model, loader, interveners, policies, ks, per_example=c.per_example, blackbox_accuracy=bb, encoding=levels,
                    costs=costs, per_cost=c.costs.per_cost, implications=structure, propagate=c.hierarchy.propagate,
                    exchange=exchange_columns(c, model), units=unit_of)  # fmt: skip
    grid.meta.update(
        checkpoint=str(c.checkpoint),
        dataset=model.info.dataset,
        model=model.cfg.name,
        split=c.split,
        concepts=[names[j] for j in allowed] if allowed is not None else names,
        device=str(device),
        config=OmegaConf.to_container(OmegaConf.structured(c)),
        title=f"{model.info.dataset} / {model.cfg.name} ({c.split})",
        k_max=k_max,  # what 'max' resolved to: concepts, groups or cost units
        units="groups" if c.groups else "concepts",
        encoding=c.encoding.kind,
        encoding_levels=None if levels is None else {n: [float(levels[0, j]), float(levels[1, j])] for j, n in enumerate(names)},
    )
    for name, iv in interveners.items():
        if isinstance(iv, LLMIntervener):
            grid.meta[f"{name}_queries"], grid.meta[f"{name}_fallbacks"] = iv.n_queries, iv.n_fallbacks
            usage = getattr(iv.client, "usage", None)  # the project's chat client: tokens, cost, cache hits
            if usage is not None and callable(getattr(usage, "to_json", None)):
                grid.meta[f"{name}_usage"] = usage.to_json()
                say(f"{name}: {usage.summary()}")
    return grid


main = hydra_app(
    "cbm-intervene",
    "intervene",
    run,
    validate,
    "Test-time concept interventions on a trained run: every intervener x policy x budget k;\nwrites results.csv / results.json / accuracy_vs_k.png.",
    [
        "checkpoint=outputs/robot-cbm/<time>",
        "checkpoint=<run> 'policy=[random,responsiveness]' policy.responsiveness.threshold=0.3 'ks=[0,1,2,3,max]'",
        "checkpoint=<run> 'intervener=[expert]' intervener.expert.accuracy=0.9 blackbox=<black-box run> device=cuda",
        "checkpoint=<run> 'costs.concepts={knees: 5}' 'ks=[0,1,3,5,max]' hierarchy.propagate=true",
    ],
)


if __name__ == "__main__":
    main()

__all__ = ["ConfigError", "InterveneConfig", "main", "run", "validate"]
