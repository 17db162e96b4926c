"""W&B runs a W&B user can work with: every run's whole config, groups, job types, unique names,
stable ids, summaries and long-format tables, artifacts and true exit codes.

* **Config**: the resolved config as in ``config.yaml`` plus ``run`` (command, Hydra job number,
  sweep directory, the command-line overrides, the swept ones, package version, git commit), so
  runs can be sliced by seed or by any swept setting.
* **Identity** (:func:`identity`): ``group`` = ``logger.wandb.group``, else the experiment or the
  multirun sweep directory; ``job_type`` = the command; ``name`` = the run's own name plus the
  swept settings (unique within a sweep), a single training's with a hash of its other settings
  (:func:`distinct_name`); ``id``: new, or the run's recorded one on resume, or a
  stable one for runs that are rewritten (an experiment's report).
* Each run directory keeps ``wandb.json`` (id, project, group, name, job type), which a resume
  continues and which ``cbm-intervene`` / ``cbm-automate`` read to join their training's group.

``wandb`` is imported only when a run starts: with W&B off nothing here costs an import.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cbm.core.atomic import write_json_atomic

#: The run directory's record of its W&B run.
RUN_FILE = "wandb.json"
#: Summary kinds of the validation metrics: the best epoch's value (not the last one's).
BEST_VAL = {"val/task_acc": "max", "val/task_loss": "min", "val/concept_acc": "max", "val/concept_auroc": "max", "val/concept_f1": "max"}
#: Override prefixes that say where a run writes, not what it is (left out of names).
_LOCATION_KEYS = ("hydra.", "logger.", "cache_dir", "output_dir", "checkpoint", "blackbox", "resume")


#: The characters of a W&B run id.
ID_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"


def stable_id(*parts: str) -> str:
    """A W&B run id (12 characters of :data:`ID_CHARS`) that is the same for the same ``parts``."""
    n = int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:10], "big")
    out = ""
    for _ in range(12):
        n, r = divmod(n, len(ID_CHARS))
        out += ID_CHARS[r]
    return out


def hydra_job() -> dict[str, Any]:
    """The Hydra job this process runs: mode, job number, sweep / run directory, its command-line
    overrides and the swept ones (a multirun's), or ``{}`` outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:  # pragma: no cover - hydra is a dependency
        return {}
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    multirun = "MULTIRUN" in str(hc.mode)
    task = [str(o) for o in hc.overrides.task]
    job: dict[str, Any] = {"mode": "multirun" if multirun else "run", "overrides": task, "run_dir": hc.runtime.output_dir}
    if multirun:
        job["job_num"] = int(hc.job.num)
        job["sweep_dir"] = str(hc.sweep.dir)
        job["swept"] = swept_overrides(task)
    return job


def swept_overrides(task: Sequence[str]) -> list[str]:
    """The overrides of a multirun job that say what it is (not where it writes)."""
    return [o for o in task if not o.lstrip("+~").startswith(_LOCATION_KEYS)]


#: Hex digits of the settings hash in a run's name (:func:`distinct_name`).
NAME_HASH_CHARS = 6


def distinct_name(base: str, overrides: Sequence[str], shown: Mapping[str, str] | None = None) -> str:
    """``base`` (``robot-cbm-s0``: what a run's name shows) and a short hash of the command-line
    overrides that say what else the run is (``robot-cbm-s0-e2d995`` for ``model.optim.lr=0.01``):
    two runs that differ in any setting get different names, as a sweep's runs do, and the same
    overrides (in any order, ``+`` or not) give the same name. Left out: overrides that say where
    a run writes or logs, and those whose value ``base`` shows (``shown``: ``{"seed": "0",
    "model": "cbm"}``); none left: ``base`` itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    shown = dict(shown or {})
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # not Hydra's overrides (a run started in code): the plain name
        return base
    where = {k.rstrip(".") for k in _LOCATION_KEYS}
    what = []
    for o in parsed:
        key = o.key_or_group + (f"@{o.package}" if o.package else "")
        if key.split(".")[0] in where or (key in shown and str(o.value()) == str(shown[key])):
            continue
        what.append(f"{'~' if o.is_delete() else ''}{key}={json.dumps(o.value(), sort_keys=True, default=str)}")
    if not what:
        return base
    return f"{base}-{hashlib.sha256(json.dumps(sorted(what)).encode()).hexdigest()[:NAME_HASH_CHARS]}"


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the checkout this package runs from (``None`` outside a git checkout)."""
    here = path or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """Package version and git commit."""
    try:
        version = importlib.metadata.version("cbm")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        version = None
    return {"version": version, "git_commit": git_commit()}


def run_config(config: Mapping[str, Any], command: str, job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The W&B config: ``config`` (nested as in ``config.yaml``) plus ``run`` (command, job, provenance)."""
    job = hydra_job() if job is None else dict(job)
    return {**config, "run": {"command": command, **job, **provenance()}}


def read_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The ``wandb.json`` a run directory keeps, or ``None``."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("id") else None


def identity(
    wb: Any,
    *,
    job_type: str,
    name: str,
    run_dir: str | Path,
    job: Mapping[str, Any] | None = None,
    group: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """``wandb.init`` keyword arguments of a run (``wb``: a :class:`~cbm.config.train.WandbConfig`).

    ``group``: the default group (an experiment's, the training run's); else a multirun's sweep
    directory. ``run_id``: continue that run (``resume="allow"``), else a new id.
    """
    job = hydra_job() if job is None else job
    swept = list(job.get("swept") or [])
    default_group = group or (str(job["sweep_dir"]) if job.get("sweep_dir") else None)
    run_name = getattr(wb, "name", None) or name
    if swept and not getattr(wb, "name", None):
        run_name = f"{run_name} [{', '.join(swept)}]"
    kw: dict[str, Any] = {
        "dir": str(run_dir),
        "project": wb.project,
        "entity": wb.entity,
        "name": run_name,
        "group": getattr(wb, "group", None) or default_group,
        "job_type": getattr(wb, "job_type", None) or job_type,
        "tags": list(wb.tags),
        "notes": wb.notes,
        "mode": wb.mode,
    }
    if run_id:
        kw.update(id=run_id, resume="allow")
    return kw


def new_id() -> str:
    """A fresh W&B run id (8 characters of :data:`ID_CHARS`), known before the run starts."""
    import secrets

    return "".join(secrets.choice(ID_CHARS) for _ in range(8))


def write_record(run_dir: str | Path, kw: Mapping[str, Any]) -> None:
    """Keep the run's identity (``kw["id"]`` ...) in ``<run_dir>/wandb.json`` (resume and follow-up
    commands read it)."""
    write_json_atomic(Path(run_dir) / RUN_FILE, {k: kw.get(k) for k in ("id", "project", "entity", "group", "name", "job_type")})


#: How long a resume waits for a W&B service to let go of the run id of a killed process.
IN_USE_WAIT_S = 30.0


def retry_in_use(start: Any) -> Any:
    """``start()``, retried while W&B answers "run ID ... is in use". The killed process whose run a
    resume continues may have logged through a W&B service it shared (``WANDB_SERVICE`` inherited
    from a parent that used W&B itself: a notebook, a test runner), which still holds the id: the
    retry starts this process's own service; a service of the killed process's own lets go within
    seconds."""
    deadline = time.monotonic() + IN_USE_WAIT_S
    while True:
        try:
            return start()
        except Exception as err:
            if "in use" not in str(err) or time.monotonic() > deadline:
                raise
            if os.environ.pop("WANDB_SERVICE", None) is not None:
                import wandb

                wandb.teardown()
                continue
            time.sleep(1.0)


def start(kw: Mapping[str, Any], config: Mapping[str, Any], run_dir: str | Path) -> Any:
    """``wandb.init`` (quietly) with ``kw`` and ``config``; the run is recorded in ``run_dir``."""
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    Path(kw["dir"]).mkdir(parents=True, exist_ok=True)
    run = retry_in_use(lambda: wandb.init(**kw, config=dict(config)))
    write_record(run_dir, {**kw, "id": run.id})
    return run


def check_api_key(wb: Any, where: str = "logger.wandb") -> None:
    """``mode=online`` needs a W&B API key: looked for where ``wandb.init`` looks (``WANDB_API_KEY``,
    an identity token file, the ``.netrc`` entry of the W&B host, wandb's settings), without the
    network and before any run starts; ``ValueError`` with one line saying how to fix it when there
    is none. Nothing is imported unless the mode is online and the run is on (``wb.enabled``). A
    ``WANDB_MODE`` of ``offline`` / ``dryrun`` / ``disabled`` in the environment needs no key: the
    training's logger leaves the mode to it when ``mode=online``."""
    if wb.mode != "online" or getattr(wb, "enabled", True) is False:
        return
    if os.environ.get("WANDB_MODE", "").strip().lower() in ("offline", "dryrun", "disabled"):
        return
    try:
        from wandb import env
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib import wbauth
    except ImportError:  # another wandb layout: wandb.init says it itself
        return
    if os.getenv(env.API_KEY) or os.getenv(env.IDENTITY_TOKEN_FILE):
        return
    settings = wandb_setup.singleton().settings
    try:
        found = settings.api_key or wbauth.read_netrc_auth(host=settings.base_url)
    except Exception as err:  # an entry W&B cannot use (AuthenticationError)
        raise ValueError(f"{where}.mode=online: the W&B API key found for {settings.base_url} is not usable ({err})") from None
    if not found:
        raise ValueError(f"{where}.mode=online but no W&B API key was found for {settings.base_url}: set WANDB_API_KEY "
                         f"(or run 'wandb login'), or log without an account with {where}.mode=offline")  # fmt: skip


def exit_code_for(err: BaseException | None) -> int:
    """The process exit code an error leads to: 0 none, 2 bad input, 130 Ctrl-C, 143 SIGTERM, 1
    anything else."""
    from cbm.core.common import USER_ERRORS
    from cbm.core.concurrency import Terminated, stop_code

    if err is None:
        return 0
    if isinstance(err, KeyboardInterrupt | Terminated):
        return stop_code(err)
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else 1
    return 2 if isinstance(err, USER_ERRORS) else 1


def finish(exit_code: int = 0) -> None:
    """Close the current W&B run (if any) with ``exit_code``: a failed run is recorded as failed."""
    import sys

    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish(exit_code=exit_code)


def numeric_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Any:
    """A long-format ``wandb.Table``: one row per record, numbers kept as numbers."""
    import wandb

    return wandb.Table(columns=list(columns), data=[[r.get(c) for c in columns] for r in rows])


def log_curves(run: Any, key: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str], x: str, y: str,
               series: Sequence[str], title: str) -> None:  # fmt: skip
    """``key``: the rows as a long-format table, and ``key/plot``: a native line plot of ``y`` vs
    ``x``, one line per combination of the ``series`` columns."""
    import wandb

    cols = [*columns, "series"]
    data = [{**r, "series": " / ".join(str(r.get(s)) for s in series)} for r in rows]
    table = numeric_table(data, cols)
    run.log({key: table, f"{key}/plot": wandb.plot.line(table, x, y, stroke="series", title=title)})


def log_files_artifact(run: Any, name: str, kind: str, files: Sequence[Path], metadata: Mapping[str, Any] | None = None,
                       aliases: Sequence[str] = ()) -> None:  # fmt: skip
    """Log ``files`` as one artifact (uploaded when the run syncs)."""
    import wandb

    art = wandb.Artifact(name, type=kind, metadata=dict(metadata or {}))
    for f in files:
        if Path(f).is_file():
            art.add_file(str(f), name=Path(f).name)
    run.log_artifact(art, aliases=list(aliases) or None)


@contextlib.contextmanager
def finishing() -> Iterator[None]:
    """Close the W&B run the block started (if any) with the exit code its outcome leads to."""
    try:
        yield
    except BaseException as err:
        finish(exit_code_for(err))
        raise
    finish(0)


def plain_config(cfg: Any) -> dict[str, Any]:
    """A dataclass / mapping config as plain JSON values (paths and other objects as text)."""
    from cbm.core.validation import as_dict

    return json.loads(json.dumps(as_dict(cfg), default=str))


def log_finetune_results(run: Any, result: Mapping[str, Any], out: Path, log_model: bool) -> None:
    """Fine-tuning before / after per split (summary and a long-format table), McNemar, the
    heatmaps as images, and the adapter as a ``model`` artifact when asked for."""
    import wandb

    rows, summary = [], {}
    for when in ("before", "after"):
        for split, m in (result.get(when) or {}).items():
            row = {"when": when, "split": split, **{k: m.get(k) for k in ("rows", "loss", "accuracy", "localisation")}}
            rows.append(row)
            summary.update({f"{when}/{split}/{k}": v for k, v in row.items() if k not in ("when", "split")})
    for split, t in (result.get("mcnemar") or {}).items():
        summary.update({f"mcnemar/{split}/{k}": t.get(k) for k in ("p_value", "worse", "better")})
    for when, t in (result.get("original_vs_counterfactual") or {}).items():
        summary.update({f"original_vs_counterfactual/{when}/{k}": t.get(k) for k in ("p_value", "worse", "better")})
    summary.update({k: result.get(k) for k in ("loss_first", "loss_last", "steps", "train_rows", "eval_rows", "trainable_params")})
    run.summary.update(summary)
    payload: dict[str, Any] = {"eval": numeric_table(rows, ["when", "split", "rows", "loss", "accuracy", "localisation"])}
    payload.update({f"heatmaps/{p.stem}": wandb.Image(str(p)) for p in sorted((out / "heatmaps").glob("*.png"))})
    run.log(payload)
    if log_model:
        adapter = sorted(p for p in (out / "adapter").glob("*") if p.is_file())
        log_files_artifact(run, f"adapter-{run.id}", "model", adapter, {"model": result.get("model")}, ["latest"])


def training_dir(checkpoint: str | Path) -> Path:
    """The cbm-train run directory of a run directory or of one of its ``.ckpt`` files."""
    from cbm.core.paths import resolve_checkpoint

    ckpt = resolve_checkpoint(checkpoint)
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent


def start_follower(wb: Any, *, job_type: str, checkpoint: str | Path, run_dir: str | Path, config: Mapping[str, Any]) -> Any:
    """The W&B run of a command that reads a training run (cbm-intervene, cbm-automate), in that
    run's group; ``wb.enabled=None``: only when the training run logged to W&B. ``None``: no run."""
    record = read_record(training_dir(checkpoint))
    enabled = wb.enabled if wb.enabled is not None else record is not None
    if not enabled or wb.mode == "disabled":
        return None
    base = (record or {}).get("name") or training_dir(checkpoint).name
    kw = identity(wb, job_type=job_type, name=f"{base} {job_type}", run_dir=run_dir, group=(record or {}).get("group"))
    return start(kw, config, run_dir)


def log_intervention_results(run: Any, rows: Sequence[Mapping[str, Any]], blackbox_accuracy: float | None) -> None:
    """One row per intervener x policy x k (numeric columns) with its accuracy-vs-k line plot, and
    ``accuracy/<intervener>/<policy>/k=<k>`` (and ``gain/...``) in the summary."""
    cols = ["intervener", "policy", "k", "accuracy", "gain", "mean_requested", "frac_requesting", "n_examples"]
    log_curves(run, "interventions", rows, cols, "k", "accuracy", ["intervener", "policy"], "accuracy vs k")
    summary: dict[str, Any] = {"blackbox_accuracy": blackbox_accuracy}
    for r in rows:
        at = f"{r['intervener']}/{r['policy']}/k={r['k']}"
        summary[f"accuracy/{at}"] = r["accuracy"]
        if r.get("gain") is not None:
            summary[f"gain/{at}"] = r["gain"]
    run.summary.update(summary)


def log_automation_results(run: Any, report: Mapping[str, Any], columns: Sequence[str]) -> None:
    """Per-k automation results as a long-format table (coverage, selective accuracy, NWA ... vs k)
    with a coverage-vs-k plot, the calibration and ``nwa/k=<k>`` / ``coverage/k=<k>`` in the summary."""
    import wandb

    rows = list(report.get("results") or [])
    table = numeric_table(rows, columns)
    payload: dict[str, Any] = {"automation": table}
    if rows:
        payload["automation/coverage_vs_k"] = wandb.plot.line(table, "k", "coverage", title="coverage after interventions vs k")
    run.log(payload)
    summary = {f"calibration/{k}": v for k, v in (report.get("calibration") or {}).items() if isinstance(v, int | float | str | bool)}
    for r in rows:
        summary.update({f"{m}/k={r['k']}": r.get(m) for m in ("coverage", "selective_acc", "nwa", "nwa_cost", "aurc")})
    run.summary.update(summary)


def start_command_run(logger: Mapping[str, Any] | None, *, job_type: str, name: str, out_dir: str | Path, config: Any, command: str) -> Any:
    """The W&B run of a command whose config holds ``logger`` as a mapping (cbm-edct, cbm-icl):
    ``None`` when ``logger.wandb`` is absent (a config built in code), disabled or off."""
    from cbm.config.train import LoggerConfig
    from cbm.core.validation import to_dataclass

    if not (logger or {}).get("wandb"):
        return None
    wb = to_dataclass(LoggerConfig, dict(logger or {}), "logger").wandb
    if wb.enabled is False or wb.mode == "disabled":
        return None
    kw = identity(wb, job_type=job_type, name=name, run_dir=out_dir)
    return start(kw, run_config(plain_config(config), command), out_dir)


def flat_numbers(data: Any, prefix: str = "", depth: int = 4) -> dict[str, float | int]:
    """The numeric leaves of a JSON result (``a/b/c`` keys), ``depth`` levels deep."""
    out: dict[str, float | int] = {}
    if isinstance(data, bool):
        return out
    if isinstance(data, int | float):
        return {prefix: data} if prefix else {}
    if isinstance(data, Mapping) and depth > 0:
        for k, v in data.items():
            out.update(flat_numbers(v, f"{prefix}/{k}" if prefix else str(k), depth - 1))
    return out


def _number(text: str) -> Any:
    """A CSV cell as W&B should type it: a number as a number, an empty cell as a missing value
    (``None``; an empty string in a numeric column is refused by ``wandb.Table``), else the text."""
    if not text.strip():
        return None
    try:
        f = float(text)
    except (TypeError, ValueError):
        return text
    return int(f) if f.is_integer() and "." not in text and "e" not in text.lower() else f


def log_result_files(run: Any, out_dir: str | Path, result_json: str = "results.json", images: Sequence[str] = ()) -> None:
    """A command's results: the numeric leaves of ``result_json`` in the summary, every CSV table in
    ``out_dir`` as a ``wandb.Table`` (numbers as numbers), ``images`` as images."""
    import csv

    import wandb

    out = Path(out_dir)
    path = out / result_json
    if path.is_file():
        run.summary.update(flat_numbers(json.loads(path.read_text())))
    payload: dict[str, Any] = {}
    for f in sorted(out.glob("*.csv")):
        with f.open(newline="") as fh:
            rows = list(csv.reader(fh))
        if rows:
            payload[f"tables/{f.stem}"] = wandb.Table(columns=rows[0], data=[[_number(v) for v in r] for r in rows[1:]])
    payload.update({f"figures/{Path(i).stem}": wandb.Image(str(out / i)) for i in images if (out / i).is_file()})
    if payload:
        run.log(payload)
