"""Alignment as sign constraints (``model.monotonicity``): the bounded L-BFGS-B fit of the
independent CBM's head is the constrained optimum (KKT), agrees with the unconstrained solver when
the constraint is inactive, and gradient-trained heads are projected after every step."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn

from cbm.core.validation import ConfigError
from cbm.models import build_model
from cbm.models.head_fit import fit_head, fit_signed_head, margin_weights, project_signs
from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_info
from synthetic.robot import RobotConfig, generate

L2, TOL = 1e-4, 1e-9


def rule_data(n: int = 4000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary concepts; y from a noisy rule in which concept 2 lowers Pr(y=1)."""
    g = torch.Generator().manual_seed(seed)
    c = (torch.rand(n, 4, generator=g) > 0.5).double()
    z = 3 * c[:, 0] + 2 * c[:, 1] - 2.5 * c[:, 2] + 0.5 * c[:, 3] - 1.5
    y = (torch.rand(n, generator=g) < torch.sigmoid(z)).long()
    return c, y


def linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 2).double()


def test_active_constraint_stops_the_weight_at_zero_and_others_refit():
    c, y = rule_data()
    head = linear()
    fit = fit_signed_head(head, c, y, torch.tensor([0.0, 0.0, 1.0, 0.0]), L2, 1000, TOL)
    w, _ = margin_weights(head)
    assert fit.converged and fit.grad_max <= TOL
    assert float(w[2]) == 0.0  # the data push it below 0: it stops on the bound
    free = fit_head(linear(), c, y, L2, 1000, 1e-9)
    assert free.loss < fit.loss  # the constraint costs fit
    # KKT by hand: at the optimum of the bounded problem the free coordinates' gradient is 0 and
    # the bound's gradient points outwards (d loss / d w_2 > 0 pushes w_2 down)
    x = c
    t = y.double()
    wd, bd = margin_weights(head)
    z = x @ wd.double() + bd.double()
    r = (torch.sigmoid(z) - t) / len(t)
    grad = x.T @ r + 0.5 * L2 * wd.double()
    assert torch.allclose(grad[[0, 1, 3]], torch.zeros(3, dtype=torch.float64), atol=1e-7)
    assert float(grad[2]) > 1e-3


def test_inactive_constraint_gives_the_unconstrained_head():
    c, y = rule_data()
    signed, plain = linear(), linear()
    fit_signed_head(signed, c, y, torch.tensor([1.0, 1.0, -1.0, 1.0]), L2, 1000, TOL)  # the rule's own signs
    fit_head(plain, c, y, L2, 1000, 1e-10)
    ws, bs = margin_weights(signed)
    wp, bp = margin_weights(plain)
    assert torch.allclose(ws, wp, atol=1e-6) and abs(float(bs - bp)) < 1e-6


def test_projection_is_onto_the_constraint_set():
    torch.manual_seed(1)
    head = nn.Linear(5, 2)
    signs = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0])
    before = head.weight.detach().clone()
    project_signs(head, signs)
    w, _ = margin_weights(head)
    assert (signs * w >= -1e-7).all()
    feasible = (signs * (before[1] - before[0]) >= 0) | (signs == 0)
    assert torch.equal(head.weight[:, feasible], before[:, feasible])  # feasible coordinates stay
    assert torch.allclose(w[~feasible], torch.zeros(int((~feasible).sum())), atol=1e-7)  # the rest land on 0
    assert torch.allclose((head.weight[1] + head.weight[0])[~feasible], (before[1] + before[0])[~feasible])
    again = head.weight.detach().clone()
    project_signs(head, signs)
    assert torch.equal(head.weight, again)  # idempotent


@pytest.fixture(scope="module")
def robots():
    cfg = RobotConfig(label_rule="balanced", modality="tabular", n_train=1500, n_calib=0, n_test=500)
    return generate(cfg), cfg


@pytest.mark.parametrize("training", ["independent", "joint"])
def test_cbm_head_keeps_the_required_signs(robots, training, one_thread):
    data, cfg = robots
    L.seed_everything(0, verbose=False)
    dm = SyntheticDataModule(lambda: data, batch_size=100)
    model = build_model({"name": "cbm", "training": training, "head": {"kind": "linear"}, "monotonicity": {"knees": 1},
                         "backbone": {"hidden": [32], "out_dim": 32}}, data_info(data, cfg))  # fmt: skip
    L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False).fit(model, datamodule=dm)  # fmt: skip
    w, _ = margin_weights(model.head)
    knees = data.concept_names.index("knees")
    # the balanced rule's knees weight is -3: the constraint holds it at 0 (exactly for the solved head)
    assert float(w[knees]) >= 0.0
    if training == "independent":
        assert model.head_fit.converged and float(w[knees]) == 0.0
        assert float(w[data.concept_names.index("foot_pointy")]) > 1.0  # the rest still learn the rule


@pytest.mark.parametrize(
    "over, match",
    [
        ({"name": "cbm", "monotonicity": {"wings": 1}}, "monotonicity: unknown concept 'wings'"),
        ({"name": "cbm", "monotonicity": {"knees": 2}}, r"signs must be \+1 or -1"),
        ({"name": "cbm", "monotonicity": {"knees": 1}, "head": {"kind": "mlp"}}, "need a linear head"),
        ({"name": "cem", "monotonicity": {"knees": 1}}, "not to cem"),
    ],
)
def test_bad_sign_constraints_are_refused(robots, over, match):
    data, cfg = robots
    with pytest.raises((ConfigError, ValueError), match=match):
        build_model(over, data_info(data, cfg))


def test_signs_come_from_the_config_so_older_checkpoints_load(robots):
    """The sign buffer is rebuilt from ``model.monotonicity``: it is not in the state dict, so a
    checkpoint written before the knob existed (or without it) loads strictly."""
    data, cfg = robots
    base = {"name": "cbm", "head": {"kind": "linear"}, "backbone": {"hidden": [32], "out_dim": 32}}
    plain = build_model(base, data_info(data, cfg))
    signed = build_model({**base, "monotonicity": {"knees": 1}}, data_info(data, cfg))
    assert "monotonic_signs" not in plain.state_dict() and "monotonic_signs" not in signed.state_dict()
    signed.load_state_dict(plain.state_dict(), strict=True)
    assert float(signed.monotonic_signs[data.concept_names.index("knees")]) == 1.0
