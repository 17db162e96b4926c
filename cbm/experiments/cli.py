"""The command-line front of the Hydra apps (``cbm-train``, ``cbm-intervene``, ``cbm-automate``).

Before Hydra creates a run directory and before torch is imported, every config the command line
asks for is composed and validated by the app's typed schema (a multirun: each swept value once),
so a typo costs about a second, prints one line (``prog: error: ...``, exit 2) and leaves no file.
``--help`` lists the config groups, their options and the top-level settings. Hydra's own flags
(``--cfg job``, ``--info``, ``--hydra-help`` ...) go straight to Hydra.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from cbm.config import ConfigError
from cbm.config.safe_paths import check_hydra_names
from cbm.experiments.common import CONF_DIR, USER_ERRORS, clean_errors, fail, one_line

MULTIRUN_FLAGS = ("-m", "--multirun")


def typed_app_config(cfg: DictConfig, cls: type) -> Any:
    """An app's composed config as its dataclass ``cls`` (fields with unions, which OmegaConf's
    structured configs cannot hold): unknown top-level keys and ``__post_init__`` checks are one line."""
    raw: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    raw.pop("hydra", None)
    unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}")
    return cls(**raw)


def group_options(group: str) -> list[str]:
    """Config names of a group (``model`` -> ``[blackbox, cbm, ...]``)."""
    d = Path(CONF_DIR) / group
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def config_groups(config_name: str) -> list[str]:
    """Groups in the app's defaults list."""
    cfg = OmegaConf.load(Path(CONF_DIR) / f"{config_name}.yaml")
    groups = []
    for entry in cfg.get("defaults", []) or []:
        if isinstance(entry, DictConfig | dict):
            groups += [str(k) for k in entry if not str(k).startswith("override")]
    return groups


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Override lists covering every swept value once: the first value of every sweep, then each
    other value of one sweep with the rest at their first values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as err:  # OverrideParseException: bad syntax
        raise ConfigError(f"bad override: {one_line(err)}") from None
    base: list[str] = []
    sweeps: list[tuple[int, list[str]]] = []
    for o in parsed:
        if o.is_sweep_override():
            try:
                values = [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
            except Exception:  # e.g. glob sweeps over group options: left to Hydra
                continue
            if not values:
                continue
            sweeps.append((len(base), values))
            base.append(values[0])
        else:
            base.append(o.input_line or "")
    combos = [base]
    for i, values in sweeps:
        combos += [[*base[:i], v, *base[i + 1 :]] for v in values[1:]]
    return combos


def explain(err: Exception, overrides: list[str], config_name: str) -> str:
    """One line for a Hydra composition error, naming the field and the valid choices."""
    from hydra.errors import MissingConfigException

    text = f"{err}\n{err.__cause__ or ''}"
    if isinstance(err, MissingConfigException):
        m = re.search(r"Could not (?:find|load) '([^']+)/([^']+)'", text)
        if m:
            group, name = m.groups()
            options = getattr(err, "options", None) or group_options(group)
            return f"config: unknown {group} '{name}' (choose from: {', '.join(options)})"
    m = re.search(r"Could not override '([^']+)'", text)
    if m and "not in struct" in text:
        key = m.group(1)
        parent, _, leaf = key.rpartition(".")
        node = compose_plain(config_name, [o for o in overrides if not o.lstrip("+~").startswith(key)])
        sub = OmegaConf.select(node, parent) if parent else node
        have = ", ".join(sorted(str(k) for k in sub if k != "hydra")) if isinstance(sub, DictConfig) else ""
        return f"config: unknown key '{key}'" + (f" ({parent or 'the config'} has: {have})" if have else "")
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    lines += [ln.strip() for ln in str(err.__cause__ or "").strip().splitlines() if ln.strip()]
    detail = next((ln for ln in lines[1:] if not ln.startswith(("full_key", "object_type", "To append"))), "")
    return "config: " + " ".join(x for x in (lines[0] if lines else type(err).__name__, detail) if x)


def compose_plain(config_name: str, overrides: list[str]) -> DictConfig:
    """The composed config (with ``hydra``), its runtime paths filled so interpolations resolve."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = os.path.join(os.getcwd(), "<run dir>")
        cfg.hydra.runtime.cwd = os.getcwd()
    HydraConfig.instance().set_config(cfg)
    return cfg


def check_creatable(directory: str, what: str) -> None:
    """A directory Hydra will create must not sit under a file or in a read-only place."""
    p = Path(directory).absolute()
    ancestor = p
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{what}: cannot create {p}: {ancestor} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: cannot create {p}: {ancestor} is not writable")


def precheck(config_name: str, overrides: list[str], validate: Callable[[DictConfig], Any]) -> None:
    """Compose and validate every config of the command line; :class:`ConfigError` with one line."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        for combo in expand_sweeps(overrides):
            try:
                cfg = compose_plain(config_name, combo)
            except (HydraException, OmegaConfBaseException) as err:
                raise ConfigError(explain(err, combo, config_name)) from None
            check_creatable(str(cfg.hydra.run.dir), "hydra.run.dir")
            check_creatable(str(cfg.hydra.sweep.dir), "hydra.sweep.dir")
            check_hydra_names(cfg)  # hydra.job.name, output_subdir, sweep.subdir stay in the run directory
            job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            try:
                validate(job)
            except OmegaConfBaseException as err:  # an interpolation that cannot resolve
                raise ConfigError(f"config: {one_line(err)}") from None
    finally:
        GlobalHydra.instance().clear()


#: Longest default shown in ``--help`` (prompt templates are summarised).
HELP_VALUE_CHARS = 120


def _short(text: str) -> str:
    return text if len(text) <= HELP_VALUE_CHARS else text[: HELP_VALUE_CHARS - 5] + " ...}"


def help_text(prog: str, config_name: str, summary: str, examples: list[str]) -> str:
    cfg = OmegaConf.load(Path(CONF_DIR) / f"{config_name}.yaml")
    lines = [f"usage: {prog} [key=value ...] [group=option ...] [-m/--multirun]", "", summary, "", "config groups:"]
    for group in config_groups(config_name):
        lines.append(f"  {group:<11} {', '.join(group_options(group.split('@')[0]))}")
    if (Path(CONF_DIR) / config_name).is_dir() and config_name not in config_groups(config_name):  # presets added with +<name>=
        lines.append(f"  +{config_name:<10} {', '.join(group_options(config_name))}")
    raw = OmegaConf.to_container(cfg, resolve=False)
    settings = [f"{k}={_short(repr(raw.get(k)))}" for k in cfg if k not in ("defaults", "hydra")]
    lines += ["", "settings (defaults): " + "  ".join(settings), "", "examples:"]
    lines += [f"  {prog} {e}" for e in examples]
    lines += [
        "",
        f"Defaults live in {CONF_DIR}/{config_name}.yaml and its groups; '{prog} --cfg job' prints the",
        "composed config, '--hydra-help' Hydra's own options. Bad values stop with one line and exit 2.",
    ]
    return "\n".join(lines)


def hydra_app(
    prog: str,
    config_name: str,
    task: Callable[[DictConfig], Any],
    validate: Callable[[DictConfig], Any],
    summary: str,
    examples: list[str],
) -> Callable[[], None]:
    """``main()`` of a Hydra entry point: ``--help``, the precheck, then the Hydra app running ``task``."""

    def main() -> None:
        argv = sys.argv[1:]
        if any(a in ("-h", "--help") for a in argv):
            print(help_text(prog, config_name, summary, examples))
            return
        flags = [a for a in argv if a.startswith("-")]
        if all(f in MULTIRUN_FLAGS for f in flags) and not os.environ.get("CBM_NO_PRECHECK"):
            try:
                precheck(config_name, [a for a in argv if not a.startswith("-")], validate)
            except USER_ERRORS as err:
                fail(prog, one_line(err))
        import hydra

        hydra.main(config_path=CONF_DIR, config_name=config_name, version_base="1.3")(clean_errors(prog)(task))()

    return main
