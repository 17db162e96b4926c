"""concept-benchmark 0.4.1's robot models as presets (conf/model/cbm_v04.yaml, blackbox_v04.yaml):
its architectures transcribed from its experiments/models.py (MIT) give our encoders' outputs on
copied weights; the hard readout is its ``p >= 0.5``; the label predictor with ``head.C=1`` is its
sklearn ``LogisticRegression(C=1)``; the mean concept F1 is its early-stopping score."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cbm.models import build_model
from cbm.models.config import HeadConfig
from cbm.models.head_fit import fit_head, fit_signed_head
from cbm.models.metrics import MeanConceptF1
from cbm.models.state import ConceptState

CONF = Path(__file__).resolve().parents[2] / "cbm" / "conf"


def info(m: int = 7, size: int = 32) -> dict:
    return {"dataset": "robot", "modality": "image", "in_shape": [3, size, size], "concept_names": [f"c{i}" for i in range(m)],
            "class_names": ["drent", "glorp"]}  # fmt: skip


def preset(name: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={name}"])
    return OmegaConf.to_container(cfg.model, resolve=True)


class RefConceptClassifier(nn.Module):
    """0.4.1's ``RobotConceptClassifier`` below 128 px, transcribed."""

    def __init__(self, num_concepts: int, input_size: int):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU())  # fmt: skip
        self.heads = nn.ModuleList([nn.Linear(64 * input_size * input_size, 1) for _ in range(num_concepts)])

    def forward(self, x):
        f = torch.flatten(self.backbone(x), 1)
        return torch.cat([h(f) for h in self.heads], dim=1)


class RefClassifierCNN(nn.Module):
    """0.4.1's ``RobotClassifierCNN``, transcribed."""

    def __init__(self, input_size: int = 32):
        super().__init__()
        layers = []
        for a, b in ((3, 16), (16, 32), (32, 64)):
            layers += [nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2)]
        self.backbone = nn.Sequential(*layers)
        self.fc1 = nn.Linear(64 * (input_size // 8) ** 2, 128)
        self.dropout = nn.Dropout(0.5)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, x):
        x = torch.flatten(self.backbone(x), 1)
        return torch.sigmoid(self.fc2(self.dropout(F.relu(self.fc1(x)))))


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("m", "count"), [(7, 482_343), (12, 810_028)])
def test_the_concept_encoder_is_the_references(m, count):
    """Parameter counts of 0.4.1's own ``RobotConceptClassifier(m, 32)`` (7: ground_truth, 12:
    foot_subtypes), and the same logits once its weights are copied in (its one ``Linear(65536, 1)``
    per concept is a row of our concept layer)."""
    torch.manual_seed(0)
    ours = build_model(preset("cbm_v04"), info(m)).eval()
    encoder = [*ours.backbone.parameters(), *ours.concept_layer.parameters()]
    assert ours.backbone.out_dim == 64 * 32 * 32 and sum(p.numel() for p in encoder) == count
    ref = RefConceptClassifier(m, 32).eval()
    assert n_params(ref) == count
    with torch.no_grad():
        for mine, theirs in zip(ours.backbone.features, ref.backbone):
            if isinstance(mine, nn.Conv2d):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
        ours.concept_layer.weight.copy_(torch.cat([h.weight for h in ref.heads]))
        ours.concept_layer.bias.copy_(torch.cat([h.bias for h in ref.heads]))
        x = torch.rand(4, 3, 32, 32)
        torch.testing.assert_close(ours.encode(x).logits, ref(x), atol=1e-5, rtol=1e-5)
    assert not any(isinstance(mod, nn.BatchNorm2d | nn.MaxPool2d) for mod in ours.modules())


def test_the_dnn_is_the_references():
    """0.4.1's ``RobotClassifierCNN(input_size=32)`` has 154,913 parameters; ours the same plus one
    output row (its sigmoid output is our two-class softmax: class 1 gets its logit, class 0 zero)."""
    torch.manual_seed(0)
    ours = build_model(preset("blackbox_v04"), info()).eval()
    ref = RefClassifierCNN(32).eval()
    assert n_params(ref) == 154_913 and n_params(ours) == 154_913 + 129
    assert ours.backbone.out_dim == 1024 and [type(x).__name__ for x in ours.head] == ["Linear", "ReLU", "Dropout", "Linear"]
    assert ours.head[2].p == 0.5
    with torch.no_grad():
        for mine, theirs in zip(ours.backbone.features, ref.backbone):
            if isinstance(mine, nn.Conv2d):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
        ours.head[0].load_state_dict(ref.fc1.state_dict())
        ours.head[3].weight.copy_(torch.cat([torch.zeros_like(ref.fc2.weight), ref.fc2.weight]))
        ours.head[3].bias.copy_(torch.cat([torch.zeros_like(ref.fc2.bias), ref.fc2.bias]))
        x = torch.rand(4, 3, 32, 32)
        _, logits = ours(x)
        torch.testing.assert_close(logits.softmax(1)[:, 1], ref(x)[:, 0], atol=1e-6, rtol=1e-5)


def test_plain_cnn_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="needs image data"):
        build_model({"name": "cbm", "backbone": {"name": "plain_cnn"}}, {**info(), "modality": "tabular", "in_shape": [6]})
    with pytest.raises(ValueError, match="max pools leave no pixel"):
        build_model({"name": "blackbox", "backbone": {"name": "plain_cnn", "maxpool": True}}, info(size=4))


def test_the_presets_train_as_the_reference():
    cbm, dnn = preset("cbm_v04"), preset("blackbox_v04")
    assert (cbm["optim"]["lr"], cbm["concept_readout"], cbm["head"]["C"], cbm["training"]) == (1e-3, "hard", 1.0, "independent")
    assert (dnn["optim"]["lr"], dnn["optim"]["head_lr"], dnn["head"]["dropout"]) == (1e-3, None, 0.5)


def test_hard_readout_is_p_at_least_one_half():
    """``1[p >= 0.5]``, as 0.4.1's ``predict_proba(...) >= 0.5``: exactly 0.5 reads as 1."""
    model = build_model({"name": "cbm", "concept_readout": "hard", "backbone": {"name": "mlp", "hidden": [4], "out_dim": 4}},
                        {**info(3), "modality": "tabular", "in_shape": [5]}).eval()  # fmt: skip
    p = torch.tensor([[0.5, 0.49999997, 1.0], [0.0, 0.50000006, 0.5]])
    assert model.readout(p).tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    state = ConceptState(logits=torch.logit(p), probs=p)
    with torch.no_grad():
        torch.testing.assert_close(model.predict(state), model.head(model.readout(p)))


# ----------------------------------------------------------------------------- the label predictor
def toy_rows(n: int = 900, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(0, 2, (n, 6), generator=g).double()
    p = torch.sigmoid(1.5 * c[:, 0] + 2.0 * c[:, 1] - 1.0 * c[:, 2] - 1.2)
    return c, (torch.rand(n, generator=g, dtype=torch.float64) < p).long()


def newton_logreg(x: np.ndarray, y: np.ndarray, c: float = 1.0) -> np.ndarray:
    """sklearn's objective ``0.5 ||w||^2 + C sum log-loss`` (bias free), solved by Newton steps."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    reg = np.eye(len(w)) / c
    reg[-1, -1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-xb @ w))
        w -= np.linalg.solve(xb.T @ (xb * (p * (1 - p))[:, None]) + reg, xb.T @ (p - y) + reg @ w)
    return w


@pytest.mark.parametrize("c_value", [1.0, 0.05])
def test_head_c_is_sklearns_logistic_regression(c_value):
    """``head.C``: the L-BFGS head's margin equals the Newton solution of sklearn's objective and
    sklearn's own ``LogisticRegression(C, lbfgs)``; the sign-constrained fit with no binding sign too."""
    c, y = toy_rows()
    l2 = HeadConfig(C=c_value).l2_for(len(y), 2)
    assert l2 == pytest.approx(2.0 / (c_value * len(y)))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        head, signed = nn.Linear(6, 2).double(), nn.Linear(6, 2).double()
    fit = fit_head(head, c, y, l2, max_iter=1000, tol=1e-9)
    # 1e-9 is at float64's resolution here: L-BFGS's line search stops at 1.0-4.0e-9 from some starts
    # (15 seeds x 1 / 2 threads measured), so the gradient is checked with a margin, the solution below exactly
    assert fit.grad_max < 1e-7
    margin = torch.cat([head.weight[1] - head.weight[0], (head.bias[1] - head.bias[0])[None]]).detach().numpy()
    exact = newton_logreg(c.numpy(), y.numpy().astype(float), c_value)
    np.testing.assert_allclose(margin, exact, atol=1e-6)
    sklearn = pytest.importorskip("sklearn.linear_model")
    lr = sklearn.LogisticRegression(C=c_value, solver="lbfgs", tol=1e-12, max_iter=10_000).fit(c.numpy(), y.numpy())
    np.testing.assert_allclose(margin, np.r_[lr.coef_[0], lr.intercept_], atol=1e-5)
    fit_signed_head(signed, c, y, torch.tensor([1.0, 1.0, -1.0, 0, 0, 0]), l2, max_iter=1000, tol=1e-9)
    np.testing.assert_allclose((signed.weight[1] - signed.weight[0]).detach().numpy(), exact[:-1], atol=1e-6)


def test_head_c_is_validated_and_l2_kept_without_it():
    assert HeadConfig(l2=3e-4).l2_for(10, 2) == 3e-4
    assert HeadConfig(C=2.0).l2_for(100, 3) == pytest.approx(1.0 / 200)
    for bad in ({"C": 0.0}, {"C": -1.0}, {"dropout": 1.0}):
        with pytest.raises(ValueError, match="head.C|head.dropout"):
            HeadConfig(**bad)


# ----------------------------------------------------------------------------- early stopping score
def reference_mean_f1(probs: np.ndarray, target: np.ndarray, observed: np.ndarray) -> float:
    """0.4.1's ``DefaultConceptTrainer`` validation score (experiments/train.py), by sklearn."""
    from sklearn.metrics import f1_score

    scores = []
    for j in range(probs.shape[1]):
        seen = observed[:, j]
        t = target[seen, j].astype(int)
        if not seen.any() or np.unique(t).size < 2:
            continue
        scores.append(f1_score(t, (probs[seen, j] > 0.5).astype(int)))
    return float(np.mean(scores)) if scores else float("nan")


def test_mean_concept_f1_is_the_references_score():
    pytest.importorskip("sklearn")
    g = torch.Generator().manual_seed(3)
    probs = torch.rand(200, 5, generator=g)
    probs[:7, 0] = 0.5  # exactly 0.5 reads as 0 here (its ``> 0.5``)
    target = (torch.rand(200, 5, generator=g) < 0.4).float()
    target[:, 3] = 1.0  # one class only: skipped
    observed = torch.rand(200, 5, generator=g) < 0.8
    observed[:, 4] = False  # no annotation: skipped
    metric = MeanConceptF1(5)
    for rows in (slice(0, 64), slice(64, 65), slice(65, 200)):  # batches add up to one pass
        metric.update(probs[rows], target[rows], observed[rows].float())
    expected = reference_mean_f1(probs.numpy(), target.numpy(), observed.numpy())
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)
    whole = MeanConceptF1(5)
    whole.update(probs, target)
    assert float(whole.compute()) == pytest.approx(reference_mean_f1(probs.numpy(), target.numpy(), np.ones((200, 5), bool)), abs=1e-6)
    empty = MeanConceptF1(2)
    empty.update(probs[:, :2], torch.ones(200, 2))
    assert np.isnan(float(empty.compute()))
