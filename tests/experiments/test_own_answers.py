"""The own-answers table (0.4.1's make_own_answers_table.py): the accuracy change on the rows
intervened on, with the model's own answers and with the true values, paired over seeds."""

from __future__ import annotations

import pytest

from cbm.experiments.tables import change_on_intervened, own_answer_rows


def grid(iv: str, accs: list[float], fracs: list[float], policy: str = "responsiveness") -> list[dict]:
    return [{"intervener": iv, "policy": policy, "k": k, "accuracy": a, "frac_requesting": f}
            for k, a, f in zip([0, 1, 3, "max"], accs, fracs)]  # fmt: skip


def cell(seed: int, own: list[float], true: list[float], fracs: list[float], model: str = "cbm") -> dict:
    return {"setting": "true", "model": model, "seed": seed, "_results": {"rows": grid("self", own, fracs) + grid("oracle", true, fracs)}}


def test_the_change_is_per_row_intervened_on_averaged_over_the_budgets():
    # k=1: +0.02 over 10% of the rows = +0.2; k=3: +0.06 / 0.3 = +0.2; k=max: +0.10 / 0.5 = +0.2
    change, share = change_on_intervened(grid("oracle", [0.8, 0.82, 0.86, 0.9], [0.0, 0.1, 0.3, 0.5]))
    assert change == pytest.approx(0.2) and share == pytest.approx(0.3)
    assert change_on_intervened(grid("oracle", [0.8, 0.8, 0.8, 0.8], [0.0, 0.0, 0.0, 0.0])) == (None, None)


def test_own_answers_rows_pair_true_and_own_over_seeds():
    fr = [0.0, 0.1, 0.3, 0.5]
    cells = [cell(1014, [0.8] * 4, [0.8, 0.82, 0.86, 0.9], fr), cell(1015, [0.8, 0.79, 0.77, 0.75], [0.8, 0.83, 0.89, 0.95], fr),
             {"setting": "true", "model": "cem", "seed": 1014, "_results": {"rows": grid("oracle", [0.8] * 4, fr)}}]  # fmt: skip
    rows, cols = own_answer_rows(cells)
    assert len(rows) == 1  # cem's grid has no self intervener
    row = rows[0]
    assert (row["model"], row["seeds"], row["intervened on %"]) == ("cbm", 2, "30.00 ± 0.00")
    # own: 0 and -0.1 (every budget: -0.01/0.1, -0.03/0.3, -0.05/0.5); true: +0.2 and +0.3
    assert row["own answers (points)"] == "-5.00 ± 5.00" and row["true values (points)"] == "+25.00 ± 5.00"
    assert row["true - own [95% CI]"].startswith("+30.00 [") and row["resolved"] == "no"  # +20 and +40: t(1) is wide
    assert cols[-2:] == ["true - own [95% CI]", "resolved"]
