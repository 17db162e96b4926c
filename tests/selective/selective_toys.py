"""A tiny hand-wired CBM whose automation outcomes can be worked out by hand.

Three concepts, tabular input ``x in [0,1]^3`` = concept evidence. The backbone is the identity
(weights ``I``, ReLU on non-negative inputs), the concept layer gives logits ``20 (x - 0.5)``
and the head scores class 1 with logit ``10 * (p0 + p1 + p2) - 15`` (class 0: logit 0), so
``P(y=1) = sigmoid(10 * sum(p) - 15)``:

* two concepts on, one off: ``sigmoid(~5) = 0.9933``; all on / off: ``~1`` / ``~0``;
* ``sum(p) = 1.5``: ``0.5``.
"""

import numpy as np
import torch

from cbm.interventions import topk_mask
from cbm.models import build_model
from synthetic.base import SyntheticData, split_codes

NAMES = ["c0", "c1", "c2"]

# The eight hand-made test examples (x, true concepts c, label y) and what happens to them at
# tau = 0.99 with the most-uncertain-first policy and the oracle:
#   1-3 confident and right; 7 confident and wrong (label noise);
#   4, 5: abstain, rescued (right) by one concept;
#   6: abstain; k=1 deferred (sum 1.89 -> 0.980); k=2, 3 rescued (right);
#   8: abstain; k=1 rescued but wrong; k=2 deferred; k=3 rescued (right).
X = [
    [1, 1, 1],
    [0, 0, 0],
    [1, 1, 0],
    [1, 0.5, 0],
    [1, 0.5, 0],
    [0.5, 0.525, 0.45],
    [1, 1, 1],
    [0.5, 0.525, 0.45],
]
C = [[1, 1, 1], [0, 0, 0], [1, 1, 0], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [0, 1, 1]]
Y = [1, 0, 1, 1, 0, 1, 0, 1]


def toy_model():
    info = {
        "dataset": "toy",
        "modality": "tabular",
        "in_shape": [3],
        "concept_names": NAMES,
        "class_names": ["no", "yes"],
    }
    cfg = {"name": "cbm", "training": "joint", "backbone": {"name": "mlp", "hidden": [3], "out_dim": 3}}
    model = build_model(cfg, info)
    with torch.no_grad():
        for layer in model.backbone.net:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.copy_(torch.eye(3))
                layer.bias.zero_()
        model.concept_layer.weight.copy_(20 * torch.eye(3))
        model.concept_layer.bias.fill_(-10.0)
        model.head.weight.copy_(torch.tensor([[0.0, 0.0, 0.0], [10.0, 10.0, 10.0]]))
        model.head.bias.copy_(torch.tensor([0.0, -15.0]))
    return model.eval()


def toy_batch():
    c = torch.tensor(C, dtype=torch.float32)
    return {"x": torch.tensor(X, dtype=torch.float32), "c": c, "c_true": c.clone(), "y": torch.tensor(Y)}


class MostUncertainPolicy:
    """Deterministic: the ``k`` not-yet-intervened concepts with the largest ``p(1-p)``."""

    def select(self, model, state, k):
        scores = (state.probs * (1 - state.probs)).masked_fill(state.intervened, -1.0)
        return topk_mask(scores, k) & ~state.intervened


class ToyDataModule:
    """The ``loader(split)`` interface of SyntheticDataModule over fixed batches."""

    def __init__(self, splits):
        self.splits = splits

    def loader(self, name):
        return list(self.splits[name])


def toy_data(n_calib: int = 400, n_test: int = 400, seed: int = 0) -> SyntheticData:
    """Random toy examples: evidence ``x = c`` blurred towards 0.5 (never past it), ``y = [sum(c) >= 2]``.

    Weak evidence makes the hand-wired model unsure, and sometimes wrong (e.g. two concepts
    barely on, ``sum(p) < 1.5``); the oracle's true concepts then make it right and sure."""
    rng = np.random.default_rng(seed)
    n = 10 + n_calib + n_test
    c = rng.integers(0, 2, size=(n, 3)).astype(np.float32)
    blur = rng.uniform(0.5, 1.0, size=(n, 3)).astype(np.float32)
    x = (c * (1 - blur) + 0.5 * blur).astype(np.float32)
    y = (c.sum(1) >= 2).astype(np.int64)
    return SyntheticData(
        x=x,
        c=c,
        c_true=c.copy(),
        y=y,
        split=split_codes({"train": 5, "val": 5, "calib": n_calib, "test": n_test}),
        meta=np.arange(n)[:, None],
        concept_names=NAMES,
        true_concept_names=NAMES,
        class_names=["no", "yes"],
        meta_names=["id"],
        modality="tabular",
    )
