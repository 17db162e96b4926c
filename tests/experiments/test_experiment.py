"""``cbm-experiment``: presets, the plan of cells, resumable runs and the report's tables."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cbm.core.cli import compose_plain, precheck
from cbm.core.common import CONF_DIR
from cbm.core.validation import ConfigError
from cbm.experiments import experiment
from cbm.experiments.plan import plan
from cbm.experiments.stats import mean_se
from cbm.experiments.tables import automation_rows, intervention_rows, paired_rows, swept_keys, training_rows

PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


def typed(*overrides: str):
    from hydra.core.global_hydra import GlobalHydra

    cfg = compose_plain("experiment", list(overrides))
    GlobalHydra.instance().clear()
    return experiment.validate_schema({k: v for k, v in cfg.items() if k != "hydra"})


def test_every_preset_has_a_smoke_variant():
    full = [p for p in PRESETS if not p.endswith("_smoke")]
    assert set(full) >= {"robot_decision_support", "sudoku_automation", "alignment", "concept_noise", "resolution", "concept_sets"}
    assert sorted(f"{p}_smoke" for p in full) == sorted(p for p in PRESETS if p.endswith("_smoke"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_every_cell_validates(preset, tmp_path, monkeypatch):
    """The command-line front composes each cell's cbm-train / cbm-intervene / cbm-automate config
    and validates it by that command's schema, so a preset cannot fail halfway through a table
    (in a fresh output_dir: cells a checkout ran earlier with other settings would be refused)."""
    if preset.startswith("real_"):
        env = real_data_env(preset, tmp_path)
        for name in ("CBM_CUB_ROOT", "CBM_DERM7PT_ROOT", "CBM_CELEBA_ROOT"):
            monkeypatch.setenv(name, env[name])
    precheck("experiment", [f"+experiment={preset}", f"output_dir={tmp_path}"], experiment.validate)


def test_no_preset_and_bad_entries_are_one_line():
    with pytest.raises(ConfigError, match=r"no experiment chosen: cbm-experiment \+experiment=<name>"):
        precheck("experiment", [], experiment.validate)
    with pytest.raises(ConfigError, match=r"select.models: unknown \['cnn'\] \(the preset has \['blackbox', 'cbm', 'cbm_aligned'\]\)"):
        precheck("experiment", ["+experiment=alignment", "select.models=[cnn]"], experiment.validate)
    with pytest.raises(ConfigError, match=r"paper/cbm \(train\): config: unknown model 'nope'"):
        precheck("experiment", ["+experiment=alignment", "models.cbm=['model=nope']"], experiment.validate)
    with pytest.raises(ConfigError, match=r"experiment: intervene.ks entries must be integers >= 0 or 'max', got -1"):
        precheck("experiment", ["+experiment=alignment", "intervene.ks=[0,-1]"], experiment.validate)
    with pytest.raises(ConfigError, match=r"paper/cbm \(intervene\): config: unknown policy 'psychic' \(choose from: coop, fixed_order, global_order, gradient, intcem, random"):
        precheck("experiment", ["+experiment=alignment", "intervene.policy=[psychic]"], experiment.validate)


def test_cells_share_the_cores_within_the_threads_the_experiment_was_given(monkeypatch):
    from cbm.experiments.experiment import cell_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [cell_threads(j, {}) for j in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert [cell_threads(j, {"OMP_NUM_THREADS": "2"}) for j in (1, 2, 8)] == [2, 2, 1]
    assert cell_threads(1, {"OMP_NUM_THREADS": "0"}) == cell_threads(1, {"OMP_NUM_THREADS": "x"}) == 8


def test_plan_pairs_the_black_box_and_names_cells_by_directory(tmp_path):
    c = typed("+experiment=robot_decision_support", f"output_dir={tmp_path}", "select.settings=[llm]", "seeds=[0,1]")
    cells = plan(c)
    train = [x for x in cells if x.stage == "train"]
    inter = [x for x in cells if x.stage == "intervene"]
    assert len(train) == 5 * 2 and len(inter) == 4 * 2 and not [x for x in cells if x.stage == "automate"]
    assert cells.index(inter[0]) > cells.index(train[-1])  # every training before the analyses
    cem1 = next(x for x in inter if x.model == "cem" and x.seed == 1)
    assert cem1.dir == tmp_path / "llm" / "cem" / "seed1" / "intervene"
    assert f"blackbox={tmp_path / 'llm' / 'blackbox' / 'seed1' / 'train' / 'metrics.json'}" in cem1.overrides
    assert [n.key for n in cem1.needs] == ["llm/cem/seed1/train", "llm/blackbox/seed1/train"]
    # no LLM client configured: the llm intervener is left out with the reason (n/a rows)
    assert "intervener=[oracle,expert,self]" in cem1.overrides and "no LLM client configured" in cem1.skipped["llm"]
    c = typed("+experiment=sudoku_automation", f"output_dir={tmp_path}")
    auto = {x.model: x for x in plan(c) if x.stage == "automate" and x.setting == "18px"}
    assert "ks=[0]" in auto["blackbox"].overrides and "ks=[0,3,max]" in auto["cbm"].overrides


def test_cell_state_done_changed_resume(tmp_path):
    c = typed("+experiment=alignment_smoke", f"output_dir={tmp_path}", "seeds=[0]")
    cell = plan(c)[1]
    assert cell.state() == "fresh"
    cell.dir.mkdir(parents=True)
    (cell.dir / "cell.json").write_text(json.dumps({"fingerprint": cell.fingerprint()}))
    (cell.dir / "checkpoints").mkdir()
    (cell.dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert cell.state() == "resume" and experiment.command(cell)[-1] == f"resume={cell.dir}"
    (cell.dir / "metrics.json").write_text("{}")
    assert cell.state() == "done"
    other = typed("+experiment=alignment_smoke", f"output_dir={tmp_path}", "seeds=[0]", "train=['trainer=cpu_smoke']")
    assert plan(other)[1].state() == "changed"


def test_mean_se_and_swept_keys():
    # stdev of (99, 97) is 1.414, the standard error over two seeds 1.414 / sqrt(2) = 1.00
    assert mean_se([0.99, 0.97]) == "98.00 ± 1.00" and mean_se([0.5]) == "50.00" and mean_se([None]) == "n/a"
    assert mean_se([-0.1], signed=True) == "-10.00"
    runs = [{"data": {"concept_noise": n, "n_test": 10}, "model": {"name": "cbm", "lr": 1}, "seed": s, "output_dir": f"r{s}{n}"}
            for n in (0.0, 0.2) for s in (0, 1)]  # fmt: skip
    runs.append({"data": {"concept_noise": 0.0, "n_test": 10}, "model": {"name": "blackbox", "lr": 2}, "seed": 0, "output_dir": "x"})
    assert swept_keys(runs) == ["data.concept_noise"]  # seeds, paths and two architectures' defaults are not settings


def test_knobs_added_later_at_their_neutral_value_are_not_a_swept_setting():
    """A run written before a data knob existed and one written after, with the knob at its neutral
    value, are the same setting (both read through the generator's record); a real value shows."""
    from synthetic.robot import RobotConfig

    new = RobotConfig().to_dict()
    old = {k: v for k, v in new.items() if k not in ("label_rule", "train_constraints", "concept_missing", "label_noise",
                                                     "concept_noise_asym")}  # fmt: skip
    old["label"] = {k: v for k, v in old["label"].items() if k != "stochastic"}
    runs = [{"data": d, "model": {"name": "cbm"}, "seed": s} for s, d in enumerate([old, new])]
    assert swept_keys(runs) == []
    shifted = {**new, "label_noise": {"p": 0.1, "splits": ["train"]}}
    assert swept_keys([*runs, {"data": shifted, "model": {"name": "cbm"}, "seed": 2}]) == ["data.label_noise.p", "data.label_noise.splits"]


def metrics(model, acc, noise, seed):
    return {"model": model, "dataset": "robot", "training": "independent", "seed": seed, "test/task_acc": acc,
            "test/concept_acc": 0.9, "oracle_random": {"0": acc, "1": acc + 0.01, "7": 1.0},
            "_config": {"data": {"concept_noise": noise}, "model": {"name": model}, "seed": seed}}  # fmt: skip


def test_training_rows_average_seeds_with_swept_columns():
    runs = [metrics("cbm", a, n, s) for n, accs in ((0.0, (0.9, 0.8)), (0.2, (0.7, 0.7))) for s, a in enumerate(accs)]
    rows, cols = training_rows(runs)
    assert cols[:4] == ["model", "data.concept_noise", "seeds", "task acc"] and cols[-1] == "oracle k=max"
    assert [(r["data.concept_noise"], r["task acc"], r["oracle k=max"]) for r in rows] == [
        ("0.0", "85.00 ± 5.00", "100.00 ± 0.00"), ("0.2", "70.00 ± 0.00", "100.00 ± 0.00")]


def cell(setting, model, seed, rows, bb=None, skipped=None):
    return {"setting": setting, "model": model, "seed": seed, "skipped": skipped or {},
            "_results": {"rows": rows, "blackbox_accuracy": bb, "meta": {"concepts": list("abc"), "config": {"policy": {"random": {}}}}}}  # fmt: skip


def test_intervention_rows_gain_paper_and_na():
    def r(k, acc, bb):
        return {"intervener": "oracle", "policy": "random", "k": k, "accuracy": acc, "gain": acc - bb}

    why = "no LLM client configured"
    cells = [cell("true", "cbm", s, [r(0, 0.8 + s / 10, 0.85), r(3, 1.0, 0.85)], bb=0.85, skipped={"llm": why}) for s in (0, 1)]
    rows, cols = intervention_rows(cells, {"interventions": {"true": {"cbm": {"k=0": 85.1}, "blackbox": {"k=0": 87.5}}}})
    assert cols == ["setting", "model", "intervener", "policy", "seeds", "acc k=0", "acc k=max", "Gain k=0", "Gain k=max", "paper k=0", "note"]
    bb, llm, cbm = rows  # interveners in name order
    assert (bb["model"], bb["seeds"], bb["acc k=0"], bb["paper k=0"]) == ("blackbox", 2, "85.00 ± 0.00", "87.5")
    assert (cbm["seeds"], cbm["acc k=0"], cbm["Gain k=0"], cbm["Gain k=max"], cbm["paper k=0"]) == (2, "85.00 ± 5.00", "+0.00 ± 5.00", "+15.00 ± 0.00", "85.1")
    assert (llm["intervener"], llm["acc k=max"], llm["note"]) == ("llm", "n/a", why)


def test_paired_rows_use_per_seed_differences_with_t_intervals():
    def r(policy, k, acc):
        return {"intervener": "oracle", "policy": policy, "k": k, "accuracy": acc, "gain": None}

    # Three seeds: the black box moves with the seed (0.80, 0.90, 0.85) and the model moves with it, 0.05
    # above it at k=0, so the unpaired spread is large but every per-seed Gain is exactly +5 points.
    bbs = {0: 0.80, 1: 0.90, 2: 0.85}
    cells = [cell("true", "cbm", s, [r("random", 0, b + 0.05), r("random", 1, b + 0.06 + s / 100), r("random", 3, 1.0),
                                     r("unc", 0, b + 0.05), r("unc", 1, b + 0.10), r("unc", 3, 1.0)], bb=b)
             for s, b in bbs.items()]  # fmt: skip
    cells += [cell("true", "aligned", s, [r("random", 0, b), r("random", 3, b)], bb=b) for s, b in bbs.items()]
    rows, cols = paired_rows(cells, [["aligned", "cbm"]], [["unc", "random"]])
    assert cols[-3:] == ["difference (points) [95% CI]", "seeds", "resolved"]
    got = {(r["comparison"], r["model"], r["policy"], r["k"]): (r["difference (points) [95% CI]"], r["seeds"], r["resolved"]) for r in rows}
    assert got["Gain (model - black box)", "cbm", "random", "0"] == ("+5.00 [+5.00, +5.00]", 3, "yes")
    # policy unc - random at k=1: per seed +4, +3, +2 points: mean 3, SE 1/sqrt(3), t(0.975, 2) = 4.303
    half = 4.302653 * 1.0 / 3**0.5
    assert got["policy unc - random", "cbm", "", "1"] == (f"+3.00 [{3 - half:+.2f}, {3 + half:+.2f}]", 3, "yes")
    assert got["model aligned - cbm", "", "random", "0"] == ("-5.00 [-5.00, -5.00]", 3, "yes")
    assert got["model aligned - cbm", "", "random", "max"][0].startswith("-")
    one = paired_rows(cells[:1] + cells[3:4], [["aligned", "cbm"]], [])[0]
    assert {r["difference (points) [95% CI]"] for r in one if r["comparison"].startswith("model")} == {"-5.00", "-20.00"}
    assert {r["resolved"] for r in one} == {""}  # one seed: no interval


def test_seeds_as_a_count_or_a_list(tmp_path):
    assert typed("+experiment=alignment_smoke", f"output_dir={tmp_path}", "seeds=3").seeds == [0, 1, 2]
    assert typed("+experiment=alignment_smoke", f"output_dir={tmp_path}", "seeds=[4,2]").seeds == [4, 2]
    assert typed("+experiment=alignment", f"output_dir={tmp_path}").compare.models == [["cbm_aligned", "cbm"]]
    for bad in ("seeds=0", "seeds=[1,1]", "seeds=abc", "compare.models=[[cbm,nope]]", "compare.policies=[[random]]"):
        with pytest.raises(ConfigError):
            typed("+experiment=alignment_smoke", f"output_dir={tmp_path}", bad)


def test_data_seed_follows_the_seed_when_asked(tmp_path):
    """``data_seed=seed``: every training cell's data.seed is its seed (paper_v04_robot: 1014-1023, new
    labels and split per seed, one black box per seed still serving both concept sets); ``fixed``
    (the default) leaves data.seed to the settings."""
    c = typed("+experiment=paper_v04_robot", f"output_dir={tmp_path}")
    assert c.seeds == list(range(1014, 1024)) and c.data_seed == "seed"
    trains = [x for x in plan(c) if x.stage == "train"]
    assert len(trains) == 10 * 3 and all(f"data.seed={x.seed}" in x.overrides for x in trains)
    fixed = typed("+experiment=paper_v04_robot_ours", f"output_dir={tmp_path}")
    assert fixed.data_seed == "fixed" and not any("data.seed=" in o for x in plan(fixed) for o in x.overrides)
    with pytest.raises(ConfigError, match="data_seed must be one of"):
        typed("+experiment=paper_v04_robot_smoke", f"output_dir={tmp_path}", "data_seed=row")


def test_one_black_box_per_seed_serves_every_concept_set(tmp_path):
    cells = plan(typed("+experiment=robot_decision_support", f"output_dir={tmp_path}", "seeds=2"))
    boxes = [c.key for c in cells if c.stage == "train" and c.model == "blackbox"]
    assert boxes == ["true/blackbox/seed0/train", "true/blackbox/seed1/train"]  # not one per concept set
    inter = {c.key: c for c in cells if c.stage == "intervene"}
    assert len(inter) == 3 * 4 * 2
    fine = inter["fine/cem/seed1/intervene"]
    assert f"blackbox={tmp_path}/true/blackbox/seed1/train/metrics.json" in fine.overrides
    assert [n.key for n in fine.needs] == ["fine/cem/seed1/train", "true/blackbox/seed1/train"]
    noisy = plan(typed("+experiment=concept_noise", f"output_dir={tmp_path}"))
    assert [c.key for c in noisy if c.model == "blackbox"] == ["noise0.0/blackbox/seed0/train"]
    other = plan(typed("+experiment=resolution", f"output_dir={tmp_path}"))  # image sizes differ: one box each
    assert len([c for c in other if c.model == "blackbox"]) == len({c.setting for c in other})


@pytest.mark.slow
def test_a_black_box_is_the_same_model_whatever_the_concept_set(tmp_path):
    """Why one black box serves every concept set (plan.BLACKBOX_IGNORES): bit-identical weights."""
    import torch

    from tests.forked import run_forked

    small = ["model=blackbox", "data=robot_paper", "trainer=cpu_smoke", "logger=csv_only", "trainer.max_epochs=2",
             "data.modality=tabular", "data.n_train=400", "data.n_calib=100", "data.n_test=200", f"cache_dir={tmp_path / 'c'}"]  # fmt: skip
    state, acc = {}, {}
    for cs, noise in (("'true'", 0.0), ("llm", 0.3)):
        d = tmp_path / cs.strip("'")
        res = run_forked("cbm-train", [*small, f"data.concept_set={cs}", f"data.concept_noise={noise}", f"hydra.run.dir={d}"],
                         tmp_path, dict(os.environ))  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        state[cs] = torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
        acc[cs] = json.loads((d / "metrics.json").read_text())["test/task_acc"]
    a, b = state.values()
    assert a.keys() == b.keys() and acc["'true'"] == acc["llm"]
    assert [k for k in a if not torch.equal(a[k], b[k])] == ["concept_keep"]  # a buffer of length m, unused


def test_automation_rows_keep_failed_calibrations_as_na():
    ok = {"k": 0, "coverage_before": 0.5, "coverage": 0.5, "selective_acc": 0.96, "nwa": 0.5}
    na = {"k": 0, "coverage_before": None, "coverage": None, "selective_acc": None, "nwa": None, "status": "n/a", "note": "ltt calibration: no threshold"}
    cells = [{"setting": "18px", "model": "probcbm", "seed": 0, "_results": {"n_concepts": 27, "results": [ok, {**ok, "k": 27, "nwa": -0.1}]}},
             {"setting": "18px", "model": "cbm", "seed": 0, "_results": {"n_concepts": 27, "results": [na]}}]  # fmt: skip
    rows, cols = automation_rows(cells, {"automation": {"18px": {"cbm": {"NWA k=0": 44.0}}}})
    assert [(r["model"], r["k"], r["NWA %"]) for r in rows] == [("cbm", "0", "n/a"), ("probcbm", "0", "+50.00"), ("probcbm", "max", "-10.00")]
    assert rows[0]["note"] == "ltt calibration: no threshold" and rows[0]["paper NWA %"] == "+44.0" and cols[-2:] == ["paper NWA %", "note"]
    rows, cols = automation_rows(cells, {"automation": {"18px": {"probcbm": {"coverage k=0": 64.0, "coverage k=max": 95.0, "NWA k=max": 59.0}}}})
    assert [(r["k"], r.get("paper coverage %"), r.get("paper NWA %")) for r in rows[1:]] == [("0", "64.0", None), ("max", "95.0", "+59.0")]
    assert cols[-3:] == ["paper coverage %", "paper NWA %", "note"]


def real_data_env(preset: str, where: Path) -> dict[str, str]:
    """The environment a preset runs in: a real-data preset (``real_*``) reads CUB, Derm7pt and CelebA
    fixtures in their published layouts written under ``where`` (``CBM_CUB_ROOT`` ...)."""
    env = dict(os.environ)
    if preset.startswith("real_"):
        from synthetic.real.fixtures import write_celeba, write_cub, write_derm7pt

        root = where / "cub_fixture"
        if not (root / "CUB_200_2011" / "images.txt").is_file():
            write_cub(root, per_class=3, n_classes=25)  # CUB-25 reads its first 25 classes
        derm = where / "derm7pt_fixture"
        if not (derm / "meta" / "meta.csv").is_file():
            write_derm7pt(derm)
        celeba = where / "celeba_fixture"
        if not (celeba / "list_attr_celeba.txt").is_file():
            write_celeba(celeba, n_images=120)
        env["CBM_CUB_ROOT"], env["CBM_DERM7PT_ROOT"], env["CBM_CELEBA_ROOT"] = str(root), str(derm), str(celeba)
    return env


def run_experiment(tmp_path, shared_cache, *args, out: Path | None = None):
    preset = next((a.split("=", 1)[1] for a in args if a.startswith("+experiment=")), "")
    return subprocess.run([sys.executable, "-m", "cbm.experiments.experiment", *args, f"output_dir={out or tmp_path / 'exp'}",
                           f"cache_dir={shared_cache}"], capture_output=True, text=True, cwd=tmp_path, timeout=1800,
                          env=real_data_env(preset, tmp_path))  # fmt: skip


#: ``make test`` points this and the notebooks (``CBM_NOTEBOOK_OUT``) at one folder: the notebooks
#: then show these smoke experiments instead of running them a second time.
SMOKE_OUT = "CBM_SMOKE_EXPERIMENTS"


def true_concept_ceiling(rule: str) -> float:
    """Bayes accuracy of the robot label from the true concepts (every attribute combination once)."""
    import numpy as np

    from synthetic.robot import RobotConfig, load_concept_set
    from synthetic.robot.config import body_grid
    from synthetic.robot.generator import glorp_probability

    grid = body_grid()
    p = glorp_probability(grid, RobotConfig(label_rule=rule))
    _, group = np.unique(load_concept_set("true").evaluate(grid), axis=0, return_inverse=True)
    group = group.ravel()
    pc = np.bincount(group, weights=p) / np.bincount(group)
    return float(np.maximum(pc, 1 - pc)[group].mean())


def test_true_concept_ceilings_of_the_two_rules():
    assert true_concept_ceiling("sparse") > 0.9999 and abs(true_concept_ceiling("balanced") - 0.9301) < 1e-4


def check_archive_round_trip(root: Path, archive: Path, report: dict, cache: Path) -> None:
    """``cbm-report collect`` of a finished experiment: the paired tests read back from the archive equal the
    report's, and every trained model's archived test predictions score its recorded test accuracy."""
    import numpy as np

    from cbm.experiments.archive import collect, paired_from_archive

    proc = subprocess.run([sys.executable, "-m", "cbm.experiments.report", "collect", str(root), str(archive)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "CBM_CACHE_DIR": str(cache)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    index = collect(root, archive, cache_dir=cache)  # collected again in place: the same archive
    assert paired_from_archive(archive) == report["paired differences"] and not index["skipped"]
    for e in (e for e in index["cells"] if e["stage"] == "train"):
        with np.load(archive / e["dir"] / "predictions.npz") as f:
            metrics = json.loads((archive / e["dir"] / "metrics.json").read_text())
            assert abs(float((f["pred"] == f["y"]).mean()) - metrics["test/task_acc"]) < 1e-6, e
            if e["model"] != "blackbox":  # concept models: the detector's probabilities beside the true concepts
                assert f["concept_probs"].shape == f["concept_true"].shape and f["concept_probs"].shape[0] == len(f["y"]) > 0


#: Smoke presets whose test also reruns the experiment and checks that every cell is skipped.
RERUN_CHECKED = ("concept_noise_smoke", "sudoku_automation_smoke")


@pytest.mark.slow
@pytest.mark.parametrize("preset", [p for p in PRESETS if p.endswith("_smoke")])
def test_smoke_preset_makes_its_table_and_a_rerun_skips_every_cell(tmp_path, shared_cache, preset):
    root = Path(os.environ[SMOKE_OUT]) / preset if os.environ.get(SMOKE_OUT) else tmp_path / "exp"
    shutil.rmtree(root, ignore_errors=True)  # a fresh run, whatever an earlier one left
    proc = run_experiment(tmp_path, shared_cache, f"+experiment={preset}", out=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((root / "report.json").read_text())
    manifest = json.loads((root / "experiment.json").read_text())
    assert manifest["cells"] and all(c["status"] == "done" for c in manifest["cells"]) and not report["unfinished"]
    assert (root / "report.md").read_text().startswith(f"# {preset}")
    # sanity: an oracle fixing every true concept reaches the label rule's Bayes rate from those
    # concepts: ~99.99% under the sparse rule; 93.01% under 0.4's balanced rule (elbows drive its
    # label but are no concept), within 4.5 binomial SE of the smoke test split
    ceiling = true_concept_ceiling("balanced" if preset.startswith("paper_v04") and "sparse" not in preset else "sparse")
    for row in report["training"]:
        clean = row.get("data.concept_set", "true") == "true" and float(row.get("data.concept_noise", 0)) == 0
        clean = clean and row.get("model.zero_concepts", "[]") == "[]" and not row.get("model.monotonicity.knees")
        if row["model"] == "cbm (independent)" and clean and "oracle k=max" in row and not preset.startswith("real_"):  # robots only
            floor = min(0.99, ceiling - 4.5 * (ceiling * (1 - ceiling) / 500) ** 0.5)
            assert float(row["oracle k=max"].split()[0]) >= 100 * floor, (row, ceiling)
    if report["interventions"]:
        with_bb = bool(manifest.get("config", {}).get("blackbox"))  # Gain columns exactly when the preset has a black box
        assert any(c.startswith("Gain k=") for c in report["interventions"][1]) == with_bb and (root / "interventions.csv").is_file()
        assert list((root / "figures").glob("accuracy_vs_k_*.png"))
    if report["automation"]:
        rows = report["automation"]
        assert all({"NWA %", "coverage %"} <= set(r) for r in rows)
        # a number, or n/a with the calibration's reason (a smoke-size model may reach no threshold at the
        # target on 20 calibration boards: the 0.4 Sudoku smoke's does on some handwritings)
        assert all(r["coverage %"] != "n/a" or r.get("note", "").startswith("plugin calibration: no threshold reaches") for r in rows), rows
        if any(r["coverage %"] != "n/a" for r in rows):  # a figure whenever there is a coverage to draw
            assert list((root / "figures").glob("automation_*.png"))
    if report["interventions"]:  # the diagnostics: the per-concept figure of every setting at least
        assert "## Diagnostics" in (root / "report.md").read_text() and list((root / "figures").glob("diag_per_concept_*.png"))
        assert "could not be drawn" not in (root / "report.md").read_text()
    if preset == "paper_v04_alignment_smoke":  # the constrained knees weight sits on its bound (the rule's is -3)
        from cbm.training.checkpoint import read_checkpoint

        for model, ok in (("cbm", lambda w: w < -1.0), ("cbm_aligned", lambda w: w == 0.0)):
            ck = read_checkpoint(root / "true" / model / "seed1014" / "train" / "checkpoints" / "best.ckpt")  # 0.4.1's first seed
            w = ck["state_dict"]["head.weight"]
            knees = ck["hyper_parameters"]["data"]["concept_names"].index("knees")
            assert ok(float(w[1, knees] - w[0, knees])), (model, w)
        assert "| 89.8 | 90.7 |" in (root / "report.md").read_text()  # the paper's means beside ours
    if preset == "paper_v04_sudoku_smoke":  # priced all equal, the cost table's NWA is the automation table's
        nwa = {(r["model"], r["k"]): r["NWA %"] for r in report["automation"]}
        for r in (r for r in report["cost of a check"] if r["price"] == "equal"):
            assert r["NWA %"] == nwa[(r["model"], r["k"])], r
        # 0.4.1's class-wise thresholds beside the global one, every model and k, the global rows the automation table's
        rules = {(r["model"], r["k"], r["threshold"]): r for r in report["threshold rules"]}
        assert set(rules) == {(m, k, t) for (m, k) in nwa for t in ("global", "classwise")}
        assert all(rules[(m, k, "global")]["NWA %"] == v for (m, k), v in nwa.items())
        # 0.4.1's tau sweep: every target at each of its budgets k = 0, 1, 3, max, the 0.95 rows the automation table's
        taus = {(r["model"], r["target %"], r["k"]): r for r in report["accuracy target sweep"]}
        assert {(t, k) for m, t, k in taus if m == "cbm"} == {(t, k) for t in ("90", "95", "99") for k in ("0", "1", "3", "max")}
        assert all(taus[(m, "95", k)]["NWA %"] == v for (m, k), v in nwa.items())
        # the confidence figure's second row: the CBM's test boards with every cell's digit confirmed
        (conf,) = (root / "figures").glob("diag_confidence_*.csv")
        rows = list(csv.DictReader(conf.open()))
        assert {r["model"] for r in rows if r["split"] == "test_confirmed"} == {"cbm"} < {r["model"] for r in rows}
        assert [(r["model"], r["seeds"]) for r in report["confirmed confidence"]] == [("cbm", 1)]
    if preset == "paper_v04_own_answers_smoke":  # 0.4.1's CBM reads 1[p >= 0.5]: its own answers change nothing
        rows = {r["model"]: r for r in report["own answers"]}
        assert set(rows) == {"cbm", "cem", "probcbm", "ecbm"} and rows["cbm"]["own answers (points)"] == "+0.00"
        assert rows["cbm"]["true values (points)"].startswith("+")
    if preset == "real_cbm_smoke":  # the fixture's attribute groups revealed whole: k counts groups
        for cell in (c for c in manifest["cells"] if c["stage"] == "intervene"):
            meta = json.loads((root / cell["dir"] / "results.json").read_text())["meta"]
            groups = len({name.split("::")[0] for name in meta["concepts"]})
            assert meta["units"] == "groups" and meta["k_max"] == groups < len(meta["concepts"]) and meta["ks"] == [0, 1, 3, groups], meta
        assert {r["model"] for r in report["interventions"]} == {"blackbox", "cbm", "cem", "probcbm"}
    if preset == "real_celeba_smoke":  # CEM's composite task on the fixture's three most balanced (visible) attributes
        from synthetic.real.fixtures import CELEBA_FROM_ROBOT

        for cell in (c for c in manifest["cells"] if c["stage"] == "intervene"):
            meta = json.loads((root / cell["dir"] / "results.json").read_text())["meta"]
            assert meta["k_max"] == len(meta["concepts"]) == 3 and set(meta["concepts"]) <= set(CELEBA_FROM_ROBOT), meta
        rows = {r["model"]: r for r in report["interventions"]}
        assert set(rows) == {"blackbox", "cbm", "hybrid_cbm", "cem"} and "| 30.6 |" in (root / "report.md").read_text()
    if preset == "real_data_v04_smoke":  # both datasets, each on its cached embeddings, no data root among the settings
        assert {r["setting"] for r in report["interventions"]} == {"derm7pt", "cub25"}
        assert not any("data.root" in r for r in report["training"])
        for cell in (c for c in manifest["cells"] if c["stage"] == "train"):
            assert json.loads((root / cell["dir"] / "metrics.json").read_text())["dataset"] in ("derm7pt", "cub")
    if preset == "paper_v04_answer_exchange_smoke":  # both interveners, each with the other's knees, in the paper's order
        rows = report["answer exchange"]
        assert [r["answers"] for r in rows] == ["oracle on every concept", "expert on every concept",
                                                "expert, with oracle's answers on knees", "oracle, with expert's answers on knees"]  # fmt: skip
        assert all(r["moves k=max (points) [95% CI]"] for r in rows[2:]) and (root / "answer_exchange.csv").is_file()
    if preset in ("robot_decision_support_smoke", "alignment_smoke"):  # the diagnostics' data against the stored results
        from test_diagnostics import check_alignment_diagnostics, check_decision_support_diagnostics

        (check_decision_support_diagnostics if preset == "robot_decision_support_smoke" else check_alignment_diagnostics)(root)
    if preset == "alignment_smoke":  # two seeds: constrained - unconstrained paired per seed, with an interval
        pairs = [r for r in report["paired differences"] if r["comparison"] == "model cbm_aligned - cbm"]
        assert pairs and all(r["seeds"] == 2 and "[" in r["difference (points) [95% CI]"] for r in pairs)
        assert (root / "paired_differences.csv").is_file() and " ± " in report["interventions"][1]["acc k=0"]
        check_archive_round_trip(root, tmp_path / "archive", report, shared_cache)
    if preset in RERUN_CHECKED:  # the skip logic is generic (cell fingerprints): one robot and one Sudoku preset check it
        again = run_experiment(tmp_path, shared_cache, f"+experiment={preset}", out=root)
        assert again.returncode == 0 and f"({len(manifest['cells'])} finished)" not in again.stdout
        assert f"0 to run, {len(manifest['cells'])} finished" in again.stdout
