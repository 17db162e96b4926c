"""Probabilistic Concept Bottleneck Model (Kim et al., ICML 2023).

Each concept ``i`` of an input is a Gaussian embedding ``N(mu_i, diag(sigma_i^2))`` in
``R^d`` (``mu_i`` L2-normalised, paper Sec. 3.2). Its probability is the Monte-Carlo mean,
over reparameterised samples ``z_i^s = mu_i + sigma_i * eps^s``, of a softmax over the
distances to a learned negative and positive prototype ``a_i^-, a_i^+`` (Eq. 3):

    p(c_i = 1 | z) = sigmoid(s * (||z - a_i^-|| - ||z - a_i^+||)),  s learned (init 5)

The class predictor maps the concatenated samples ``[z_1^s .. z_m^s]`` linearly to a class
space and scores classes by a softmax over scaled distances to learned class prototypes,
averaged over samples (Eq. 5). A KL term to ``N(0, I)`` regularises the embeddings (Eq. 4,
weight 5e-5). Uncertainties (Sec. 3.4): concept ``exp(mean_d log sigma_i^2)`` (``state.uncertainty``);
class ``det(W Sigma W^T + 1e-10 I)^(1/n)`` over the ``n = min(H, m d)`` possibly non-zero
eigenvalues, ``W`` the class map (``state_class_uncertainty``: computed on demand and stored in
``extras["class_uncertainty"]``).

Training-time interventions (reference ``intervention_prob`` 0.5): each MC draw of each sample
is, with that probability, replaced by the ground-truth prototypes of all its concepts.

Determinism: inference draws its ``eps`` once, at build time, from a generator seeded by
``mc_seed`` (a fixed buffer ``[S,m,d]`` shared by every input: common random numbers).
The state stores ``mu`` and ``sigma`` (small, batch-first), and ``predict`` re-forms the
samples from them, so it is a pure function of the state and an example's prediction does
not depend on its batch. Training draws fresh ``eps`` every step (the global seeded RNG).

Learning rate: the reference's 1e-3 (``lr``), not the CBM's 3e-3. ``mu_i`` is the normalised
output ``v_i / ||v_i||`` of the mean head, so nothing fixes ``||v_i||``; under Adam the noisy updates
of a concept not yet learned are mostly orthogonal to ``v_i`` and grow its norm, and the gradient
reaching its direction (and the encoder) shrinks as ``1 / ||v_i||``: the concept stalls. At 3e-3,
over the default 10 epochs on robot images ``||v_i||`` grew from ~0.2 to 7-14 for learned concepts
and to ~30 for the stalled ones (seed 1: ``knees`` at 52%, task accuracy 88.6% = the majority
class); at 1e-3 it stays at 2-6 and every label concept is learned (task 99.8-99.9%, seeds 0-2).

Initial variance: the log-variance head starts at ``logvar_init`` = -4 (sigma ~ 0.14), not at the
``nn.Linear`` default of ~0 (sigma ~ 1). With sigma ~ 1 a unit-norm mean is buried in noise of norm
~ sqrt(d) = 4, so a concept's MC probability sits at ~0.5 whatever its mean, the mean gets almost no
gradient and a tight sigma around an uninformative mean earns nothing either: the concept stays in
that equilibrium. On the default robot data (10 epochs) such stalled concepts kept sigma 0.4-1.0
and a positive-negative mean separation of 0.02-0.25, where learned ones had sigma ~ 0.05 and ~ 1.7
(seed 4: knees stalled, task accuracy 88.8%; seed 6: 99.46%). Starting tight, every concept first
learns like a deterministic CBM's and its sigma grows where the data is ambiguous (seed 4: 99.83%).

Intervention replaces a concept's distribution by the point mass at the prototype of the
given value (``sigma = 0``, ``mu = v a^+ + (1 - v) a^-``), so every sample is the prototype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cbm.models.base import Batch, ConceptModel, concept_hint, masked_mean, prob_to_logit, replace_concepts
from cbm.models.config import ProbCBMConfig
from cbm.models.hooks import PairBlock
from cbm.models.probcbm_pairs import pair_logits as probcbm_pair_logits
from cbm.models.probcbm_pairs import pair_terms
from cbm.models.state import ConceptState

#: Log-variance clip: the reference's upper bound 10, and a lower bound so sigma never underflows.
LOGVAR_RANGE = (-20.0, 10.0)


class ProbCBM(ConceptModel):
    """Gaussian concept embeddings, prototype matching, class prototypes over samples."""

    config_cls = ProbCBMConfig
    cfg: ProbCBMConfig
    supports_typed_concepts = True

    def build(self) -> None:
        m, d, cfg = self.n_concepts, self.cfg.emb_size, self.cfg
        self.hint = concept_hint(self.backbone, m)
        in_dim = self.concept_input_dim()
        self.mean_head = nn.Linear(in_dim, m * d)
        self.logvar_head = nn.Linear(in_dim, m * d)
        nn.init.constant_(self.logvar_head.bias, cfg.logvar_init)
        #: Concept prototypes ``[2,m,d]``: index 0 negative, 1 positive (reference ``use_neg_concept``).
        self.prototypes = nn.Parameter(nn.init.trunc_normal_(torch.empty(2, m, d), std=d**-0.5))
        self.concept_scale = nn.Parameter(torch.tensor(cfg.scale_init))
        self.class_map = nn.Linear(m * d, cfg.class_emb_size)
        self.class_prototypes = nn.Parameter(torch.randn(self.n_classes, cfg.class_emb_size))
        self.class_scale = nn.Parameter(torch.tensor(cfg.scale_init))
        gen = torch.Generator().manual_seed(cfg.mc_seed)
        eps = torch.randn(cfg.n_samples_infer, m, d, generator=gen) if cfg.n_samples_infer else torch.zeros(1, m, d)
        self.register_buffer("eps_infer", eps, persistent=False)

    # ------------------------------------------------------------------ pieces
    def concept_prototypes(self) -> Tensor:
        """L2-normalised prototypes ``[2,m,d]`` (negative, positive)."""
        return F.normalize(self.prototypes, dim=-1)

    def distribution(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """Mean (unit norm) and clipped log-variance ``[B,m,d]`` of each concept embedding."""
        shape = (len(features), self.n_concepts, self.cfg.emb_size)
        h = self.concept_input(features)
        mean = F.normalize(self.mean_head(h).view(shape), dim=-1)
        logvar = self.logvar_head(h).view(shape).clamp(*LOGVAR_RANGE)
        return mean, logvar

    @staticmethod
    def sample(mean: Tensor, std: Tensor, eps: Tensor) -> Tensor:
        """Reparameterised samples ``[B,S,m,d]`` from ``[B,m,d]`` moments and ``eps [B or 1,S,m,d]``."""
        return mean.unsqueeze(1) + std.unsqueeze(1) * eps

    def concept_sample_logits(self, samples: Tensor) -> Tensor:
        """``[B,S,m]`` logit of the prototype-distance probability of every sample (Eq. 3)."""
        protos = self.concept_prototypes()
        sq = samples.pow(2).sum(-1).unsqueeze(2) - 2 * torch.einsum("bsmd,kmd->bskm", samples, protos) + 1.0
        dist = torch.sqrt(sq.clamp_min(0) + 1e-6)  # [B,S,2,m]; |a|^2 = 1 (unit prototypes)
        return self.concept_scale * (dist[:, :, 0] - dist[:, :, 1])

    def concept_probs(self, samples: Tensor) -> Tensor:
        """MC mean ``[B,m]`` of the prototype-distance probability (Eq. 3)."""
        return self.types.activate(self.concept_sample_logits(samples)).mean(1)

    def class_embedding(self, samples: Tensor) -> Tensor:
        """``[B,S,H]`` class-space embedding of samples ``[B,S,m,d]`` (linear in every concept's sample)."""
        z = samples * self.concept_keep.view(1, 1, -1, 1)  # alignment constraint
        return self.class_map(z.flatten(2))

    def log_probs_from_dist(self, dist: Tensor) -> Tensor:
        """``log`` of the MC-mean class probability ``[...,C]`` from root-mean-square distances
        ``[...,S,C]`` of every sample to every class prototype (Eq. 5). Two classes take
        ``log softmax = logsigmoid`` of the difference: the same function, a third of the work."""
        z = -self.class_scale * dist
        if z.shape[-1] == 2:
            gap = z[..., 1] - z[..., 0]
            log_p = torch.stack([F.logsigmoid(-gap), F.logsigmoid(gap)], dim=-1)
        else:
            log_p = F.log_softmax(z, dim=-1)
        return torch.logsumexp(log_p, dim=-2) - math.log(log_p.shape[-2])

    def class_log_probs(self, samples: Tensor) -> Tensor:
        """``log`` of the MC-mean class probability ``[B,C]`` (Eq. 5), usable as logits."""
        h = self.class_embedding(samples)  # [B,S,H]
        p = self.class_prototypes
        sq = h.pow(2).sum(-1, keepdim=True) - 2 * h @ p.T + p.pow(2).sum(-1)
        return self.log_probs_from_dist(torch.sqrt(sq.clamp_min(0) / h.shape[-1] + 1e-10))

    def class_uncertainty(self, std: Tensor) -> Tensor:
        """``[B]`` class uncertainty ``det(G + 1e-10 I)^(1/n)``, ``G`` the Gram of ``W diag(sigma^2) W^T``.

        As the reference (geometric mean of the eigenvalues of the class-embedding covariance,
        each ``+ 1e-10``), over its ``n = min(H, m d)`` possibly non-zero eigenvalues: ``G`` is
        whichever of ``W S^2 W^T`` / ``S W^T W S`` is smaller (same non-zero spectrum). The log-det
        comes from a float64 Cholesky (eigenvalues only where that fails): ~10x cheaper.
        """
        w = self.class_map.weight.detach().double()  # [H, m*d]
        s = (std.detach().flatten(1) * self.concept_keep.repeat_interleave(self.cfg.emb_size)).double()
        if w.shape[0] <= w.shape[1]:
            gram = (w * s.pow(2).unsqueeze(1)) @ w.T
        else:
            gram = s.unsqueeze(2) * (w.T @ w) * s.unsqueeze(1)
        n = gram.shape[-1]
        chol, info = torch.linalg.cholesky_ex(gram + 1e-10 * torch.eye(n, dtype=gram.dtype, device=gram.device))
        logdet = 2 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        bad = info != 0
        if bool(bad.any()):
            logdet[bad] = (torch.linalg.eigvalsh(gram[bad]).clamp_min(0) + 1e-10).log().sum(-1)
        return (logdet / n).exp().to(std.dtype)

    # ------------------------------------------------------------------ contract
    def encode(self, x: Tensor) -> ConceptState:
        features = self.backbone(x)
        mean, logvar = self.distribution(features)
        std = torch.exp(0.5 * logvar)
        if self.training and self.warming_up():
            eps = mean.new_zeros(len(mean), 1, *mean.shape[1:])  # the mean itself, as a CBM's concept
        elif self.training:
            eps = torch.randn(len(mean), self.cfg.n_samples_train, *mean.shape[1:], dtype=mean.dtype, device=mean.device)
        else:
            eps = self.eps_infer.unsqueeze(0)
        samples = self.sample(mean, std, eps)
        probs = self.concept_probs(samples)
        extras = {"features": features, "mean": mean, "std": std}
        if self.training:
            extras["samples"] = samples  # fresh draws for the training losses only
        # the class uncertainty (a float64 Cholesky per row, half a second per 1,000 rows) is computed on
        # demand by state_class_uncertainty: validation epochs and intervention grids never read it
        return ConceptState(
            logits=prob_to_logit(probs), probs=probs, uncertainty=logvar.mean(-1).exp(), extras=extras
        )

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        """Replace each masked concept's distribution by its value's prototype (a point mass)."""
        self.check_intervention(state, mask, values)
        new = replace_concepts(state, mask, values)
        neg, pos = self.concept_prototypes()
        v = values.to(state.probs).unsqueeze(-1)
        m3 = mask.unsqueeze(-1)
        new.extras["mean"] = torch.where(m3, v * pos + (1 - v) * neg, state.extras["mean"])
        new.extras["std"] = torch.where(m3, torch.zeros_like(state.extras["std"]), state.extras["std"])
        new.extras.pop("samples", None)
        # stale now; recomputed on demand (state_class_uncertainty): the intervention grid never reads it
        new.extras.pop("class_uncertainty", None)
        return new

    def state_class_uncertainty(self, state: ConceptState) -> Tensor:
        """``[B]`` class uncertainty of ``state``: the stored one, else computed from its moments
        (and stored) -- an intervention drops it, so only the states selective prediction scores pay."""
        if "class_uncertainty" not in state.extras:
            state.extras["class_uncertainty"] = self.class_uncertainty(state.extras["std"])
        return state.extras["class_uncertainty"]

    def predict(self, state: ConceptState) -> Tensor:
        """Class log-probabilities from the fixed inference noise (deterministic)."""
        ex = state.extras
        return self.class_log_probs(self.sample(ex["mean"], ex["std"], self.eps_infer.unsqueeze(0)))

    # ------------------------------------------------- intervention-engine hooks (see cbm.models.hooks)
    def _plain_probcbm_contract(self) -> bool:
        return type(self).predict is ProbCBM.predict and type(self).intervene is ProbCBM.intervene

    def intervention_extras(self) -> frozenset[str] | None:
        """``predict`` reads the moments only (the class uncertainty is recomputed when present)."""
        return frozenset({"mean", "std"}) if self._plain_probcbm_contract() else None

    def pair_logits(self, state: ConceptState, pairs: PairBlock) -> Tensor:
        """Exact logits of every pair through the expansion of :mod:`cbm.models.probcbm_pairs`
        (its per-example terms are computed once per state and reused across pair blocks)."""
        if not self._plain_probcbm_contract():
            return super().pair_logits(state, pairs)
        cached = getattr(self, "_pair_cache", None)
        if cached is None or cached[0] is not state:
            self._pair_cache = (state, pair_terms(self, state))
        return probcbm_pair_logits(self, self._pair_cache[1], pairs)

    # ------------------------------------------------------------------ training
    def task_logits_for_training(self, batch: Batch, state: ConceptState) -> Tensor:
        """Class logits from the step's fresh samples, per the reference ``train_class_mode``."""
        if "samples" not in state.extras:  # encoded in eval mode
            return self.predict(state)
        samples = state.extras["samples"]
        c = batch["c"].to(samples)
        neg, pos = self.concept_prototypes().detach()
        gt = (c.unsqueeze(-1) * pos + (1 - c.unsqueeze(-1)) * neg).unsqueeze(1)  # [B,1,m,d]
        if self.cfg.training == "independent":
            eps = torch.randn_like(samples)
            samples = self.sample(gt.squeeze(1), state.extras["std"].detach(), eps)
        elif self.cfg.training == "sequential":
            samples = samples.detach()
        if self.cfg.train_intervention_prob > 0:  # per sample and MC draw, all concepts at once
            hit = torch.rand(samples.shape[:2], device=samples.device) < self.cfg.train_intervention_prob
            samples = torch.where(hit[..., None, None], gt, samples)
        return self.class_log_probs(samples)

    def concept_loss(self, state: ConceptState, c: Tensor, observed: Tensor | None = None) -> Tensor:
        """BCE on the MC-mean probabilities (reference ``MCBCELoss``), over the annotated entries.

        Computed from the samples' logits ``z``, at least in float32: ``log p = logsumexp_s
        logsigmoid(z_s) - log S`` and ``log(1 - p) = logsumexp_s logsigmoid(-z_s) - log S``, each
        clamped at -100 as ``F.binary_cross_entropy`` clamps its logs: the same loss, without a
        ``log(1 - p)`` that rounds to ``log 0`` near ``p = 1`` in bf16, and an op CUDA's autocast
        accepts (it refuses ``binary_cross_entropy`` on probabilities as unsafe)."""
        samples = state.extras.get("samples")
        if samples is None:  # encoded in eval mode: the fixed inference draws, as ``encode``'s probs
            samples = self.sample(state.extras["mean"], state.extras["std"], self.eps_infer.unsqueeze(0))
        z = self.concept_sample_logits(samples)
        z = z.to(torch.promote_types(z.dtype, torch.float32))
        if self.types.typed:  # per column type, on the Monte-Carlo mean probabilities
            return self.types.loss_from_probs(self.types.activate(z).mean(1), c, observed)
        log_n = math.log(z.shape[1])
        log_p = (torch.logsumexp(F.logsigmoid(z), dim=1) - log_n).clamp_min(-100.0)
        log_q = (torch.logsumexp(F.logsigmoid(-z), dim=1) - log_n).clamp_min(-100.0)
        c = c.to(z.dtype)
        return masked_mean(-(c * log_p + (1 - c) * log_q), None if observed is None else observed.to(z.dtype))

    def warming_up(self) -> bool:
        """Within ``warmup_epochs`` of training: samples are the means and there is no KL term."""
        return self.cfg.warmup_epochs > 0 and self._trainer is not None and self.current_epoch < self.cfg.warmup_epochs

    def extra_losses(self, batch: Batch, state: ConceptState, y_logits: Tensor) -> dict[str, Tensor]:
        if self.cfg.kl_weight <= 0 or self.warming_up():
            return {}
        mean, logvar = state.extras["mean"], 2 * state.extras["std"].log()
        kl = -0.5 * (1 + logvar - mean.pow(2) - logvar.exp())
        return {"kl_loss": self.cfg.kl_weight * kl.sum(-1).mean()}
