"""The report's "cost of a check" table: NWA recomputed under each price of a check from the share
of examples each concept was asked for (0.4.1's Sudoku cost table)."""

from __future__ import annotations

import pytest

from cbm.config.experiment import ExperimentConfig
from cbm.experiments.tables import cost_rows

NAMES = ["row1", "row2", "col1", "box1"]


def cell(seed: int, share: list[float], coverage: float) -> dict:
    rows = [{"k": 0, "coverage": 0.5, "requested_share": [0.0] * 4}, {"k": 2, "coverage": coverage, "requested_share": share},
            {"k": 4, "coverage": None, "note": "no threshold"}]  # fmt: skip
    return {"setting": "10px", "model": "cbm", "seed": seed,
            "_results": {"concept_costs": dict.fromkeys(NAMES, 0.25), "n_concepts": 4, "results": rows}}  # fmt: skip


def test_nwa_charges_each_check_its_price_over_m():
    cells = [cell(171, [0.4, 0.2, 0.2, 0.0], 0.8), cell(172, [0.4, 0.0, 0.0, 0.4], 0.9)]
    prices = {"equal": {"rest": 1}, "2x_block": {"box*": 2}}
    rows, cols = cost_rows(cells, prices)
    got = {(r["price"], r["k"]): r for r in rows}
    assert [(r["price"], r["k"]) for r in rows] == [("equal", "0"), ("equal", "2"), ("2x_block", "0"), ("2x_block", "2")]
    assert got[("equal", "0")]["NWA %"] == "+50.00 ± 0.00"
    # equal: 0.8 - 0.8/4 = 0.6 and 0.9 - 0.8/4 = 0.7; 2x block: 0.6 and 0.9 - (0.4 + 0.8)/4 = 0.6
    assert got[("equal", "2")]["NWA %"] == "+65.00 ± 5.00" and got[("2x_block", "2")]["NWA %"] == "+60.00 ± 0.00"
    assert got[("equal", "2")]["coverage %"] == "85.00 ± 5.00" and cols[-1] == "NWA %"
    assert cost_rows(cells, {}) == ([], [])


def test_a_black_box_asks_for_no_concept_and_is_not_priced():
    blackbox = {"setting": "10px", "model": "blackbox", "seed": 171,
                "_results": {"concept_costs": {}, "n_concepts": 0, "results": [{"k": 0, "coverage": 0.7, "requested_share": []}]}}  # fmt: skip
    rows, _ = cost_rows([blackbox, cell(171, [0.4, 0.2, 0.2, 0.0], 0.8)], {"2x_block": {"box*": 2}})
    assert {r["model"] for r in rows} == {"cbm"} and len(rows) == 2


def test_a_price_is_checked_like_any_cost_spec():
    base = {"name": "x", "settings": {"a": []}, "models": {"cbm": []}}
    with pytest.raises(ValueError, match=r"cost_models.bad.box\* must be a finite number > 0, got 0"):
        ExperimentConfig(**base, cost_models={"bad": {"box*": 0}})
    with pytest.raises(ValueError, match=r"cost_models.typo: unknown concept\(s\) \['blok\*'\]"):
        cost_rows([cell(171, [0.1] * 4, 0.8)], {"typo": {"blok*": 2}})


def test_the_target_sweep_table_pools_each_target_over_seeds():
    """Rows per (target, k), the run's own target among them; mean +- SE over the seeds that swept."""
    from cbm.experiments.tables import target_rows

    def swept(seed: int, covs: dict[float, float]) -> dict:
        res = lambda c: [{"k": 0, "coverage": c, "selective_acc": 0.96, "nwa": c}]  # noqa: E731
        return {"setting": "10px", "model": "cbm", "seed": seed,
                "_results": {"n_concepts": 4, "calibration": {"target_accuracy": 0.95}, "results": res(covs[0.95]),
                             "sweep": [{"target_accuracy": t, "results": res(c)} for t, c in covs.items() if t != 0.95]}}  # fmt: skip

    cells = [swept(171, {0.9: 0.9, 0.95: 0.8, 0.99: 0.5}), swept(172, {0.9: 1.0, 0.95: 0.7, 0.99: 0.3}),
             {"setting": "10px", "model": "cbm", "seed": 173, "_results": {"n_concepts": 4, "results": []}}]  # fmt: skip
    rows, cols = target_rows(cells)
    assert [(r["target %"], r["k"], r["seeds"]) for r in rows] == [("90", "0", 2), ("95", "0", 2), ("99", "0", 2)]
    assert [r["coverage %"] for r in rows] == ["95.00 ± 5.00", "75.00 ± 5.00", "40.00 ± 10.00"]
    assert rows[2]["NWA %"] == "+40.00 ± 10.00" and cols[2] == "target %"
    assert target_rows(cells[2:]) == ([], cols)


def test_the_threshold_rules_table_pairs_each_rule_with_the_runs_own():
    """Rows per (k, rule), the run's own rule first; each swept rule's coverage and selective
    accuracy paired with the own rule's on the same seeds (t interval over the differences)."""
    from cbm.experiments.tables import threshold_rows

    def run(seed: int, own: tuple[float, float], classwise: tuple[float | None, float | None]) -> dict:
        res = lambda c, a: [{"k": 4, "coverage": c, "selective_acc": a, "nwa": c}]  # noqa: E731
        return {"setting": "10px", "model": "cbm", "seed": seed,
                "_results": {"n_concepts": 4, "config": {"threshold": "global"}, "results": res(*own),
                             "threshold_sweep": [{"threshold": "classwise", "results": res(*classwise)}]}}  # fmt: skip

    cells = [run(171, (0.80, 0.95), (0.84, 0.94)), run(172, (0.70, 0.96), (0.76, 0.97)), run(173, (0.60, 0.90), (None, None)),
             {"setting": "10px", "model": "blackbox", "seed": 171, "_results": {"n_concepts": 0, "results": []}}]  # fmt: skip
    rows, cols = threshold_rows(cells)
    assert [(r["k"], r["threshold"], r["seeds"]) for r in rows] == [("max", "global", 3), ("max", "classwise", 3)]
    assert rows[0]["coverage %"] == "70.00 ± 5.77" and rows[1]["coverage %"] == "80.00 ± 4.00"
    # differences +4 and +6 points on seeds 171, 172 (173 has no class-wise threshold): mean +5,
    # half-width t(0.975, 1) * sd / sqrt(2) = 12.706 * 1.414 / 1.414 = 12.71
    assert rows[1]["coverage vs global (points) [95% CI]"] == "+5.00 [-7.71, +17.71]"
    assert rows[1]["sel. acc vs global (points) [95% CI]"] == "+0.00 [-12.71, +12.71]"
    assert rows[0]["coverage vs global (points) [95% CI]"] == ""
    assert cols[-2:] == ["coverage vs global (points) [95% CI]", "sel. acc vs global (points) [95% CI]"]
    assert threshold_rows(cells[3:]) == ([], cols[:8])
