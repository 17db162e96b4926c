"""``cbm-automate``: config validation, the report, its files and one-line errors."""

import csv
import json
import re
import sys
from dataclasses import replace

import pytest
from hydra import compose, initialize_config_dir
from selective_toys import MostUncertainPolicy, toy_data, toy_model

from cbm.core.common import CONF_DIR
from cbm.core.validation import ConfigError
from cbm.experiments.automate import (
    CONFIRMED,
    CSV_COLUMNS,
    AutomateConfig,
    automate,
    calibration_line,
    results_table,
    validate,
    write_outputs,
)
from synthetic.datamodule import SyntheticDataModule


def composed(*overrides):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("automate", overrides=["cache_dir=null", "output_dir=.", *overrides])


def test_shipped_config_validates():
    cfg = validate(composed("checkpoint=runs/x"), check_paths=False)
    plain = AutomateConfig(checkpoint="runs/x", cache_dir=None)  # the schema's defaults = the shipped ones
    assert list(cfg.policy) == list(plain.policy) == ["random"] and list(cfg.intervener) == list(plain.intervener) == ["oracle"]
    assert replace(cfg, policy={}, intervener={}) == replace(plain, policy={}, intervener={})
    assert (cfg.method, cfg.target_accuracy, cfg.delta, cfg.ks) == ("ltt", 0.90, 0.1, [0, 1, 3, "max"])
    cfg = validate(composed("checkpoint=r", "+costs={c0: 2.0}", "method=sgr", "ks=[0,2]"), check_paths=False)
    assert cfg.costs == {"c0": 2.0} and cfg.method == "sgr" and cfg.ks == [0, 2]


@pytest.mark.parametrize(
    "overrides,msg",
    [
        ([], "checkpoint is required: cbm-automate checkpoint=<cbm-train run dir or .ckpt file>"),
        (
            ["checkpoint=r", "method=magic"],
            "config: method must be one of ('empirical', 'plugin', 'sgr', 'ltt'), got 'magic'",
        ),
        (
            ["checkpoint=r", "score=vibes"],
            "config: score must be one of ('probability', 'uncertainty'), got 'vibes'",
        ),
        (["checkpoint=r", "policy=[random,uncertainty]"], "exactly one policy is used here, got ['random', 'uncertainty']"),
        (["checkpoint=r", "+policy.random.nope=1"], "policy.random: Key 'nope' not in 'Config' (key: nope)"),
        (["checkpoint=r", "intervener=expert", "intervener.expert.accuracy=2"], "intervener.expert: expert accuracy for accuracy must be in [0, 1], got 2.0"),
        (["checkpoint=r", "delta=0"], "config: delta must be in (0, 1), got 0.0"),
        (["checkpoint=r", "ks=[1,-2]"], "config: ks entries must be integers >= 0 or 'max', got -2"),
    ],
)
def test_bad_config_is_one_line(overrides, msg):
    with pytest.raises(ConfigError) as err:
        validate(composed(*overrides), check_paths=False)
    assert str(err.value) == msg


def run_toy(tmp_path, **overrides):
    data = toy_data()
    dm = SyntheticDataModule(lambda: data, 64, 128)
    cfg = AutomateConfig(checkpoint="toy", ks=[0, 1, "max"], output_dir=str(tmp_path), **overrides)
    return automate(toy_model(), dm, cfg)


def test_report_and_files(tmp_path, monkeypatch):

    # A deterministic policy by name, so the numbers below do not depend on the random stream.
    from cbm.interventions import registry

    real = registry.build
    monkeypatch.setattr(registry, "build", lambda kind, *a: MostUncertainPolicy() if kind == "policy" else real(kind, *a))
    report = run_toy(tmp_path, method="ltt", target_accuracy=0.95, costs={"c0": 2.0})
    cal = report["calibration"]
    assert cal["method"] == "ltt" and cal["guaranteed"] and cal["bound"] >= 0.95 and cal["n_cal"] == 400
    assert report["concept_costs"] == pytest.approx({"c0": 2 / 3, "c1": 1 / 3, "c2": 1 / 3})
    by_k = {r["k"]: r for r in report["results"]}
    assert sorted(by_k) == [0, 1, 3]
    assert by_k[0]["coverage"] == by_k[0]["coverage_before"] and by_k[0]["nwa"] == by_k[0]["coverage"]
    for r in report["results"]:
        assert r["tau"] == cal["tau"] and r["n"] == 400
        assert r["coverage"] == pytest.approx(r["coverage_before"] + r["rescued"])
        assert r["nwa"] == pytest.approx(r["coverage"] - r["mean_cost_uniform"])
        assert r["rescued"] + r["deferred"] == pytest.approx(1 - r["coverage_before"])
    assert by_k[1]["rescued"] > 0 and by_k[1]["mean_requested"] == pytest.approx(
        1 - by_k[1]["coverage_before"]
    )
    assert by_k[3]["selective_acc"] >= 0.95  # oracle concepts through a correct head: rescues are right
    conf = report["confidence"]  # the test split as scored, and again with every concept true
    assert conf["abstained"]["test"] == pytest.approx(1 - by_k[0]["coverage_before"])
    assert sum(map(sum, conf["splits"][CONFIRMED].values())) == 400
    # k = 3 asks the abstained examples about all three concepts: what is still held then is held confirmed
    assert conf["abstained"][CONFIRMED] >= 1 - by_k[3]["coverage"] - 1e-12

    write_outputs(report, tmp_path)
    assert json.loads((tmp_path / "automation.json").read_text())["calibration"]["tau"] == cal["tau"]
    rows = list(csv.DictReader((tmp_path / "automation.csv").open()))
    assert list(rows[0]) == CSV_COLUMNS and [r["k"] for r in rows] == ["0", "1", "3"]
    assert (tmp_path / "risk_coverage.png").stat().st_size > 1000
    table = results_table(report)
    assert (
        table.splitlines()[0].startswith("| k | coverage before % | coverage after % |")
        and len(table.splitlines()) == 5
    )


def test_threshold_comes_from_the_calibration_split_only(tmp_path):
    data = toy_data()
    other = toy_data(seed=7)  # same calibration rows, different test rows
    calib = data.split == 2
    for name in ("x", "c", "c_true", "y"):
        getattr(other, name)[calib] = getattr(data, name)[calib]
    cfg = AutomateConfig(checkpoint="toy", ks=[0], method="empirical", target_accuracy=0.99)
    a = automate(toy_model(), SyntheticDataModule(lambda: data, 64, 128), cfg)
    b = automate(toy_model(), SyntheticDataModule(lambda: other, 64, 128), cfg)
    assert a["calibration"] == b["calibration"] and a["results"] != b["results"]


def test_negative_nwa_is_shown_signed(tmp_path):
    report = {
        "results": [
            {
                "k": 3,
                "coverage_before": 0.5,
                "coverage": 0.5,
                "rescued": 0.0,
                "deferred": 0.5,
                "selective_acc": None,
                "nwa": -0.25,
                "nwa_cost": -0.3,
                "aurc": 0.1,
            }
        ]
    }
    assert "| 3 | 50.00 | 50.00 | 0.00 | 50.00 | n/a | -0.2500 | -0.3000 | 0.1000 |" in results_table(report)


def run_main(monkeypatch, capsys, *args):
    import cbm.experiments.automate as app

    monkeypatch.setattr(sys, "argv", ["cbm-automate", *args])
    monkeypatch.delenv("CBM_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        app.main()
    return exit_.value.code, capsys.readouterr().err.strip().splitlines()[-1]


def test_cli_errors_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    hydra_dir = f"hydra.run.dir={tmp_path}/run"
    code, line = run_main(monkeypatch, capsys, hydra_dir, f"checkpoint={tmp_path}/missing", "cache_dir=null")
    assert (code, line) == (2, f"cbm-automate: error: checkpoint not found: {tmp_path}/missing")
    code, line = run_main(monkeypatch, capsys, hydra_dir, "checkpoint=x", "method=magic")
    assert (code, line) == (
        2,
        "cbm-automate: error: config: method must be one of ('empirical', 'plugin', 'sgr', 'ltt'), got 'magic'",
    )


def test_empty_calibration_split_is_a_clear_error(tmp_path):
    data = toy_data(n_calib=0)
    cfg = AutomateConfig(checkpoint="toy", ks=[0])
    with pytest.raises(ValueError) as err:
        automate(toy_model(), SyntheticDataModule(lambda: data, 64, 128), cfg)
    assert str(err.value).startswith("calibration split is empty: cannot calibrate the abstention threshold")


def test_failed_calibration_gives_na_rows_not_an_abort(tmp_path):
    """A target no threshold can reach is a result: every k is n/a with the reason, the files are
    written (no plot) and the table says n/a; a sweep over models goes on."""
    report = run_toy(tmp_path, method="ltt", target_accuracy=1.0, delta=0.01)
    cal = report["calibration"]
    assert cal["failed"].startswith("ltt calibration: no threshold reaches selective accuracy 100.00%")
    assert [r["k"] for r in report["results"]] == [0, 1, 3]
    for r in report["results"]:
        assert r["status"] == "n/a" and r["note"] == cal["failed"] and r["nwa"] is None and r["coverage"] is None
    write_outputs(report, tmp_path)
    rows = list(csv.DictReader((tmp_path / "automation.csv").open()))
    assert [r["nwa"] for r in rows] == ["", "", ""] and rows[0]["note"] == cal["failed"]
    assert not (tmp_path / "risk_coverage.png").exists()
    assert results_table(report).splitlines()[2] == "| 0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"


def test_a_target_sweep_equals_separate_runs_at_each_target(tmp_path):
    """Each swept target: the threshold and every k's results of a run with that target alone; a
    target out of reach is a row of n/a with the reason, and the sweep is written as its own CSV."""
    report = run_toy(tmp_path, method="empirical", target_accuracy=0.95, sweep_targets=[0.9, 0.99, 1.0])
    assert [s["target_accuracy"] for s in report["sweep"]] == [0.9, 0.99, 1.0]
    for s in report["sweep"][:2]:
        alone = run_toy(tmp_path, method="empirical", target_accuracy=s["target_accuracy"])
        assert s["tau"] == alone["calibration"]["tau"] and s["results"] == alone["results"]
    taus = [s["tau"] for s in report["sweep"][:2]]
    assert taus[0] <= report["calibration"]["tau"] <= taus[1]  # a higher target, a stricter threshold
    write_outputs(report, tmp_path)
    rows = list(csv.DictReader((tmp_path / "automation_sweep.csv").open()))
    assert [(r["target_accuracy"], r["k"]) for r in rows] == [(t, k) for t in ("0.9", "0.99", "1.0") for k in ("0", "1", "3")]
    ltt = run_toy(tmp_path, method="ltt", target_accuracy=0.95, sweep_targets=[1.0])["sweep"][0]  # 100% with a guarantee: out of reach
    assert ltt["tau"] is None and ltt["failed"].startswith("ltt calibration: no threshold reaches selective accuracy 100.00%")
    assert [r["status"] for r in ltt["results"]] == ["n/a"] * 3


@pytest.mark.parametrize("sweep, msg", [([0.9, 1.5], "sweep_targets must be accuracies in (0, 1], got [1.5]"),
                                        ([0.95], "sweep_targets lists a target twice or repeats target_accuracy=0.95")])
def test_a_bad_sweep_is_refused(sweep, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        AutomateConfig(checkpoint="toy", target_accuracy=0.95, sweep_targets=sweep)


@pytest.mark.parametrize("rule, other", [("global", "classwise"), ("classwise", "global")])
def test_a_threshold_rule_sweep_equals_a_run_with_that_rule(tmp_path, rule, other):
    """Each swept rule: the thresholds and every k's results of a run with that rule alone, at the
    run's target; the run's own results unchanged; the rules written as their own CSV."""
    report = run_toy(tmp_path, method="empirical", target_accuracy=0.9, threshold=rule, sweep_thresholds=[other])
    (swept,) = report["threshold_sweep"]
    alone, own = run_toy(tmp_path, method="empirical", target_accuracy=0.9, threshold=other), run_toy(tmp_path, method="empirical", target_accuracy=0.9, threshold=rule)
    assert (swept["threshold"], swept["target_accuracy"]) == (other, 0.9)
    assert swept["tau"] == alone["calibration"]["tau"] and swept["results"] == alone["results"]
    assert report["results"] == own["results"] and "sweep" not in report
    assert isinstance(swept["tau"] if other == "classwise" else report["calibration"]["tau"], list)
    write_outputs(report, tmp_path)
    rows = list(csv.DictReader((tmp_path / "automation_thresholds.csv").open()))
    assert [(r["threshold"], r["k"]) for r in rows] == [(other, k) for k in ("0", "1", "3")]


def test_each_split_is_encoded_once_whatever_reads_it(tmp_path, monkeypatch):
    """Platt scaling and the threshold read the calibration split, the flow at every k, target and
    rule and the histograms the test split: the model encodes each batch of each split once."""
    data, model = toy_data(), toy_model()
    dm = SyntheticDataModule(lambda: data, 64, 128)
    seen: list[int] = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda x: seen.append(len(x)) or encode(x))
    cfg = AutomateConfig(checkpoint="toy", ks=[0, 1, "max"], method="empirical", target_accuracy=0.9, platt=True,
                         sweep_targets=[0.8], sweep_thresholds=["classwise"], output_dir=str(tmp_path))  # fmt: skip
    report = automate(model, dm, cfg)
    batches = [len(b["y"]) for split in ("calib", "test") for b in dm.loader(split)]
    assert seen == batches and sum(seen) == 800 and len(report["threshold_sweep"][0]["results"]) == 3


def test_classwise_thresholds_hold_each_predicted_class_to_its_own():
    """Per predicted class: the threshold of that class's calibration predictions alone; the flow
    accepts a prediction iff its score is above its class's threshold."""
    import numpy as np

    from cbm.selective.calibration import calibrate
    from cbm.selective.classwise import calibrate_classwise

    report = run_toy(".", method="empirical", target_accuracy=0.9, threshold="classwise")
    cal = report["calibration"]
    assert cal["threshold"] == "classwise" and len(cal["tau"]) == 2
    data = toy_data()
    dm = SyntheticDataModule(lambda: data, 64, 128)
    from cbm.selective.automation import score_split

    sc = score_split(toy_model(), dm.loader("calib"), "probability")
    for k in (0, 1):
        rows = sc.preds == k
        assert cal["tau"][k] == calibrate(sc.scores[rows], sc.correct[rows], 0.9, "empirical").tau
    test = score_split(toy_model(), dm.loader("test"), "probability")
    accepted = test.scores > np.asarray(cal["tau"])[test.preds]
    assert report["results"][0]["coverage"] == pytest.approx(accepted.mean())
    assert report["results"][0]["selective_acc"] == pytest.approx(test.correct[accepted].mean())
    # a class that reaches the target at no threshold is never accepted; none reaching it: unreachable
    s, c, p = np.array([0.9, 0.8, 0.7, 0.6]), np.array([True, True, False, False]), np.array([1, 1, 0, 0])
    one = calibrate_classwise(s, c, p, 2, 0.9, "empirical", 0.1)
    assert one["tau"][0] is None and one["tau"][1] is not None and one["per_class"][0]["failed"]
    assert one["coverage_cal"] == 0.5 and one["selective_acc_cal"] == 1.0
    with pytest.raises(Exception, match=r"class-wise\): no predicted class reaches selective accuracy 90.00%"):
        calibrate_classwise(s, np.zeros(4, bool), p, 2, 0.9, "empirical", 0.1)
    assert calibration_line(report).startswith("tau per predicted class = [")
