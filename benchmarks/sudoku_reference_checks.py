"""0.4.1's own check model, label predictor and automation table on the digits of one of our runs.

Is a difference in Sudoku coverage against concept-benchmark 0.4.1 in our pipeline or in the data?
This trains the reference's ``GroupPoolingConceptSudokuCNN`` + logistic label predictor
(``experiments.evaluate.train_cbm``, batch 32, <= 100 epochs, patience 20, propagation on) on the
*true* digits of a ``paper_v04_sudoku`` run's training boards and scores it, with its own Platt
scaling and plug-in threshold (``experiments.evaluate.automation_table``, target 0.95), on the
digits *our OCR* read on that run's validation and test boards. Our pipeline and 0.4.1's agree
when the two tables agree on the same digits.

Two stages, two interpreters: ``dump`` runs in this project's venv (our run's checkpoint, its data
and its OCR); ``reference`` runs the reference's code from its sdist (``--ref-src``, with
``pero`` / ``colorir`` / a ``cairo`` stand-in on ``PYTHONPATH``: nothing is drawn)::

    python benchmarks/sudoku_reference_checks.py dump --run RUN_DIR/10px/cbm/seed171/train --out d171.npz
    PYTHONPATH=SDIST:STUBS python benchmarks/sudoku_reference_checks.py reference --digits d171.npz --seed 171
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPLITS = ("train", "val", "test")


def dump(run: str, out: Path, cache_dir: str) -> None:
    """True digits, our OCR's digits, checks and labels of every split of ``run``'s data."""
    import numpy as np
    import torch

    from cbm.training.checkpoint import load_run

    model, dm, _ = load_run(run, cache_dir)
    dm.setup("test")
    arrays = {}
    with torch.no_grad():
        for name in SPLITS:
            t = dm.split(name).tensors
            arrays[f"{name}_true"] = t["board"].reshape(len(t["y"]), 81).numpy().astype(np.int64)
            arrays[f"{name}_ocr"] = model.read(t["x"]).numpy().astype(np.int64)
            arrays[f"{name}_c"], arrays[f"{name}_y"] = t["c"].numpy().astype(np.int32), t["y"].numpy().astype(np.int64)
    np.savez(out, **arrays)
    print(f"wrote {out}: " + ", ".join(f"{k} {v.shape}" for k, v in arrays.items()))


def reference(digits: Path, seed: int, target: float) -> dict:
    """0.4.1's check model trained on the true digits, its automation table on our OCR's digits."""
    import numpy as np
    from concept_benchmark.data import ConceptDataset
    from experiments.evaluate import automation_table, train_cbm
    from experiments.models import GroupPoolingConceptSudokuCNN

    a = np.load(digits)
    names = [f"{g}{i}" for g in ("row", "col", "block") for i in range(1, 10)]
    sizes = [len(a[f"{s}_y"]) for s in SPLITS]
    idx = np.arange(sum(sizes))

    def dataset(kind: str):
        stack = lambda key: np.concatenate([a[f"{s}_{key}"] for s in SPLITS])  # noqa: E731
        ds = ConceptDataset(inputs=stack(kind), C=stack("c"), y=stack("y"), meta={"concepts": names, "dataset_name": "sudoku"},
                            input_type="tabular", classes=(0, 1))  # fmt: skip
        masks = [(idx >= sum(sizes[:i])) & (idx < sum(sizes[: i + 1])) for i in range(3)]
        ds.train, ds.validation, ds.test = (ds._full.filter(m) for m in masks)
        return ds

    true, ocr = dataset("true"), dataset("ocr")
    cbm = train_cbm(true.train, true.validation, detector=GroupPoolingConceptSudokuCNN, epochs=100, lr=1e-3, patience=20, seed=seed,
                    loader_config={"batch_size": 32, "num_workers": 0, "pin_memory": False}, should_propagate=True)  # fmt: skip
    table = automation_table(cbm, ocr.validation, ocr.test, budgets=(3, "max"), target_accuracy=target, seed=seed, concept_groups=9)
    checks = cbm.concept_detector.predict_proba(ocr.test) >= 0.5
    return {"seed": seed, "check_acc_test": float((checks == (a["test_c"] >= 0.5)).mean()),
            "rows": table[["budget", "accuracy", "coverage_after", "selective_accuracy_after"]].to_dict("records")}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    d = sub.add_parser("dump", help="our run's digits (this project's venv)")
    d.add_argument("--run", required=True, help="a paper_v04_sudoku CBM training cell (its train/ folder)")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--cache-dir", default=".cache/cbm")
    r = sub.add_parser("reference", help="0.4.1's check model and table on them (the reference's code on PYTHONPATH)")
    r.add_argument("--digits", type=Path, required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--target", type=float, default=0.95)
    args = ap.parse_args(argv)
    if args.stage == "dump":
        dump(args.run, args.out, args.cache_dir)
    else:
        print(json.dumps(reference(args.digits, args.seed, args.target)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
