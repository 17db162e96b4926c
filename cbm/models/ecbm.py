"""Energy-based Concept Bottleneck Model (Xu et al., ICLR 2024).

Three energy networks over the encoder features ``z`` (paper Sec. 3.1), each of the form
``E = w . relu(h + h * e) + b`` with ``h`` a projection of its input and ``e`` a unit-norm
label embedding (as in the reference ``xmed-lab/ECBM``; here the ReLU leaks with slope
``energy_slope``, see below):

* class energy ``E_xy(x, y)``: ``h = W_y z``, ``e = u_y`` (class embedding);
* concept energy ``E_xc(x, c) = sum_i E_i(x, c_i)``: ``h = W_c z``, ``e`` the normalised
  mixture ``c_i v_i^+ + (1 - c_i) v_i^-`` of concept ``i``'s embeddings, one head per concept;
* global energy ``E_cy(c, y)``: ``h = P [s_1 .. s_m]`` with ``s_i = c_i v_i^+ + (1 - c_i) v_i^-``
  (soft: no ``c > 0.5`` threshold, so concepts receive its gradient), ``e = u_y``.

Training (Eq. 5-7) minimises ``E(pos) + logsumexp(-E)`` per energy, i.e. cross-entropy with
logits ``-E``: ``L_class + lambda_c L_concept + lambda_g L_global``, the global energy seeing the
annotated concepts with random flips (the reference's ``cy_augment``, here drawn per sample).

Inference (Eq. 8) minimises the weighted joint energy
``w_xy E_xy(x, y_hat) + w_xc E_xc(x, c) + w_cy E_cy(c, y_hat)`` over relaxed concepts
``c = sigmoid(a)`` and class ``y_hat = softmax(b)`` by batched gradient descent, bounded by
``infer_steps`` and stopped per row once its largest gradient entry is below ``infer_tol``
(so a row's result does not depend on the rest of its batch). Intervened concepts are held
at their values (``torch.where``: zero gradient) while the rest are re-minimised, so an
intervention propagates to correlated concepts. In the joint energy ``E_cy`` is class-normalised,
``E_cy(c, y) + log sum_y' exp(-E_cy(c, y'))`` = ``-log p(y|c)``: its training loss (cross-entropy
over ``y``) leaves an offset per concept vector ``c`` free, and minimising the raw energy over ``c``
chased that offset -- it dragged the free concepts away from ``E_xc``'s posterior (robot images: one
true concept given, accuracy 99.98% -> 77%). The offset is constant in ``y``, so ``-E_cy``'s use as
class logits is unchanged. Rows with an intervention use
``intervene_weights`` (the reference drops the class energy after an intervention). The class
prediction is ``logits_y = -(w_xy E_xy(x, y) + w_cy E_cy(c*, y))``: the joint energy of each
class at the inferred concepts.

Deviation from the reference: the energy heads' ReLU leaks (``energy_slope`` 0.1). With a plain
ReLU, hidden units switched off for some input never receive a gradient again; on robot images
half of ``E_cy``'s 32 units died and none stayed active for the single Drent cell of the label rule,
so ``E_cy`` could not separate it (all-true interventions 96.2%, seed 0).

In training mode ``encode`` skips the minimisation (the losses only need the energies); the
minimisation never tracks parameter gradients and never uses dropout, so it is deterministic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cbm.models.base import Batch, ConceptModel, concept_hint, masked_mean, prob_to_logit
from cbm.models.config import ECBMConfig
from cbm.models.hooks import PairBlock, additive_pair_logits
from cbm.models.state import MINIMISED, ConceptState


def _energy(h: Tensor, e: Tensor, w: Tensor, b: Tensor, slope: float = 0.0) -> Tensor:
    """The reference energy head ``w . relu(h + h * e) + b`` (broadcast over leading dims), its
    ReLU leaky with ``slope`` (0: the reference)."""
    return (F.leaky_relu(h + h * e, slope) * w).sum(-1) + b


class ECBM(ConceptModel):
    """Three energy networks; prediction and intervention by joint-energy minimisation."""

    config_cls = ECBMConfig
    cfg: ECBMConfig

    def build(self) -> None:
        m, k, h = self.n_concepts, self.n_classes, self.cfg.hidden_dim
        self.hint = concept_hint(self.backbone, m)
        in_dim = self.concept_input_dim()
        self.proj_xy = nn.Linear(in_dim, h)
        self.proj_xc = nn.Linear(in_dim, h)
        self.class_emb = nn.Parameter(torch.randn(k, h))
        #: Concept embeddings ``[2,m,h]``: index 0 negative, 1 positive; shared by E_xc and E_cy.
        self.concept_emb = nn.Parameter(torch.randn(2, m, h))
        self.concept_proj = nn.Linear(m * h, h)
        bound = h**-0.5
        self.head_xy = nn.Linear(h, 1)
        self.head_cy = nn.Linear(h, 1)
        self.head_xc_w = nn.Parameter(torch.empty(m, h).uniform_(-bound, bound))
        self.head_xc_b = nn.Parameter(torch.empty(m).uniform_(-bound, bound))

    # ------------------------------------------------------------------ energies
    def _energy(self, h: Tensor, e: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return _energy(h, e, w, b, self.cfg.energy_slope)

    def _hidden(self, features: Tensor, dropout: bool = False) -> tuple[Tensor, Tensor]:
        """Projections of the features for E_xy and E_xc (dropout only for the training losses)."""
        p = self.cfg.dropout if dropout and self.training else 0.0
        features = self.concept_input(features)
        return F.dropout(self.proj_xy(features), p, p > 0), F.dropout(self.proj_xc(features), p, p > 0)

    def _global_affine(self) -> tuple[Tensor, Tensor]:
        """``P [s_1..s_m] = g0 + c @ G`` with ``s_i`` alignment-masked: ``g0 [h]``, ``G [m,h]``.

        ``s_i`` is affine in ``c_i``, so the global projection is too; this form costs
        ``O(m h)`` per evaluation instead of ``O(m h^2)``.
        """
        m, h = self.n_concepts, self.cfg.hidden_dim
        keep = self.concept_keep.view(m, 1)
        neg, pos = self.concept_emb[0] * keep, self.concept_emb[1] * keep
        w = self.concept_proj.weight.view(h, m, h)
        return self.concept_proj(neg.reshape(1, -1)).squeeze(0), torch.einsum("omk,mk->mo", w, pos - neg)

    def _class_emb(self, y_probs: Tensor | None = None) -> Tensor:
        """Unit class embeddings ``[C,h]``, or of the relaxed class ``y_probs [B,C]`` -> ``[B,h]``."""
        u = self.class_emb if y_probs is None else y_probs @ self.class_emb
        return F.normalize(u, dim=-1)

    def concept_energies(self, h_xc: Tensor, c: Tensor) -> Tensor:
        """``E_i(x, c_i)`` ``[B,m]`` for relaxed concepts ``c [B,m]``."""
        v = c.unsqueeze(-1) * self.concept_emb[1] + (1 - c.unsqueeze(-1)) * self.concept_emb[0]
        return self._energy(h_xc.unsqueeze(1), F.normalize(v, dim=-1), self.head_xc_w, self.head_xc_b)

    def class_energies(self, features: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        """``E_xy(x, y)`` and ``E_cy(c, y)`` for every class ``y``: two ``[B,C]`` tensors."""
        h_xy, _ = self._hidden(features)
        g0, g = self._global_affine()
        u = self._class_emb()
        e_xy = self._energy(h_xy.unsqueeze(1), u, self.head_xy.weight[0], self.head_xy.bias)
        e_cy = self._energy((g0 + c @ g).unsqueeze(1), u, self.head_cy.weight[0], self.head_cy.bias)
        return e_xy, e_cy

    # ------------------------------------------------------------------ inference
    def _weights(self, rows_intervened: Tensor) -> Tensor:
        """Per-row joint-energy weights ``[B,3]`` (xy, xc, cy)."""
        inf, itv = self.cfg.infer_weights, self.cfg.intervene_weights
        a = rows_intervened.new_tensor([inf.xy, inf.xc, inf.cy], dtype=torch.float32)
        b = rows_intervened.new_tensor([itv.xy, itv.xc, itv.cy], dtype=torch.float32)
        return torch.where(rows_intervened.unsqueeze(1), b, a)

    def joint_energy(
        self, h_xy: Tensor, h_xc: Tensor, global_affine: tuple[Tensor, Tensor], c: Tensor, y_probs: Tensor, w: Tensor
    ) -> Tensor:
        """Weighted joint energy ``[B]`` of relaxed concepts ``c`` and class ``y_probs`` (Eq. 8)."""
        g0, g = global_affine
        u = self._class_emb(y_probs)
        h_cy = g0 + c @ g
        e_cy = self._energy(h_cy, u, self.head_cy.weight[0], self.head_cy.bias)
        # + log Z(c) makes it -log p(y|c): the global loss (cross-entropy over y) leaves an offset per
        # concept vector free, which minimising the raw energy over c would chase.
        all_y = self._energy(h_cy.unsqueeze(1), self._class_emb(), self.head_cy.weight[0], self.head_cy.bias)
        e_cy = e_cy + torch.logsumexp(-all_y, dim=1)
        return (
            w[:, 0] * self._energy(h_xy, u, self.head_xy.weight[0], self.head_xy.bias)
            + w[:, 1] * self.concept_energies(h_xc, c).sum(1)
            + w[:, 2] * e_cy
        )

    def minimise(
        self, features: Tensor, logits: Tensor, y_logits: Tensor, fixed: Tensor, values: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Bounded batched gradient descent of the joint energy over ``(a, b)``, detached from the weights.

        Starts from concept logits ``a = logits [B,m]`` and class logits ``b = y_logits [B,C]``; concepts at
        ``fixed`` are held at ``values``. A row stops once no concept probability would move by more
        than ``infer_tol`` (so a minimum is a fixed point); only unfinished rows are computed.
        """
        cfg = self.cfg
        with torch.inference_mode(False), torch.no_grad():  # clones are normal tensors even under inference_mode
            a_out, b_out = logits.detach().clone(), y_logits.detach().clone()
            z = features.detach().clone()
            affine = self._global_affine()
            rows = torch.arange(len(z), device=z.device)
            work = [*self._hidden(z), fixed.clone(), values.detach().to(z.dtype).clone()]
            work.append(self._weights(fixed.any(1)).to(z.dtype))
            a, b = a_out.clone(), b_out.clone()
            for _ in range(cfg.infer_steps):
                h_xy, h_xc, fix, val, w = work
                with torch.enable_grad():
                    a.requires_grad_(True)
                    b.requires_grad_(True)
                    e_b = (b - b.detach().amax(1, keepdim=True)).exp()  # softmax spelt out: aten's is slow on
                    y_probs = e_b / e_b.sum(1, keepdim=True)  # tiny CPU tensors under thread contention
                    c = torch.where(fix, val, torch.sigmoid(a))
                    energy = self.joint_energy(h_xy, h_xc, affine, c, y_probs, w)
                    ga, gb = torch.autograd.grad(energy.sum(), (a, b))
                a_new, b_new = a.detach() - cfg.infer_lr * ga, b.detach() - cfg.infer_lr * gb
                moved = ((torch.sigmoid(a_new) - torch.sigmoid(a.detach())).abs().masked_fill(fix, 0).amax(1) > cfg.infer_tol)
                a_out[rows[moved]], b_out[rows[moved]] = a_new[moved], b_new[moved]
                if not bool(moved.all()):
                    rows, work = rows[moved], [t[moved] for t in work]
                    a_new, b_new = a_new[moved], b_new[moved]
                if len(rows) == 0:
                    break
                a, b = a_new, b_new
            return a_out, b_out

    def _infer_state(self, state: ConceptState, y_logits: Tensor) -> ConceptState:
        """Minimise from ``state`` (intervened concepts fixed) and return the new state."""
        fixed = state.intervened
        a, b = self.minimise(state.extras["features"], state.logits, y_logits, fixed, state.probs)
        probs = torch.where(fixed, state.probs, torch.sigmoid(a))
        # MINIMISED marks rows whose (a, b) is this bounded descent's result: predict reads them as they are
        extras = {**state.extras, "y_logits": b, MINIMISED: torch.ones(len(b), dtype=torch.bool, device=b.device)}
        return ConceptState(logits=torch.where(fixed, state.logits, a), probs=probs, intervened=fixed, extras=extras)

    # ------------------------------------------------------------------ contract
    def encode(self, x: Tensor) -> ConceptState:
        """Concepts inferred by joint-energy minimisation (training mode: the E_xc posterior only)."""
        features = self.backbone(x)
        _, h_xc = self._hidden(features, dropout=True)
        logits = self.posterior_logits(h_xc)
        state = ConceptState(logits=logits, probs=torch.sigmoid(logits), extras={"features": features})
        if self.training:
            return state
        return self._infer_state(state, logits.new_zeros(len(logits), self.n_classes))

    def posterior_logits(self, h_xc: Tensor) -> Tensor:
        """``log p(c_i=1|x) - log p(c_i=0|x) = E_i(x, 0) - E_i(x, 1)`` ``[B,m]`` from the concept energy."""
        zeros = h_xc.new_zeros(len(h_xc), self.n_concepts)
        return self.concept_energies(h_xc, zeros) - self.concept_energies(h_xc, torch.ones_like(zeros))

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        """Fix the masked concepts at ``values`` and re-minimise the rest (class relaxation reset)."""
        self.check_intervention(state, mask, values)
        values = values.to(state.probs)
        fixed = state.intervened | mask
        new = ConceptState(
            logits=torch.where(mask, prob_to_logit(values), state.logits),
            probs=torch.where(mask, values, state.probs),
            intervened=fixed,
            extras=dict(state.extras),
        )
        y0 = state.extras.get("y_logits", state.logits.new_zeros(state.batch_size, self.n_classes))
        y0 = torch.where(mask.any(1, keepdim=True), torch.zeros_like(y0), y0)
        return self._infer_state(new, y0)

    def predict(self, state: ConceptState) -> Tensor:
        """``-(w_xy E_xy + w_cy E_cy)`` per class at the state's minimum: a state that ``encode`` or
        ``intervene`` minimised is read as it is (one bounded descent per inference, ``infer_steps``
        meaning what it says); any other state is minimised first."""
        done = state.extras.get(MINIMISED)
        if done is None or not bool(done.all()):
            y0 = state.extras.get("y_logits", state.logits.new_zeros(state.batch_size, self.n_classes))
            state = self._infer_state(state, y0)
        w = self._weights(state.intervened.any(1)).to(state.probs)
        e_xy, e_cy = self.class_energies(state.extras["features"], state.probs)
        return -(w[:, :1] * e_xy + w[:, 2:] * e_cy)

    # ------------------------------------------------- intervention-engine hooks (see cbm.models.hooks)
    def pair_bytes(self, state: ConceptState) -> int | None:
        """``fast``: the global energy's input, the energy head's activations per class, the logits."""
        if self.cfg.pair_inference == "full":
            return None
        return 4 * 3 * (self.cfg.hidden_dim * (1 + self.n_classes) + self.n_classes)

    def pair_logits(self, state: ConceptState, pairs: PairBlock) -> Tensor:
        """``pair_inference=fast``: the free concepts keep the un-intervened minimum, so the global
        energy's input ``g0 + c @ G`` moves by ``sum_{i in S} (a_i - c_i) G_i`` per pair (row gathers)
        and each class's logit is ``-(w_xy E_xy(x, y) + w_cy E_cy(c, y))`` under the intervention
        weights. ``full``: every pair is re-minimised (``intervene`` + ``predict``)."""
        if self.cfg.pair_inference == "full" or type(self).predict is not ECBM.predict:
            return super().pair_logits(state, pairs)
        w = self.cfg.intervene_weights
        g0, g = self._global_affine()
        u = self._class_emb()  # [C, h]
        e_xy = self._energy(self._hidden(state.extras["features"])[0].unsqueeze(1), u, self.head_xy.weight[0], self.head_xy.bias)

        def logits(gsum: Tensor) -> Tensor:  # [B, P, h] -> [B, P, C]
            e_cy = self._energy(gsum.unsqueeze(-2), u, self.head_cy.weight[0], self.head_cy.bias)
            return -(w.xy * e_xy.unsqueeze(1) + w.cy * e_cy)

        return additive_pair_logits(g0 + state.probs @ g, g.unsqueeze(0), state.probs, pairs, logits)

    # ------------------------------------------------------------------ training
    def task_logits_for_training(self, batch: Batch, state: ConceptState) -> Tensor:
        """``-E_xy(x, y)``: the class loss ``E_xy(x, y) + logsumexp(-E_xy)`` is cross-entropy on it."""
        h_xy, _ = self._hidden(state.extras["features"], dropout=True)
        return -self._energy(h_xy.unsqueeze(1), self._class_emb(), self.head_xy.weight[0], self.head_xy.bias)

    def concept_loss(self, state: ConceptState, c: Tensor, observed: Tensor | None = None) -> Tensor:
        """Concept energy loss summed over concepts, averaged over the batch (reference ``EBMLoss_concept``;
        missing annotations: summed over the annotated ones, the mean scaled by ``m``)."""
        bce = F.binary_cross_entropy_with_logits(state.logits, c, reduction="none")
        if observed is None:
            return bce.sum(1).mean()
        return c.shape[1] * masked_mean(bce, observed)

    def extra_losses(self, batch: Batch, state: ConceptState, y_logits: Tensor) -> dict[str, Tensor]:
        """Global energy loss on the annotated concepts, a random subset of them flipped (training mode)."""
        if self.cfg.global_loss_weight <= 0:
            return {}
        c = batch["c"].to(state.probs)
        if self.training:  # an augmentation: an eval-mode loss draws no random numbers
            flip = (torch.rand_like(c[:, :1]) < self.cfg.perturb_sample_prob) & (
                torch.rand_like(c) < self.cfg.perturb_concept_prob
            )
            c = torch.where(flip, 1 - c, c)
        g0, g = self._global_affine()
        e_cy = self._energy((g0 + c @ g).unsqueeze(1), self._class_emb(), self.head_cy.weight[0], self.head_cy.bias)
        return {"global_loss": self.cfg.global_loss_weight * F.cross_entropy(-e_cy, batch["y"])}
