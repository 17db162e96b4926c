"""Shared plumbing of the command-line entry points: config path, clean errors, results I/O."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable
from datetime import datetime
from functools import cache, wraps
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from cbm.core import runlock
from cbm.core.atomic import WriteError, describe, write_json_atomic, write_text_atomic  # noqa: F401 (the write path)
from cbm.core.paths import CONF_DIR as _CONF_DIR
from cbm.core.tables import markdown_table  # noqa: F401 (re-exported for the apps)
from cbm.core.validation import ConfigError


@cache
def run_stamp() -> str:
    """``${run_stamp:}``, the name of every default run directory: the start time to the microsecond and
    the process id, so two commands started in the same second (a script, a sweep's jobs) never
    share a directory. One per process: the precheck, Hydra and a sweep's jobs see the same stamp."""
    return f"{datetime.now():%Y-%m-%d_%H-%M-%S-%f}-{os.getpid()}"


OmegaConf.register_new_resolver("run_stamp", run_stamp, replace=True, use_cache=True)

CONF_DIR = _CONF_DIR

#: ``CBM_DRY_RUN=1``: a command stops with exit code 0 once its command line is validated (nothing
#: is run or written); the test of every ``--help`` example runs them this way.
DRY_RUN_ENV = "CBM_DRY_RUN"

#: Errors that mean "bad input" or an unusable file system, reported as one line and exit code 2.
USER_ERRORS = (ConfigError, ValueError, KeyError, OSError)


def one_line(err: BaseException) -> str:
    """The first line of an error's message (an ``OSError`` as ``cannot ... <file>: <reason>``)."""
    if isinstance(err, OSError) and not isinstance(err, WriteError) and err.errno is not None:
        return describe(err, err.filename, "read" if isinstance(err, FileNotFoundError) else "access")
    text = str(err).strip()
    if isinstance(err, KeyError) and len(err.args) == 1:
        text = f"missing key {err.args[0]!r}"
    return text.splitlines()[0] if text else type(err).__name__


def dry_run(prog: str | None = None) -> bool:
    """Whether this is a dry run (``CBM_DRY_RUN``); with ``prog``, say so when it is."""
    on = os.environ.get(DRY_RUN_ENV, "") not in ("", "0")
    if on and prog:
        print(f"{prog}: the command line is valid (dry run: nothing was run)")
    return on


def say(text: str) -> None:
    """Report to the user: through logging when a run's log is set up (the console shows the
    plain text, ``<run dir>/<app>.log`` keeps it with a time stamp), else on stdout."""
    logger = logging.getLogger("cbm")
    if logging.getLogger().handlers and logger.isEnabledFor(logging.INFO):
        logger.info(text)
    else:
        print(text)


def log_to(run_dir: Path, app: str) -> None:
    """The logging Hydra's ``job_logging: cbm`` gives, for runs outside Hydra (``cbm-train resume=``)."""
    root = logging.getLogger()
    if root.handlers:
        return
    root.setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(logging.Formatter("%(message)s"))
    file = logging.FileHandler(run_dir / f"{app}.log", delay=True)
    file.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] %(message)s"))
    root.addHandler(console)
    root.addHandler(file)


def fail(prog: str, message: str, code: int = 2) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)


def hydra_run_dir() -> Path | None:
    """The run directory Hydra made for this job (``None`` outside a Hydra app)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None
    except Exception:
        return None


def remove_if_unused(run_dir: Path | None) -> None:
    """Delete a run directory that holds nothing but Hydra's own files (``.hydra/``, job logs) and
    a free lock: a run that failed before its work started leaves nothing behind. The lock is held
    while the files go (no command can start in the directory meanwhile) and its file removed
    last: a command that waited for it finds its lock on a removed file and is not let in."""
    if run_dir is None or not run_dir.is_dir() or runlock.holds(run_dir) or runlock.secondary_rank():
        return  # a secondary rank works in rank zero's directory: never its to remove
    try:
        runlock.acquire(run_dir, retry_s=0)
    except (runlock.Busy, OSError):
        return  # another live command's directory (this one was refused the lock)
    try:
        entries = list(run_dir.iterdir())
        unused = all(p.name in (".hydra", runlock.LOCK_NAME) or p.suffix == ".log" for p in entries)
        if unused:
            for p in entries:
                if p.name != runlock.LOCK_NAME:
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
            (run_dir / runlock.LOCK_NAME).unlink(missing_ok=True)
    except OSError:
        unused = False
    finally:
        runlock.release(run_dir)
    if unused:
        try:
            run_dir.rmdir()
        except OSError:  # something new arrived, or the lock file could not go (Windows): kept
            return
        cwd, parent = Path.cwd().resolve(), run_dir.resolve().parent  # e.g. outputs/robot-cbm/
        while parent != cwd and cwd in parent.parents and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()  # folders Hydra made for this run alone
            parent = parent.parent


def remove_fresh(run_dir: Path) -> None:
    """Delete ``run_dir``, which this command made (it did not exist when the command started), and
    the folders Hydra made for it alone: what a run wrote before its endpoint ever answered (its
    inputs, its first records) is no result, and a rerun makes it again."""
    if run_dir.is_dir() and not runlock.holds(run_dir) and not runlock.secondary_rank():
        shutil.rmtree(run_dir, ignore_errors=True)
        cwd, parent = Path.cwd().resolve(), run_dir.resolve().parent
        while parent != cwd and cwd in parent.parents and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def clean_errors(prog: str, fresh_run: Path | None = None) -> Callable:
    """Decorator: bad-input exceptions become one ``prog: error: ...`` line and exit code 2, and a
    Hydra run directory the failed job did not use is removed; ``fresh_run`` (the run directory, when
    this command made it) is removed whole when the error is an endpoint that never answered
    (a ``ConnectionError``: :class:`cbm.vlm.reply.EndpointUnreachable`)."""

    def deco(fn: Callable) -> Callable:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if os.environ.get("CBM_DEBUG"):
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except USER_ERRORS as err:
                if fresh_run is not None and isinstance(err, ConnectionError):
                    remove_fresh(fresh_run)
                else:
                    remove_if_unused(hydra_run_dir())
                fail(prog, one_line(err))

        return wrapper

    return deco
