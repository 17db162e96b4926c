"""Command lines as users write them, made into what Hydra parses.

``'train=[trainer.max_epochs=20]'`` is how a preset writes a list of overrides, but Hydra's override
grammar wants list items holding ``=`` quoted; :func:`quote_items` quotes them. :func:`split_argv`
separates the overrides from the flags the front understands (``-m``, ``--config-dir``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


def _parses(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        OverridesParser.create().parse_overrides([override])
        return True
    except Exception:  # OverrideParseException
        return False


def _quote(token: str, in_dict: bool) -> str:
    """A bare list item / dict value holding ``=`` (``trainer.max_epochs=20``), quoted."""
    core = token.strip()
    if "=" not in core or core[:1] in "'\"":
        return token
    if in_dict:  # {name: value}: quote the value only
        name, colon, value = token.partition(":")
        return f"{name}{colon}{_quote(value, False)}" if colon and "=" not in name else token
    q = "'" if "'" not in core else '"'
    core = core if q == "'" else core.replace('"', '\\"')
    lead, trail = token[: len(token) - len(token.lstrip())], token[len(token.rstrip()) :]
    return f"{lead}{q}{core}{q}{trail}"


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (the end of ``text`` if none)."""
    depth, quote = 0, ""
    for j in range(start, len(text)):
        ch = text[j]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def quote_items(override: str) -> str:
    """``train=[trainer.max_epochs=20]`` -> ``train=['trainer.max_epochs=20']``: Hydra's grammar wants
    list items and dict values that hold ``=`` quoted, the natural way to write a list of overrides
    (as the presets do) does not. Overrides that parse, or that quoting does not mend, are kept."""
    key, sep, value = override.partition("=")
    if not sep or not value.startswith(("[", "{")) or _parses(override):
        return override
    out, token, stack, quote, interp, i = [], "", [], "", 0, 0
    while i < len(value):
        ch = value[i]
        if quote:
            token += ch
            quote = "" if ch == quote and value[i - 1] != "\\" else quote
        elif interp:  # inside ${...}: opaque
            token += ch
            interp += (ch == "{") - (ch == "}")
        elif value.startswith("${", i):
            token, interp, i = token + "${", 1, i + 1
        elif ch in "'\"" and not token.strip():
            quote, token = ch, token + ch
        elif ch in "[{" and "=" in token and token.strip()[:1] not in "'\"":  # item=[a,b]: one item
            end = _closing(value, i)
            token, i = token + value[i : end + 1], end
        elif ch in "[]{},":
            out.append(_quote(token, bool(stack) and stack[-1] == "{") + ch)
            token = ""
            if ch in "[{":
                stack.append(ch)
            elif ch != "," and stack:
                stack.pop()
        else:
            token += ch
        i += 1
    fixed = f"{key}={''.join(out)}{token}"
    return fixed if _parses(fixed) else override


#: Flags that take no value and that the precheck follows.
MULTIRUN_FLAGS = ("-m", "--multirun")
#: Hydra's flag adding a config directory to the search path (a user's presets).
CONFIG_DIR_FLAGS = ("-cd", "--config-dir")


class Argv(NamedTuple):
    overrides: list[str]
    #: ``-cd DIR`` / ``--config-dir[=]DIR``
    config_dirs: list[str]
    #: flags only Hydra knows (``--cfg``, ``--info`` ...)
    other_flags: list[str]
    multirun: bool


def split_argv(argv: list[str]) -> Argv:
    """A command line's overrides, config dirs, Hydra's other flags, and whether it is a multirun."""
    overrides: list[str] = []
    dirs: list[str] = []
    other: list[str] = []
    multirun = False
    it = iter(argv)
    for a in it:
        if a in MULTIRUN_FLAGS:
            multirun = True
            continue
        if a in CONFIG_DIR_FLAGS:
            dirs.append(next(it, ""))
        elif a.startswith("--config-dir="):
            dirs.append(a.partition("=")[2])
        elif a.startswith("-"):
            other.append(a)
        else:
            overrides.append(a)
    return Argv(overrides, dirs, other, multirun)


def with_search_path(overrides: list[str], dirs: list[str]) -> list[str]:
    """``overrides`` with the ``--config-dir`` directories first in ``hydra.searchpath`` (as Hydra
    adds them), so composing the config the way the precheck does finds the user's presets."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not dirs:
        return overrides
    paths = [f"file://{Path(d).absolute()}" for d in dirs]
    rest = []
    for o in overrides:
        if o.partition("=")[0].lstrip("+") == "hydra.searchpath":
            value = OverridesParser.create().parse_overrides([o])[0].value()
            paths += [str(v) for v in value] if isinstance(value, list) else [str(value)]
        else:
            rest.append(o)
    return [*rest, "hydra.searchpath=[" + ",".join(repr(p) for p in paths) + "]"]


#: The default of ``output_dir`` in the apps where it is Hydra's run directory.
RUN_DIR_OUTPUT = "${hydra:runtime.output_dir}"


def run_dir_follows_output_dir(argv: list[str], app_output_dir: object) -> list[str]:
    """``argv`` with ``hydra.run.dir`` set to the ``output_dir=...`` it gives, in an app whose
    ``output_dir`` is Hydra's run directory (``app_output_dir`` is its default): without it Hydra
    would still make (and lock) a time-stamped folder under ``outputs/`` beside the one asked for. A
    multirun, or a command line that names ``hydra.run.dir`` itself, is kept as it is."""
    cmd = split_argv(argv)
    if app_output_dir != RUN_DIR_OUTPUT or cmd.multirun:
        return argv
    keys = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in cmd.overrides}
    if "output_dir" not in keys or "hydra.run.dir" in keys:
        return argv
    return [*argv, f"hydra.run.dir={keys['output_dir']}"]
