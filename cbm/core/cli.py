"""The command-line front of the Hydra apps (``cbm-train``, ``cbm-intervene``, ``cbm-automate``).

Before Hydra creates a run directory and before torch is imported, every config the command line
asks for is composed and validated by the app's typed schema (a multirun: each swept value once),
so a typo costs about a second, prints one line (``prog: error: ...``, exit 2) and leaves no file.
``--help`` lists the config groups, their options and the top-level settings. Hydra's own flags
(``--cfg job``, ``--info``, ``--hydra-help``, ``-cn`` ...) go straight to Hydra; so do the cells of
``cbm-experiment`` (``CBM_NO_PRECHECK``, validated by their parent). Either way a run directory a
live command holds is refused before Hydra writes into it.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from cbm.core import runlock
from cbm.core.common import CONF_DIR, USER_ERRORS, clean_errors, dry_run, fail, hydra_run_dir, one_line
from cbm.core.concurrency import stoppable
from cbm.core.overrides import quote_items, run_dir_follows_output_dir, split_argv, with_search_path
from cbm.core.safe_paths import check_creatable, check_hydra_names
from cbm.core.validation import ConfigError


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

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
        # the basic sweeper's own sweeps ('+hydra.sweeper.params={seed:"0,1"}'): each value checked too
        parsed += parser.parse_overrides(sweeper_params(parsed))
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


SWEEPER_PARAMS = "hydra.sweeper.params"


def sweeper_params(parsed: list[Any]) -> list[str]:
    """``key=values`` overrides of the basic sweeper's ``hydra.sweeper.params`` given on the command
    line (a mapping, or one ``hydra.sweeper.params.<key>``)."""
    out: list[str] = []
    for o in parsed:
        key = o.key_or_group
        if key == SWEEPER_PARAMS and isinstance(o.value(), dict):
            out += [f"{k}={v}" for k, v in o.value().items()]
        elif key.startswith(SWEEPER_PARAMS + "."):
            out.append(f"{key.removeprefix(SWEEPER_PARAMS + '.')}={o.value()}")
    return out


def explain(err: Exception, overrides: list[str], config_name: str) -> str:
    """One line for a Hydra composition error, naming the field and the valid choices."""
    import yaml
    from hydra.errors import MissingConfigException

    bad_yaml = err if isinstance(err, yaml.YAMLError) else err.__cause__
    if isinstance(bad_yaml, yaml.MarkedYAMLError) and bad_yaml.problem_mark is not None:
        mark = bad_yaml.problem_mark
        return f"config: {mark.name}: not valid YAML at line {mark.line + 1} ({bad_yaml.problem})"
    text = f"{err}\n{err.__cause__ or ''}"
    m = re.search(r"In '([^']+)': ConfigTypeError raised while composing config:\s*Cannot merge (Dict|List)Config with (Dict|List)Config", text)
    if m:  # e.g. a preset that is a YAML list, or 'settings: [...]' where a mapping belongs
        kind = {"Dict": "mapping", "List": "list"}
        return f"config: {m.group(1)}: a {kind[m.group(3)]} where the config has a {kind[m.group(2)]} (the file itself or one of its settings)"
    if isinstance(err, MissingConfigException):
        m = re.search(r"Could not (?:find|load) '([^']+)/([^']+)'", text)
        if m:
            group, name = m.groups()
            options = getattr(err, "options", None) or group_options(group)
            return f"config: unknown {group} '{name}' (choose from: {', '.join(options)})"
    m = re.search(r"Could not override '([^']+)'", text)
    if m and "not in struct" in text:
        key = given = m.group(1)
        full = re.search(r"full_key: (\S+)", text)
        if full and full.group(1).startswith(key + "."):  # a mapping merged into the node: the unknown key is inside it
            key = full.group(1)
        if key.startswith(SWEEPER_PARAMS):
            return f"config: the basic sweeper's params are added with '+': '+{SWEEPER_PARAMS}={{seed:\"0,1\"}}' (or sweep on the command line: seed=0,1)"
        parent, _, leaf = key.rpartition(".")
        node = compose_plain(config_name, [o for o in overrides if not o.lstrip("+~").startswith(given)])
        sub = OmegaConf.select(node, parent) if parent else node
        if parent and sub is None:
            return f"config: unknown key '{key}' ({parent} is null: set it whole, '{parent}={{{leaf}: ...}}')"
        have = ", ".join(sorted(str(k) for k in sub if k != "hydra")) if isinstance(sub, DictConfig) else ""
        add = f"; a key it does not set yet is added with '+{key}=...'" if parent and have else ""
        return f"config: unknown key '{key}'" + (f" ({parent or 'the config'} has: {have}{add})" if have else "")
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


def precheck(config_name: str, overrides: list[str], validate: Callable[[DictConfig], Any],
             config_dirs: list[str] | None = None, multirun: bool = False) -> list[str]:  # fmt: skip
    """Compose and validate every config of the command line (with the ``--config-dir`` presets);
    the run directory must be free (no live command holds it). :class:`ConfigError` with one line.
    Returns the run directory of each composed config."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf.errors import OmegaConfBaseException

    for d in config_dirs or []:
        if not Path(d).is_dir():
            raise ConfigError(f"--config-dir: {d or repr(d)} is not a directory")
    run_dirs: list[str] = []
    try:
        for combo in expand_sweeps(overrides):
            combo = with_search_path(combo, config_dirs or [])
            try:
                cfg = compose_plain(config_name, combo)
            except Exception as err:  # Hydra's composition errors, a user preset's YAML errors
                raise ConfigError(explain(err, combo, config_name)) from None
            run_dirs.append(str(cfg.hydra.run.dir))
            check_creatable(run_dirs[-1], "hydra.run.dir")
            check_creatable(str(cfg.hydra.sweep.dir), "hydra.sweep.dir")
            check_hydra_names(cfg)  # hydra.job.name, output_subdir, sweep.subdir stay in the run directory
            if not multirun:
                runlock.check_free(str(cfg.hydra.run.dir), "wait for it to finish or choose another directory")
            job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            try:
                validate(job)
            except OmegaConfBaseException as err:  # an interpolation that cannot resolve
                raise ConfigError(f"config: {one_line(err)}") from None
    finally:
        GlobalHydra.instance().clear()
    return run_dirs


#: Hydra's flags that answer without running the job (nothing is written into a run directory).
NO_JOB_FLAGS = ("help", "hydra_help", "cfg", "info", "shell_completion")


def _no_usage(message: str) -> None:
    raise ValueError(message)


def job_run_dir(config_name: str, argv: list[str]) -> str | None:
    """The run directory Hydra's job will write into for ``argv`` (Hydra's flags included);
    ``None`` for a multirun, a command Hydra answers without a job (``--cfg``, ``--info`` ...) or
    one it cannot compose (Hydra itself then says why, before it writes anything)."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if "--version" in argv:
        return None
    parser = get_args_parser()
    parser.error = _no_usage  # type: ignore[method-assign]  # Hydra prints its own refusal
    try:
        args = parser.parse_args(argv)
    except ValueError:  # a bad flag: Hydra refuses it before any job
        return None
    if args.multirun or args.experimental_rerun or any(getattr(args, f, None) for f in NO_JOB_FLAGS):
        return None
    given = [o for o in args.overrides if o.partition("=")[0].lstrip("+") == "hydra.run.dir"]
    try:  # a literal hydra.run.dir (every cell's): no need to compose the config
        literal = OverridesParser.create().parse_overrides(given[-1:])[0].value() if given else None
    except Exception:
        literal = None
    if isinstance(literal, str) and "${" not in literal:
        return literal
    try:
        overrides = with_search_path(list(args.overrides), split_argv(argv).config_dirs)
        with warnings.catch_warnings():  # Hydra warns itself (a --config-dir that is not there)
            warnings.simplefilter("ignore")
            return str(compose_plain(args.config_name or config_name, overrides).hydra.run.dir)
    except Exception:  # Hydra's composition errors: Hydra reports them itself
        return None
    finally:
        GlobalHydra.instance().clear()


def check_not_busy(config_name: str, argv: list[str]) -> None:
    """:class:`runlock.Busy` when a live command holds the run directory ``argv``'s job would write
    into: run before Hydra writes ``.hydra/`` there, whatever flags or ``CBM_NO_PRECHECK`` skipped
    the precheck. The other ranks of a multi-process run share rank zero's (:func:`runlock.check_free`)."""
    run_dir = job_run_dir(config_name, argv)
    if run_dir is not None:
        runlock.check_free(run_dir, "wait for it to finish or choose another directory")


def locked(task: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """``task`` holding its Hydra run directory's lock (:mod:`runlock`): two commands never write
    into one directory at once; a second is refused with one line naming the first."""

    @wraps(task)
    def run(cfg: DictConfig) -> Any:
        d = hydra_run_dir()
        if d is None or not d.is_dir():
            return task(cfg)
        with runlock.hold(d, "wait for it to finish or choose another directory"):
            return task(cfg)

    return run


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

    @stoppable(prog)
    def main() -> None:
        from cbm.core.lifeline import die_with_parent

        die_with_parent()  # a cell of cbm-experiment does not outlive it
        argv = [a if a.startswith("-") else quote_items(a) for a in sys.argv[1:]]
        raw = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / f"{config_name}.yaml"), resolve=False)
        argv = run_dir_follows_output_dir(argv, raw.get("output_dir") if isinstance(raw, dict) else None)
        sys.argv[1:] = argv  # what Hydra parses: list items holding '=' quoted, the run directory output_dir names
        if any(a in ("-h", "--help") for a in argv):
            print(help_text(prog, config_name, summary, examples))
            return
        cmd = split_argv(argv)
        checked = not cmd.other_flags and not os.environ.get("CBM_NO_PRECHECK")
        fresh = None  # the run directory this command makes, if it makes one: an endpoint that never answered leaves nothing there
        try:
            if checked:
                run_dirs = precheck(config_name, cmd.overrides, validate, cmd.config_dirs, cmd.multirun)
                if not cmd.multirun and run_dirs and not Path(run_dirs[0]).exists():
                    fresh = Path(run_dirs[0])
            else:  # Hydra would write .hydra/ into a directory a live command holds before locked() refuses
                check_not_busy(config_name, argv)
        except USER_ERRORS as err:
            fail(prog, one_line(err))
        if checked and dry_run(prog):
            return
        import hydra

        app = (lambda cfg: None) if dry_run() else clean_errors(prog, fresh)(locked(task))
        hydra.main(config_path=CONF_DIR, config_name=config_name, version_base="1.3")(app)()

    return main
