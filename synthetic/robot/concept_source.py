"""Who annotates the robots' concepts (``data.concept_source``): the concept set's definitions
(``annotated``, the generator's own labels) or a CLIP model (``clip``: label-free annotation).

CLIP annotation runs after generation, on the generated images: the dataset's cache entry is
the same for every source, and the CLIP scores are cached beside it keyed by the dataset, the
checkpoint's files and the texts. ``c`` becomes CLIP's annotation on every split; ``c_clean``
(what oracle interveners answer with) stays the concept set's true values, except for concepts
from ``concepts_file``, which have no definition and so no truth beyond the annotation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from synthetic.base import SyntheticData
from synthetic.cache import cached_arrays
from synthetic.robot.concepts import load_concept_set


def concept_texts(cfg: Any) -> tuple[list[str], list[str], bool]:
    """``(names, texts, free)``: the concepts CLIP scores and whether they replace the concept set."""
    from synthetic.clip_scores import load_free_concepts

    src = cfg.concept_source
    if src.concepts_file:
        pairs = load_free_concepts(src.concepts_file)
        return [n for n, _ in pairs], [t for _, t in pairs], True
    concepts = load_concept_set(cfg.concept_set).concepts
    texts = [src.prompts.get(c.name) or src.prompt.format(description=c.description or c.name.replace("_", " "), name=c.name)
             for c in concepts]  # fmt: skip
    return [c.name for c in concepts], texts, False


def apply_concept_source(data: SyntheticData, cfg: Any, cache_dir: str | None, base_key: dict[str, Any], device: str = "cpu") -> SyntheticData:
    """``data`` with the concepts annotated by ``cfg.concept_source`` (unchanged for ``annotated``)."""
    src = cfg.concept_source
    if src.kind == "annotated":
        return data
    from synthetic.clip_scores import ClipScorer, annotate, percentile_thresholds

    names, texts, free = concept_texts(cfg)
    scorer = ClipScorer(src.checkpoint, device=device, batch_size=src.batch_size)
    key = {"scores": "clip", "data": base_key, "checkpoint": scorer.identity, "texts": texts}
    scores = cached_arrays(key, lambda: {"scores": scorer.scores(data.x, texts)}, cache_dir, prefix="robot-clip", required=("scores",))["scores"]
    train = data.indices("train")
    if len(train) == 0:
        raise ValueError("RobotConfig.concept_source: kind=clip calibrates on the training split, which is empty (n_train=0)")
    thresholds = percentile_thresholds(scores[train], src.percentile)
    c = annotate(scores, thresholds)
    extra = dict(data.extra)
    extra["c_clean"] = c.copy() if free else data.extra.get("c_clean", data.c)
    extra["c_score"] = scores
    info = {**data.info, "concept_source": {"kind": src.kind, "texts": dict(zip(names, texts, strict=True)),
                                            "thresholds": thresholds.tolist(), "checkpoint": scorer.identity}}  # fmt: skip
    return dataclasses.replace(data, c=c, concept_names=list(names), extra=extra, info=info)

