"""The cells of an experiment: which command each runs, with which overrides, in which directory.

A cell is one run of an existing command (``cbm-train``, ``cbm-intervene``, ``cbm-automate``) in
``<output_dir>/<setting>/<model>/seed<k>/<stage>``; the directory says which experiment and cell it
holds. A cell is finished when its result file exists and was made with the same overrides
(``cell.json``), so rerunning an experiment skips finished cells and resumes killed trainings.
Torch-free: planning and checking a whole experiment costs no import of torch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from cbm.config.experiment import ExperimentConfig

#: Stage -> (module run as ``python -m``, the file a finished run leaves).
STAGES = {
    "train": ("cbm.experiments.train", "metrics.json"),
    "intervene": ("cbm.experiments.intervene", "results.json"),
    "automate": ("cbm.experiments.automate", "automation.json"),
}


@dataclass
class Cell:
    """One run of the experiment."""

    stage: str
    setting: str
    model: str
    seed: int
    dir: Path
    overrides: list[str]
    #: Cells whose results this one reads (its training; the paired black box).
    needs: list[Cell] = field(default_factory=list)
    #: Why parts of the requested grid are not run here (e.g. an LLM intervener without a client).
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.setting}/{self.model}/seed{self.seed}/{self.stage}"

    @property
    def result(self) -> Path:
        return self.dir / STAGES[self.stage][1]

    def fingerprint(self) -> str:
        """Hash of what defines the cell (its overrides without the paths that locate it)."""
        own = [o for o in self.overrides if not o.startswith(("hydra.run.dir=", SEARCH_PATH, "cache_dir=", "checkpoint=", "blackbox=", ORACLE_TABLE, WANDB))]
        return hashlib.sha256(json.dumps([self.stage, own]).encode()).hexdigest()[:16]

    def state(self) -> str:
        """``done`` | ``resume`` (a killed training with a checkpoint) | ``fresh`` | ``changed``."""
        stamp = self.dir / "cell.json"
        if stamp.is_file():
            try:
                same = json.loads(stamp.read_text()).get("fingerprint") == self.fingerprint()
            except (OSError, json.JSONDecodeError):
                same = False
            if not same:
                return "changed"
        if self.result.is_file():
            return "done"
        if self.stage == "train" and (self.dir / "checkpoints" / "last.ckpt").is_file() and stamp.is_file():
            return "resume"
        return "fresh"


#: Data keys that change only the concept annotations, never ``x``, ``y`` or the splits: a black box
#: (which never reads concepts) trained on settings that differ only in these is the same model, bit
#: for bit (tests/experiments/test_experiment.py), so it is trained once and paired with all of them.
BLACKBOX_IGNORES = ("data.concept_set", "data.concept_noise")


#: The training's own oracle table (random concepts, true values), an analysis rather than part of the
#: model: an experiment whose intervene stage runs oracle x random turns it off (the same numbers
#: come from the intervene cell, which encodes the test split once for every intervener and policy).
ORACLE_TABLE = "interventions.ks="


def covers_oracle_table(cfg: ExperimentConfig) -> bool:
    """Whether the experiment's intervene stage measures what the training's oracle table would."""
    st = cfg.intervene
    return st is not None and "oracle" in st.intervener and "random" in st.policy


def blackbox_identity(overrides: list[str]) -> tuple[str, ...]:
    """A black-box training's overrides without the keys it ignores (and its run directory)."""
    return tuple(o for o in overrides if o.partition("=")[0].lstrip("+") not in BLACKBOX_IGNORES and not o.startswith("hydra.run.dir="))


def _listing(values: list) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def llm_client(stage_overrides: list[str]) -> str | None:
    """The LLM client the intervene stage's overrides configure (the shipped default has none)."""
    for o in stage_overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+") == "intervener.llm.client" and value not in ("", "null"):
            return value
    from cbm.interventions import registry  # torch-free

    return registry.defaults("intervener", "llm").get("client")


#: Overrides that say where a cell logs, not what it computes (W&B on or off never reruns a cell).
WANDB = "logger.wandb."


def wandb_overrides(cfg: ExperimentConfig, cell: Cell) -> list[str]:
    """``logger.wandb.*`` of a cell: with ``wandb=true`` one group (the experiment's name) and the
    cell's key as its name, else W&B off."""
    if not cfg.wandb:
        return [f"{WANDB}enabled=false"]
    w = cfg.wandb_settings
    over = [f"{WANDB}enabled=true", f"{WANDB}group={cfg.name}", f"{WANDB}name={cell.key}", f"{WANDB}mode={w.mode}",
            f"{WANDB}project={w.project}", f"{WANDB}tags=[{','.join(json.dumps(t) for t in w.tags)}]"]  # fmt: skip
    if w.entity:
        over.append(f"{WANDB}entity={w.entity}")
    if w.notes:
        over.append(f"{WANDB}notes={json.dumps(w.notes)}")
    if cell.stage == "train":
        over += [f"{WANDB}log_model={str(w.log_model).lower()}", f"{WANDB}log_dataset={str(w.log_dataset).lower()}"]
    return over


#: Where a cell finds the experiment's own config directories (a user's models and presets).
SEARCH_PATH = "hydra.searchpath="


def user_search_path() -> list[str]:
    """The config directories the running command was given beyond the package's own
    (``--config-dir``, ``hydra.searchpath``), as ``hydra.searchpath`` entries: every cell composes
    its config with them, so ``model=my_model`` in a user's preset finds ``conf/model/my_model.yaml``."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    sources = HydraConfig.get().runtime.get("config_sources") or []
    return [f"{s.schema}://{s.path}" for s in sources if s.provider not in ("hydra", "main", "schema") and s.schema in ("file", "pkg")]


def plan(cfg: ExperimentConfig, search_path: list[str] | None = None) -> list[Cell]:
    """Every cell of the experiment in run order: all trainings, then the analyses (``search_path``:
    config directories every cell gets, default :func:`user_search_path`)."""
    root = Path(cfg.output_dir)
    search_path = user_search_path() if search_path is None else search_path
    cache = [f"cache_dir={cfg.cache_dir}"] if cfg.cache_dir is not None else ["cache_dir=null"]
    cells: list[Cell] = []
    train: dict[tuple[str, str, int], Cell] = {}
    shared: dict[tuple[str, ...], Cell] = {}  # black boxes by what they are trained on
    for setting, s_over in cfg.settings.items():
        for model, m_over in cfg.models.items():
            for seed in cfg.seeds:
                d = root / setting / model / f"seed{seed}" / "train"
                # the most specific last: a model's own overrides win over the experiment-wide `train`
                data_seed = [f"data.seed={seed}"] if cfg.data_seed == "seed" else []
                over = [*s_over, *cfg.train, *m_over, f"seed={seed}", *data_seed, *cache, f"hydra.run.dir={d}"]
                if covers_oracle_table(cfg) and model != cfg.blackbox:
                    over.insert(-1, f"{ORACLE_TABLE}[]")
                cell = Cell("train", setting, model, seed, d, over)
                if model == cfg.blackbox:
                    first = shared.setdefault(blackbox_identity(over), cell)
                    if first is not cell:  # the same black box as an earlier setting's: paired, not retrained
                        train[setting, model, seed] = first
                        continue
                train[setting, model, seed] = cell
                cells.append(cell)
    for (setting, model, seed), tcell in train.items():
        bb = train.get((setting, cfg.blackbox, seed)) if cfg.blackbox else None
        is_bb = model == cfg.blackbox
        if is_bb and tcell.setting != setting:
            continue  # a shared black box is analysed once, under its own setting
        base = root / setting / model / f"seed{seed}"
        if cfg.intervene is not None and not is_bb:
            st = cfg.intervene
            interveners, skipped = list(st.intervener), {}
            if "llm" in interveners and llm_client(st.overrides) is None:
                interveners.remove("llm")
                skipped["llm"] = "no LLM client configured (intervene.overrides: intervener.llm.client=cbm.vlm.client:make_client and its client_kwargs)"
            if interveners:
                d = base / "intervene"
                over = [f"checkpoint={tcell.dir}", f"intervener={_listing(interveners)}", f"policy={_listing(st.policy)}",
                        f"ks={_listing(st.ks)}", f"seed={seed}", *cache, *st.overrides, f"hydra.run.dir={d}"]  # fmt: skip
                if bb is not None:
                    over.insert(1, f"blackbox={bb.dir / 'metrics.json'}")
                cells.append(Cell("intervene", setting, model, seed, d, over, [tcell, *([bb] if bb else [])], skipped))
        if cfg.automate is not None:
            st = cfg.automate
            ks = [0] if is_bb else st.ks
            d = base / "automate"
            over = [f"checkpoint={tcell.dir}", f"policy={st.policy}", f"intervener={st.intervener}", f"ks={_listing(ks)}",
                    f"target_accuracy={st.target_accuracy}", f"method={st.method}", f"seed={seed}", *cache,
                    *st.overrides, f"hydra.run.dir={d}"]  # fmt: skip
            cells.append(Cell("automate", setting, model, seed, d, over, [tcell]))
    where = [SEARCH_PATH + "[" + ",".join(repr(p) for p in search_path) + "]"] if search_path else []
    for cell in cells:  # the run directory stays last
        cell.overrides[-1:-1] = [*wandb_overrides(cfg, cell), *where]
    return cells


def replaced(overrides: list[str]) -> list[tuple[list[str], list[str]]]:
    """Overrides a later one of the same key or config group replaces (a preset's shared ``train``
    list under a model's own ``model=``, a setting's ``data.n_train`` under ``train``'s), each put in
    effect: ``(the list without the later ones of its key, the overrides put in effect)``, one list
    per round (the first replaced value of every key, then the second ...). Composing these lists
    checks every override of a preset on its own, whatever comes after it: a misspelt group option
    or key is not silently dropped. ``[]`` when nothing is replaced (or the list does not parse:
    composing it says why)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # OverrideParseException
        return []
    where: dict[tuple[str, str | None], list[int]] = {}
    for i, o in enumerate(parsed):
        if not o.key_or_group.startswith("hydra."):
            where.setdefault((o.key_or_group, o.package), []).append(i)
    rounds = max((len(at) for at in where.values()), default=1) - 1
    out = []
    for r in range(rounds):
        keep = {at[min(r, len(at) - 1)] for at in where.values()}
        drop = {i for at in where.values() for i in at if i not in keep}
        shown = [overrides[at[r]] for at in where.values() if r < len(at) - 1]
        out.append(([o for i, o in enumerate(overrides) if i not in drop], shown))
    return out
