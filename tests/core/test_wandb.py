"""What W&B users get, read back from the offline ``.wandb`` files with wandb's own protobufs
(:mod:`cbm.tracking.offline`): a sweep sliceable by seed and swept setting in one group with unique
names, best validation and the oracle table in the summary, numeric long-format tables, artifacts,
an experiment's cells and report in one group (the report rerun updating one run), a resumed run
continuing its id with contiguous epochs, a failed run marked failed, and a fine-tuning run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forked import run_forked

from cbm.core import forkserver
from cbm.tracking.offline import OfflineRun, read_run, runs_under
from cbm.tracking.wandb_run import distinct_name

TAB = ["data.modality=tabular", "data.n_train=300", "data.n_calib=100", "data.n_test=200", "trainer.enable_progress_bar=false",
       "batch_size=50", "trainer.log_every_n_steps=2"]  # fmt: skip
STEPS_PER_EPOCH = 5  # 240 training robots / batch 50

#: Fault hooks for the child (the product has no test hooks): die (SIGKILL), be pre-empted (SIGTERM) or fail
#: (ValueError) at an optimiser step.
SITECUSTOMIZE = """
import os, signal
import torch
_count = [0]
_orig_step = torch.optim.Adam.step
def step(self, *a, **k):
    _count[0] += 1
    if os.environ.get("CBM_KILL_AT_STEP") and _count[0] == int(os.environ["CBM_KILL_AT_STEP"]):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("CBM_TERM_AT_STEP") and _count[0] == int(os.environ["CBM_TERM_AT_STEP"]):
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's pre-emption
    if os.environ.get("CBM_FAIL_AT_STEP") and _count[0] == int(os.environ["CBM_FAIL_AT_STEP"]):
        raise ValueError("injected failure at a training step")
    return _orig_step(self, *a, **k)
torch.optim.Adam.step = step
"""


def cli(prog: str, tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    hooks = tmp / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    full = {**os.environ, "PYTHONPATH": str(hooks), "WANDB_MODE": "offline", **(env or {})}
    full.pop("WANDB_DISABLED", None)
    if forkserver.available():
        return run_forked(prog, list(args), tmp, full)
    exe = Path(sys.executable).parent / prog
    return subprocess.run([str(exe), *args], cwd=tmp, capture_output=True, text=True, timeout=600, env=full)


def table_rows(run_dir: Path, key: str) -> tuple[list[str], list[list]]:
    """The columns and rows of the ``key`` table a run logged (its file under ``files/media/table``)."""
    files = sorted((run_dir / "files" / "media" / "table").glob(f"{key}_*.table.json"))
    assert files, f"no {key} table in {run_dir}"
    data = json.loads(files[-1].read_text())
    return data["columns"], data["data"]


def offline_dir(root: Path, run: OfflineRun) -> Path:
    return next(d for d in root.rglob(f"offline-run-*-{run.id}") if read_run(d).name == run.name)


def val_epochs(run: OfflineRun) -> list[int]:
    return [int(h["epoch"]) for h in run.history if "val/task_acc" in h]


def test_a_sweep_is_one_group_sliceable_by_seed_and_swept_setting(tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("cbm-train", tmp_path, "--multirun", "seed=0,1", "data.concept_noise=0.1", *TAB, "trainer.max_epochs=2",
              "logger=default", "logger.wandb.log_model=true", f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    runs = runs_under(sweep)
    assert len(runs) == 2
    assert sorted(r.config["seed"] for r in runs) == [0, 1]
    assert {r.config["data"]["concept_noise"] for r in runs} == {0.1}  # the whole resolved config, nested
    assert {r.config["trainer"]["max_epochs"] for r in runs} == {2} and all(r.config["batch_size"] == 50 for r in runs)
    for r in runs:
        assert f"seed={r.config['seed']}" in r.config["run"]["swept"] and r.config["run"]["command"] == "cbm-train"
        assert r.config["run"]["job_num"] in (0, 1) and r.config["run"]["version"]
    assert len({r.group for r in runs}) == 1 and runs[0].group == str(sweep)
    assert len({r.name for r in runs}) == 2 and all("seed=" in r.name for r in runs)
    assert {r.job_type for r in runs} == {"train"} and {r.exit_code for r in runs} == {0}
    for r in runs:
        assert set(r.summary["val/task_acc"]) == {"max"} and set(r.summary["val/task_loss"]) == {"min"}  # best, not last
        best = max(h["val/task_acc"] for h in r.history if "val/task_acc" in h)
        assert r.summary["val/task_acc"]["max"] == pytest.approx(best)
        assert 0.5 < r.summary["oracle/k=7"] <= 1.0 and "test/task_acc" in r.summary
        assert [r.summary[f"oracle/k={k}"] for k in (0, 7)] == [r.summary["test/task_acc"], r.summary["oracle/k=7"]]
        assert ("model", f"model-{r.id}") in r.artifacts
        steps = [h for h in r.history if "train/loss_step" in h]  # per-step loss and learning rate
        assert len(steps) == STEPS_PER_EPOCH and all("lr/opt0_group0" in h for h in steps)


def test_a_failed_run_is_recorded_with_its_exit_code(tmp_path):
    run_dir = tmp_path / "run"
    res = cli("cbm-train", tmp_path, *TAB, "trainer.max_epochs=2", "logger=default", f"hydra.run.dir={run_dir}",
              f"cache_dir={tmp_path / 'cache'}", env={"CBM_FAIL_AT_STEP": "3"})  # fmt: skip
    assert res.returncode == 2 and "injected failure" in res.stderr.strip().splitlines()[-1]
    (run,) = runs_under(run_dir)
    assert run.exit_code == 2
    assert run.name == distinct_name("robot-cbm-s0", [*TAB, "trainer.max_epochs=2"]) != "robot-cbm-s0"  # its settings' hash


def test_a_single_runs_name_is_unique_per_setting_and_the_same_for_the_same_settings():
    """Runs that differ in a setting other than data, model and seed (two learning rates) get
    different W&B names, as a sweep's runs do; the same overrides give the same name, in any order,
    with or without '+', whatever says where the run writes or logs and whatever the name shows."""
    base, shown = "robot-cbm-s0", {"data": "robot", "model": "cbm", "seed": "0"}
    lr2, lr3 = distinct_name(base, ["model.optim.lr=0.01"], shown), distinct_name(base, ["model.optim.lr=0.001"], shown)
    assert (lr2, lr3) == ("robot-cbm-s0-e2d995", "robot-cbm-s0-014c54")
    same = ["data=robot", "seed=0", "+model.optim.lr=0.01", "model=cbm", "hydra.run.dir=/runs/a", "cache_dir=/c", "logger=csv_only",
            "logger.wandb.mode=offline", "output_dir=/o"]  # fmt: skip
    assert distinct_name(base, same, shown) == lr2 == distinct_name(base, ["model.optim.lr=0.01"], shown)
    assert distinct_name(base, ["a=1", "b=[2, 3]"], shown) == distinct_name(base, ["b=[2,3]", "a=1"], shown)
    assert distinct_name(base, [], shown) == base == distinct_name(base, ["seed=0", "model=cbm", "hydra.run.dir=/x"], shown)
    assert distinct_name(base, ["data=robot_paper"], shown) != base  # its name shows 'robot': the choice is in the hash
    assert distinct_name(base, ["seed=1"], shown) != base  # a seed the name does not show


def test_a_run_a_scheduler_terminates_says_so_exits_143_and_resumes(tmp_path):
    """SIGTERM (how SLURM and most schedulers pre-empt) in epoch 3: one line saying so and how to go on,
    exit 143 (Lightning alone exits 0: a scheduler would read success), W&B records 143, no
    metrics.json; the resume the line names finishes the run."""
    run_dir = tmp_path / "run"
    args = [*TAB, "trainer.max_epochs=4", "logger=default", f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    res = cli("cbm-train", tmp_path, *args, env={"CBM_TERM_AT_STEP": str(2 * STEPS_PER_EPOCH + 3)})
    assert res.returncode == 143, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == f"cbm-train: terminated (SIGTERM); resume it with 'cbm-train resume={run_dir}'"
    assert not (run_dir / "metrics.json").exists() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    (run,) = runs_under(run_dir)
    assert run.exit_code == 143
    resumed = cli("cbm-train", tmp_path, f"resume={run_dir}")
    assert resumed.returncode == 0 and (run_dir / "metrics.json").is_file(), resumed.stderr[-2000:]


@pytest.mark.slow
def test_a_resumed_run_continues_its_id_with_contiguous_epochs(tmp_path):
    """Killed (SIGKILL) in epoch 3, its checkpoint after epoch 2, then resumed: the same W&B id and
    each of the 4 epochs once over the two offline logs. A kill loses what W&B had not written yet
    (here: every record), so the resume logs the epochs up to its checkpoint from the CSV log."""
    run_dir = tmp_path / "run"
    args = [*TAB, "model=cem", "trainer.max_epochs=4", "logger=default", f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    killed = cli("cbm-train", tmp_path, *args, env={"CBM_KILL_AT_STEP": str(2 * STEPS_PER_EPOCH + 3)})
    assert killed.returncode == -9, killed.stderr[-2000:]
    (first,) = runs_under(run_dir)
    assert val_epochs(first) in ([], [0], [0, 1])  # what reached the file before the kill
    resumed = cli("cbm-train", tmp_path, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    runs = runs_under(run_dir)
    second = next(r for r in runs if r.exit_code == 0)
    assert len(runs) == 2 and first.id == second.id == json.loads((run_dir / "wandb.json").read_text())["id"]
    assert second.name == distinct_name("robot-cem-s0", args, {"model": "cem"}) and second.job_type == "train"
    assert sorted(val_epochs(first) + val_epochs(second)) == [0, 1, 2, 3]
    assert "oracle/k=7" in second.summary


def test_a_run_id_held_by_an_inherited_service_is_retried_on_this_processs_own(monkeypatch):
    """A resume whose killed run logged through a W&B service inherited from a parent (WANDB_SERVICE)
    finds the id in use there: the retry drops the inherited service and starts again."""
    import wandb

    from cbm.tracking import wandb_run

    monkeypatch.setenv("WANDB_SERVICE", "2-123-unix-/nonexistent")
    monkeypatch.setattr(wandb, "teardown", lambda *a, **k: None)
    calls = []

    def start():
        calls.append(os.environ.get("WANDB_SERVICE"))
        if len(calls) == 1:
            raise RuntimeError("run ID abc is in use")
        return "run"

    assert wandb_run.retry_in_use(start) == "run"
    assert calls == ["2-123-unix-/nonexistent", None]
    with pytest.raises(RuntimeError, match="quota"):
        wandb_run.retry_in_use(lambda: (_ for _ in ()).throw(RuntimeError("quota exceeded")))


def test_the_logger_skips_steps_the_run_already_has_and_replays_lost_epochs(tmp_path):
    """Unit: rows at or below the floor (logged by the killed process) are not logged again; the CSV
    replay logs the epochs above it up to the checkpoint's."""
    from cbm.tracking.lightning import CbmWandbLogger, replay_csv

    logged = []

    class Run:
        def log(self, row, step=None):
            logged.append((step, row.get("epoch")))

    lg = CbmWandbLogger(floor_step=9, save_dir=str(tmp_path), offline=True)
    lg._experiment = Run()
    csv_path = tmp_path / "metrics.csv"
    csv_path.write_text("epoch,step,val/task_acc,train/loss\n0,4,0.5,\n0,4,,0.9\n1,9,0.6,\n1,9,,0.8\n2,14,0.7,\n2,14,,0.7\n3,19,0.8,\n")
    assert replay_csv(lg, csv_path, lg.floor_step, up_to_epoch=2) == 2
    lg.log_metrics({"epoch": 1.0}, step=9)  # the killed run has it
    lg.log_metrics({"epoch": 3.0}, step=19)
    assert logged == [(14, 2.0), (14, 2.0), (19, 3.0)]


@pytest.mark.slow
def test_an_experiment_logs_every_cell_and_its_report_in_one_group(tmp_path):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "tiny.yaml").write_text(
        "# @package _global_\nname: tiny\n"
        "settings:\n  tab: [data.modality=tabular, data.n_train=300, data.n_calib=100, data.n_test=200]\n"
        "models:\n  cbm: [model=cbm]\nblackbox: null\n"
        "train: [trainer=cpu_smoke, logger=csv_only]\n"
        "intervene: {intervener: [oracle], policy: [random], ks: [0, 1, max]}\n"
    )
    out = tmp_path / "exp"
    base = ["--config-dir", str(tmp_path / "conf"), "+experiment=tiny", f"output_dir={out}", f"cache_dir={tmp_path / 'cache'}",
            "wandb=true", "wandb_settings.tags=[smoke]"]  # fmt: skip
    res = cli("cbm-experiment", tmp_path, *base)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = runs_under(out)
    assert sorted(r.job_type for r in runs) == ["intervene", "report", "train"]
    assert {r.group for r in runs} == {"tiny"} and len({r.name for r in runs}) == 3 and {r.exit_code for r in runs} == {0}
    assert all(r.tags == ["smoke"] for r in runs)
    inter = next(r for r in runs if r.job_type == "intervene")
    assert inter.summary["accuracy/oracle/random/k=7"] > inter.summary["accuracy/oracle/random/k=0"] - 0.01
    cols, rows = table_rows(offline_dir(out, inter), "interventions")
    assert cols[:4] == ["intervener", "policy", "k", "accuracy"] and [r[2] for r in rows] == [0, 1, 7]
    report = next(r for r in runs if r.job_type == "report")
    cols, rows = table_rows(offline_dir(out, report), "interventions")
    assert cols[:6] == ["setting", "model", "seed", "intervener", "policy", "k"] and len(rows) == 3
    assert all(isinstance(r[cols.index("accuracy")], float) for r in rows)
    again = cli("cbm-report", tmp_path, str(out))  # a rerun of the report updates the same run
    assert again.returncode == 0, again.stderr[-2000:]
    reports = [r for r in runs_under(out) if r.job_type == "report"]
    assert len(reports) == 2 and reports[0].id == reports[1].id == report.id


@pytest.mark.slow
def test_a_finetuning_run_logs_its_config_results_and_adapter(tmp_path):
    from cbm.vlm.apps.finetune import run
    from cbm.vlm.finetune.config import FinetuneConfig
    from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm

    tiny = build_tiny_vlm(tmp_path / "tiny", TinyVLMConfig(image_px=112))
    out = tmp_path / "run"
    cfg = FinetuneConfig(output_dir=str(out), model={"path": str(tiny)},
                         data={"n": 4, "parts": ["knees"], "cache_dir": str(tmp_path / "cache"), "source": {"image_size": 64}, "eval_fraction": 0.5},
                         lora={"r": 4}, train={"epochs": 1, "batch_size": 4}, eval={"heatmaps": 1}, progress=False,
                         logger={"wandb": {"enabled": True, "mode": "offline", "log_model": True}})  # fmt: skip
    run(cfg)
    import wandb

    # in process, the W&B service outlives the run and may still hold unwritten records of its log
    # (read empty once in CI); the command line's process exit closes it, here teardown does
    wandb.teardown()
    (r,) = runs_under(out)
    assert r.job_type == "finetune" and r.exit_code == 0 and r.name == "finetune-tiny"
    assert r.config["lora"]["r"] == 4 and r.config["model"]["path"] == str(tiny) and r.config["run"]["command"] == "cbm-finetune"
    for when in ("before", "after"):
        assert 0 <= r.summary[f"{when}/counterfactual/accuracy"] <= 1
    assert "mcnemar/original/p_value" in r.summary and r.summary["steps"] >= 1
    cols, rows = table_rows(offline_dir(out, r), "eval")
    assert cols == ["when", "split", "rows", "loss", "accuracy", "localisation"] and len(rows) == 4
    assert ("model", f"adapter-{r.id}") in r.artifacts
    assert any(k.startswith("heatmaps/") for h in r.history for k in h)


def test_a_result_table_logs_an_empty_cell_as_a_missing_value(tmp_path):
    """cbm-icl's judge table with judge_options.global_discriminativeness=true: E1 is not judged, so
    its row's global cell is empty in judge.csv; W&B refused the empty string in a numeric column
    (a traceback, exit 1, after every file was written). It is logged as a missing value."""
    import wandb

    from cbm.tracking.wandb_run import log_result_files

    (tmp_path / "judge.csv").write_text("model,condition,judged,conciseness,global_discriminativeness\n"
                                        "vlm,E1,0,,\nvlm,E2,3,4.5,4\n")  # fmt: skip
    run = wandb.init(project="cbm-test", name="tables", dir=str(tmp_path), mode="offline")
    log_result_files(run, tmp_path, "results.json")
    run.finish()
    wandb.teardown()  # the service may still hold unwritten records (see the finetune test)
    (r,) = runs_under(tmp_path)
    cols, rows = table_rows(offline_dir(tmp_path, r), "tables/judge")
    assert cols == ["model", "condition", "judged", "conciseness", "global_discriminativeness"]
    assert rows == [["vlm", "E1", 0, None, None], ["vlm", "E2", 3, 4.5, 4]]
