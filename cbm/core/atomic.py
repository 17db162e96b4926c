"""The one write path for every file the project produces: datasets in the cache, checkpoints,
metrics, results, exports and plots.

A file is written to a temp file beside its destination (same filesystem), flushed and
``fsync``-ed, then renamed over the destination with ``os.replace``: readers see the old file or
the new one, never a partial one, and a failed write (disk full, read-only, file-size limit,
killed process) leaves the destination as it was. Temp files carry their writer's host and pid,
so :func:`clean_orphans` can remove those of writers that died (``kill -9``) on the next access.

I/O failures become :class:`WriteError` (an ``OSError``) whose message is one line naming the
file and the problem, e.g. ``cannot write out/metrics.json: no space left on device``.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

#: Temp files of writers on other hosts (shared filesystems) are removed after this long.
ORPHAN_AGE_S = 24 * 3600
TMP_SUFFIX = ".tmp"

_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "file too large (a file-size limit of this process or filesystem)",
    errno.ENOTDIR: "a path component is a file, not a directory",
    errno.EISDIR: "it is a directory",
    errno.EEXIST: "a file is in the way of a directory",
    errno.ENAMETOOLONG: "file name too long",
}


class WriteError(OSError):
    """A file could not be written; ``str()`` is one line naming the file and the reason."""

    def __str__(self) -> str:
        return str(self.strerror)


def describe(err: OSError, path: str | Path | None = None, verb: str = "write") -> str:
    """One line for an ``OSError``: ``cannot <verb> <path>: <reason>``."""
    reason = _REASONS.get(err.errno or -1) or (err.strerror or type(err).__name__).lower()
    where = path if path is not None else (err.filename or "?")
    return f"cannot {verb} {where}: {reason}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _host() -> str:
    return socket.gethostname().replace(".", "_") or "host"


def temp_path(path: Path) -> Path:
    """``.<name>.<host>.<pid>.<ns>.tmp`` beside ``path``."""
    return path.with_name(f".{path.name}.{_host()}.{os.getpid()}.{time.monotonic_ns()}{TMP_SUFFIX}")


def ensure_dir(directory: str | Path) -> Path:
    """``mkdir -p`` with one-line errors (a file in the way, read-only, no permission)."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise WriteError(errno.EEXIST, f"cannot create directory {d}: a file is in the way") from None
    except OSError as err:
        raise WriteError(err.errno, describe(err, d, "create directory")) from None
    if not d.is_dir():
        raise WriteError(errno.ENOTDIR, f"cannot create directory {d}: a file is in the way")
    return d


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(f)`` on a binary temp file beside ``path``, then rename it to ``path``."""
    path = Path(path)
    if path.is_dir():
        raise WriteError(errno.EISDIR, f"cannot write {path}: it is a directory")
    ensure_dir(path.parent)
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        _unlink(tmp)
        if isinstance(err, WriteError):
            raise
        raise WriteError(err.errno, describe(err, path)) from None
    except BaseException:
        _unlink(tmp)
        raise
    return path


def _unlink(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    return atomic_write(path, lambda f: f.write(data))


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())


def json_ready(obj: Any) -> Any:
    """``obj`` with arrays and array scalars (numpy, torch: anything with ``tolist``) as plain lists
    and numbers, through nested dicts and lists."""
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str | bytes):
        return obj.tolist()
    return obj


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """JSON with sorted keys (numpy / torch scalars as floats)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=float) + "\n")


def write_csv_atomic(path: str | Path, rows: list[dict[str, Any]], columns: list[str]) -> Path:
    """CSV with a header of ``columns`` (``None`` as empty cells, other keys ignored)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: "" if r.get(c) is None else r.get(c) for c in columns})
    return write_text_atomic(path, buf.getvalue())


def save_npz_atomic(path: str | Path, arrays: dict[str, Any]) -> Path:
    import numpy as np

    return atomic_write(path, lambda f: np.savez(f, **arrays))


def savefig_atomic(fig: Any, path: str | Path, **kwargs: Any) -> Path:
    """A matplotlib figure (PNG unless ``format`` says otherwise)."""
    kwargs.setdefault("format", Path(path).suffix.lstrip(".") or "png")
    return atomic_write(path, lambda f: fig.savefig(f, **kwargs))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _writer_dead(host: str, pid: int, p: Path, now: float) -> bool:
    """Whether the writer ``host``/``pid`` of ``p`` is gone: this host's when its pid is; another
    host's when ``p`` is older than :data:`ORPHAN_AGE_S`. ``OSError`` when ``p`` vanished."""
    return not _alive(pid) if host == _host() else now - p.stat().st_mtime > ORPHAN_AGE_S


def clean_orphans(directory: str | Path) -> int:
    """Remove temp files left in ``directory`` by writers that died; the number removed.

    A temp file of this host is an orphan when its pid is gone; one of another host when it is
    older than :data:`ORPHAN_AGE_S`. Files of live writers are never touched.
    """
    d = Path(directory)
    if not d.is_dir():
        return 0
    removed, now = 0, time.time()
    for p in d.glob(f".*{TMP_SUFFIX}"):
        parts = p.name[: -len(TMP_SUFFIX)].split(".")
        if len(parts) < 5 or not parts[-2].isdigit():
            continue
        try:
            orphan = _writer_dead(parts[-3], int(parts[-2]), p, now)
        except OSError:
            continue
        if orphan:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else _unlink(p)  # dirs: atomic_dir's
            removed += 1
    return removed


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


#: ``renameat2`` flag swapping two existing paths in one step (Linux 3.15+, most local file systems).
RENAME_EXCHANGE = 2
AT_FDCWD = -100
#: Errors of ``renameat2`` meaning "not on this kernel / file system": :func:`atomic_dir` falls back.
_NO_EXCHANGE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP)


def _renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28+ / musl), else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap the existing ``a`` and ``b`` in one atomic step; ``False`` where the system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    import ctypes

    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(b))


def _aside(path: Path) -> Path:
    """``.<name>.old.<host>.<pid>``: where the fallback of :func:`atomic_dir` keeps the previous
    directory for a moment (not a temp name: :func:`clean_orphans` never deletes it)."""
    return path.with_name(f".{path.name}.old.{_host()}.{os.getpid()}")


def recover_dir(path: str | Path) -> None:
    """Undo what a writer killed inside :func:`atomic_dir`'s fallback left: ``path`` missing and its
    previous directory aside is put back; a previous directory aside beside a complete ``path`` is
    removed. Directories aside of live writers are left alone."""
    path, now = Path(path), time.time()
    for p in sorted(path.parent.glob(f".{glob.escape(path.name)}.old.*")):
        host, _, pid = p.name[len(path.name) + 6 :].partition(".")
        if not pid.isdigit() or "." in host:
            continue
        try:
            if not _writer_dead(host, int(pid), p, now):
                continue
            if path.exists():
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.replace(p, path)
        except OSError:
            continue


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A directory written whole or not at all: yields a temp directory beside ``path``; when the
    block succeeds its files are ``fsync``-ed and it takes the place of ``path``. When the block
    fails it is removed and ``path`` is as it was. I/O failures become :class:`WriteError`; other
    exceptions pass through after the clean-up.

    A previous ``path`` is swapped out in one step on Linux (``renameat2(RENAME_EXCHANGE)``: readers
    see the old directory or the complete new one, never none) and removed after; a writer killed
    before that removal leaves it under a temp name, which :func:`clean_orphans` removes. Where the
    system cannot swap (other OSes, some file systems) the previous directory is first moved aside
    to ``.<name>.old.<host>.<pid>``, and ``path`` is missing for a moment: a writer killed then
    leaves it there, and the next :func:`atomic_dir` on ``path`` (or :func:`recover_dir`) puts it back."""
    path = Path(path)
    recover_dir(path)
    if path.exists() and not path.is_dir():
        raise WriteError(errno.EEXIST, f"cannot write {path}: a file is in the way")
    ensure_dir(path.parent)
    clean_orphans(path.parent)
    tmp, old = temp_path(path), None
    try:
        tmp.mkdir()
        yield tmp
        _fsync_tree(tmp)
        if path.exists() and _exchange(tmp, path):
            old = tmp  # now the previous directory, under the temp name
        else:
            if path.exists():
                old = _aside(path)
                os.replace(path, old)
            try:
                os.replace(tmp, path)
            except OSError:
                if old is not None:
                    os.replace(old, path)
                    old = None
                raise
        _fsync_dir(path.parent)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, WriteError):
            raise
        raise WriteError(err.errno, describe(err, path)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
