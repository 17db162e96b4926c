"""``cbm-automate``: calibrate abstention on the calibration split, automate the test split.

The model decides the confident test cases; an abstained case gets up to ``k`` concepts from
a human (policy + intervener) and is automated if the model is then confident under the same
threshold, else deferred. For every ``k`` the report gives coverage before/after, selective
accuracy, rescued/deferred fractions, NetWorkAutomated (uniform and cost-weighted) and AURC.

Writes into the Hydra run directory: ``automation.json`` (calibration, config, per-k results,
risk–coverage curves, and ``confidence``: histograms per true class of what the abstention rule
thresholds, with the calibrated band, on the calibration and test splits and on the test split with
every concept confirmed), ``automation.csv`` (one row per ``k``), ``risk_coverage.png``;
prints a markdown table.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from cbm.config.automate import AutomateConfig
from cbm.config.automate import validate as validate_schema
from cbm.core.atomic import ensure_dir, write_csv_atomic
from cbm.core.cli import hydra_app
from cbm.core.common import markdown_table, say, write_json_atomic
from cbm.core.validation import as_dict
from cbm.experiments.tables import CONFIRMED
from cbm.tracking import wandb_run
from cbm.training.device import resolve_device

log = logging.getLogger("cbm.automate")

#: Per-k columns of automation.csv, in order.
CSV_COLUMNS = [
    "k",
    "tau",
    "n",
    "coverage_before",
    "selective_acc_before",
    "rescued",
    "deferred",
    "coverage",
    "selective_acc",
    "rescued_acc",
    "mean_requested",
    "mean_cost_uniform",
    "mean_cost",
    "nwa",
    "nwa_cost",
    "aurc",
    "eaurc",
    "meets_target",
    "note",
]
#: Most points stored per risk–coverage curve in automation.json.
MAX_CURVE_POINTS = 500
#: Equal-width bins on [0, 1] of the stored confidence histograms (automation.json's ``confidence``).
HIST_BINS = 20


def validate(cfg: DictConfig | dict, check_paths: bool = True) -> AutomateConfig:
    """The typed config, its one policy and one intervener validated by their own schemas."""
    from cbm.interventions import registry

    c = validate_schema(cfg, check_paths)
    registry.validate_all("policy", c.policy, exactly_one=True)
    registry.validate_all("intervener", c.intervener, exactly_one=True)
    if c.device == "cuda":  # refused before any data is made, not after
        resolve_device(c.device)
    return c


# ----------------------------------------------------------------------------- core
def automate(model, dm, cfg: AutomateConfig) -> dict[str, Any]:
    """Calibrate on ``dm``'s calib split, run the flow on its test split; the report dict.

    ``dm`` is anything with ``loader(split_name)`` (a :class:`~synthetic.datamodule.SyntheticDataModule`).
    """
    from cbm.interventions import registry
    from cbm.interventions.evaluate import resolve_ks
    from cbm.interventions.registry import BuildContext
    from cbm.selective.abstention import uncertainty_threshold
    from cbm.selective.automation import encode_split, run_automation, score_confirmed, score_split
    from cbm.selective.calibration import TargetUnreachable
    from cbm.selective.metrics import concept_costs, risk_coverage_curve

    ks = resolve_ks(cfg.ks, model.n_concepts)
    costs = concept_costs(model.info.concept_names, cfg.costs) if model.n_concepts else None
    needs_humans = any(k > 0 for k in ks)
    ctx = BuildContext(seed=cfg.seed, concept_names=tuple(model.info.concept_names), labels=lambda: dm.split("train").tensors["c"],
                       model=model, validation=lambda: dm.whole("val"))  # fmt: skip
    (pname, psettings), (iname, isettings) = next(iter(cfg.policy.items())), next(iter(cfg.intervener.items()))
    policy = None
    if needs_humans:
        policy = registry.build("policy", pname, psettings, ctx)  # fails now, not inside the flow; prepared once
        intervener = registry.build("intervener", iname, isettings, ctx)
    else:
        intervener = None

    def make_policy():  # a fresh, identically seeded policy per budget k (a copy of the unused, prepared one)
        return copy.deepcopy(policy)

    # each split encoded once: Platt, the threshold and every swept target or rule read the same encoding
    calib, test = encode_split(model, dm.loader(cfg.calib_split)), encode_split(model, dm.loader("test"))
    transform, platt = None, None
    if cfg.platt:  # 0.4's Platt scaling of P(y=1), fitted on the calibration split's predictions
        from cbm.selective.platt import fit_platt

        if int(getattr(model, "n_classes", 2)) != 2:
            raise ValueError(f"platt=true scales P(y=1) of a two-class model; this one has {model.n_classes} classes")
        raw = score_split(model, calib, "probability")
        platt = fit_platt(np.where(raw.preds == 1, raw.scores, 1.0 - raw.scores), raw.y)
        transform = platt.logits
    cal_scored = score_split(model, calib, cfg.score, transform)

    def sweep() -> dict[str, list]:  # further targets, then further threshold rules, on the same predictions
        flow = (model, test, cfg, cal_scored, ks, make_policy, intervener, costs, transform)
        return {"sweep": [_swept(*flow, t, cfg.threshold) for t in cfg.sweep_targets],
                "threshold_sweep": [_swept(*flow, cfg.target_accuracy, rule) for rule in cfg.sweep_thresholds]}

    try:
        tau, cal_dict = _calibrated(cfg, cal_scored, cfg.target_accuracy, model)
    except TargetUnreachable as err:  # a result ("cannot reach the target"), not bad input: n/a rows
        log.warning("calibration failed: %s", err)
        return _report(model, cfg, costs, {"failed": str(err), "method": cfg.method, "target_accuracy": cfg.target_accuracy,
                       "delta": cfg.delta, "split": cfg.calib_split, "platt": platt and platt.to_dict()},
                       [not_available(k, str(err)) for k in ks], {}, **sweep())  # fmt: skip
    outcomes = run_automation(model, test, tau, ks, make_policy, intervener, score=cfg.score, costs=costs, transform=transform)
    results = [outcomes[k].summary(cfg.target_accuracy) for k in ks]
    for r in results:
        if "note" in r:
            log.warning("k=%s: %s", r["k"], r["note"])
    cal_dict.update(split=cfg.calib_split, platt=platt and platt.to_dict())
    if cfg.score == "uncertainty" and cfg.threshold == "global":
        cal_dict["tau_uncertainty"] = uncertainty_threshold(tau)
    cal_cov, cal_risk, _ = risk_coverage_curve(cal_scored.scores, cal_scored.correct)
    curves = {f"{cfg.calib_split} (k=0)": _thin(cal_cov, cal_risk)}
    curves.update({f"test k={k}": _thin(*outcomes[k].curve()) for k in ks})
    scored = {cfg.calib_split: cal_scored, "test": score_split(model, test, cfg.score, transform)}
    if model.n_concepts:  # how confident checks can make it: the test split with every concept true
        scored[CONFIRMED] = score_confirmed(model, test, cfg.score, transform)
    conf = confidence_histograms(scored, tau, cfg.score, int(getattr(model, "n_classes", 2)))
    return _report(model, cfg, costs, cal_dict, results, curves, conf, **sweep())


def _swept(model, test, cfg: AutomateConfig, cal_scored, ks, make_policy, intervener, costs, transform, target: float,
           threshold: str) -> dict[str, Any]:  # fmt: skip
    """One target or threshold rule of a sweep: the threshold calibrated on the same predictions of
    the calibration split, the flow's results at every k (n/a rows with the reason when no threshold
    reaches the target)."""
    from cbm.selective.automation import run_automation
    from cbm.selective.calibration import TargetUnreachable

    head = {"target_accuracy": target, "threshold": threshold}
    try:
        tau, _ = _calibrated(cfg, cal_scored, target, model, threshold)
    except TargetUnreachable as err:
        return {**head, "tau": None, "failed": str(err), "results": [not_available(k, str(err)) for k in ks]}
    outcomes = run_automation(model, test, tau, ks, make_policy, intervener, score=cfg.score, costs=costs, transform=transform)
    return {**head, "tau": tau, "results": [outcomes[k].summary(target) for k in ks]}


def _calibrated(cfg: AutomateConfig, cal_scored, target: float, model, threshold: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The threshold (one, or one per predicted class under the rule ``classwise``; the rule is
    ``threshold``, else the config's) for ``target`` on the calibration predictions, and its record;
    :class:`TargetUnreachable` when none reaches it."""
    from cbm.selective.calibration import calibrate
    from cbm.selective.classwise import calibrate_classwise

    if (threshold or cfg.threshold) == "classwise":
        cal = calibrate_classwise(cal_scored.scores, cal_scored.correct, cal_scored.preds, int(getattr(model, "n_classes", 2)),
                                  target, cfg.method, cfg.delta)  # fmt: skip
        return cal["tau"], cal
    cal = calibrate(cal_scored.scores, cal_scored.correct, target, cfg.method, cfg.delta)
    return cal.tau, {**cal.to_dict(), "threshold": "global"}


def confidence_histograms(scored: dict[str, Any], tau: float, score: str, n_classes: int,
                          bins: int = HIST_BINS) -> dict[str, Any]:  # fmt: skip
    """Per split, histograms per true class of the quantity the abstention rule thresholds, the
    calibrated band (compact: counts per bin, no per-example values), ``abstained``: the share of the
    split's examples the rule holds back (:data:`CONFIRMED`, if scored: those no check can rescue), and
    ``accuracy``: the split's accuracy (:data:`CONFIRMED`: the label head's on the true concepts).

    A binary task scored by probability shows ``p(y=1)`` (``max(p, 1-p)`` is the score: the score
    and the prediction give it back exactly) with the closed rejection band ``[1 - tau, tau]``
    (empty when ``tau < 0.5``); otherwise the score itself, abstaining on ``[0, tau]``.
    """
    import torch

    from cbm.selective.classwise import per_example

    binary = score == "probability" and n_classes <= 2
    edges = np.linspace(0.0, 1.0, bins + 1)
    if isinstance(tau, int | float):
        band = [1.0 - float(tau), float(tau)] if binary else [0.0, float(tau)]
    else:  # per predicted class: class 0 accepted iff 1 - p > tau_0, class 1 iff p > tau_1
        t = [1.0 if v is None else float(v) for v in tau]
        band = [1.0 - t[0], t[1]] if binary else [0.0, min(t)]
    out: dict[str, Any] = {"quantity": "p(y=1)" if binary else f"confidence ({score})", "tau": tau, "band": band,
                           "edges": [round(float(e), 12) for e in edges], "splits": {}}  # fmt: skip
    out["abstained"], out["accuracy"] = {}, {}
    for split, sc in scored.items():
        value = np.where(sc.preds == 1, sc.scores, 1.0 - sc.scores) if binary else sc.scores
        out["splits"][split] = {
            str(int(c)): [int(n) for n in np.histogram(np.clip(value[sc.y == c], 0.0, 1.0), edges)[0]]
            for c in np.unique(sc.y)
        }
        held = per_example(tau, torch.from_numpy(np.asarray(sc.preds))).numpy()
        out["abstained"][split] = float(np.mean(~(sc.scores > held))) if len(sc) else None
        out["accuracy"][split] = float(np.mean(sc.correct)) if len(sc) else None
    return out


def not_available(k: int, reason: str) -> dict[str, Any]:
    """A per-k row of a run whose calibration failed: every figure ``None``, the reason kept."""
    return {**dict.fromkeys(CSV_COLUMNS), "k": k, "meets_target": False, "status": "n/a", "note": reason}


def _report(model, cfg: AutomateConfig, costs, calibration: dict, results: list, curves: dict,
            confidence: dict | None = None, sweep: list | None = None, threshold_sweep: list | None = None) -> dict[str, Any]:  # fmt: skip
    info = model.info
    report = {
        "checkpoint": cfg.checkpoint,
        "dataset": info.dataset,
        "model": getattr(model.cfg, "name", type(model).__name__),
        "n_concepts": model.n_concepts,
        "concept_costs": None if costs is None else dict(zip(info.concept_names, costs.tolist())),
        "config": as_dict(cfg),
        "calibration": calibration,
        "results": results,
        "curves": curves,
    }
    if confidence is not None:
        report["confidence"] = confidence
    if sweep:
        report["sweep"] = sweep
    if threshold_sweep:
        report["threshold_sweep"] = threshold_sweep
    return report


def _thin(cov: np.ndarray, risk: np.ndarray) -> dict[str, list[float]]:
    """At most MAX_CURVE_POINTS points of a curve (always keeping its ends)."""
    if len(cov) > MAX_CURVE_POINTS:
        idx = np.unique(np.linspace(0, len(cov) - 1, MAX_CURVE_POINTS).round().astype(int))
        cov, risk = cov[idx], risk[idx]
    return {"coverage": [float(v) for v in cov], "risk": [float(v) for v in risk]}


# ----------------------------------------------------------------------------- output
def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.2f}"


def _signed(v: float | None, fmt: str = "+.4f") -> str:
    return "n/a" if v is None else format(v, fmt)


def results_table(report: dict[str, Any]) -> str:
    """Markdown table of the per-k results (percentages; NWA as a signed fraction)."""
    rows = [
        {
            "k": r["k"],
            "coverage before %": _pct(r["coverage_before"]),
            "coverage after %": _pct(r["coverage"]),
            "rescued %": _pct(r["rescued"]),
            "deferred %": _pct(r["deferred"]),
            "sel. acc %": _pct(r["selective_acc"]),
            "NWA": _signed(r["nwa"]),
            "NWA (cost)": _signed(r["nwa_cost"]),
            "AURC": _signed(r["aurc"], ".4f"),
        }
        for r in report["results"]
    ]
    return markdown_table(rows, list(rows[0]))


def calibration_line(report: dict[str, Any]) -> str:
    from cbm.selective.classwise import tau_text

    c = report["calibration"]
    if "failed" in c:
        return f"no threshold (every k n/a): {c['failed']}"
    guarantee = (
        f"true selective accuracy >= {c['bound']:.2%} with probability >= {1 - c['delta']:.0%}"
        if c["guaranteed"]
        else f"no guarantee (uncorrected {1 - c['delta']:.0%} bound {c['bound']:.2%})"
    )
    return (
        f"tau{' per predicted class' if c.get('threshold') == 'classwise' else ''} = {tau_text(c['tau'])} ({c['method']}, "
        f"target {c['target_accuracy']:.2%}): calibration coverage {c['coverage_cal']:.2%}, selective accuracy "
        f"{_pct(c['selective_acc_cal'])}% on {c['n_cal']} examples; {guarantee}"
    )


def write_outputs(report: dict[str, Any], out_dir: Path) -> None:
    """automation.json, automation.csv and risk_coverage.png in ``out_dir``."""
    from cbm.selective.classwise import tau_text
    from cbm.selective.plots import plot_risk_coverage

    write_json_atomic(out_dir / "automation.json", report)
    write_csv_atomic(out_dir / "automation.csv", report["results"], CSV_COLUMNS)
    if report.get("sweep"):
        rows = [{"target_accuracy": s["target_accuracy"], **r} for s in report["sweep"] for r in s["results"]]
        write_csv_atomic(out_dir / "automation_sweep.csv", rows, ["target_accuracy", *CSV_COLUMNS])
    if report.get("threshold_sweep"):
        rows = [{"threshold": s["threshold"], **r} for s in report["threshold_sweep"] for r in s["results"]]
        write_csv_atomic(out_dir / "automation_thresholds.csv", rows, ["threshold", *CSV_COLUMNS])
    if "failed" in report["calibration"]:
        return  # nothing to draw
    curves = {
        name: (np.asarray(c["coverage"]), np.asarray(c["risk"])) for name, c in report["curves"].items()
    }
    points = [
        (
            f"test k={r['k']}",
            r["coverage"],
            None if r["selective_acc"] is None else 1.0 - r["selective_acc"],
        )
        for r in report["results"]
    ]
    title = f"{report['dataset']} / {report['model']}: {report['calibration']['method']} tau={tau_text(report['calibration']['tau'])}"
    plot_risk_coverage(
        curves, out_dir / "risk_coverage.png", report["calibration"]["target_accuracy"], points, title
    )


def run(cfg: DictConfig | dict) -> dict[str, Any]:
    """Load the run, calibrate, automate, write the outputs; return the report."""
    import lightning as L

    from cbm.training.checkpoint import load_run  # imports the data generators

    acfg = validate(cfg)
    out_dir = ensure_dir(acfg.output_dir)
    L.seed_everything(acfg.seed, workers=True, verbose=False)
    model, dm, _ = load_run(
        acfg.checkpoint, acfg.cache_dir, acfg.batch_size, acfg.eval_batch_size, acfg.data_overrides
    )
    device = resolve_device(acfg.device)
    model.to(device).eval()
    dm.to_device(device)
    with wandb_run.finishing():
        config = wandb_run.run_config(wandb_run.plain_config(acfg), "cbm-automate")
        wb = wandb_run.start_follower(acfg.logger.wandb, job_type="automate", checkpoint=acfg.checkpoint, run_dir=out_dir, config=config)
        report = automate(model, dm, acfg)
        write_outputs(report, out_dir)
        if wb is not None:
            wandb_run.log_automation_results(wb, report, CSV_COLUMNS)
    say(calibration_line(report) + "\n" + results_table(report))
    return report


main = hydra_app(
    "cbm-automate",
    "automate",
    run,
    validate,
    "Calibrated abstention on the calibration split, then automation of the test split with up to k\nconcepts from a human; writes automation.json / automation.csv / risk_coverage.png.",
    ['checkpoint=outputs/sudoku-cbm/<time>', "checkpoint=<run> target_accuracy=0.99 method=sgr delta=0.05 'ks=[0,1,3,max]'", 'checkpoint=<run> policy=responsiveness intervener=expert device=cuda'],
)


if __name__ == "__main__":
    main()
