"""Typed schemas of ``conf/model/*.yaml`` shared by all architectures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cbm.core.safe_paths import check_component

#: The key naming a model's class in its config.
TARGET = "_target_"


def settings_of(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A model config without its ``_target_`` (what the typed schema holds)."""
    return {k: v for k, v in model_cfg.items() if k != TARGET}

BACKBONES = ("auto", "cnn", "plain_cnn", "resnet18", "resnet50", "vit_b_16", "hf", "mlp", "text_bag", "sudoku_cells")
TRAINING_MODES = ("independent", "sequential", "joint")
CONCEPT_INPUTS = ("features", "hint", "hint_detached")
CONCEPT_READOUTS = ("soft", "hard")


@dataclass
class BackboneConfig:
    """Encoder ``x -> features``; ``auto`` picks by modality (cnn / mlp / text_bag)."""

    name: str = "auto"
    channels: list[int] = field(default_factory=lambda: [16, 32, 64])
    #: CNN: side of the pooled feature map that is flattened (1 = global average pooling).
    grid: int = 4
    #: plain_cnn: a 2x2 max pool after each conv block (concept-benchmark 0.4.1's DNN) or none (its
    #: concept encoder below 128 px: the features keep every pixel).
    maxpool: bool = False
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    #: Width of the features the cnn / resnet18 / mlp / text_bag encoder outputs (sudoku_cells: fixed n^3).
    out_dim: int = 128
    #: text_bag: width of the token embeddings and of its width-3 convolution.
    embed_dim: int = 64
    dropout: float = 0.0
    #: Auxiliary supervision weight for backbones that define ``aux_loss`` (Sudoku digits).
    aux_weight: float = 0.0
    #: resnet18 / resnet50 / vit_b_16: ``null`` (resnet18 only: the from-scratch network), ``random``,
    #: ``torchvision`` (torchvision's file, already in torch's hub cache: nothing is downloaded) or a
    #: state_dict file; hf: the folder of a CLIP / SigLIP image encoder saved by transformers
    #: (:mod:`synthetic.real.encoders`); a projection to ``out_dim`` follows.
    weights: str | None = None
    #: Pretrained encoders: keep the encoder's weights fixed (and its batch norm in eval mode); only the
    #: projection, the concept layer and the head train.
    freeze: bool = False

    def __post_init__(self) -> None:
        if self.name not in BACKBONES:
            raise ValueError(f"backbone.name must be one of {BACKBONES}, got '{self.name}'")
        if self.out_dim <= 0 or self.embed_dim <= 0 or self.grid <= 0 or any(h <= 0 for h in [*self.channels, *self.hidden]):
            raise ValueError("backbone sizes must be positive")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"backbone.dropout must be in [0, 1), got {self.dropout}")
        if self.name in ("resnet50", "vit_b_16", "hf") and self.weights is None:
            raise ValueError(f"backbone.name={self.name} is a pretrained encoder: set backbone.weights (torchvision | random | <state_dict file>)")
        if self.freeze and self.weights is None:
            raise ValueError("backbone.freeze needs a pretrained encoder (backbone.weights)")


HEAD_SOLVERS = ("lbfgs", "gradient")


@dataclass
class HeadConfig:
    """Label predictor over concepts: ``linear`` or ``mlp``."""

    kind: str = "linear"
    hidden: int = 64
    layers: int = 2
    #: How an independent CBM fits its head on the annotated training concepts: ``lbfgs`` solves
    #: it before the encoder trains (full batch, float64, to ``tol``; the same head on every
    #: machine, see cbm/models/head_fit.py), ``gradient`` trains it with the encoder's optimiser.
    #: Other training schemes always use the optimiser (their head reads predicted concepts).
    solver: str = "lbfgs"
    #: L2 penalty on the head's weights in the L-BFGS objective (makes the minimiser unique).
    l2: float = 1e-4
    #: scikit-learn's ``LogisticRegression(C=...)`` objective instead of ``l2``: the *sum* of the
    #: training losses plus ``||w||^2 / (2 C)`` (bias unpenalised), i.e. ``l2 = 2 / (C N)`` for two
    #: classes (one margin vector) and ``1 / (C N)`` for more, over the ``N`` rows the head is fit on.
    #: concept-benchmark 0.4.1's label predictor is ``C=1``. ``None``: ``l2`` as given.
    C: float | None = None
    #: mlp head: dropout after each hidden layer's ReLU (concept-benchmark 0.4.1's DNN: 0.5).
    dropout: float = 0.0
    #: L-BFGS iteration bound and stopping tolerance (max |gradient| of the objective).
    max_iter: int = 1000
    tol: float = 1e-7

    def __post_init__(self) -> None:
        if self.kind not in ("linear", "mlp"):
            raise ValueError(f"head.kind must be 'linear' or 'mlp', got '{self.kind}'")
        if self.hidden <= 0 or self.layers < 1:
            raise ValueError("head.hidden must be > 0 and head.layers >= 1")
        if self.solver not in HEAD_SOLVERS:
            raise ValueError(f"head.solver must be one of {HEAD_SOLVERS}, got '{self.solver}'")
        if self.l2 < 0 or self.max_iter < 1 or not self.tol > 0:
            raise ValueError(f"head.l2 must be >= 0, head.max_iter >= 1 and head.tol > 0, got {self.l2}, {self.max_iter}, {self.tol}")
        if self.C is not None and not self.C > 0:
            raise ValueError(f"head.C must be > 0 (sklearn's inverse regularisation strength) or null, got {self.C}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"head.dropout must be in [0, 1), got {self.dropout}")

    def l2_for(self, n_rows: int, n_classes: int) -> float:
        """The L2 weight of the L-BFGS objective (mean loss + ``l2/2 ||W||^2``) for ``n_rows`` training
        rows: ``l2``, or sklearn's ``C`` turned into it (see ``C``; a two-class softmax head's
        ``||W||^2`` is half its margin's ``||w||^2`` at the optimum, hence the 2)."""
        if self.C is None:
            return self.l2
        return (2.0 if n_classes == 2 else 1.0) / (self.C * max(n_rows, 1))


@dataclass
class OptimConfig:
    name: str = "adam"
    lr: float = 1e-3
    #: Learning rate of the label predictor (``head``); ``None`` uses ``lr``. The head of an
    #: independent CBM is a small convex problem that converges far faster at a higher rate.
    head_lr: float | None = None
    weight_decay: float = 0.0
    #: ``none`` (constant rates) or ``cosine`` (cosine annealing per epoch over ``trainer.max_epochs``).
    scheduler: str = "none"

    def __post_init__(self) -> None:
        if self.name not in ("adam", "adamw", "sgd"):
            raise ValueError(f"optim.name must be adam, adamw or sgd, got '{self.name}'")
        if self.lr <= 0 or (self.head_lr is not None and self.head_lr <= 0):
            raise ValueError(f"optim.lr and optim.head_lr must be > 0, got {self.lr}, {self.head_lr}")
        if self.scheduler not in ("none", "cosine"):
            raise ValueError(f"optim.scheduler must be 'none' or 'cosine', got '{self.scheduler}'")


@dataclass
class ModelConfig:
    """Fields every architecture has; architectures subclass it with their own knobs."""

    name: str = "cbm"
    #: CBM training scheme (independent / sequential / joint); other architectures train jointly.
    training: str = "joint"
    concept_loss_weight: float = 1.0
    task_loss_weight: float = 1.0
    #: Sequential training: fraction of epochs spent on the concept encoder before the head.
    sequential_concept_fraction: float = 0.5
    #: Alignment constraint: these concepts' contribution to the head is forced to zero.
    zero_concepts: list[str] = field(default_factory=list)
    #: What CEM / ProbCBM / ECBM build their concepts from when the backbone has its own concept layer
    #: (Sudoku: the group-validity logits): ``features`` (the backbone features with those logits
    #: appended), ``hint`` (the logits alone) or ``hint_detached`` (the logits alone, no gradient back:
    #: the backbone and the hint layer then train as a CBM's, from the hint and auxiliary losses).
    #: Without such a layer all three mean the features.
    concept_input: str = "features"
    #: CBM: what the head reads, ``soft`` (the concept probabilities) or ``hard`` (``1[p >= 0.5]``, Koh
    #: et al.'s hard CBM; sequential / joint training pass the gradient straight through). A hard
    #: head cannot hedge on an unreadable concept: a chance-level detector costs its full error.
    concept_readout: str = "soft"
    #: CBM alignment as sign constraints (concept-benchmark 0.4's ``monotonicity_constraints``):
    #: ``{concept: +1 | -1}``, the sign a concept's weight toward the positive class (class 1) must
    #: have in a linear label predictor of a two-class task (0 is allowed: the concept may drop out).
    monotonicity: Any = None  # typed Any: OmegaConf cannot hold dict-or-None; None = {}
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def __post_init__(self) -> None:
        check_component(self.name, "model.name")  # run directories are named after it
        if self.training not in TRAINING_MODES:
            raise ValueError(f"model.training must be one of {TRAINING_MODES}, got '{self.training}'")
        if self.concept_loss_weight < 0 or self.task_loss_weight < 0:
            raise ValueError("loss weights must be >= 0")
        if not 0.0 < self.sequential_concept_fraction < 1.0:
            raise ValueError("model.sequential_concept_fraction must be in (0, 1)")
        if self.concept_input not in CONCEPT_INPUTS:
            raise ValueError(f"model.concept_input must be one of {CONCEPT_INPUTS}, got '{self.concept_input}'")
        if self.concept_readout not in CONCEPT_READOUTS:
            raise ValueError(f"model.concept_readout must be one of {CONCEPT_READOUTS}, got '{self.concept_readout}'")
        mono = self.monotonicity or {}
        if not isinstance(mono, Mapping):
            raise ValueError(f"model.monotonicity: expected a mapping {{concept: +1 | -1}}, got {mono!r}")
        mono = dict(mono)
        bad = {k: v for k, v in mono.items() if isinstance(v, bool) or v not in (1, -1)}
        if bad:
            raise ValueError(f"model.monotonicity: signs must be +1 or -1, got {bad}")
        self.monotonicity = {str(k): int(v) for k, v in mono.items()} or None


# ------------------------------------------------------------------ per-architecture schemas
@dataclass
class CEMConfig(ModelConfig):
    """CEM knobs; defaults are the reference implementation's (``mateoespinosa/cem``)."""

    name: str = "cem"
    #: The CBM's encoder rate (conf/model/cbm.yaml), so short runs compare like with like.
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3))
    #: Size ``k`` of each concept's positive / negative embedding.
    emb_size: int = 16
    #: RandInt probability of intervening on a concept during training (per sample and concept).
    randint_prob: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training != "joint":
            raise ValueError(f"model.training: CEM trains jointly, got '{self.training}'")
        if self.emb_size <= 0:
            raise ValueError(f"model.emb_size must be > 0, got {self.emb_size}")
        if not 0.0 <= self.randint_prob <= 1.0:
            raise ValueError(f"model.randint_prob must be in [0, 1], got {self.randint_prob}")


@dataclass
class ProbCBMConfig(ModelConfig):
    """ProbCBM knobs; defaults from the reference ``ejkim47/prob-cbm`` (configs/config_exp.yaml).

    ``training`` follows the reference ``train_class_mode``: ``sequential`` (default) trains the
    class predictor on detached concept samples, ``joint`` lets the class loss reach the encoder,
    ``independent`` feeds it samples around the ground-truth prototypes.
    """

    name: str = "probcbm"
    training: str = "sequential"
    #: The reference rate 1e-3, not the CBM's 3e-3: see "Learning rate" in cbm/models/probcbm.py.
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3))
    #: Dimension ``d`` of each concept embedding (reference ``hidden_dim``).
    emb_size: int = 16
    #: Dimension of the class embedding space (reference ``class_hidden_dim``).
    class_emb_size: int = 128
    n_samples_train: int = 50
    #: Monte-Carlo samples at inference; 0 uses the mean embedding only.
    n_samples_infer: int = 50
    #: Seed of the fixed inference noise buffer.
    mc_seed: int = 0
    #: Initial value of the learned concept and class distance scales.
    scale_init: float = 5.0
    #: Initial log-variance of every concept embedding (the bias of the log-variance head); see
    #: "Initial variance" in cbm/models/probcbm.py.
    logvar_init: float = -4.0
    #: Training epochs at the start whose samples are the means (no noise, no KL term): the means
    #: learn as a deterministic CBM's before the variances do (0: off).
    warmup_epochs: int = 0
    #: Weight of the KL(N(mu, sigma^2) || N(0, I)) regulariser (reference ``vib_beta``).
    kl_weight: float = 5e-5
    #: Training-time intervention: probability that an MC draw of a sample is replaced by the
    #: ground-truth prototypes of all its concepts (reference ``intervention_prob``).
    train_intervention_prob: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if min(self.emb_size, self.class_emb_size, self.n_samples_train) <= 0 or self.n_samples_infer < 0:
            raise ValueError("model.emb_size, class_emb_size and n_samples_train must be > 0, n_samples_infer >= 0")
        if self.warmup_epochs < 0:
            raise ValueError(f"model.warmup_epochs must be >= 0, got {self.warmup_epochs}")
        if self.scale_init <= 0 or self.kl_weight < 0:
            raise ValueError("model.scale_init must be > 0 and model.kl_weight >= 0")
        if not 0.0 <= self.train_intervention_prob <= 1.0:
            raise ValueError(f"model.train_intervention_prob must be in [0, 1], got {self.train_intervention_prob}")


@dataclass
class EnergyWeights:
    """Weights of the three energies in the joint energy minimised at inference."""

    #: Weight (>= 0) of the class energy ``E_xy(x, y)``.
    xy: float = 1.0
    #: Weight (>= 0) of the concept energy ``E_xc(x, c)`` (anchors the free concepts to the input).
    xc: float = 1.0
    #: Weight (>= 0) of the global concept-class energy ``E_cy(c, y)``; xy + cy must be > 0.
    cy: float = 1.0

    def __post_init__(self) -> None:
        if min(self.xy, self.xc, self.cy) < 0 or self.xy + self.cy <= 0:
            raise ValueError("energy weights must be >= 0 with xy + cy > 0 (else no class is preferred)")


@dataclass
class ECBMConfig(ModelConfig):
    """ECBM knobs; defaults from the reference (configs/cub.json, GradientInference.py).

    ``task_loss_weight`` / ``concept_loss_weight`` / ``global_loss_weight`` weigh the class,
    concept and global energy losses (reference ``lambda_xy`` 3, ``lambda_xc`` 1, ``lambda_cy`` 1).
    """

    name: str = "ecbm"
    #: The CBM's encoder rate (conf/model/cbm.yaml), so short runs compare like with like.
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3))
    task_loss_weight: float = 3.0
    global_loss_weight: float = 1.0
    #: Width of the energy networks (reference ``hid_size`` 512 = a quarter of its 2048-d features;
    #: a quarter of the default 128-d backbone here).
    hidden_dim: int = 32
    dropout: float = 0.2
    #: Global-energy augmentation: a sample is perturbed with this probability ...
    #: Off by default (the reference uses 0.2): flipping concepts while keeping y teaches E_cy a
    #: noisy rule, and all-true interventions then reached only 97.7% on robot images (99.1% tabular).
    perturb_sample_prob: float = 0.0
    #: ... and then each of its concepts flipped with this probability.
    perturb_concept_prob: float = 0.2
    #: Joint-energy weights at inference (reference defaults lambda_xy 1, lambda_xc 1, lambda_cy 0.01).
    infer_weights: EnergyWeights = field(default_factory=lambda: EnergyWeights(xy=1.0, xc=1.0, cy=0.01))
    #: Weights for rows with intervened concepts. The reference turns the class energy off (kept
    #: here) and uses (xc 0, cy 3), but its global energy thresholds concepts, so they never moved;
    #: with soft concepts E_xc must anchor the free ones to the input, and cy 3 let E_cy override
    #: it (robot tabular: accuracy 1.00 -> 0.95 at k=1), so the training balance (1, 1) is used.
    intervene_weights: EnergyWeights = field(default_factory=lambda: EnergyWeights(xy=0.0, xc=1.0, cy=1.0))
    #: Gradient-descent bound, step size and per-row stopping tolerance (max |gradient|).
    infer_steps: int = 100
    #: Step size of that gradient descent on the concept and class logits.
    infer_lr: float = 1.0
    infer_tol: float = 1e-4
    #: Negative slope of the energy heads' ReLU. The reference uses a plain ReLU (0); with it,
    #: units switched off by the majority class never come back, and on robot images 17 of E_cy's
    #: 32 units were dead, none active for the one Drent cell (knees, open mouth, round feet), so
    #: E_cy was constant there and all-true interventions reached only 96.2% (seed 0).
    energy_slope: float = 0.1
    #: How the responsiveness search evaluates an intervention: ``fast`` keeps the free concepts at
    #: the un-intervened minimum (the concept-class energy is then additive in the intervened ones:
    #: thousands of (subset, assignment) pairs per millisecond); ``full`` re-minimises every pair
    #: (``intervene`` + ``predict``, exact, ~1,000x slower). Interventions themselves always re-minimise.
    pair_inference: str = "fast"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training != "joint":
            raise ValueError(f"model.training: ECBM trains jointly, got '{self.training}'")
        if self.hidden_dim <= 0 or self.infer_steps < 0 or self.infer_lr <= 0 or self.infer_tol < 0:
            raise ValueError("model.hidden_dim and infer_lr must be > 0, infer_steps and infer_tol >= 0")
        if self.pair_inference not in ("fast", "full"):
            raise ValueError(f"model.pair_inference must be 'fast' or 'full', got '{self.pair_inference}'")
        if not 0.0 <= self.energy_slope < 1.0:
            raise ValueError(f"model.energy_slope must be in [0, 1), got {self.energy_slope}")
        if self.global_loss_weight < 0 or not 0.0 <= self.dropout < 1.0:
            raise ValueError("model.global_loss_weight must be >= 0 and model.dropout in [0, 1)")
        for p in (self.perturb_sample_prob, self.perturb_concept_prob):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"model.perturb_*_prob must be in [0, 1], got {p}")


@dataclass
class HybridCBMConfig(ModelConfig):
    """Hybrid (residual) CBM knobs: the head reads the concepts and ``side_dim`` unsupervised units."""

    name: str = "hybrid_cbm"
    #: trained end to end: the side channel has no target of its own
    training: str = "joint"
    #: The CBM's rates (conf/model/cbm.yaml): at the encoder's rate the head lagged (tabular robots,
    #: 10 epochs: 95.8% with the side channel off, against the joint CBM's 100%).
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, head_lr=1e-2))
    #: Width of the unsupervised side channel the head reads beside the concepts (0: a joint CBM).
    side_dim: int = 8
    #: Dropout on the side channel while training (pushes the head onto the concepts).
    side_dropout: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training != "joint":
            raise ValueError(f"model.training: a hybrid CBM trains jointly (its side channel has no target), got '{self.training}'")
        if self.side_dim < 0:
            raise ValueError(f"model.side_dim must be >= 0, got {self.side_dim}")
        if not 0.0 <= self.side_dropout < 1.0:
            raise ValueError(f"model.side_dropout must be in [0, 1), got {self.side_dropout}")


COVARIANCES = ("amortized", "global")


@dataclass
class StochasticCBMConfig(ModelConfig):
    """Stochastic CBM knobs (Vandenhirtz et al. 2024); see cbm/models/scbm.py."""

    name: str = "scbm"
    training: str = "joint"
    #: The CBM's rates (conf/model/cbm.yaml).
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, head_lr=1e-2))
    #: ``amortized``: a covariance per input (from the features); ``global``: one learned covariance.
    covariance: str = "amortized"
    #: Monte-Carlo samples of the concept logits while training / at inference (fixed buffer, ``mc_seed``).
    n_samples_train: int = 20
    n_samples_infer: int = 50
    mc_seed: int = 0
    #: Weight of the L1 penalty on the off-diagonal precision (sparse concept dependencies).
    cov_reg_weight: float = 0.01
    #: An intervened concept's logit is moved (no further than needed) to where its probability reaches
    #: this confidence, the other logits follow through the conditional Gaussian.
    intervention_confidence: float = 0.99
    #: Added to the diagonal before factorising a conditioned covariance (numerical floor).
    jitter: float = 1e-5
    #: Training interventions: with this probability an example's head reads every concept at its
    #: annotated value (as ProbCBM's), so exact values from a human are in distribution.
    train_intervention_prob: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training != "joint":
            raise ValueError(f"model.training: a stochastic CBM trains jointly, got '{self.training}'")
        if self.covariance not in COVARIANCES:
            raise ValueError(f"model.covariance must be one of {COVARIANCES}, got '{self.covariance}'")
        if self.n_samples_train < 1 or self.n_samples_infer < 1:
            raise ValueError("model.n_samples_train and n_samples_infer must be >= 1")
        if self.cov_reg_weight < 0 or not self.jitter > 0:
            raise ValueError("model.cov_reg_weight must be >= 0 and model.jitter > 0")
        if not 0.5 < self.intervention_confidence < 1.0:
            raise ValueError(f"model.intervention_confidence must be in (0.5, 1), got {self.intervention_confidence}")
        if not 0.0 <= self.train_intervention_prob <= 1.0:
            raise ValueError(f"model.train_intervention_prob must be in [0, 1], got {self.train_intervention_prob}")


@dataclass
class IntCEMConfig(CEMConfig):
    """IntCEM knobs (Espinosa Zarlenga et al. 2023); defaults from the reference ``cem/models/intcbm.py``
    where it has them. ``randint_prob`` draws each rollout's starting interventions."""

    name: str = "intcem"
    #: Longest rollout (concepts asked after the start), drawn uniformly from 1 .. this (capped at m).
    max_horizon: int = 6
    #: The task loss after a rollout of ``T`` steps is weighted ``discount ** T`` (reference 1.1):
    #: the more concepts a human gave, the more a wrong answer costs.
    intervention_task_discount: float = 1.1
    #: Weight of that task loss (the plain task loss on the starting interventions keeps ``task_loss_weight``).
    rollout_task_weight: float = 1.0
    #: Weight of the policy's imitation loss (psi imitates the greedy oracle at every rollout step).
    policy_loss_weight: float = 1.0
    #: psi's width and hidden layers (cbm.interventions.policies.imitation.PolicyNet).
    policy_hidden: int = 64
    #: Number of hidden layers (>= 1) of psi, each ``policy_hidden`` wide.
    policy_layers: int = 2
    #: stakes (each step's imitation weighted by how much the oracle's choice raises log p(y)) |
    #: uniform (the reference's plain cross-entropy); see cbm.interventions.policies.imitation
    policy_weighting: str = "stakes"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_horizon < 1:
            raise ValueError(f"model.max_horizon must be >= 1, got {self.max_horizon}")
        if not self.intervention_task_discount > 0:
            raise ValueError(f"model.intervention_task_discount must be > 0, got {self.intervention_task_discount}")
        if self.rollout_task_weight < 0 or self.policy_loss_weight < 0:
            raise ValueError("model.rollout_task_weight and model.policy_loss_weight must be >= 0")
        if self.policy_hidden < 1 or self.policy_layers < 1:
            raise ValueError("model.policy_hidden and model.policy_layers must be >= 1")
        if self.policy_weighting not in ("stakes", "uniform"):
            raise ValueError(f"model.policy_weighting must be one of ('stakes', 'uniform'), got '{self.policy_weighting}'")


DCR_LOGICS = ("godel", "product")


@dataclass
class DCRConfig(CEMConfig):
    """Deep Concept Reasoner knobs (Barbiero et al. 2023); see cbm/models/dcr.py."""

    name: str = "dcr"
    #: fuzzy logic of the rule: godel (min / max, the reference default) | product (product t-norm)
    logic: str = "godel"
    #: Sharpness of relevance and polarity (their logits are divided by it; reference: 1).
    temperature: float = 1.0
    #: Hidden width of the relevance and polarity networks (reference: the embedding size).
    rule_hidden: int = 16
    #: A literal is shown in a rule when its relevance exceeds this (readable rules in the report).
    rule_threshold: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.logic not in DCR_LOGICS:
            raise ValueError(f"model.logic must be one of {DCR_LOGICS}, got '{self.logic}'")
        if not self.temperature > 0 or self.rule_hidden < 1:
            raise ValueError("model.temperature must be > 0 and model.rule_hidden >= 1")
        if not 0.0 < self.rule_threshold < 1.0:
            raise ValueError(f"model.rule_threshold must be in (0, 1), got {self.rule_threshold}")


#: ``model.name`` -> its schema (torch-free: configs are validated before torch is imported).
MODEL_CONFIGS: dict[str, type[ModelConfig]] = {
    "cbm": ModelConfig,
    "blackbox": ModelConfig,
    "cem": CEMConfig,
    "probcbm": ProbCBMConfig,
    "ecbm": ECBMConfig,
    "hybrid_cbm": HybridCBMConfig,
    "scbm": StochasticCBMConfig,
    "intcem": IntCEMConfig,
    "dcr": DCRConfig,
}


@dataclass
class DataInfo:
    """What a model needs to know about its dataset (stored in checkpoints)."""

    #: Dataset name (``data.name``: ``robot``, ``sudoku``, ...); with modality, picks the ``auto`` backbone.
    dataset: str
    #: ``image``, ``tabular`` or ``text``: the input kind a backbone must accept.
    modality: str
    #: Shape of one input as the model sees it: ``[C, H, W]`` (images), ``[features]`` or ``[tokens]``.
    in_shape: list[int]
    #: Concept names, in the order of the concept columns (their count is the number of concepts).
    concept_names: list[str]
    #: Class names, in the order of the label indices (their count is the number of classes).
    class_names: list[str]
    #: Text modality: token vocabulary size (id 0 = padding); 0 for other modalities.
    vocab_size: int = 0
    #: Fingerprint of the data config, so a checkpoint of another dataset is refused.
    data_hash: str = ""
    #: Categorical concepts, ``{name: [its value columns]}`` (at most one column 1 per example; a model
    #: reads them as one softmax and an intervention reveals the whole group); see
    #: :mod:`cbm.models.concept_types`.
    concept_groups: dict[str, list[str]] = field(default_factory=dict)
    #: Continuous concepts' columns (values in [0, 1], fitted with a squared error).
    continuous_concepts: list[str] = field(default_factory=list)

    @property
    def n_concepts(self) -> int:
        return len(self.concept_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)
