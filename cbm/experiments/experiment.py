"""``cbm-experiment``: one command per table.

Trains every cell of a preset (data setting x architecture x seed; the black box once per setting
and seed), runs ``cbm-intervene`` / ``cbm-automate`` on every trained model (the black box paired
for Gain), then writes the report (``cbm-report``'s tables and figures) into the experiment
directory. Each cell is a run of the existing command in its own process, in
``<output_dir>/<setting>/<model>/seed<k>/<stage>``; a rerun skips finished cells and resumes killed
trainings, a failed cell is recorded and the rest go on.

    cbm-experiment +experiment=robot_decision_support
    cbm-experiment +experiment=sudoku_automation jobs=2
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cbm.config.experiment import ExperimentConfig
from cbm.config.experiment import validate as validate_schema
from cbm.core import forkserver, runlock
from cbm.core.atomic import ensure_dir
from cbm.core.cells import Running
from cbm.core.cli import hydra_app
from cbm.core.common import DRY_RUN_ENV, say, write_json_atomic
from cbm.core.concurrency import Terminated, drain, stopped
from cbm.core.forkserver import ForkServer
from cbm.core.safe_paths import check_creatable
from cbm.core.validation import ConfigError
from cbm.experiments.plan import STAGES, Cell, plan, replaced

#: Name of the experiment's manifest (cells, their status and wall times) in its directory.
MANIFEST = "experiment.json"


def validate(cfg: DictConfig | dict) -> ExperimentConfig:
    """The typed experiment config, and every cell's config composed and validated by its own
    command's schema (each distinct one once), so a typo in a preset fails before any training."""
    from cbm.core.cli import compose_plain, explain
    from cbm.experiments import automate, intervene, train

    if "experiment" in cfg:  # a preset without '# @package _global_' lands under this key
        raise ConfigError("experiment: the preset was not merged into the config: a preset is a YAML mapping of "
                          "settings whose first line is '# @package _global_' (as in conf/experiment/)")  # fmt: skip
    c = validate_schema(cfg)
    if c.cache_dir is not None:
        check_creatable(c.cache_dir, "cache_dir")  # every cell's data cache: refused once, before any cell
    cells = plan(c)
    refuse_changed(cells, c.output_dir)  # before Hydra writes into the experiment's directory
    seen: set[tuple[str, ...]] = set()
    checks = {"train": lambda j: train.validate(j), "intervene": lambda j: intervene.validate(j, check_paths=False),
              "automate": lambda j: automate.validate(j, check_paths=False)}  # fmt: skip

    def compose(cell: Cell, over: list[str], where: str) -> DictConfig:
        try:
            job = compose_plain(cell.stage, over)
        except Exception as err:  # Hydra's composition errors
            raise ConfigError(f"{where}: {explain(err, over, cell.stage)}") from None
        return OmegaConf.masked_copy(job, [k for k in job if k != "hydra"])

    def check(cell: Cell, full: bool) -> None:
        """The cell's config composed and validated (``full``: by its command's schema), then each
        override a later one replaces put in effect, composed and (``full``) its own part validated."""
        over = [o for o in cell.overrides if not o.startswith(("hydra.run.dir=", "seed=", "blackbox="))]
        over = ["checkpoint=RUN_DIR" if o.startswith("checkpoint=") else o for o in over]
        if (cell.stage, *over) in seen:
            return
        seen.add((cell.stage, *over))
        where = f"{cell.setting}/{cell.model} ({cell.stage})"
        job = compose(cell, over, where)
        if full:
            try:
                checks[cell.stage](job)
            except ValueError as err:
                raise ConfigError(f"{where}: {err}") from None
        for variant, shown in replaced(over):
            where = f"{cell.setting}/{cell.model} ({cell.stage}; {', '.join(shown)}, replaced by a later override)"
            job = compose(cell, variant, where)
            if full and cell.stage == "train":
                try:
                    check_parts(job, shown)
                except ValueError as err:
                    raise ConfigError(f"{where}: {err}") from None

    for cell in cells:
        check(cell, full=True)
    if c.select.settings is not None or c.select.models is not None:  # the entries the selection leaves out: composed
        planned = {cell.key for cell in cells}
        everything = validate_schema({**as_plain(cfg), "select": {"settings": None, "models": None}})
        for cell in plan(everything):
            if cell.stage == "train" and cell.key not in planned:
                check(cell, full=False)
    return c


def as_plain(cfg: DictConfig | dict) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)  # type: ignore[return-value]


def check_parts(job: DictConfig, overrides: list[str]) -> None:
    """The parts of a training config that ``overrides`` set (``data``, ``model``, the rest), each
    validated by its own schema: a value a later override replaces is still a value the preset gives,
    checked on its own (not against the rest of a cell it never reaches: a black box's
    ``checkpoint_monitor``)."""
    from cbm.config.train import TrainConfig
    from cbm.core.validation import to_dataclass
    from cbm.models.registry import validate_model
    from synthetic.registry import data_config

    raw = as_plain(job)
    parts = {o.lstrip("+~").partition("=")[0].split(".")[0].split("@")[0] for o in overrides}
    if "data" in parts:
        data_config(raw["data"])
    if "model" in parts:
        validate_model(raw["model"])
    if parts - {"data", "model"}:
        to_dataclass(TrainConfig, {k: v for k, v in raw.items() if k not in ("data", "model")}, "config")


def refuse_changed(cells: list[Cell], root: Path | str) -> None:
    """Cells run earlier with other settings are refused rather than mixed in (one line)."""
    changed = [cell.key for cell in cells if cell.state() == "changed"]
    if changed:
        raise ConfigError(f"{len(changed)} cell(s) in {root} were run with other settings (e.g. {changed[0]}): "
                          "delete them or choose another output_dir")  # fmt: skip


def command(cell: Cell) -> list[str]:
    """The process a cell runs (a killed training resumes from its last checkpoint)."""
    module = STAGES[cell.stage][0]
    if cell.stage == "train" and cell.state() == "resume":
        return [sys.executable, "-m", module, f"resume={cell.dir}"]
    return [sys.executable, "-m", module, *cell.overrides]


#: Files a cell's directory holds before its command starts (not leftovers of an earlier attempt).
OWN_FILES = ("cell.json", "output.txt", runlock.LOCK_NAME)


def clear_leftovers(cell: Cell) -> None:
    """Remove what a killed attempt left in a cell that starts afresh (its command would refuse a
    directory holding a run); the caller made sure no live process holds the cell."""
    if not cell.dir.is_dir():
        return
    for p in cell.dir.iterdir():
        if p.name in OWN_FILES:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def run_cell(cell: Cell, threads: int, root: Path, running: Running | None = None) -> dict[str, Any]:
    """Run one cell to completion; its status, wall time and (on failure) the error line. The
    record names the cell's directory relative to the experiment's (the report reads it there)."""
    record: dict[str, Any] = {"key": cell.key, "stage": cell.stage, "setting": cell.setting, "model": cell.model,
                              "seed": cell.seed, "dir": str(cell.dir.relative_to(root)), "skipped": cell.skipped}  # fmt: skip
    busy = runlock.holder(cell.dir)
    if busy is not None:  # e.g. a cbm-train run by hand with hydra.run.dir=<this cell>
        return {**record, "status": "failed", "seconds": None, "note": f"in use by {runlock.describe(busy)}"}
    state = cell.state()
    if state == "done":
        return {**record, "status": "done", "seconds": None, "note": "finished earlier"}
    blocked = [n.key for n in cell.needs if not n.result.is_file()]
    if blocked:
        return {**record, "status": "blocked", "seconds": None, "note": f"needs {', '.join(blocked)}"}
    if state == "fresh":
        clear_leftovers(cell)  # an attempt killed before its first checkpoint
    cmd = command(cell)
    ensure_dir(cell.dir)
    write_json_atomic(cell.dir / "cell.json", {"fingerprint": cell.fingerprint(), "stage": cell.stage, "overrides": cell.overrides})
    env = {**os.environ, "CBM_NO_PRECHECK": "1", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env.pop(DRY_RUN_ENV, None)
    running = running or Running()
    start = time.perf_counter()
    proc = running.start(cmd, cell.dir / "output.txt", env)
    if proc is None:
        return {**record, "status": "failed", "seconds": None, "note": "interrupted before it started"}
    code = running.wait(proc)
    seconds = round(time.perf_counter() - start, 2)
    if code == 0 and cell.result.is_file():
        return {**record, "status": "done", "seconds": seconds, "note": "resumed" if state == "resume" else ""}
    lines = [ln.strip() for ln in (cell.dir / "output.txt").read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": error: " in ln or "Error" in ln]
    why = (errors or lines or [f"exit code {code}"])[-1]
    return {**record, "status": "failed", "seconds": seconds, "note": why[:300]}


def cell_threads(jobs: int, env: dict[str, str] | None = None) -> int:
    """Threads per cell: the cores shared by ``jobs`` cells, at most the ``OMP_NUM_THREADS`` the
    experiment was given (more OpenMP threads than free cores slow small ops 10-25x)."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    given = (env if env is not None else os.environ).get("OMP_NUM_THREADS", "").strip()
    return min(threads, int(given)) if given.isdigit() and int(given) > 0 else threads


def start_server(launcher: str, cells: list[Cell]) -> ForkServer | None:
    """The fork server the cells are forked from (``launcher=fork`` where the OS can, with a cell to
    run), else ``None``: every cell is a fresh ``python -m`` process."""
    if launcher != "fork" or not forkserver.available() or all(c.state() == "done" for c in cells):
        return None
    return ForkServer()


def execute(cells: list[Cell], jobs: int, root: Path, log: dict[str, dict[str, Any]], save, launcher: str = "fork") -> None:
    """Run the cells, trainings first, ``jobs`` at a time; ``log`` gets each cell's record. An
    interruption (Ctrl-C) kills the running cells and starts no more."""
    server = start_server(launcher, cells)  # here, in the main thread, which outlives every cell
    try:
        _execute(cells, jobs, root, log, save, Running(server))
    finally:
        if server is not None:
            server.close()


def _execute(cells: list[Cell], jobs: int, root: Path, log: dict[str, dict[str, Any]], save, running: Running) -> None:
    threads = cell_threads(jobs)
    total = len(cells)
    done = 0
    lock = threading.Lock()  # one writer of the log, the console and the manifest at a time

    def one(cell: Cell) -> None:
        nonlocal done
        rec = run_cell(cell, threads, root, running)
        with lock:
            if running.stopping:
                return
            log[cell.key] = rec
            done += 1
            _report_cell(cell, rec, done, total)
            save()

    def _report_cell(cell: Cell, rec: dict[str, Any], done: int, total: int) -> None:
        took = f" in {rec['seconds']:.1f} s" if rec["seconds"] is not None else ""
        note = f" ({rec['note']})" if rec["note"] else ""
        say(f"[{done:>{len(str(total))}}/{total}] {cell.stage:<9} {cell.setting}/{cell.model} seed {cell.seed}: {rec['status']}{took}{note}")

    for stage in ("train", "intervene", "automate"):  # every training before the analyses
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            try:  # a cell's error is raised here (never a cell's failure: that is its record)
                drain(pool, [pool.submit(one, c) for c in cells if c.stage == stage])
            except BaseException:
                running.stop_all()
                raise


def run(cfg: DictConfig | dict) -> dict[str, Any]:
    """Run (or resume) the experiment and write its report, holding ``output_dir``'s lock (a second
    experiment on the same directory is refused with one line naming this one); the manifest."""
    c = cfg if isinstance(cfg, ExperimentConfig) else validate_schema(cfg)
    root = ensure_dir(c.output_dir)
    try:
        with runlock.hold(root, "wait for it to finish or choose another output_dir"):
            return _run(c, root)
    except (KeyboardInterrupt, Terminated) as err:  # the running cells were stopped, finished ones are kept
        stopped("cbm-experiment", err, "the running cells were stopped (rerun the same command to go on)")


def _run(c: ExperimentConfig, root: Path) -> dict[str, Any]:
    from cbm.experiments.report import write_experiment_report

    cells = plan(c)
    refuse_changed(cells, root)
    todo = sum(cell.state() != "done" for cell in cells)
    say(f"experiment {c.name}: {len(cells)} cells ({todo} to run, {len(cells) - todo} finished) in {root}")
    log: dict[str, dict[str, Any]] = {}
    manifest: dict[str, Any] = {"name": c.name, "description": c.description,
                                "config": OmegaConf.to_container(OmegaConf.structured(c)), "cells": []}  # fmt: skip

    def save() -> None:
        manifest["cells"] = [log[cell.key] for cell in cells if cell.key in log]
        write_json_atomic(root / MANIFEST, manifest)

    start = time.perf_counter()
    execute(cells, c.jobs, root, log, save, c.launcher)
    manifest["wall_s"] = round(time.perf_counter() - start, 1)
    save()
    table = write_experiment_report(root)
    say(table)
    failed = [r for r in manifest["cells"] if r["status"] in ("failed", "blocked")]
    if failed:
        say(f"{len(failed)} cell(s) did not finish, e.g. {failed[0]['key']}: {failed[0]['note']} "
            f"(rerun the same command to retry them; finished cells are kept)")  # fmt: skip
        sys.exit(1)
    return manifest


main = hydra_app(
    "cbm-experiment",
    "experiment",
    run,
    validate,
    "Run a whole table: train every cell of a preset (conf/experiment/), intervene / automate on every\n"
    "trained model with the black box paired for Gain, then write the report; reruns skip finished cells.",
    [
        "+experiment=robot_decision_support",
        "+experiment=sudoku_automation jobs=2",
        "+experiment=concept_noise_smoke output_dir=/tmp/noise",
        "+experiment=robot_decision_support 'seeds=[0,1,2]' 'train=[trainer.max_epochs=20]'",
    ],
)


def load_manifest(root: str | Path) -> dict[str, Any] | None:
    """The manifest of an experiment directory (``None`` if it is not one)."""
    p = Path(root) / MANIFEST
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


if __name__ == "__main__":
    main()
