"""The answer-exchange table (0.4.1's make_answer_exchange_table.py): each intervener on every concept,
each with the other's answers on one concept, and the points that concept moves at the largest budget."""

from __future__ import annotations

from cbm.experiments.tables import exchange_rows

NAMES = ["knees", "foot", "head", "ears"]  # k = 3 is not k = max
ROWS = ("oracle", "expert", "expert+oracle", "oracle+expert")


def cell(seed: int, accs: dict[str, list[float]]) -> dict:
    rows = [{"intervener": iv, "policy": "responsiveness", "k": k, "accuracy": a}
            for iv in ROWS for k, a in zip([0, 1, 3], accs[iv])]  # fmt: skip
    meta = {"concepts": NAMES, "policies": ["responsiveness"],
            "exchange": {"expert+oracle": {"answers": "expert", "with": "oracle", "columns": [0]},
                         "oracle+expert": {"answers": "oracle", "with": "expert", "columns": [0]}}}  # fmt: skip
    return {"setting": "true", "model": "cbm", "seed": seed, "_results": {"rows": rows, "meta": meta}}


def test_rows_in_the_papers_order_with_the_paired_move_at_the_largest_budget():
    cells = [cell(1014, {"oracle": [0.8, 0.9, 0.95], "expert": [0.8, 0.85, 0.88], "expert+oracle": [0.8, 0.88, 0.93], "oracle+expert": [0.8, 0.86, 0.9]}),
             cell(1015, {"oracle": [0.8, 0.9, 0.97], "expert": [0.8, 0.85, 0.86], "expert+oracle": [0.8, 0.88, 0.95], "oracle+expert": [0.8, 0.86, 0.88]})]  # fmt: skip
    rows, cols = exchange_rows(cells)
    assert [r["answers"] for r in rows] == ["oracle on every concept", "expert on every concept",
                                            "expert, with oracle's answers on knees", "oracle, with expert's answers on knees"]  # fmt: skip
    assert cols == ["setting", "model", "policy", "answers", "seeds", "acc k=1", "acc k=3", "moves k=3 (points) [95% CI]"]
    assert rows[0]["acc k=3"] == "96.00 ± 1.00" and rows[1]["acc k=1"] == "85.00 ± 0.00"
    assert rows[2]["seeds"] == 2 and rows[2]["acc k=3"] == "94.00 ± 1.00"
    # expert+oracle - expert at k=3: +0.05 and +0.09; oracle+expert - oracle: -0.05 and -0.09
    assert rows[2]["moves k=3 (points) [95% CI]"].startswith("+7.00 [")
    assert rows[3]["moves k=3 (points) [95% CI]"].startswith("-7.00 [")
    assert rows[0]["moves k=3 (points) [95% CI]"] == rows[1]["moves k=3 (points) [95% CI]"] == ""


def test_no_exchange_no_rows():
    c = cell(1014, {iv: [0.8, 0.9, 0.9] for iv in ROWS})
    del c["_results"]["meta"]["exchange"]
    assert exchange_rows([c]) == ([], ["setting", "model", "policy", "answers", "seeds", "acc k=1", "acc k=3", "moves k=3 (points) [95% CI]"])
