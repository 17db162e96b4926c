"""Intervention encodings: the levels each kind measures, what the model reads, and that the
intervener's answers (and their scored accuracy) never move."""

from __future__ import annotations

import pytest
import torch

from cbm.config.intervene import EncodingConfig
from cbm.core.validation import ConfigError, to_dataclass
from cbm.interventions.encodings import encode_values, fit_levels
from cbm.interventions.engine import run_grid
from cbm.interventions.interveners.oracle import OracleIntervener
from cbm.interventions.policies.random import RandomPolicy
from tests.interventions.intervention_toys import random_linear


def batches(logits: torch.Tensor, c: torch.Tensor, y: torch.Tensor, size: int = 7):
    return [{"x": logits[i : i + size], "c": c[i : i + size], "y": y[i : i + size]} for i in range(0, len(y), size)]


@pytest.fixture
def toy():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(40, 5, generator=g) * 2
    c = (torch.rand(40, 5, generator=g) < 0.5).float()
    c[:, 4] = 1.0  # a concept never annotated absent
    y = torch.randint(0, 3, (40,), generator=g)
    return random_linear(5, 3, seed=1), logits, c, y


def test_levels_of_each_kind_are_exact(toy):
    model, logits, c, y = toy
    p = torch.sigmoid(logits)
    assert fit_levels(model, batches(logits, c, y), EncodingConfig("binary")) is None
    got = fit_levels(model, batches(logits, c, y), EncodingConfig("percentile", [10.0, 80.0]))
    torch.testing.assert_close(got, torch.quantile(p, torch.tensor([0.1, 0.8]), dim=0))
    got = fit_levels(model, batches(logits, c, y), EncodingConfig("binary_revealed"))
    for j in range(4):
        for v in (0, 1):
            assert got[v, j] == p[c[:, j] == v, j].median()  # torch's median: the lower middle value
    assert got[0, 4] == 0.0 and got[1, 4] == p[:, 4].median()  # never annotated 0: keeps the answer


def test_the_model_reads_the_levels_and_the_answers_are_scored_unchanged(toy):
    model, logits, c, y = toy
    levels = torch.tensor([[0.2, 0.1, 0.3, 0.25, 0.05], [0.7, 0.9, 0.6, 0.8, 0.95]])
    values = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]])
    torch.testing.assert_close(encode_values(values, levels), torch.tensor([[0.7, 0.1, 0.6, 0.25, 0.95]]))
    data = batches(logits, c, y)
    ivs, pols = {"oracle": OracleIntervener()}, {"random": RandomPolicy(seed=0)}
    plain = run_grid(model, data, ivs, pols, [0, 2, 5])
    same = run_grid(model, data, ivs, pols, [0, 2, 5], encoding=torch.tensor([[0.0] * 5, [1.0] * 5]))
    assert [r["accuracy"] for r in plain.rows] == [r["accuracy"] for r in same.rows]  # levels 0/1 = binary
    moved = run_grid(model, data, ivs, pols, [0, 5], encoding=levels)
    state = model.encode(logits)
    want = (model.head(encode_values(c, levels)).argmax(1) == y).float().mean()  # k = max: every concept set
    assert moved.row("oracle", "random", 5)["accuracy"] == pytest.approx(float(want))
    assert moved.row("oracle", "random", 0)["accuracy"] == pytest.approx(float((model.predict(state).argmax(1) == y).float().mean()))
    last = moved.concept_stats["rows"][-1]
    assert last["k"] == 5 and last["correct"] == last["requested"] == [40] * 5  # the answers are scored as given


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"kind": "soft"}, "encoding.kind must be one of"),
        ({"percentiles": [95, 5]}, "0 <= low < high <= 100"),
        ({"percentiles": [5]}, "0 <= low < high <= 100"),
        ({"split": "dev"}, "encoding.split must be one of"),
    ],
)
def test_bad_encoding_is_one_line(raw, message):
    with pytest.raises(ConfigError) as err:
        to_dataclass(EncodingConfig, raw, "encoding")
    assert message in str(err.value) and "\n" not in str(err.value)
