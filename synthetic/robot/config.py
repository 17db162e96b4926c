"""Typed configuration of the robot generator (mirrors ``conf/data/robot.yaml``).

Every value is checked in ``__post_init__``; a bad value raises one
``ValueError`` naming the field, e.g.
``RobotConfig.concept_set: unknown concept_set 'foo'; expected one of [...]``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cbm.core.validation import boolean, integer, number
from synthetic.robot.attributes import BODY_CARDINALITY, BODY_NAMES, EXPRESSION_NAMES, MAX_SHIFT, MAX_TINT
from synthetic.robot.concepts import ExpressionError, check_expression, load_concept_set
from synthetic.robot.renderer import PART_NAMES
from synthetic.robot.rules import LABEL_RULE_NAMES, LABEL_RULES, RULE_TRAIN_CONSTRAINTS

MODALITIES = ("image", "tabular", "text")
#: ``render``: this project's renderer and sampling (``ours``) or concept-benchmark 0.4.1's robots,
#: catalogue and row split (``reference``, :mod:`synthetic.robot.reference`).
RENDERS = ("ours", "reference")
#: ``source``: robots made here (``generator``) or by the installed reference package itself
#: (``concept_benchmark``, the ``[reference]`` extra; :mod:`synthetic.robot.reference.oracle`).
SOURCES = ("generator", "concept_benchmark")
#: Bytes a robot takes in memory besides its input (labels, concepts, attributes; measured ~1 KB).
ROW_OVERHEAD = 1000


def _fail(where: str, msg: str) -> None:
    raise ValueError(f"{where}: {msg}")


def _plain(obj: Any) -> Any:
    """OmegaConf containers -> plain Python (no-op for plain objects)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover
        return obj
    if isinstance(obj, DictConfig | ListConfig):
        return OmegaConf.to_container(obj, resolve=True)
    return obj


@dataclass
class LabelConfig:
    """``Pr(Glorp | c) = sigmoid(scale * (sum_k weights[k] * term_k + bias))``.

    ``weights`` maps terms to coefficients: an attribute name (``EXPRESSION_NAMES``, e.g.
    ``mouth_closed``, ``foot_pointy``, ``knees``) or an expression over them in the concept-set
    language (e.g. ``"foot_subtype == 9"``, ``"(knees == 1) & (elbows == 0)"``; booleans count 0/1).
    ``stochastic``: draw ``y ~ Bernoulli(Pr(Glorp))``; else ``y = 1[Pr(Glorp) > 0.5]``.
    """

    weights: dict[str, float] = field(default_factory=lambda: dict(LABEL_RULES["sparse"]["weights"]))
    #: Constant added to the weighted sum of terms before scaling (the logit offset; with label_rule=custom).
    bias: float = LABEL_RULES["sparse"]["bias"]
    #: Multiplier of the whole sum inside the sigmoid: larger makes Pr(Glorp) closer to 0 / 1 (sharper rule).
    scale: float = LABEL_RULES["sparse"]["scale"]
    stochastic: bool = True

    def __post_init__(self) -> None:
        weights = _plain(self.weights)
        if not isinstance(weights, Mapping) or not weights:
            _fail("RobotConfig.label.weights", f"expected a non-empty mapping term -> coefficient, got {weights!r}")
        for term in weights:
            try:
                check_expression(str(term))
            except ExpressionError as err:
                _fail("RobotConfig.label.weights", f"term {str(term)!r}: {err} (attribute names: {EXPRESSION_NAMES})")
        self.weights = {str(k): number(f"RobotConfig.label.weights.{k}", v) for k, v in weights.items()}
        self.bias = number("RobotConfig.label.bias", self.bias)
        self.scale = number("RobotConfig.label.scale", self.scale)
        self.stochastic = boolean("RobotConfig.label.stochastic", self.stochastic)


@dataclass
class SamplingConstraint:
    """At least ``min_fraction`` of the training robots satisfy ``expr`` (an expression over the body
    attributes, ``BODY_NAMES`` plus ``hand_edgy`` / ``foot_pointy``)."""

    #: Expression over the body attributes (``BODY_NAMES``, ``hand_edgy``, ``foot_pointy``), e.g. ``knees == 1``.
    expr: str
    #: Share in [0, 1] of the training robots drawn among those matching ``expr`` (``int(n * min_fraction)``).
    min_fraction: float

    def __post_init__(self) -> None:
        where = "RobotConfig.train_constraints"
        try:
            check_expression(str(self.expr), [*BODY_NAMES, "hand_edgy", "foot_pointy"])
        except ExpressionError as err:
            _fail(where, f"{err} (body attributes only: {[*BODY_NAMES, 'hand_edgy', 'foot_pointy']})")
        self.expr = str(self.expr)
        self.min_fraction = number(f"{where}[{self.expr!r}].min_fraction", self.min_fraction, 0.0, 1.0)
        if self.min_fraction > 0 and pattern_share(self.expr) == 0:
            _fail(where, f"{self.expr!r} matches no robot (every body attribute value is checked)")


#: Splits label noise may touch (names of ``synthetic.base.SPLITS``).
SPLIT_NAMES = ("train", "val", "calib", "test")


@dataclass
class AsymmetricNoise:
    """Annotation flips that depend on the value: ``p01`` turns an absent concept (0) into a
    present one, ``p10`` a present one into an absent one (after ``concept_noise``)."""

    #: Probability in [0, 1] that an annotation of 0 (absent) is flipped to 1, in every split.
    p01: float = 0.0
    #: Probability in [0, 1] that an annotation of 1 (present) is flipped to 0, in every split.
    p10: float = 0.0

    def __post_init__(self) -> None:
        self.p01 = number("RobotConfig.concept_noise_asym.p01", self.p01, 0.0, 1.0)
        self.p10 = number("RobotConfig.concept_noise_asym.p10", self.p10, 0.0, 1.0)


@dataclass
class MissingConcepts:
    """Concept annotations missing from the training split (``extra['c_observed']``; the models'
    concept loss skips them). ``mcar``: each is missing with probability ``p``; ``mnar``: with
    ``present_prob`` when the annotated value is 1 and ``absent_prob`` when it is 0."""

    mechanism: str = "none"
    #: ``mcar``: probability in [0, 1) that each training concept annotation is missing.
    p: float = 0.0
    #: ``mnar``: probability in [0, 1] that a training annotation of 1 (present) is missing.
    present_prob: float = 0.0
    #: ``mnar``: probability in [0, 1] that a training annotation of 0 (absent) is missing.
    absent_prob: float = 0.0

    def __post_init__(self) -> None:
        where = "RobotConfig.concept_missing"
        if self.mechanism not in ("none", "mcar", "mnar"):
            _fail(f"{where}.mechanism", f"must be one of ['none', 'mcar', 'mnar'], got {self.mechanism!r}")
        for name in ("p", "present_prob", "absent_prob"):
            setattr(self, name, number(f"{where}.{name}", getattr(self, name), 0.0, 1.0))
        if self.mechanism == "mcar" and self.p >= 1.0:
            _fail(f"{where}.p", "1.0 leaves no concept annotated")


#: Who annotates the concepts: ``annotated`` (the concept set's definitions, with the noise knobs) or
#: ``clip`` (a CLIP model scores every image against a text per concept: label-free annotation).
CONCEPT_SOURCES = ("annotated", "clip")


@dataclass
class ConceptSource:
    """Who annotates the concepts (concept-benchmark 0.4's concept sources).

    ``clip``: every image is scored against one text per concept by the CLIP checkpoint at
    ``checkpoint`` (a ``transformers`` CLIP directory); a concept is annotated present where its
    score is above the ``percentile``-th percentile of its training-split scores (the percentile
    calibration of label-free CBMs: no concept label is used). The texts are the concept set's
    descriptions in ``prompt`` (``{description}`` / ``{name}``), or ``prompts[name]``, or, with
    ``concepts_file`` (a ``.jsonl`` / ``.yaml`` list of ``{name, text}``: LLM-written concepts,
    CLIP-chosen words), concepts with no definition that replace the concept set; those have no
    ground truth, so what interveners read as the true value is the annotation itself.
    """

    kind: str = "annotated"
    checkpoint: str | None = None
    prompt: str = "a robot: {description}"
    prompts: Any = field(default_factory=dict)  # {concept name: text}; typed Any: None = {}
    concepts_file: str | None = None
    percentile: float = 50.0
    batch_size: int = 256

    def __post_init__(self) -> None:
        where = "RobotConfig.concept_source"
        if self.kind not in CONCEPT_SOURCES:
            _fail(f"{where}.kind", f"must be one of {list(CONCEPT_SOURCES)}, got {self.kind!r}")
        prompts = _plain(self.prompts)
        prompts = {} if prompts is None else prompts
        if not isinstance(prompts, Mapping) or not all(isinstance(v, str) and v.strip() for v in prompts.values()):
            _fail(f"{where}.prompts", f"expected a mapping concept name -> non-empty text, got {prompts!r}")
        self.prompts = {str(k): str(v) for k, v in prompts.items()}
        self.percentile = number(f"{where}.percentile", self.percentile, 0.0, 100.0)
        self.batch_size = integer(f"{where}.batch_size", self.batch_size, 1)
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            _fail(f"{where}.prompt", f"expected a non-empty text, got {self.prompt!r}")
        try:
            self.prompt.format(description="d", name="n")
        except (KeyError, IndexError, ValueError) as err:
            _fail(f"{where}.prompt", f"placeholders are {{description}} and {{name}} (literal braces as {{{{ }}}}): {err}")
        if self.kind == "annotated":
            if self.checkpoint or self.concepts_file or self.prompts:
                _fail(where, "checkpoint, prompts and concepts_file need kind=clip")
        elif not self.checkpoint:
            _fail(f"{where}.checkpoint", "kind=clip needs a CLIP checkpoint directory (transformers format)")
        if self.concepts_file and self.prompts:
            _fail(where, "prompts name the concept set's concepts; with concepts_file the file holds the texts")


@dataclass
class LabelNoise:
    """Each robot's label flips with probability ``p`` in the named splits."""

    #: Probability in [0, 0.5] that a robot's label is flipped (per robot: all its renders share the flip).
    p: float = 0.0
    #: Splits whose labels are flipped: any of ``train``, ``val``, ``calib``, ``test``.
    splits: list[str] = field(default_factory=lambda: ["train", "val"])

    def __post_init__(self) -> None:
        self.p = number("RobotConfig.label_noise.p", self.p, 0.0, 0.5)
        splits = _plain(self.splits)
        if isinstance(splits, str) or not isinstance(splits, list | tuple) or not set(map(str, splits)) <= set(SPLIT_NAMES):
            _fail("RobotConfig.label_noise.splits", f"expected a list of {list(SPLIT_NAMES)}, got {splits!r}")
        self.splits = [str(x) for x in splits]


CUE_KINDS = ("none", "corner", "swatch", "tint")


@dataclass
class SpuriousCue:
    """A cue drawn into every image that says a class, true with probability ``correlation``: the
    shortcut a model can learn instead of the parts (the faithfulness testbed's knob).

    ``kind``: ``swatch`` (a square in the top-left corner, white says Glorp, black Drent: readable
    without knowing where it is, as a vision tower with only relative positions reads), ``corner`` (a white square in the top-left corner says Glorp, in the top-right corner
    Drent) or ``tint`` (the image shifted toward red says Glorp, toward blue Drent); ``none``: no cue.
    ``correlation`` 1 makes the cue as good as the label rule, 0.5 independent of the label.
    ``strength``: the tint's shift in intensity levels, or the corner square's side in pixels at
    32 px (scaled with the image). The drawn cue of each row is ``extra["cue"]`` (1 = says Glorp),
    so a counterfactual re-renders the row with the other cue (:func:`synthetic.robot.cue.draw_cue`)."""

    kind: str = "none"
    correlation: float = 1.0
    strength: int = 4

    def __post_init__(self) -> None:
        if self.kind not in CUE_KINDS:
            _fail("RobotConfig.cue.kind", f"must be one of {list(CUE_KINDS)}, got {self.kind!r}")
        self.correlation = number("RobotConfig.cue.correlation", self.correlation, 0.0, 1.0)
        self.strength = integer("RobotConfig.cue.strength", self.strength, 1, 128)


def body_grid() -> dict:
    """Every combination of the body attributes once (an attribute table), for exact shares."""
    import numpy as np

    from synthetic.robot.attributes import body_table

    cards = [BODY_CARDINALITY[name] for name in BODY_NAMES]
    return body_table(np.stack(np.meshgrid(*[np.arange(c) for c in cards], indexing="ij"), -1).reshape(-1, len(cards)))


def pattern_share(expr: str) -> float:
    """Exact share of robots (body attributes uniform and independent) that satisfy ``expr``."""
    from synthetic.robot.concepts import evaluate

    return float(evaluate(expr, body_grid()).astype(bool).mean())


@dataclass
class NuisanceConfig:
    """Nuisance variation of the renders (stored in ``meta``)."""

    #: largest translation, in units of 1/32 of the image side (0..4)
    max_shift: int = 2
    #: draw each arm at a random angle (else both horizontal)
    arm_angle: bool = True
    #: random stance width (else the second narrowest)
    leg_spread: bool = True
    #: random colour scheme out of 8 (else always "blue")
    palette: bool = True
    #: largest per-channel colour jitter added to the robot's colours (0..64)
    jitter: int = 16

    def __post_init__(self) -> None:
        self.max_shift = integer("RobotConfig.nuisance.max_shift", self.max_shift, 0, MAX_SHIFT)
        self.arm_angle = boolean("RobotConfig.nuisance.arm_angle", self.arm_angle)
        self.leg_spread = boolean("RobotConfig.nuisance.leg_spread", self.leg_spread)
        self.palette = boolean("RobotConfig.nuisance.palette", self.palette)
        self.jitter = integer("RobotConfig.nuisance.jitter", self.jitter, 0, MAX_TINT)


@dataclass
class RobotConfig:
    """Configuration of the Glorp/Drent robot benchmark.

    Split sizes count sampled robots; every robot appears ``renders_per_robot``
    times (independent nuisance, same split), so a split has
    ``size * renders_per_robot`` rows. ``n_train`` includes the validation part
    (``val_fraction`` of it).
    """

    name: str = "robot"
    seed: int = 0
    #: "image" (uint8 [N,H,W,3]), "tabular" (float32 [N,25]) or "text" (int64 token ids [N,L])
    modality: str = "image"
    image_size: int = 32
    #: Gaussian blur sigma in pixels (0 = none)
    blur: float = 0.0
    #: part names hidden under a grey box (see synthetic.robot.renderer.PART_NAMES)
    occlude: list[str] = field(default_factory=list)
    #: per-part opacity {part name: v in [0, 1]}: the part is alpha-blended at v times its usual
    #: coverage (1 = as usual, 0 = not drawn; parts not named are drawn as usual), so a faint part
    #: is hard to see without a box that marks it. Typed ``Any`` like ``concept_noise``; ``None`` = {}.
    visibility: Any = field(default_factory=dict)
    #: per-pixel Gaussian noise added after blurring, sigma in intensity levels (0..255 scale;
    #: 0 = none), drawn from its own random stream per split
    pixel_noise: float = 0.0
    #: "true", "fine", "llm" or a path to a concept-set YAML file
    concept_set: str = "true"
    #: annotation flip rate in [0, 0.5]: one float for all concepts or {concept name: rate}
    #: (typed ``Any`` because OmegaConf structured configs cannot hold a float-or-dict union)
    concept_noise: Any = 0.0
    #: value-dependent annotation flips {p01, p10} (0 -> 1 and 1 -> 0), after ``concept_noise``
    concept_noise_asym: AsymmetricNoise = field(default_factory=AsymmetricNoise)
    #: training concept annotations missing: {mechanism: none | mcar | mnar, p, present_prob, absent_prob}
    concept_missing: MissingConcepts = field(default_factory=MissingConcepts)
    #: label flips {p, splits}
    label_noise: LabelNoise = field(default_factory=LabelNoise)
    #: who annotates the concepts: {kind: annotated | clip, checkpoint, prompt, prompts, concepts_file, percentile}
    concept_source: ConceptSource = field(default_factory=ConceptSource)
    #: a spurious cue drawn into the images: {kind: none | corner | swatch | tint, correlation, strength}
    cue: SpuriousCue = field(default_factory=SpuriousCue)
    n_train: int = 3800
    val_fraction: float = 0.2
    n_calib: int = 2000
    n_test: int = 10000
    #: Images per sampled robot (>= 1), each with independent nuisance; a split has size x this many rows.
    renders_per_robot: int = 1
    #: text modality: shuffle the order of the feature clauses per sample
    text_shuffle: bool = True
    #: sparse (the first paper's rule) | balanced (concept-benchmark 0.4's default) | custom (``label``)
    label_rule: str = "sparse"
    label: LabelConfig = field(default_factory=LabelConfig)
    #: training-split shift: ``[{expr, min_fraction}]`` (in order, each takes its share of the training
    #: robots among robots matching ``expr``, the rest of the split is drawn as usual), or ``rule``: the 0.4 shift
    #: of ``label_rule`` (six of the ten foot sub-types). Validation, calibration and test are unshifted.
    train_constraints: Any = field(default_factory=list)
    nuisance: NuisanceConfig = field(default_factory=NuisanceConfig)
    #: ``ours`` (poses, palettes, robots drawn per split) or ``reference``: 0.4.1's fixed-pose robots in
    #: its 71 colour schemes, its catalogue (every robot ``renders_per_robot`` times, scheme = row % 71),
    #: labels drawn per row and its row split (sizes count rows; ``nuisance`` is not used)
    render: str = "ours"
    #: ``generator`` (made here) or ``concept_benchmark``: the installed reference package makes the
    #: robots, labels, split and PNGs itself (needs ``render=reference``; cached after the first run)
    source: str = "generator"

    def __post_init__(self) -> None:
        if self.name != "robot":
            _fail("RobotConfig.name", f"must be 'robot', got {self.name!r}")
        self.seed = integer("RobotConfig.seed", self.seed, 0)
        if self.modality not in MODALITIES:
            _fail("RobotConfig.modality", f"unknown modality {self.modality!r}; expected one of {list(MODALITIES)}")
        self.image_size = integer("RobotConfig.image_size", self.image_size, 8, 1024)
        self.blur = number("RobotConfig.blur", self.blur, 0.0, float(self.image_size))
        occlude = _plain(self.occlude)
        if isinstance(occlude, str) or not isinstance(occlude, list | tuple):
            _fail("RobotConfig.occlude", f"expected a list of part names, got {occlude!r}")
        unknown = sorted({str(p) for p in occlude} - set(PART_NAMES))
        if unknown:
            _fail("RobotConfig.occlude", f"unknown part(s) {unknown}; expected names from {PART_NAMES}")
        self.occlude = [str(p) for p in occlude]
        visibility = _plain(self.visibility)
        if visibility is None:  # the YAML default (so that data.visibility={knees: 0.1} replaces it)
            visibility = {}
        if not isinstance(visibility, Mapping):
            _fail("RobotConfig.visibility", f"expected a mapping part -> opacity in [0, 1], got {visibility!r}")
        unknown = sorted({str(p) for p in visibility} - set(PART_NAMES))
        if unknown:
            _fail("RobotConfig.visibility", f"unknown part(s) {unknown}; expected names from {PART_NAMES}")
        self.visibility = {str(k): number(f"RobotConfig.visibility.{k}", v, 0.0, 1.0) for k, v in visibility.items()}
        self.pixel_noise = number("RobotConfig.pixel_noise", self.pixel_noise, 0.0, 255.0)
        try:
            concepts = load_concept_set(str(self.concept_set))
        except ValueError as err:
            _fail("RobotConfig.concept_set", str(err))
        self.concept_set = str(self.concept_set)
        noise = _plain(self.concept_noise)
        if isinstance(noise, Mapping):
            unknown = sorted(set(noise) - set(concepts.names))
            if unknown:
                _fail("RobotConfig.concept_noise", f"unknown concept(s) {unknown}; concept set '{self.concept_set}' has {concepts.names}")
            self.concept_noise = {str(k): number(f"RobotConfig.concept_noise.{k}", v, 0.0, 0.5) for k, v in noise.items()}
        else:
            self.concept_noise = number("RobotConfig.concept_noise", noise, 0.0, 0.5)
        for name in ("n_train", "n_calib", "n_test"):
            setattr(self, name, integer(f"RobotConfig.{name}", getattr(self, name), 0))
        self.val_fraction = number("RobotConfig.val_fraction", self.val_fraction, 0.0, 1.0)
        if self.n_train + self.n_calib + self.n_test == 0:
            _fail("RobotConfig.n_train", "every split is empty (n_train, n_calib and n_test are all 0)")
        self.renders_per_robot = integer("RobotConfig.renders_per_robot", self.renders_per_robot, 1)
        self.text_shuffle = boolean("RobotConfig.text_shuffle", self.text_shuffle)
        self._resolve_label_rule()
        self._resolve_train_constraints()
        blocks = (("nuisance", NuisanceConfig), ("concept_noise_asym", AsymmetricNoise),
                  ("concept_missing", MissingConcepts), ("label_noise", LabelNoise), ("concept_source", ConceptSource),
                  ("cue", SpuriousCue))  # fmt: skip
        for name, cls in blocks:
            value = _plain(getattr(self, name))
            if isinstance(value, Mapping):
                try:
                    value = cls(**value)
                except TypeError as err:
                    _fail(f"RobotConfig.{name}", str(err))
            if not isinstance(value, cls):
                _fail(f"RobotConfig.{name}", f"expected a mapping or {cls.__name__}, got {value!r}")
            setattr(self, name, value)
        self._check_concept_source()
        self._check_render()
        if self.cue.kind != "none" and self.modality != "image":
            _fail("RobotConfig.cue.kind", f"a cue is drawn into images: needs modality=image, got {self.modality!r}")

    @property
    def catalogue_rows(self) -> int:
        """``render=reference``: rows of 0.4.1's catalogue (7,680 robots x ``renders_per_robot``)."""
        return int(math.prod(BODY_CARDINALITY.values())) * self.renders_per_robot

    def _check_render(self) -> None:
        """``render`` / ``source`` values, and what 0.4.1's catalogue and drawing allow."""
        if self.render not in RENDERS:
            _fail("RobotConfig.render", f"must be one of {list(RENDERS)}, got {self.render!r}")
        if self.source not in SOURCES:
            _fail("RobotConfig.source", f"must be one of {list(SOURCES)}, got {self.source!r}")
        if self.render == "reference":
            from synthetic.robot.reference.rows import check_config

            check_config(self, _fail)
        elif self.source != "generator":
            _fail("RobotConfig.source", f"source={self.source} makes 0.4.1's own robots: needs render=reference")

    def _check_concept_source(self) -> None:
        """CLIP annotation reads images and replaces every other annotation knob's work."""
        src = self.concept_source
        if src.kind == "annotated":
            return
        where = "RobotConfig.concept_source"
        if self.modality != "image":
            _fail(f"{where}.kind", f"kind=clip scores images: needs modality=image, got {self.modality!r}")
        noisy = [n for n, on in (("concept_noise", self.concept_noise not in (0, 0.0, {})),
                                 ("concept_noise_asym", self.concept_noise_asym != AsymmetricNoise()),
                                 ("concept_missing", self.concept_missing.mechanism != "none")) if on]  # fmt: skip
        if noisy:
            _fail(where, f"kind=clip replaces the annotations: {', '.join(noisy)} must be off")
        unknown = sorted(set(src.prompts) - set(load_concept_set(self.concept_set).names))
        if unknown:
            _fail(f"{where}.prompts", f"unknown concept(s) {unknown}; concept set '{self.concept_set}' has {load_concept_set(self.concept_set).names}")

    def _resolve_label_rule(self) -> None:
        """``label_rule`` names a rule (its formula replaces ``label``) or is ``custom``."""
        if self.label_rule not in LABEL_RULE_NAMES:
            _fail("RobotConfig.label_rule", f"must be one of {list(LABEL_RULE_NAMES)}, got {self.label_rule!r}")
        value = _plain(self.label)
        if isinstance(value, Mapping):
            try:
                value = LabelConfig(**value)
            except TypeError as err:
                _fail("RobotConfig.label", str(err))
        if not isinstance(value, LabelConfig):
            _fail("RobotConfig.label", f"expected a mapping or LabelConfig, got {value!r}")
        if self.label_rule != "custom":
            rule = LabelConfig(**LABEL_RULES[self.label_rule], stochastic=value.stochastic)
            if value not in (LabelConfig(stochastic=value.stochastic), rule):
                _fail("RobotConfig.label", f"label_rule={self.label_rule} fixes the rule; set label_rule=custom to use your own label block")
            value = rule
        self.label = value

    def _resolve_train_constraints(self) -> None:
        where = "RobotConfig.train_constraints"
        raw = _plain(self.train_constraints)
        if raw == "rule":
            if self.label_rule not in RULE_TRAIN_CONSTRAINTS:
                _fail(where, f"'rule' needs a named label_rule ({sorted(RULE_TRAIN_CONSTRAINTS)}), got {self.label_rule!r}")
            raw = RULE_TRAIN_CONSTRAINTS[self.label_rule]
        if raw is None:
            raw = []
        if isinstance(raw, str) or not isinstance(raw, list | tuple):
            _fail(where, f"expected a list of {{expr, min_fraction}} or 'rule', got {raw!r}")
        out = []
        for item in raw:
            if isinstance(item, SamplingConstraint):
                out.append(item)
                continue
            if not isinstance(item, Mapping) or set(item) != {"expr", "min_fraction"}:
                _fail(where, f"each entry needs exactly the keys expr and min_fraction, got {item!r}")
            out.append(SamplingConstraint(**item))
        total = sum(c.min_fraction for c in out)
        if total > 1.0 + 1e-9:
            _fail(where, f"the min_fraction values sum to {total:g} > 1")
        self.train_constraints = out

    # ---------------------------------------------------------------- helpers
    @property
    def split_sizes(self) -> dict[str, int]:
        """Robots per split (``train``, ``val``, ``calib``, ``test``); with ``render=reference``
        catalogue rows: ``n_train`` training rows and ``int(val_fraction * rest)`` validation rows
        of the rows neither test nor training (0.4.1's sizes)."""
        if self.render == "reference":
            from synthetic.robot.reference.catalog import val_rows

            n_val = val_rows(self.catalogue_rows, self.n_test, self.n_train, self.val_fraction)
            return {"train": self.n_train, "val": n_val, "calib": self.n_calib, "test": self.n_test}
        n_val = int(round(self.n_train * self.val_fraction))
        return {"train": self.n_train - n_val, "val": n_val, "calib": self.n_calib, "test": self.n_test}

    @property
    def split_rows(self) -> dict[str, int]:
        """Rows per split: robots x ``renders_per_robot`` (``render=reference``: the split sizes)."""
        per = 1 if self.render == "reference" else self.renders_per_robot
        return {name: n * per for name, n in self.split_sizes.items()}

    def footprint(self, storage: str = "memory") -> dict[str, Any]:
        """Lower bounds of the bytes the dataset takes (see :mod:`synthetic.resources`): the inputs
        (in memory, or on disk for ``storage="disk"`` images, nowhere for ``render``) plus about
        1 KB a row of labels, concepts and attributes in memory."""
        from synthetic.robot.attributes import TABULAR_NAMES
        from synthetic.robot.text import MAX_LEN

        rows = sum(self.split_rows.values())
        image = self.modality == "image"
        x = {"image": self.image_size**2 * 3, "tabular": len(TABULAR_NAMES) * 4, "text": MAX_LEN * 8}[self.modality]
        on_disk = image and storage == "disk"
        in_memory = not image or storage == "memory"
        form = f"{self.image_size} px images" if image else self.modality
        return {"rows": rows, "unit": "robots" if self.renders_per_robot == 1 else "renders", "form": form,
                "memory": rows * (ROW_OVERHEAD + (x if in_memory else 0)), "disk": rows * x if on_disk else 0,
                "disk_possible": image, "knobs": ["n_train", "n_calib", "n_test"]}  # fmt: skip

    def noise_rates(self, concept_names: list[str]) -> list[float]:
        """Flip rate of each concept of the chosen set."""
        if isinstance(self.concept_noise, dict):
            return [self.concept_noise.get(name, 0.0) for name in concept_names]
        return [float(self.concept_noise)] * len(concept_names)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def record(self) -> dict[str, Any]:
        """``to_dict`` without the knobs added later that are at their neutral value
        (``visibility`` empty, ``pixel_noise`` 0, ``label_rule`` sparse, a stochastic label, no
        ``train_constraints``, no asymmetric noise, missing concepts, label noise or concept source): the cache key and ``info`` of every config
        written before those knobs existed stay what they were."""
        out = self.to_dict()
        if not out["visibility"]:
            del out["visibility"]
        if not out["pixel_noise"]:
            del out["pixel_noise"]
        if out["label_rule"] == "sparse":
            del out["label_rule"]
        if out["label"]["stochastic"]:
            del out["label"]["stochastic"]
        if not out["train_constraints"]:
            del out["train_constraints"]
        for name, cls in (("concept_noise_asym", AsymmetricNoise), ("concept_missing", MissingConcepts)):
            if out[name] == dataclasses.asdict(cls()):
                del out[name]
        if out["label_noise"]["p"] == 0:
            del out["label_noise"]
        if out["concept_source"] == dataclasses.asdict(ConceptSource()):
            del out["concept_source"]
        if out["cue"]["kind"] == "none":
            del out["cue"]
        if out["render"] == "ours":
            del out["render"]
        else:
            del out["nuisance"]  # 0.4.1's robots have none
        if out["source"] == "generator":
            del out["source"]
        return out

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | Any) -> RobotConfig:
        """Build from a plain dict or an OmegaConf ``DictConfig`` (e.g. Hydra's ``cfg.data``)."""
        cfg = dict(_plain(cfg))
        unknown = sorted(set(cfg) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"RobotConfig: unknown key(s) {unknown}")
        return cls(**cfg)
