"""Names that become paths, checked in one place (torch-free).

Every value that ends up as one component of a file or directory name goes through here, so a
setting such as ``name=../../x`` or a data value such as a fine-tuning ``pair_id`` of
``../../X/p3`` can never write outside the run folder:

* :func:`check_component` — a *setting* (experiment, setting and model names, dataset names):
  refused with one line naming the field and the bad value;
* :func:`slug` — a *data value* (pair ids, item ids, episode ids, names read back from a
  manifest): mapped deterministically to a safe component, unchanged when already safe, else
  made safe and suffixed with a digest of the original, so two values never share a name;
  :func:`slugs` also checks a whole set for collisions;
* :func:`inside` — the last guard: a path, symlinks followed, stays under its root;
* :func:`check_file_path` — an explicit output *file* path a user gave (it may lie anywhere, but
  must name a file);
* :func:`check_creatable` — a directory a command will create (run, cache, output folders): not
  under a file, not in a read-only place (:func:`existing_ancestor` is where it would be made).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

#: Longest file name most file systems take (bytes, UTF-8).
MAX_NAME_BYTES = 255
#: What a slug keeps; everything else becomes ``_``.
SAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
#: A name left as it is by :func:`slug` (it never contains the digest separator ``~``).
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
#: Separator of a slug's digest suffix, and the digest's length (hex digits, 64 bits).
SLUG_SEP, SLUG_DIGEST = "~", 16
#: Longest slug (bytes): room is left for what a call site puts around it (``automation_<slug>.png``).
SLUG_MAX_BYTES = 200
_DRIVE = re.compile(r"^[A-Za-z]:")
#: An innermost ``${...}`` interpolation.
_INTERPOLATION = re.compile(r"\$\{[^{}]*\}")


def _problem(s: str) -> str | None:
    """Why ``s`` cannot be one path component (``None``: it can)."""
    if not s:
        return "it is empty"
    if s in (".", ".."):
        return "it names a directory, not an entry"
    if "/" in s or "\\" in s:
        return "it contains a path separator"
    if _has_control(s):
        return "it contains a control character"
    if _DRIVE.match(s) or PureWindowsPath(s).is_absolute() or PurePosixPath(s).is_absolute():
        return "it is an absolute path"
    if len(s.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    return None


def _has_control(s: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in s)


def _shown(s: str) -> str:
    """``s`` quoted on one line (control characters escaped), long values cut."""
    return repr(s if len(s) <= 80 else s[:77] + "...")


def check_component(value: Any, what: str, shown: str | None = None) -> str:
    """``value`` as a string that is safe as one file or directory name; else ``ValueError`` naming
    ``what`` (the field) and the value (or ``shown``, what the user wrote): empty, ``.``, ``..``,
    ``/`` or ``\\``, control characters (NUL, newline), an absolute path or drive letter, or over 255 bytes."""
    s = str(value) if value is not None else ""
    why = _problem(s)
    if why:
        raise ValueError(f"{what}: {_shown(s if shown is None else shown)} is not usable as a file or directory name ({why})")
    return s


def slug(value: Any) -> str:
    """A safe path component for a data value, deterministic: ``value`` itself when it is made of
    letters, digits, ``_ . -`` (not starting with ``.``), else those characters kept, the rest as
    ``_``, and ``~`` plus a digest of the original appended (distinct values, distinct slugs); at
    most :data:`SLUG_MAX_BYTES` long."""
    s = str(value)
    if SAFE_NAME.match(s) and len(s) <= SLUG_MAX_BYTES:  # ASCII: characters are bytes
        return s
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:SLUG_DIGEST]
    base = SAFE_CHARS.sub("_", s)[: SLUG_MAX_BYTES - len(SLUG_SEP) - SLUG_DIGEST].lstrip(".") or "_"
    return f"{base}{SLUG_SEP}{digest}"


def slugs(values: Iterable[Any], what: str) -> dict[Any, str]:
    """:func:`slug` of every distinct value; ``ValueError`` if two share one (they would
    overwrite each other's files)."""
    out: dict[Any, str] = {}
    owner: dict[str, Any] = {}
    for v in values:
        if v in out:
            continue
        s = slug(v)
        if s in owner:
            raise ValueError(f"{what}: {owner[s]!r} and {v!r} map to the same file name {s!r}")
        out[v], owner[s] = s, v
    return out


def inside(root: str | Path, path: str | Path, what: str) -> Path:
    """``path`` when it stays under ``root`` once both are resolved (symlinks followed, ``..``
    collapsed); else ``ValueError`` naming ``what``."""
    base, full = Path(root).resolve(), Path(path).resolve()  # both relative to the working directory
    if full != base and base not in full.parents:
        raise ValueError(f"{what}: {str(path)!r} leads outside {base}")
    return Path(path)


def child(root: str | Path, name: Any, what: str) -> Path:
    """``root / name`` for a checked component ``name`` that stays under ``root``."""
    return inside(root, Path(root) / check_component(name, what), what)


def check_file_path(value: Any, what: str) -> Path:
    """An output file path a user chose (it may lie anywhere): not empty, no control characters,
    and its last part a usable file name (not ``.`` or ``..``, no trailing separator)."""
    s = os.fspath(value) if isinstance(value, Path) else str(value if value is not None else "")
    name = s.replace("\\", "/").rsplit("/", 1)[-1]
    if _has_control(s):
        why = "it contains a control character"
    elif name in ("", ".", ".."):
        why = "it ends in a directory" if s else "it is empty"
    else:
        why = _problem(name)
    if why:
        raise ValueError(f"{what}: {_shown(s)} does not name a file ({why})")
    return Path(s)


def existing_ancestor(path: str | Path) -> Path:
    """``path`` (absolute) or its nearest ancestor that exists: where ``mkdir -p path`` would start."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_creatable(directory: str | Path, what: str) -> None:
    """A directory a command will create must not sit under a file or in a read-only place;
    ``ValueError`` naming ``what`` (the setting) otherwise."""
    p = Path(directory).absolute()
    ancestor = existing_ancestor(p)
    if not ancestor.is_dir():
        raise ValueError(f"{what}: cannot create {p}: {ancestor} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: cannot create {p}: {ancestor} is not writable")


def check_hydra_names(cfg: Any) -> None:
    """Hydra's own names that become paths: ``hydra.job.name`` (the log file), ``hydra.output_subdir``
    (``.hydra``) and a sweep's ``hydra.sweep.subdir`` stay in the run directory, and every config
    group choice (``+experiment=<preset>``, ``data=<name>``) in the config folder. The run and sweep
    directories themselves are paths a user may point anywhere, but without control characters."""
    from omegaconf import OmegaConf

    hydra = cfg.get("hydra") if hasattr(cfg, "get") else None
    if hydra is None:
        return

    def value(key: str) -> Any:
        try:
            return OmegaConf.select(hydra, key, throw_on_missing=True)
        except Exception:  # not resolvable before Hydra runs (e.g. hydra.job.num): Hydra's own
            return None

    def text(key: str) -> tuple[str, str] | None:
        """``(checked, shown)``: the value; where it cannot be resolved before Hydra runs
        (``x_${hydra.job.num}``) its text as written, checked with every interpolation as ``x``."""
        try:
            v = OmegaConf.select(hydra, key, throw_on_missing=True)
            return None if v is None else (str(v), str(v))
        except Exception:
            raw = _raw(hydra, key)
            return None if raw is None else (blank_interpolations(raw), raw)

    name = text("job.name")
    if name is not None:
        check_component(name[0], "hydra.job.name", shown=name[1])
    for key in ("run.dir", "sweep.dir"):
        d = text(key)
        if d is not None and _has_control(d[0]):
            raise ValueError(f"hydra.{key}: {_shown(d[1])} contains a control character")
    for key in ("output_subdir", "sweep.subdir"):
        sub = text(key)
        if sub is not None:
            _relative_inside(sub[0], f"hydra.{key}", "the run directory", shown=sub[1])
    chosen = [(str(g), o) for g, o in (value("runtime.choices") or {}).items() if isinstance(o, str)]
    for group, option in chosen + _group_overrides(value("overrides.task") or []):  # policy=[a,b]: only in the overrides
        _relative_inside(option, group, f"conf/{group.split('@')[0]}/")  # client@vlm: conf/client/


def blank_interpolations(raw: str) -> str:
    """``../x_${hydra.job.num}`` -> ``../x_x``: what a path check can judge before the values exist."""
    while True:
        blanked = _INTERPOLATION.sub("x", raw)
        if blanked == raw:
            return raw
        raw = blanked


def _raw(node: Any, key: str) -> str | None:
    """The unresolved text of the string at ``key`` under ``node`` (``None`` if it is not one)."""
    from omegaconf import DictConfig, OmegaConf

    parent, _, leaf = key.rpartition(".")
    try:
        sub = OmegaConf.select(node, parent) if parent else node
        raw = OmegaConf.to_container(sub, resolve=False).get(leaf) if isinstance(sub, DictConfig) else None
    except Exception:
        return None
    return raw if isinstance(raw, str) else None


def _group_overrides(task: Any) -> list[tuple[str, str]]:
    """``(group, option)`` of every command-line override that chooses options of a config group of
    ``conf/`` (``data=robot``, ``policy=[random,uncertainty]``, ``client@vlm=openai``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from cbm.core.paths import CONF_DIR

    try:
        parsed = OverridesParser.create().parse_overrides([str(t) for t in task])
    except Exception:  # bad syntax: Hydra itself said so already
        return []
    out = []
    for o in parsed:
        if (Path(CONF_DIR) / o.key_or_group).is_dir() and not o.is_sweep_override():
            v = o.value()
            out += [(o.key_or_group, x) for x in (v if isinstance(v, list) else [v]) if isinstance(x, str)]
    return out


def _relative_inside(s: str, what: str, where: str, shown: str | None = None) -> None:
    """A relative path of usable components (``a/b`` is fine, ``../x`` and ``/x`` are not)."""
    absolute = PurePosixPath(s).is_absolute() or PureWindowsPath(s).is_absolute() or bool(_DRIVE.match(s))
    parts = [p for p in s.replace("\\", "/").split("/") if p not in ("", ".")]
    if absolute or any(_problem(p) for p in parts):
        raise ValueError(f"{what}: {(s if shown is None else shown)!r} must be a relative path inside {where} (no '..', no absolute path)")
