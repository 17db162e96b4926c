"""Typed configuration of the Sudoku generator (defaults mirror ``conf/data/sudoku.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from cbm.core.validation import integer, number, one_of
from synthetic.sudoku.geometry import BOXES, geometry
from synthetic.sudoku.negatives import FAMILIES, fail_count_items, family_probs, parse_fail_counts
from synthetic.sudoku.v04_config import V04Render

#: Default failing-check distribution of the invalid boards: ``count:weight`` or
#: ``lo-hi:weight`` entries (2 = near-valid minimum: one failing check is impossible).
DEFAULT_FAIL_COUNTS = "2:0.2, 3:0.15, 4:0.15, 5-6:0.15, 7-9:0.15, 10-18:0.12, 19-27:0.08"
#: How invalid boards are made (``SudokuConfig.corruption``).
CORRUPTIONS = ("walk", "swaps")
#: Where valid boards come from (``SudokuConfig.valid_source``).
VALID_SOURCES = ("mip", "pattern")
#: Glyph banks (``SudokuConfig.glyph_bank``): one per split (no split shares a glyph with training)
#: or one shared by every split (a speed knob: test glyphs are then training glyphs).
GLYPH_BANKS = ("per_split", "shared")
#: How boards are drawn (``SudokuConfig.renderer``): gathered from glyph banks, or drawn board by
#: board as concept-benchmark 0.4 draws them (``data.v04.*``).
RENDERERS = ("bank", "v04")
#: Where a setting's error points (``SudokuConfig.cell_size: ...``).
W = "SudokuConfig"
DEFAULT_NEGATIVE_OPS: dict[str, float] = {"line_swap": 0.25, "group_permute": 0.25, "corrupt": 0.5}
#: Bytes a board takes in memory besides its image (board, checks, labels, render seeds).
ROW_OVERHEAD = 2000


@dataclass
class SudokuConfig:
    """Sudoku validity task: x = rendered board, c = 27 exact checks (12 on 4x4 boards), y = AND of the checks.

    Attributes
    ----------
    seed : data seed (boards, negatives, render choices and glyph banks).
    n_train, n_val, n_calib, n_test : split sizes.
    valid_fraction : share of valid boards in every split (exact up to rounding).
    n_mip_seeds : most HiGHS solves whose grids are expanded by validity-preserving transforms.
    boards_per_mip_seed : solve one seed grid per this many boards (all splits), between 1 and
        ``n_mip_seeds`` (a 1,000-board smoke set pays one solve, not 32); 0 = always ``n_mip_seeds``.
    negative_ops : relative weights of the negative families ``line_swap``,
        ``group_permute``, ``corrupt``; for each invalid board the family is drawn
        among those that reach its failing-check count.
    fail_counts : distribution of the number of failing checks of invalid boards,
        ``"k:w, a-b:w, ..."`` with 2 <= k <= 27 (a range spreads its weight evenly; one
        failing check is impossible). A string, so an override replaces it (dicts merge).
    modality : ``image`` (uint8 ``[N,H,W,3]``) or ``tabular`` (one-hot board, float32 ``[N,729]``; 4x4: ``[N,64]``).
    cell_size : cell pitch in px; images are ``9*cell_size + thick line`` square (``4*cell_size + ...`` for 4x4).
    style : ``printed`` or ``handwritten`` digits.
    glyph_variants : pre-rendered variants per digit (handwriting / print jitter), per bank.
    glyph_bank : ``per_split`` (default: every split draws its glyphs, pencil marks and noise fields
        from banks of its own, so no validation, calibration or test glyph occurs in training) or
        ``shared`` (one bank for every split: a speed knob; the test glyphs are then training glyphs,
        which a reader can memorise).
    pencil_prob, pencil_max : share of cells with 1..pencil_max pencil-mark candidates.
    blur : Gaussian blur sigma in px; noise : pixel-noise std in grey levels.
    """

    name: str = "sudoku"
    seed: int = 0
    n_train: int = 4000
    n_val: int = 1000
    n_calib: int = 2000
    n_test: int = 4000
    valid_fraction: float = 0.5
    n_mip_seeds: int = 32
    boards_per_mip_seed: int = 2000
    negative_ops: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_NEGATIVE_OPS))
    fail_counts: str = DEFAULT_FAIL_COUNTS
    modality: str = "image"
    cell_size: int = 28
    style: str = "printed"
    glyph_variants: int = 48
    glyph_bank: str = "per_split"
    #: ``bank`` (cells gathered from glyph banks: style, glyph_variants, glyph_bank, pencil marks,
    #: blur, noise) or ``v04`` (concept-benchmark 0.4's drawing, board by board: ``v04``)
    renderer: str = "bank"
    #: ``renderer=v04``'s knobs (synthetic.sudoku.v04_config.V04Render)
    v04: V04Render = field(default_factory=V04Render)
    pencil_prob: float = 0.0
    pencil_max: int = 3
    blur: float = 0.0
    noise: float = 0.0
    #: how invalid boards are made: ``walk`` (random walks to a drawn failing-check count, the
    #: families of ``negative_ops``; ``fail_counts`` sets the counts) or ``swaps`` (concept-benchmark
    #: 0.4: 1..``max_cell_swaps`` swaps / duplications of a valid board, see synthetic.sudoku.corrupt)
    corruption: str = "walk"
    #: ``corruption=swaps``: most swap / duplication actions per invalid board (1..9; each draws 1..this uniformly).
    max_cell_swaps: int = 9
    #: where the valid boards come from: ``mip`` (HiGHS solves, every validity-preserving transform) or
    #: ``pattern`` (concept-benchmark 0.4.1's: its one canonical board under line, band and stack
    #: shuffles and a relabelling; a narrower family whose swaps break fewer boxes)
    valid_source: str = "mip"
    #: box side (concept-benchmark 0.4's ``block_size``): 3 = the 9x9 board (27 checks), 2 = 4x4
    #: boards (12 checks; only 288 valid grids exist, so boards repeat; invalid ones by ``swaps``)
    block_size: int = 3
    #: concept-benchmark 0.4's name for ``valid_fraction``: when set it replaces it
    valid_board_ratio: float | None = None

    def __post_init__(self) -> None:
        # normalise container types (OmegaConf DictConfig, int keys from YAML)
        self.negative_ops = {str(k): float(v) for k, v in dict(self.negative_ops).items()}
        if not isinstance(self.fail_counts, str):  # a mapping {"k": w} from Python code
            self.fail_counts = ", ".join(f"{k}:{w:g}" for k, w in fail_count_items(self.fail_counts))

        if self.valid_board_ratio is not None:
            self.valid_fraction = number(f"{W}.valid_board_ratio", self.valid_board_ratio, 0.0, 1.0)
            self.valid_board_ratio = None
        one_of(f"{W}.name", self.name, ("sudoku",))
        for k in ("seed", "n_train", "n_val", "n_calib", "n_test"):
            integer(f"{W}.{k}", getattr(self, k), 0)
        if self.n_train + self.n_val + self.n_calib + self.n_test <= 0:
            raise ValueError(f"{W}: all split sizes are zero")
        self.valid_fraction = number(f"{W}.valid_fraction", self.valid_fraction, 0.0, 1.0)
        integer(f"{W}.n_mip_seeds", self.n_mip_seeds, 1)
        integer(f"{W}.boards_per_mip_seed", self.boards_per_mip_seed, 0)  # 0 = always n_mip_seeds
        unknown = set(self.negative_ops) - set(FAMILIES)
        if unknown:
            raise ValueError(f"{W}: negative_ops has unknown families {sorted(unknown)}; expected {list(FAMILIES)}")
        if any(w < 0 for w in self.negative_ops.values()) or sum(self.negative_ops.values()) <= 0:
            raise ValueError(f"{W}: negative_ops weights must be non-negative with a positive sum")
        try:
            family_probs(self.negative_ops, parse_fail_counts(self.fail_counts))
        except ValueError as err:
            raise ValueError(f"{W}: {err}") from None
        one_of(f"{W}.modality", self.modality, ("image", "tabular"))
        integer(f"{W}.cell_size", self.cell_size, 8, 128)
        one_of(f"{W}.style", self.style, ("printed", "handwritten"))
        integer(f"{W}.glyph_variants", self.glyph_variants, 1, 1024)
        one_of(f"{W}.glyph_bank", self.glyph_bank, GLYPH_BANKS)
        self.v04 = V04Render.coerce(self.v04)
        one_of(f"{W}.renderer", self.renderer, RENDERERS)
        if self.renderer != "v04" and self.v04 != V04Render():
            raise ValueError(f"{W}: v04.* settings are read only with renderer=v04")
        if self.renderer == "v04":
            drawn = {"style": "handwritten", "pencil_prob": 0.0, "blur": 0.0, "noise": 0.0, "block_size": 3}
            off = [k for k, v in drawn.items() if getattr(self, k) != v]
            if off:
                raise ValueError(f"{W}: renderer=v04 draws 9x9 boards its own way (handwriting, starters, bubbles): {off[0]}="
                    f"{getattr(self, off[0])!r} does not apply (needs {drawn[off[0]]!r})")  # fmt: skip
            if self.v04.handwriting == "font":
                self.v04.font()  # a missing font is one line now, not a failure when the boards are drawn
        self.pencil_prob = number(f"{W}.pencil_prob", self.pencil_prob, 0.0, 1.0)
        integer(f"{W}.pencil_max", self.pencil_max, 1, 8)
        self.blur = number(f"{W}.blur", self.blur, 0.0)
        self.noise = number(f"{W}.noise", self.noise, 0.0)
        one_of(f"{W}.corruption", self.corruption, CORRUPTIONS)
        one_of(f"{W}.valid_source", self.valid_source, VALID_SOURCES)
        if self.valid_source == "pattern" and self.block_size != 3:
            raise ValueError(f"{W}: valid_source=pattern draws 9x9 boards (block_size=3); block_size={self.block_size} draws from all grids")
        integer(f"{W}.max_cell_swaps", self.max_cell_swaps, 1, 9)
        one_of(f"{W}.block_size", self.block_size, BOXES)  # 4x4 or 9x9 boards
        if self.block_size != 3 and self.corruption != "swaps":
            raise ValueError(f"{W}: block_size={self.block_size} makes its invalid boards by swaps: set corruption=swaps (the 'walk' "
                "families and fail_counts are defined on the 27 checks of a 9x9 board)")  # fmt: skip

    # ------------------------------------------------------------ helpers
    @property
    def sizes(self) -> dict[str, int]:
        return {"train": self.n_train, "val": self.n_val, "calib": self.n_calib, "test": self.n_test}

    @property
    def split_sizes(self) -> dict[str, int]:
        """Boards per split (the name every data config shares)."""
        return self.sizes

    @property
    def n_total(self) -> int:
        return sum(self.sizes.values())

    @property
    def mip_seeds_used(self) -> int:
        """Seed grids solved for this config: one per ``boards_per_mip_seed`` boards, 1..``n_mip_seeds``."""
        if self.boards_per_mip_seed == 0:
            return self.n_mip_seeds
        return min(self.n_mip_seeds, max(1, -(-self.n_total // self.boards_per_mip_seed)))

    def footprint(self, storage: str = "memory") -> dict[str, Any]:
        """Lower bounds of the bytes the dataset takes (see :mod:`synthetic.resources`): the inputs
        (in memory, or on disk for ``storage="disk"`` images, nowhere for ``render``) plus about
        2 KB a board of boards, checks and labels in memory."""
        image = self.modality == "image"
        g = geometry(self.block_size)
        x = self.image_side**2 if image else g.cells * g.n * 4
        on_disk = image and storage == "disk"
        in_memory = not image or storage == "memory"
        form = f"{self.cell_size} px cells" if image else "tabular"
        return {"rows": self.n_total, "unit": "boards", "form": form,
                "memory": self.n_total * (ROW_OVERHEAD + (x if in_memory else 0)), "disk": self.n_total * x if on_disk else 0,
                "disk_possible": image, "knobs": ["n_train", "n_val", "n_calib", "n_test"]}  # fmt: skip

    @property
    def image_side(self) -> int:
        """Side (px) of a board image: ``n * cell_size`` plus the thick line (``bank``) or plus the
        margin on both sides (``v04``: 94 px at 10 px cells)."""
        from synthetic.sudoku.render import image_size

        n = geometry(self.block_size).n
        return n * self.cell_size + 2 * self.v04.margin_px if self.renderer == "v04" else image_size(self.cell_size, n)

    def to_dict(self) -> dict[str, Any]:
        """The fields; ``corruption`` / ``max_cell_swaps`` only when not the default walk,
        ``block_size`` only when not 3, ``valid_source`` only when not ``mip`` and ``v04`` only with ``renderer=v04`` (the cache key and
        ``info`` of configs written before those knobs existed stay what they were);
        ``valid_board_ratio`` is folded into ``valid_fraction``."""
        out = asdict(self)
        if out["renderer"] != "v04":
            del out["v04"]
        del out["valid_board_ratio"]
        if out["corruption"] == "walk" and out["max_cell_swaps"] == 9:
            del out["corruption"], out["max_cell_swaps"]
        if out["block_size"] == 3:
            del out["block_size"]
        if out["valid_source"] == "mip":
            del out["valid_source"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SudokuConfig:
        """Build from a plain / OmegaConf mapping; unknown keys fail with one line."""
        d = dict(d)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"SudokuConfig: unknown keys {unknown}; expected a subset of {sorted(names)}")
        return cls(**d)
