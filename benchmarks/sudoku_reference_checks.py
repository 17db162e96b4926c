"""0.4.1's own check model, label predictor and automation table on the digits of our runs and of its own.

Where does a difference in Sudoku coverage against concept-benchmark 0.4.1 come from: our pipeline,
the boards, or the OCR's digits? Every stage past ``dump`` runs the reference's code: its
``GroupPoolingConceptSudokuCNN`` + logistic label predictor (``experiments.evaluate.train_cbm``,
batch 32, <= 100 epochs, patience 20, propagation on) trained on the *true* digits of a run's
training boards, then its Platt scaling and plug-in threshold (``experiments.evaluate.automation_table``,
target 0.95) fitted on the OCR's digits of the validation boards and scored on the test boards'.
On the reference's own digits this equals its pipeline's table to the board.

Digits files (``.npz``): ``{train,val,test}_{true,ocr,c,y}``, the true and OCR-read digits (81 per
board), the 27 checks and the label of every split.

- ``dump`` (this project's venv): one of our ``paper_v04_sudoku`` runs' digits (its checkpoint, data, OCR).
- ``dump-reference`` (the reference's venv, its ``CONCEPT_BENCHMARK_DATA_DIR``): the digits the reference's
  own pipeline drew and read (``--stages setup ocr``), split as its pipeline splits them.
- ``reference``: the automation table on one digits file.
- ``swap``: the check model trained on each file's training boards, its table on every mix of the two
  files' validation and test boards (which of the three splits moves the coverage?).
- ``draws``: coverage at k = 0 on each test set when only the 200 validation boards change (resampled
  from both files' validation boards): how far one seed's coverage can move on the validation draw alone.

Run the reference's stages with its sdist, ``pero`` / ``colorir`` and a ``cairo`` stand-in on
``PYTHONPATH`` (nothing is drawn)::

    python benchmarks/sudoku_reference_checks.py dump --run RUN_DIR/10px/cbm/seed171/train --out ours171.npz
    PYTHONPATH=SDIST:STUBS python benchmarks/sudoku_reference_checks.py dump-reference --seed 171 --out ref171.npz
    PYTHONPATH=SDIST:STUBS python benchmarks/sudoku_reference_checks.py reference --digits ours171.npz --seed 171
    PYTHONPATH=SDIST:STUBS python benchmarks/sudoku_reference_checks.py swap --digits ref171.npz ours171.npz --seed 171 --out swap.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPLITS = ("train", "val", "test")
#: The reference's split names for ours.
REF_SPLITS = {"train": "train", "val": "validation", "test": "test"}
CHECKS = [f"{g}{i}" for g in ("row", "col", "block") for i in range(1, 10)]
TARGET = 0.95


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


def dump_reference(seed: int, out: Path) -> None:
    """The reference's own true and OCR digits of ``seed`` (its tabular and ``ocr_inferred_full_dataset``
    files), split by its pipeline's ``sample(test_size=0.2, val_size=0.2, stratify=y, seed)``."""
    import numpy as np
    from concept_benchmark.config import SudokuBenchmarkConfig
    from concept_benchmark.ext.fileutils import load

    cfg = SudokuBenchmarkConfig(seed=seed)
    cfg.cell_px = 10
    true = load(cfg.get_dataset_path(data_type="tabular") / "sudoku_dataset.pkl")
    ocr = load(cfg.get_dataset_path(data_type="image") / "ocr_inferred_full_dataset.pkl")
    for d in (true, ocr):
        d.sample(test_size=0.2, val_size=0.2, stratify=d.y, seed=seed)
    arrays = {}
    for ours, theirs in REF_SPLITS.items():
        t, o = getattr(true, theirs), getattr(ocr, theirs)
        if not (np.array_equal(t.y, o.y) and np.array_equal(t.C, o.C)):
            raise SystemExit(f"dump-reference: the tabular and OCR datasets of seed {seed} split differently ({theirs})")
        arrays[f"{ours}_true"] = np.asarray(t.X).reshape(len(t.y), -1).astype(np.int64)
        arrays[f"{ours}_ocr"] = np.asarray(o.X).reshape(len(o.y), -1).astype(np.int64)
        arrays[f"{ours}_c"], arrays[f"{ours}_y"] = np.asarray(t.C).astype(np.int32), np.asarray(t.y).astype(np.int64)
    np.savez(out, **arrays)
    print(f"wrote {out}: " + ", ".join(f"{k} {v.shape}" for k, v in arrays.items()))


def _dataset(files: dict, parts: list[tuple[str, str]], kind: str):
    """A reference ``ConceptDataset`` whose train / validation / test are ``parts`` (``(file, split)``)."""
    import numpy as np
    from concept_benchmark.data import ConceptDataset

    stack = lambda key: np.concatenate([files[f][f"{s}_{key}"] for f, s in parts])  # noqa: E731
    sizes = [len(files[f][f"{s}_y"]) for f, s in parts]
    ds = ConceptDataset(inputs=stack(kind), C=stack("c"), y=stack("y"), meta={"concepts": CHECKS, "dataset_name": "sudoku"},
                        input_type="tabular", classes=(0, 1))  # fmt: skip
    idx = np.arange(sum(sizes))
    masks = [(idx >= sum(sizes[:i])) & (idx < sum(sizes[: i + 1])) for i in range(3)]
    ds.train, ds.validation, ds.test = (ds._full.filter(m) for m in masks)
    return ds


def _train(files: dict, name: str, seed: int):
    from experiments.evaluate import train_cbm
    from experiments.models import GroupPoolingConceptSudokuCNN

    true = _dataset(files, [(name, s) for s in SPLITS], "true")
    return train_cbm(true.train, true.validation, detector=GroupPoolingConceptSudokuCNN, epochs=100, lr=1e-3, patience=20, seed=seed,
                     loader_config={"batch_size": 32, "num_workers": 0, "pin_memory": False}, should_propagate=True)  # fmt: skip


def _table(cbm, ocr, seed: int, budgets=(3, "max")) -> list[dict]:
    from experiments.evaluate import automation_table

    table = automation_table(cbm, ocr.validation, ocr.test, budgets=budgets, target_accuracy=TARGET, seed=seed, concept_groups=9)
    return table[["budget", "accuracy", "coverage_after", "selective_accuracy_after"]].to_dict("records")


def reference(digits: Path, seed: int) -> dict:
    """0.4.1's check model trained on the true digits, its automation table on the OCR's digits."""
    files = {"d": _load(digits)}
    cbm = _train(files, "d", seed)
    checks = cbm.concept_detector.predict_proba(_dataset(files, [("d", s) for s in SPLITS], "ocr").test) >= 0.5
    return {"seed": seed, "check_acc_test": float((checks == (files["d"]["test_c"] >= 0.5)).mean()),
            "rows": _table(cbm, _dataset(files, [("d", s) for s in SPLITS], "ocr"), seed)}  # fmt: skip


def _load(path: Path) -> dict:
    import numpy as np

    with np.load(path) as f:
        return dict(f)


def swap(digits: list[Path], seed: int) -> dict:
    """For each file's training boards, the coverage at k = 0 and 3 on every (validation, test) pair of the
    files, and the check model's P(valid) on every file's validation and test boards (for ``draws``)."""
    import numpy as np

    files = {p.stem: _load(p) for p in digits}
    out: dict = {"seed": seed, "files": [str(p) for p in digits], "coverage": {}, "p_valid": {}}
    for tr in files:
        cbm = _train(files, tr, seed)
        for v in files:
            for te in files:
                rows = _table(cbm, _dataset(files, [(tr, "train"), (v, "val"), (te, "test")], "ocr"), seed, budgets=(3,))
                out["coverage"][f"train={tr} val={v} test={te}"] = [round(float(r["coverage_after"]), 4) for r in rows]
        for f in files:
            for s in ("val", "test"):
                d = _dataset(files, [(tr, "train"), (f, s), (f, s)], "ocr")
                out["p_valid"][f"train={tr} {f}_{s}"] = np.asarray(cbm.predict_proba(d.test))[:, 1].round(6).tolist()
    return out


def draws(swapped: dict, digits: list[Path], n_draws: int = 1000, seed: int = 0) -> dict:
    """Coverage at k = 0 with each training set's check model on each test set, when 200 validation boards
    are drawn (with replacement) from all files' validation boards: 0.4.1's Platt scaling and plug-in
    threshold refit on every draw."""
    import numpy as np
    from concept_benchmark.evaluation.metrics import PlattScaling, abstention_threshold, selective_at

    files = {p.stem: _load(p) for p in digits}
    p = {k: np.asarray(v) for k, v in swapped["p_valid"].items()}

    def coverage(vp, vy, tp, ty) -> float:
        scale = PlattScaling().fit(vp, vy)
        t, _ = abstention_threshold(vy, scale(vp), TARGET)
        return 0.0 if t is None else float(selective_at(ty, scale(tp), t, 0.5)[1])

    out = {}
    rng = np.random.default_rng(seed)
    for tr in files:
        pool_p = np.concatenate([p[f"train={tr} {f}_val"] for f in files])
        pool_y = np.concatenate([files[f]["val_y"] for f in files])
        picks = [rng.integers(0, len(pool_y), 200) for _ in range(n_draws)]
        for te in files:
            covs = np.array([coverage(pool_p[i], pool_y[i], p[f"train={tr} {te}_test"], files[te]["test_y"]) for i in picks])
            out[f"train={tr} test={te}"] = {"mean": round(float(covs.mean()), 4), "sd": round(float(covs.std()), 4),
                                            "q05": float(np.quantile(covs, 0.05)), "q95": float(np.quantile(covs, 0.95)),
                                            "min": float(covs.min()), "max": float(covs.max())}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    d = sub.add_parser("dump", help="our run's digits (this project's venv)")
    d.add_argument("--run", required=True, help="a paper_v04_sudoku CBM training cell (its train/ folder)")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--cache-dir", default=".cache/cbm")
    dr = sub.add_parser("dump-reference", help="the reference's own digits of a seed (its venv and data folder)")
    dr.add_argument("--seed", type=int, required=True)
    dr.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("reference", help="0.4.1's check model and table on one digits file")
    r.add_argument("--digits", type=Path, required=True)
    r.add_argument("--seed", type=int, required=True)
    s = sub.add_parser("swap", help="every mix of the files' training, validation and test boards, then the validation draws")
    s.add_argument("--digits", type=Path, nargs="+", required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--draws", type=int, default=1000)
    s.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.stage == "dump":
        dump(args.run, args.out, args.cache_dir)
    elif args.stage == "dump-reference":
        dump_reference(args.seed, args.out)
    elif args.stage == "reference":
        print(json.dumps(reference(args.digits, args.seed)))
    else:
        res = swap(args.digits, args.seed)
        res["draws"] = draws(res, args.digits, args.draws)
        args.out.write_text(json.dumps({k: v for k, v in res.items() if k != "p_valid"}, indent=1))
        print(json.dumps({"coverage": res["coverage"], "draws": res["draws"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
