"""Deep Concept Reasoner (DCR; Barbiero et al., ICML 2023, "Interpretable Neural-Symbolic Concept
Reasoning"): the label is the truth of a logic rule over the concepts, and the rule is built per
example.

Concepts are CEM embeddings (``c_hat_i``, mixed by the concept probability ``p_i``). For every class
``y`` and concept ``i``, two small networks read ``c_hat_i``:

* relevance ``r_iy = sigmoid(phi_r(c_hat_i) / t)``: does concept ``i`` enter the rule of ``y``;
* polarity ``s_iy = sigmoid(phi_s(c_hat_i) / t)``: as itself (``s ~ 1``) or negated (``s ~ 0``).

The rule's truth is a fuzzy conjunction of the relevant literals::

    literal_iy = (s_iy AND p_i) OR (NOT s_iy AND NOT p_i)
    y_hat_y    = AND_i ( literal_iy OR NOT r_iy )

with Gödel logic (AND = min, OR = max; ``logic: godel``, the reference default) or the product
t-norm (``logic: product``). The task logits are ``logit(y_hat)``. Reading ``r > rule_threshold``
and ``s > 0.5`` gives each example's rule as text, e.g. ``Glorp <- head_round & ~knees``
(:meth:`DCR.rules`); :meth:`DCR.rule_table` counts them over a split (``cbm-train`` writes
``rules.json`` and the experiment report shows the most frequent).

An intervention sets ``p_i`` (CEM's meaning): the literal's value and, through the embedding, the
rule's relevance and polarity follow. ``model.zero_concepts`` removes a concept from every rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from cbm.models.base import concept_hint
from cbm.models.cem import CEM
from cbm.models.config import DCRConfig
from cbm.models.state import ConceptState

#: Clamp of the rule's truth before ``logit`` (keeps the task logits finite: |logit| <= 13.8).
TRUTH_EPS = 1e-6


class DCR(CEM):
    """CEM embeddings -> per-example fuzzy rules per class (module docstring)."""

    config_cls = DCRConfig
    cfg: DCRConfig
    supports_typed_concepts = False  # its rules read each concept as a truth value

    def build(self) -> None:
        m, k, h, c = self.n_concepts, self.cfg.emb_size, self.cfg.rule_hidden, self.n_classes
        self.hint = concept_hint(self.backbone, m)
        self.context = nn.Linear(self.concept_input_dim(), m * 2 * k)
        self.score = nn.Linear(2 * k, 1)
        self.relevance = nn.Sequential(nn.Linear(k, h), nn.LeakyReLU(), nn.Linear(h, c))
        self.polarity = nn.Sequential(nn.Linear(k, h), nn.LeakyReLU(), nn.Linear(h, c))

    def rule_parts(self, state: ConceptState) -> tuple[Tensor, Tensor]:
        """``(relevance, polarity)``, each ``[B, m, C]`` in (0, 1); a concept removed by
        ``zero_concepts`` has relevance 0."""
        emb = self.mixed_embeddings(state)
        t = self.cfg.temperature
        relevance = torch.sigmoid(self.relevance(emb) / t) * self.concept_keep[None, :, None]
        return relevance, torch.sigmoid(self.polarity(emb) / t)

    def rule_truth(self, state: ConceptState) -> Tensor:
        """``[B, C]``: the truth of each class's rule on this example (module docstring)."""
        relevance, polarity = self.rule_parts(state)
        p = state.probs[:, :, None].to(relevance.dtype)
        if self.cfg.logic == "godel":
            literal = torch.maximum(torch.minimum(polarity, p), torch.minimum(1 - polarity, 1 - p))
            return torch.maximum(literal, 1 - relevance).amin(dim=1)
        literal = polarity * p + (1 - polarity) * (1 - p)
        return (1 - relevance * (1 - literal)).clamp_min(TRUTH_EPS).log().sum(dim=1).exp()

    def predict(self, state: ConceptState) -> Tensor:
        return torch.logit(self.rule_truth(state), eps=TRUTH_EPS)

    def intervention_extras(self) -> frozenset[str]:
        """The rule reads the embeddings and the probabilities (CEM's fast paths need CEM's linear
        head, so they step aside: ``CEM._plain_cem_contract``)."""
        return frozenset({"c_pos", "c_neg"})

    # ------------------------------------------------------------------ readable rules
    def rules(self, state: ConceptState, classes: Tensor | None = None) -> list[str]:
        """Each example's rule for ``classes`` (default: the predicted class) as text: the literals
        whose relevance exceeds ``rule_threshold``, ``~`` for a negated one (``true``: none)."""
        with torch.no_grad():
            relevance, polarity = self.rule_parts(state)
            if classes is None:
                classes = self.predict(state).argmax(1)
        idx = classes.long()[:, None, None].expand(-1, relevance.shape[1], 1)
        keep = (relevance.gather(2, idx)[..., 0] > self.cfg.rule_threshold).cpu()
        positive = (polarity.gather(2, idx)[..., 0] > 0.5).cpu()
        names, class_names = self.info.concept_names, self.info.class_names
        out = []
        for row, cls in enumerate(classes.tolist()):
            lits = [names[j] if positive[row, j] else f"~{names[j]}" for j in range(len(names)) if keep[row, j]]
            out.append(f"{class_names[cls]} <- {' & '.join(lits) if lits else 'true'}")
        return out

    def rule_table(self, batches: Iterable[dict[str, Any]], top: int | None = None) -> list[dict[str, Any]]:
        """The rules this model predicts with over ``batches`` (e.g. the test loader): per rule, how
        many examples used it and how often its class was the true label (most used first)."""
        used: Counter[str] = Counter()
        right: Counter[str] = Counter()
        dev = self.device
        with torch.no_grad():
            for batch in batches:
                state = self.encode(batch["x"].to(dev))
                pred = self.predict(state).argmax(1)
                for rule, ok in zip(self.rules(state, pred), (pred == batch["y"].to(dev)).tolist()):
                    used[rule] += 1
                    right[rule] += int(ok)
        total = sum(used.values()) or 1
        rows = [{"rule": r, "examples": n, "share": n / total, "accuracy": right[r] / n} for r, n in used.most_common(top)]
        return rows
