"""Cells forked from one warm interpreter: ``cbm-experiment`` without the import bill per cell.

Starting a cell as ``python -m cbm.experiments.train ...`` spends 10-20 s on a small CPU importing
torch and Lightning (whose torchmetrics pulls in torchvision, transformers and scipy) before a
tabular cell's few seconds of work. The fork server imports them once, then forks every cell from
itself: the child runs the cell's module as ``__main__`` with the cell's argv, environment, working
directory and output file, in its own session, and exits with the code ``python -m`` would give,
so a forked cell writes, locks and fails exactly as the process it replaces.

The server is single-threaded and never runs a tensor operation, initialises CUDA or composes a
Hydra config, so every fork starts clean (CUDA is first touched in the child). It dies with its
``cbm-experiment`` (:func:`lifeline.die_with_parent`) and every cell with the server (re-armed in
the child), so a ``kill -9`` of the experiment still takes every cell down. Protocol: one JSON
request per line on the server's stdin, ``{"id", "argv", "env", "cwd", "out", "err"}`` (``argv`` is
``[module, *args]``, ``err`` optional); one JSON line per event on its stdout, ``{"id", "pid"}`` once forked and
``{"id", "exit"}`` when the child is reaped.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import selectors
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from cbm.core import lifeline

#: What the server imports before its first fork: everything a cell's run imports that is slow.
PRELOAD = ("torch", "lightning.pytorch", "hydra", "cbm.models", "cbm.interventions", "cbm.selective", "cbm.training")
#: Exit code of a child whose cell could not even start (its reason is in the output file).
START_FAILED = 70


def available() -> bool:
    """Whether cells can be forked here (POSIX fork and Linux pidfds)."""
    return hasattr(os, "fork") and hasattr(os, "pidfd_open") and sys.platform.startswith("linux")


# ----------------------------------------------------------------------------- the server
def _send(event: dict[str, Any]) -> None:
    os.write(1, (json.dumps(event) + "\n").encode())


def _exit_code(err: SystemExit) -> int:
    """The exit status ``python`` gives for ``sys.exit(code)``: a message is printed and means 1."""
    if err.code is None:
        return 0
    if isinstance(err.code, int):
        return err.code & 0xFF
    print(err.code, file=sys.stderr)
    return 1


def _run_child(req: dict[str, Any], keep: list[int], server: int) -> None:
    """In the forked child: become the cell's process, run its module, exit with its code (never returns)."""
    code = START_FAILED
    try:
        os.setsid()  # its own session: stopping the cell stops everything it starts
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if req.get("err") else out
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {out, err, null, *keep}:
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        os.environ[lifeline.PARENT_ENV] = str(server)  # the cell dies with the server (and so with the experiment)
        module, *args = req["argv"]
        threads = req["env"].get("OMP_NUM_THREADS", "")
        torch = sys.modules.get("torch")  # preloaded (the server's point); core itself never imports it
        if torch is not None and threads.isdigit() and int(threads) > 0:  # libgomp read the variable when the server loaded it
            torch.set_num_threads(int(threads))
        lifeline._armed = False  # the death signal is not inherited through fork: arm it again
        sys.argv = [module, *args]
        sys.orig_argv = [sys.executable, "-m", module, *args]  # what a lock's owner line shows
        sys.modules.pop(module, None)  # run as __main__ only, as ``python -m`` does
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as err:
            code = _exit_code(err)
        except BaseException:  # an uncaught error: the traceback and status python would give
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:  # pragma: no cover - a failing exit hook
            traceback.print_exc()
    except BaseException:  # the cell could not start: say why in its output
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # pragma: no cover
                pass
        os._exit(code)


def serve(preload: tuple[str, ...] = PRELOAD) -> None:
    """The server's loop: fork a child per request, report its pid and, once reaped, its exit code.
    It returns when its stdin closes and every child has been reaped."""
    lifeline.die_with_parent()
    for name in preload:
        importlib.import_module(name)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # pragma: no cover - a fork would inherit a broken CUDA context
        raise RuntimeError("the fork server initialised CUDA while preloading")
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    children: dict[int, tuple[str, int]] = {}  # pidfd -> (request id, pid)
    buf, reading, me = b"", True, os.getpid()
    while reading or children:
        for key, _ in sel.select():
            if key.fd != 0:
                rid, pid = children.pop(key.fd)
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                _send({"id": rid, "exit": os.waitstatus_to_exitcode(status)})
                continue
            data = os.read(0, 1 << 16)
            if not data:
                sel.unregister(0)
                reading = False
                continue
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    _run_child(req, list(children), me)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (req["id"], pid)
                sel.register(pidfd, selectors.EVENT_READ)
                _send({"id": req["id"], "pid": pid})


# ----------------------------------------------------------------------------- the client
class ForkedCell:
    """A cell forked by the server, with the part of :class:`subprocess.Popen` the experiment uses
    (``pid``, ``poll``, ``wait``); its ``pid`` leads its own process group."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self._cond = threading.Condition()

    def _started(self, pid: int) -> None:
        with self._cond:
            self.pid = pid
            self._cond.notify_all()

    def _ended(self, code: int) -> None:
        with self._cond:
            self.returncode = code
            self._cond.notify_all()

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        pid = self.wait_started()
        if pid is not None and self.returncode is None:
            try:
                os.kill(pid, 9)
            except OSError:  # already gone
                pass

    def wait_started(self) -> int | None:
        """The pid once the server forked it (``None`` if it ended without starting)."""
        with self._cond:
            self._cond.wait_for(lambda: self.pid is not None or self.returncode is not None)
            return self.pid

    def wait(self, timeout: float | None = None) -> int:
        """The exit status (negative: killed by that signal); :class:`subprocess.TimeoutExpired` after ``timeout`` s."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            return int(self.returncode)  # type: ignore[arg-type]


class ForkServer:
    """The experiment's side: starts the server (call from the main thread: the server's death
    signal fires when the *thread* that started it ends), forks cells, collects their exit codes."""

    def __init__(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = PRELOAD) -> None:
        env = {**(env if env is not None else os.environ), lifeline.PARENT_ENV: str(os.getpid())}
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, *preload], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True)  # fmt: skip
        self._lock = threading.Lock()
        self._cells: dict[str, ForkedCell] = {}
        self._next = 0
        self._reader = threading.Thread(target=self._read, daemon=True, name="cbm-forkserver")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            cell = self._cells.get(event["id"])
            if cell is None:
                continue
            if "pid" in event:
                cell._started(int(event["pid"]))
            else:
                self._cells.pop(event["id"], None)
                cell._ended(int(event["exit"]))
        self.proc.wait()  # the server is gone: every cell it had not reported failed with it
        for cell in list(self._cells.values()):
            cell._ended(self.proc.returncode if self.proc.returncode else START_FAILED)
        self._cells.clear()

    def start(self, cmd: list[str], out: Path, env: dict[str, str], cwd: str | None = None,
              err: Path | None = None) -> ForkedCell:  # fmt: skip
        """Fork ``cmd`` (``[python, "-m", module, *args]``, as :func:`cbm.experiments.experiment.command`
        builds it) with its stdout into ``out`` and its stderr into ``err`` (default: ``out`` too)."""
        if cmd[1:2] != ["-m"]:
            raise ValueError(f"the fork server runs modules ('python -m ...'), not {cmd[:2]}")
        cell = ForkedCell()
        with self._lock:
            if self.proc.poll() is not None:
                cell._ended(START_FAILED)
                return cell
            rid = str(self._next)
            self._next += 1
            self._cells[rid] = cell
            req = {"id": rid, "argv": cmd[2:], "env": env, "cwd": cwd or os.getcwd(), "out": str(out),
                   "err": str(err) if err is not None else None}  # fmt: skip
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._cells.pop(rid, None)
                cell._ended(START_FAILED)
        return cell

    def close(self) -> None:
        """No more cells: the server exits once its children are reaped."""
        with self._lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except OSError:  # pragma: no cover
                    pass
        self.proc.wait()
        self._reader.join(timeout=5)


if __name__ == "__main__":
    serve(tuple(sys.argv[1:]))
