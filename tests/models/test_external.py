"""``ExternalCBM``: a detector and a label predictor trained elsewhere, intervened on like a built-in."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from test_contract import CLASSES, NAMES, TABULAR, fit, make, robot_rule_data
from torch import nn

from cbm.core.validation import ConfigError
from cbm.interventions import OracleIntervener, RandomPolicy
from cbm.interventions.engine import run_grid
from cbm.interventions.policies.uncertainty import UncertaintyPolicy
from cbm.models import build_model
from cbm.models.external import EstimatorHead, ExternalCBM
from synthetic.datamodule import SyntheticDataModule


@pytest.fixture(scope="module")
def trained():
    """An independent CBM (its head solved by L-BFGS) on the robot rule, and its data."""
    torch.set_num_threads(1)
    data = robot_rule_data()
    L.seed_everything(0, verbose=False)
    dm = SyntheticDataModule(lambda: data, batch_size=100)
    cbm = make("cbm", TABULAR, training="independent", optim={"lr": 0.02})
    fit(cbm, dm, epochs=4)
    return cbm.eval(), dm


def oracle_table(model, dm) -> list[tuple[str, int, float]]:
    policies = {"random": lambda: RandomPolicy(0), "uncertainty": UncertaintyPolicy}
    grid = run_grid(model, dm.test_dataloader(), {"oracle": OracleIntervener()}, policies, list(range(len(NAMES) + 1)))
    return [(r["policy"], r["k"], r["accuracy"]) for r in grid.rows]


def test_a_scikit_learn_logistic_predictor_gives_the_independent_cbms_oracle_table(trained):
    cbm, dm = trained
    train = dm.split("train").tensors
    c, y = train["c"].double().numpy(), train["y"].numpy()
    # the same objective as the CBM's solved head: mean CE + l2/2 ||W||^2 over its two class rows,
    # whose minimiser has W1 = -W0 = w/2, i.e. mean CE + l2/4 ||w||^2 = (1 / (C N)) (C sum CE + ||w||^2 / 2)
    lr = LogisticRegression(C=2 / (cbm.cfg.head.l2 * len(y)), tol=1e-12, max_iter=100_000).fit(c, y)
    w = cbm.head.weight.detach().double()
    np.testing.assert_allclose(lr.coef_[0], (w[1] - w[0]).numpy(), atol=2e-3)
    detector = nn.Sequential(cbm.backbone, cbm.concept_layer)  # a plain module with the CBM's detector weights
    ext = ExternalCBM(detector, lr, NAMES, CLASSES, in_shape=TABULAR["in_shape"]).eval()
    ours, theirs = oracle_table(cbm, dm), oracle_table(ext, dm)
    assert [r[:2] for r in ours] == [r[:2] for r in theirs]
    assert [r[2] for r in theirs] == pytest.approx([r[2] for r in ours], abs=1e-9), (ours, theirs)
    assert theirs[-1][2] >= 0.99  # k = every concept: the label rule read from the true concepts


def test_a_module_predictor_is_the_cbm_itself(trained):
    cbm, dm = trained
    ext = ExternalCBM(nn.Sequential(cbm.backbone, cbm.concept_layer), cbm.head, NAMES, CLASSES).eval()
    x = dm.split("test").tensors["x"][:50]
    with torch.no_grad():
        assert torch.equal(ext(x)[1], cbm(x)[1])
        p = torch.sigmoid(ext.backbone(x))
    probs = ExternalCBM(nn.Sequential(cbm.backbone, cbm.concept_layer, nn.Sigmoid()), cbm.head, NAMES, CLASSES,
                        detector_output="probs").eval()  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(probs.encode(x).probs, p)


def test_estimator_scores_keep_the_estimators_probabilities_and_predictions():
    rng = np.random.default_rng(0)
    c = (rng.random((300, 4)) > 0.5).astype(float)
    for y, n in (((c[:, 0] + c[:, 1] > 0.5).astype(int), 2), ((c[:, 0] * 2 + c[:, 2]).astype(int), 4)):
        lr = LogisticRegression(max_iter=1000).fit(c, y)
        head = EstimatorHead(lr, n)
        scores = head(torch.tensor(c, dtype=torch.float32))
        np.testing.assert_allclose(torch.softmax(scores.double(), 1).numpy(), lr.predict_proba(c), rtol=1e-5, atol=1e-6)
        assert (scores.argmax(1).numpy() == lr.predict(c)).all()


def test_bad_parts_are_one_line():
    det = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="predictor: LogisticRegression is not fitted"):
        ExternalCBM(det, LogisticRegression(), ["a", "b"], ["n", "y"])
    with pytest.raises(ValueError, match=r"predictor: the estimator's classes_ \[1, 2\] must be the class ids 0..1"):
        ExternalCBM(det, LogisticRegression().fit([[0, 1], [1, 0]], [1, 2]), ["a", "b"], ["n", "y"])
    with pytest.raises(ValueError, match="predictor: expected an nn.Module or a fitted classifier"):
        ExternalCBM(det, lambda p: p, ["a", "b"], ["n", "y"])
    with pytest.raises(ValueError, match="detector: expected an nn.Module"):
        ExternalCBM("detector", nn.Linear(2, 2), ["a", "b"], ["n", "y"])
    model = ExternalCBM(det, nn.Linear(2, 2), ["a", "b", "c"], ["n", "y"])
    with pytest.raises(ValueError, match=r"detector: expected \[batch, 3\] concept logits, got \(4, 2\)"):
        model.encode(torch.zeros(4, 3))
    with pytest.raises(ConfigError, match="ExternalCBM wraps a model trained elsewhere; build it in Python"):
        build_model({"_target_": "cbm.models.external.ExternalCBM"}, TABULAR)
