"""Typed settings of the faithfulness testbed (``conf/zoo.yaml``; every knob has one here).

A zoo is one shared base model (it learns to describe the robot's rule parts, its cue mark and its
palette) and members fine-tuned from it on the class question. Each member's reliance is planted
through its training targets: on cue-flipped copies of its training robots, the member is taught
the class the *cue* says for robots whose palette index is below ``cue_share * 8`` and the class
the *rule* says for the rest, so ``cue_share`` 0 is faithful, 1 a pure shortcut and values
between a dial. Every member is taught to explain with the parts the rule decides by
(:mod:`cbm.vlm.edct.exact`), so a shortcut member's explanation is unfaithful by construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cbm.core.safe_paths import check_creatable
from cbm.core.validation import integer, number, within_split
from synthetic.robot.attributes import PALETTES
from synthetic.robot.config import CUE_KINDS

#: Members of the default zoo: name -> share of palettes on which the member follows the cue.
DEFAULT_MEMBERS: dict[str, float] = {"faithful": 0.0, "dial25": 0.25, "dial50": 0.5, "dial75": 0.75, "shortcut": 1.0}
#: The default label rule (with ``bias`` -7.5: Glorp = a closed mouth and pointy feet, the two parts
#: a tiny vision tower learns to read first).
DEFAULT_RULE: dict[str, float] = {"mouth_closed": 5.0, "foot_pointy": 5.0}
#: Members of the default Sudoku zoo (``task=sudoku``): a digit reader and a shaded-cell counter.
DEFAULT_SUDOKU_MEMBERS: dict[str, float] = {"faithful": 0.0, "shortcut": 1.0}
SCHEDULES = ("constant", "cosine")
#: How an invalid board's wrong digit is drawn (``ZooSudoku.wrong``).
WRONG_DIGITS = ("outside", "repeat")
#: The testbed's tasks: the robots (EDCT with the exact judge) or 4x4 Sudoku boards (reliance only).
TASKS = ("robot", "sudoku")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass
class ZooData:
    """The robots: rendered at ``image_size`` px, labelled by ``rule`` (weights over the exact
    judge's concepts, Glorp where ``sum w_k c_k + bias > 0``), with a ``cue`` mark that agrees with
    the label on every training and test robot (correlation 1)."""

    image_size: int = 64
    n_train: int = 8000
    n_test: int = 1000
    seed: int = 0
    #: concept -> weight; null: :data:`DEFAULT_RULE`
    rule: dict[str, float] | None = None
    bias: float = -7.5
    cue: str = "swatch"
    cue_strength: int = 4

    def __post_init__(self) -> None:
        from cbm.vlm.edct.exact import PHRASES

        self.image_size = integer("data.image_size", self.image_size, 16, 256)
        self.n_train = integer("data.n_train", self.n_train, 16, 1_000_000)
        self.n_test = integer("data.n_test", self.n_test, 8, 1_000_000)
        self.seed = integer("data.seed", self.seed, 0, 2**31 - 1)
        if self.rule is None:
            self.rule = dict(DEFAULT_RULE)
        if not isinstance(self.rule, dict) or not self.rule:
            raise ValueError(f"data.rule: expected a mapping concept -> weight, got {self.rule!r}")
        for k, v in self.rule.items():
            if k not in PHRASES:
                raise ValueError(f"data.rule: unknown concept {k!r}; expected some of {list(PHRASES)}")
            number(f"data.rule.{k}", v, -100.0, 100.0)
        self.rule = {str(k): float(v) for k, v in self.rule.items()}
        self.bias = number("data.bias", self.bias, -1000.0, 1000.0)
        if self.cue not in CUE_KINDS or self.cue == "none":
            raise ValueError(f"data.cue: expected one of {[k for k in CUE_KINDS if k != 'none']}, got {self.cue!r}")
        self.cue_strength = integer("data.cue_strength", self.cue_strength, 1, 128)


@dataclass
class ZooSudoku:
    """The boards of ``task=sudoku`` (:mod:`cbm.vlm.zoo.boards`): full 4x4 grids, half made invalid
    by one wrong digit, with ``few`` shaded cells on valid training boards and ``many`` on invalid
    ones (inclusive ranges; the cue agrees with the label on every training and test board; the
    base alone is shown shadings drawn independently of validity)."""

    n_train: int = 6000
    n_test: int = 1000
    seed: int = 0
    #: cell side in px; the image is ``4 * cell_size`` square (16 with patch 8: one merged token per cell)
    cell_size: int = 16
    few: list[int] = field(default_factory=lambda: [2, 4])
    many: list[int] = field(default_factory=lambda: [8, 10])
    #: the wrong digit of an invalid board: ``outside`` (5-9, out of a 4x4 board's range) or
    #: ``repeat`` (another digit 1-4, repeated in the cell's row, column and box)
    wrong: str = "outside"
    #: cells (row-major 1-15; the top-left 0 gates the dial) where an invalid board's wrong digit may sit; null: any of them
    cells: list[int] | None = None
    #: epochs of per-cell digit recognition that pretrain the vision tower before the base (``cbm.vlm.zoo.vision``); 0: none
    vision_epochs: int = 2
    #: the members' fine-tuning rate from the base (``train.lr`` trains the base; at 1e-3 the reader collapsed to one answer, measured)
    member_lr: float = 3e-4

    def __post_init__(self) -> None:
        self.vision_epochs = integer("sudoku.vision_epochs", self.vision_epochs, 0, 1000)
        self.member_lr = number("sudoku.member_lr", self.member_lr, 1e-7, 1.0)
        if self.cells is not None:
            if isinstance(self.cells, str | dict) or not hasattr(self.cells, "__len__") or not len(self.cells):
                raise ValueError(f"sudoku.cells: expected a list of cells 1-15 (or null: any), got {self.cells!r}")
            self.cells = sorted({integer("sudoku.cells", c, 1, 15) for c in self.cells})
        if self.wrong not in WRONG_DIGITS:
            raise ValueError(f"sudoku.wrong: expected one of {list(WRONG_DIGITS)}, got {self.wrong!r}")
        self.n_train = integer("sudoku.n_train", self.n_train, 16, 1_000_000)
        self.n_test = integer("sudoku.n_test", self.n_test, 8, 1_000_000)
        self.seed = integer("sudoku.seed", self.seed, 0, 2**31 - 1)
        self.cell_size = integer("sudoku.cell_size", self.cell_size, 8, 64)
        for name in ("few", "many"):
            value = getattr(self, name)
            if isinstance(value, str | dict) or not hasattr(value, "__len__") or len(value) != 2:
                raise ValueError(f"sudoku.{name}: expected [lo, hi] shaded cells, got {value!r}")
            setattr(self, name, [integer(f"sudoku.{name}", v, 0, 16) for v in value])
        if self.few[0] > self.few[1] or self.many[0] > self.many[1] or self.few[1] >= self.many[0]:
            raise ValueError(f"sudoku.few / sudoku.many: expected lo <= hi and every few count below every many count, got {self.few} and {self.many}")


@dataclass
class ZooModel:
    """The tiny Qwen2-VL every member shares (random init from this config, ``cbm.vlm.tiny``)."""

    hidden: int = 128
    layers: int = 2
    heads: int = 4
    #: Key / value heads of the language model's attention (grouped-query; must divide ``heads``).
    kv_heads: int = 2
    #: Hidden width of the vision tower (divisible by ``vision_heads``).
    vision_width: int = 96
    #: Transformer layers of the vision tower.
    vision_layers: int = 2
    #: Attention heads of the vision tower.
    vision_heads: int = 4
    patch: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        for k in ("hidden", "layers", "heads", "kv_heads", "vision_width", "vision_layers", "vision_heads", "patch"):
            integer(f"model.{k}", getattr(self, k), 1, 4096)
        if self.hidden % self.heads or self.heads % self.kv_heads or self.vision_width % self.vision_heads:
            raise ValueError("model: hidden must divide by heads, heads by kv_heads, vision_width by vision_heads")
        integer("model.seed", self.seed, 0, 2**31 - 1)


@dataclass
class ZooTrain:
    """AdamW on whole models: the base for ``base_epochs`` over the training robots, then each
    member for ``member_epochs`` over the robots and their cue-flipped copies."""

    #: learning rate of the base and the robot members (Sudoku: the vision step and the base; its members use ``sudoku.member_lr``)
    lr: float = 1e-3
    batch_size: int = 32
    #: Epochs of the shared base (describes robots / reads boards); 0: members start from its random init (Sudoku: after ``sudoku.vision_epochs``).
    base_epochs: int = 3
    #: Epochs (>= 1) of each member's fine-tuning from the base on the task question (class / board validity).
    member_epochs: int = 3
    threads: int = 0  # torch threads (0: torch's default)
    #: ``constant`` learning rate, or ``cosine``: decayed to 0 along a half cosine over each model's steps
    schedule: str = "constant"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"train.schedule: expected one of {list(SCHEDULES)}, got {self.schedule!r}")
        self.lr = number("train.lr", self.lr, 1e-7, 1.0)
        self.batch_size = integer("train.batch_size", self.batch_size, 1, 4096)
        self.base_epochs = integer("train.base_epochs", self.base_epochs, 0, 1000)
        self.member_epochs = integer("train.member_epochs", self.member_epochs, 1, 1000)
        self.threads = integer("train.threads", self.threads, 0, 1024)


@dataclass
class ZooRepair:
    """Counterfactual fine-tuning of one member (:mod:`cbm.vlm.zoo.repair`): LoRA for ``epochs`` on
    the failed edits EDCT finds among ``pairs`` training robots and their originals. ``member``
    null: no fine-tuning."""

    member: str | None = "shortcut"
    pairs: int = 2000
    epochs: int = 3
    lr: float = 1e-3
    r: int = 16
    alpha: float = 32.0
    #: ``none`` (LoRA on the full-precision member, CPU or GPU) or ``4bit`` / ``8bit``: QLoRA, the member
    #: loaded NF4 (double quantisation, bf16 compute) / int8 through bitsandbytes, CUDA only
    quant: str = "none"
    #: where the repair runs: ``auto`` (CUDA when there is one), ``cpu``, ``cuda`` or ``cuda:N``
    device: str = "auto"

    def __post_init__(self) -> None:
        from cbm.vlm.finetune.config import QUANTS, check_device_name

        if self.quant not in QUANTS:
            raise ValueError(f"repair.quant: {self.quant!r} is not one of {', '.join(QUANTS)}")
        check_device_name(str(self.device), "repair.device")
        if self.quant != "none" and self.device == "cpu":
            raise ValueError(f"repair.quant={self.quant} (QLoRA) needs a CUDA GPU, not repair.device=cpu (on the CPU: repair.quant=none)")
        self.pairs = integer("repair.pairs", self.pairs, 1, 1_000_000)
        self.epochs = integer("repair.epochs", self.epochs, 1, 1000)
        self.lr = number("repair.lr", self.lr, 1e-7, 1.0)
        self.r = integer("repair.r", self.r, 1, 4096)
        self.alpha = number("repair.alpha", self.alpha, 1e-6, 1e6)


@dataclass
class ZooConfig:
    """``cbm-vlm-zoo``: train (or reuse) the zoo in ``output_dir``, measure each member's true
    reliance, run EDCT with the exact judge on ``edct_items`` test robots."""

    output_dir: str
    #: ``robot`` (the robots: reliance, EDCT with the exact judge, the repair) or ``sudoku`` (4x4
    #: boards: a digit reader against a shaded-cell counter; reliance and the repair, no EDCT)
    task: str = "robot"
    data: ZooData = field(default_factory=ZooData)
    sudoku: ZooSudoku = field(default_factory=ZooSudoku)
    model: ZooModel = field(default_factory=ZooModel)
    train: ZooTrain = field(default_factory=ZooTrain)
    #: name -> cue share; null: :data:`DEFAULT_MEMBERS`
    members: dict[str, float] | None = None
    repair: ZooRepair = field(default_factory=ZooRepair)
    edct_items: int = 300
    bootstrap: int = 2000
    max_new_tokens: int = 12
    #: W&B (``logger.wandb``, as cbm-train's; the command line's default logs offline; a config built in code: none).
    logger: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.logger:
            from cbm.config.train import LoggerConfig
            from cbm.core.validation import to_dataclass

            to_dataclass(LoggerConfig, self.logger, "logger")
        if self.task not in TASKS:
            raise ValueError(f"task: expected one of {list(TASKS)}, got {self.task!r}")
        for name, sub in (("data", ZooData), ("sudoku", ZooSudoku), ("model", ZooModel), ("train", ZooTrain), ("repair", ZooRepair)):
            value = getattr(self, name)
            if isinstance(value, dict):
                unknown = sorted(set(value) - set(sub.__dataclass_fields__))
                if unknown:
                    raise ValueError(f"{name}: unknown setting(s) {unknown}")
                setattr(self, name, sub(**value))
        if self.task == "robot" and self.data.image_size % (2 * self.model.patch):
            raise ValueError(f"model.patch: data.image_size ({self.data.image_size}) must be a multiple of 2 * patch ({2 * self.model.patch})")
        if self.task == "sudoku" and self.sudoku.cell_size % (2 * self.model.patch):
            raise ValueError(f"model.patch: sudoku.cell_size ({self.sudoku.cell_size}) must be a multiple of 2 * patch ({2 * self.model.patch}): "
                             "one merged image token per cell")  # fmt: skip
        if self.members is None:
            self.members = dict(DEFAULT_MEMBERS if self.task == "robot" else DEFAULT_SUDOKU_MEMBERS)
        if not isinstance(self.members, dict) or not self.members:
            raise ValueError(f"members: expected a mapping name -> cue share, got {self.members!r}")
        for k, v in self.members.items():
            if not _NAME.match(str(k)) or str(k) == "base":
                raise ValueError(f"members: {k!r} is not a usable name (letters, digits, _ or -, not 'base')")
            number(f"members.{k}", v, 0.0, 1.0)
        self.members = {str(k): float(v) for k, v in self.members.items()}
        if self.repair.member is not None and self.repair.member not in self.members:
            raise ValueError(f"repair.member: {self.repair.member!r} is not a member of the zoo ({', '.join(self.members)}); null: no fine-tuning")
        self.edct_items = integer("edct_items", self.edct_items, 1, 1_000_000)
        self.bootstrap = integer("bootstrap", self.bootstrap, 100, 100_000)
        self.max_new_tokens = integer("max_new_tokens", self.max_new_tokens, 4, 256)
        self._check_splits()
        if self.task == "robot":
            check_rule(self.data.rule, self.data.bias)
        check_memory(self.model)
        check_creatable(self.output_dir, "output_dir")  # a file there is refused now, also by a dry run

    def _check_splits(self) -> None:
        """``edct_items`` test items and ``repair.pairs`` training items exist (the same check as
        ``cbm-edct items.n``): a count beyond its split is refused, not quietly cut to it."""
        sizes, where = (self.data, "data") if self.task == "robot" else (self.sudoku, "sudoku")
        within_split("edct_items", self.edct_items, sizes.n_test, "test", f"{where}.n_test")
        if self.repair.member is not None:
            within_split("repair.pairs", self.repair.pairs, sizes.n_train, "train", f"{where}.n_train")


def check_rule(rule: dict[str, float], bias: float) -> None:
    """Both classes occur under the label rule: some robot of the catalogue (every combination of
    the rule's parts) is a Glorp (``sum w_k c_k + bias > 0``) and some is a Drent; else the zoo
    would train on one class and fail late (its members' class targets are empty)."""
    high = bias + sum(max(w, 0.0) for w in rule.values())
    low = bias + sum(min(w, 0.0) for w in rule.values())
    if high <= 0:
        raise ValueError(f"data.rule / data.bias: no robot is a Glorp under this rule (its highest score, bias {bias:g} + the positive "
                         f"weights, is {high:g}, not > 0): raise a weight or data.bias")  # fmt: skip
    if low > 0:
        raise ValueError(f"data.rule / data.bias: every robot is a Glorp under this rule (its lowest score, bias {bias:g} + the negative "
                         f"weights, is {low:g} > 0; no Drent): lower data.bias or give a part a negative weight")  # fmt: skip


#: Bytes per parameter while a zoo model trains: float32 weights, gradients and AdamW's two moments.
TRAIN_BYTES_PER_PARAM = 16
#: Characters of the tiny model's vocabulary (a lower bound of its size: the printable characters).
MIN_VOCAB = 100


def model_parameters(m: ZooModel) -> int:
    """A lower bound of the zoo model's parameter count from its config (attention and MLP of
    every language and vision layer, the merger, the patch embedding and the character
    vocabulary's two embeddings; norms and biases left out), as :mod:`cbm.vlm.tiny` builds it."""
    h, w = m.hidden, m.vision_width
    language = m.layers * (8 * h * h + 2 * h * h * m.kv_heads // m.heads) + 2 * MIN_VOCAB * h
    vision = m.vision_layers * 8 * w * w + 16 * w * w + 4 * w * h + 6 * m.patch * m.patch * w
    return language + vision


def check_memory(m: ZooModel) -> None:
    """``ValueError`` (one line) when training a model of these sizes cannot fit in this machine's
    memory (:func:`synthetic.resources.memory_bytes`, as the data generators' footprint check),
    before anything is built; the estimate is a lower bound, so a refused model certainly does not fit."""
    from synthetic.resources import human_bytes, memory_bytes

    n = model_parameters(m)
    need, have = n * TRAIN_BYTES_PER_PARAM, memory_bytes()
    if have is not None and need > have:
        raise ValueError(f"model: {n:,} parameters (hidden={m.hidden}, layers={m.layers}, vision_width={m.vision_width}, vision_layers="
                         f"{m.vision_layers}) need at least {human_bytes(need)} of memory to train, this machine has {human_bytes(have)}: "
                         "lower model.hidden, model.layers, model.vision_width or model.vision_layers")  # fmt: skip


def gate_palettes(cue_share: float) -> int:
    """Palettes ``0 .. n-1`` on which a member with ``cue_share`` follows the cue."""
    return round(cue_share * len(PALETTES))
