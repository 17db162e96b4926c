"""The reliability diagram's bins and the expected calibration error, by hand; the diagram is drawn."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from cbm.selective.metrics import expected_calibration_error, reliability_bins
from cbm.selective.plots import plot_reliability


def test_bins_and_ece_by_hand():
    conf = np.array([0.55, 0.55, 0.65, 0.95, 0.95, 0.95, 0.95, 1.0])
    right = np.array([1, 0, 1, 1, 1, 1, 0, 1], dtype=bool)
    mean, acc, count = reliability_bins(conf, right, n_bins=5, low=0.5)  # bins of 0.1 from 0.5; 1.0 in the last
    assert count.tolist() == [2, 1, 5]  # empty bins left out
    assert mean == pytest.approx([0.55, 0.65, 0.96])
    assert acc == pytest.approx([0.5, 1.0, 0.8])
    ece = (2 * 0.05 + 1 * 0.35 + 5 * 0.16) / 8
    assert expected_calibration_error(conf, right, n_bins=5, low=0.5) == pytest.approx(ece)


def test_a_calibrated_model_has_no_calibration_error():
    conf = np.repeat([0.6, 0.8, 1.0], 10)
    right = np.concatenate([np.arange(10) < 6, np.arange(10) < 8, np.ones(10, bool)])
    assert expected_calibration_error(conf, right, n_bins=5, low=0.5) == pytest.approx(0.0)


@pytest.mark.parametrize(("conf", "kwargs", "match"), [
    ([0.4, 0.9], {"low": 0.5}, r"confidence must lie in \[0.5, 1\]"),
    ([0.6, 1.2], {}, r"confidence must lie in \[0.0, 1\]"),
    ([0.6, 0.7], {"n_bins": 0}, "n_bins must be >= 1"),
    ([0.6, 0.7], {"low": 1.0}, r"low must be in \[0, 1\)"),
])  # fmt: skip
def test_bad_input_is_one_line(conf, kwargs, match):
    with pytest.raises(ValueError, match=match):
        reliability_bins(conf, [True, False], **kwargs)


def test_the_diagram_is_written(tmp_path):
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1.0, 500)
    curves = {"calibrated": (conf, rng.random(500) < conf), "overconfident": (conf, rng.random(500) < conf - 0.2)}
    path = plot_reliability(curves, tmp_path / "sub" / "reliability.png", n_bins=10, low=0.5)
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 300
    assert [p.name for p in path.parent.iterdir()] == ["reliability.png"]  # written atomically, no temp file left
