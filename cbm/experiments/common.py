"""Shared plumbing of the command-line entry points: config path, clean errors, results I/O."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from cbm.config import ConfigError
from synthetic.cache import make_temp

#: The repository's ``conf/`` directory (the only place defaults live).
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

#: Errors that mean "bad input", reported as one line and exit code 2.
USER_ERRORS = (ConfigError, ValueError, FileNotFoundError, KeyError)


#: Values of the ``device`` option of the evaluation commands.
DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str):
    """``auto`` -> CUDA when available, else the CPU; ``cuda`` without a GPU is an error."""
    import torch

    if name not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got '{name}'")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is available")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def fail(prog: str, message: str, code: int = 2) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)


def clean_errors(prog: str) -> Callable:
    """Decorator: bad-input exceptions become one ``prog: error: ...`` line and exit code 2."""

    def deco(fn: Callable) -> Callable:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if os.environ.get("CBM_DEBUG"):
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except USER_ERRORS as err:
                msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                fail(prog, msg)

        return wrapper

    return deco


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` via a temp file + rename, so readers never see a partial file."""
    fd, tmp = make_temp(path)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Atomic JSON file (floats of numpy / torch scalars included)."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=float))


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A small markdown table; floats shown as percentages with 2 decimals when in [0, 1]."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{100 * v:.2f}" if 0.0 <= v <= 1.0 else f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
