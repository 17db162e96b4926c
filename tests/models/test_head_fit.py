"""The independent CBM's label predictor is solved (L-BFGS, float64) rather than trained for a few
epochs: the objective's gradient is ~0 at the result, duplicated rows are exactly count weights,
and the thread count does not move the head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cbm.models.head_fit import distinct_rows, fit_head


def robot_rows(n: int = 4000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary concepts with the robot label rule sigmoid(4.2 * (5 c0 + 8 c1 - 5 c2 + 2)) and 4 distractors."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(0, 2, (n, 7), generator=g).float()
    p = torch.sigmoid(4.2 * (5 * c[:, 0] + 8 * c[:, 1] - 5 * c[:, 2] + 2))
    return c, (torch.rand(n, generator=g) < p).long()


def test_the_fit_is_a_stationary_point_of_the_penalised_objective():
    c, y = robot_rows()
    head = nn.Linear(7, 2)
    fit = fit_head(head, c, y, l2=1e-3, max_iter=1000, tol=1e-9)
    assert fit.converged and fit.distinct <= 2 * 2**7
    h = head.double().requires_grad_(True)
    loss = F.cross_entropy(h(c.double()), y) + 0.5 * 1e-3 * (h.weight**2).sum()
    grads = torch.autograd.grad(loss, list(h.parameters()))
    assert max(float(g.abs().max()) for g in grads) < 1e-6  # float32 copy of the float64 optimum


def test_the_head_predicts_the_bayes_rule_on_every_concept_vector():
    c, y = robot_rows()
    head = nn.Linear(7, 2)
    fit = fit_head(head, c, y, l2=1e-4, max_iter=1000, tol=1e-7)
    grid = torch.tensor([[(i >> b) & 1 for b in range(7)] for i in range(128)]).float()
    bayes = (5 * grid[:, 0] + 8 * grid[:, 1] - 5 * grid[:, 2] + 2 > 0).long()
    with torch.no_grad():
        assert torch.equal(head(grid).argmax(1), bayes)
    assert fit.train_acc >= 0.999


def test_duplicated_rows_are_count_weights_and_threads_do_not_move_the_head():
    c, y = robot_rows(600, seed=1)
    rows, labels, counts = distinct_rows(c, y)
    assert int(counts.sum()) == 600 and len(rows) == len(labels)
    heads = []
    for threads, data in ((1, (c, y)), (2, (c, y)), (1, (c.repeat(3, 1), y.repeat(3)))):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            torch.manual_seed(0)
            head = nn.Linear(7, 2)
            fit_head(head, *data, l2=1e-4, max_iter=1000, tol=1e-9)
        finally:
            torch.set_num_threads(before)
        heads.append(torch.cat([head.weight.flatten(), head.bias]))
    assert torch.allclose(heads[0], heads[1], atol=1e-5) and torch.allclose(heads[0], heads[2], atol=1e-5)


def test_an_independent_cbm_trains_with_its_solved_head(compose_train, tmp_path):
    """After one epoch of the encoder the checkpoint's head already is the Bayes rule on every
    concept vector (the solver ran before training; the optimiser never touched the head)."""
    from cbm.experiments.train import run
    from cbm.training.checkpoint import load_model

    run(compose_train("data.modality=tabular", "data.n_train=1000", "data.n_calib=0", "data.n_test=100", "trainer.max_epochs=1"))
    model = load_model(tmp_path)
    names = model.info.concept_names
    grid = torch.tensor([[(i >> b) & 1 for b in range(len(names))] for i in range(2 ** len(names))]).float()
    col = {n: grid[:, names.index(n)] for n in ("mouth_closed", "foot_pointy", "knees")}
    bayes = (5 * col["mouth_closed"] + 8 * col["foot_pointy"] - 5 * col["knees"] + 2 > 0).long()
    with torch.no_grad():
        assert torch.equal(model.head(grid).argmax(1), bayes)
