"""Typed configuration of the Sudoku generator (defaults mirror ``conf/data/sudoku.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from synthetic.sudoku.geometry import BOXES, geometry
from synthetic.sudoku.negatives import FAMILIES, fail_count_items, family_probs, parse_fail_counts
from synthetic.sudoku.v04_config import V04Render

#: Default failing-check distribution of the invalid boards: ``count:weight`` or
#: ``lo-hi:weight`` entries (2 = near-valid minimum: one failing check is impossible).
DEFAULT_FAIL_COUNTS = "2:0.2, 3:0.15, 4:0.15, 5-6:0.15, 7-9:0.15, 10-18:0.12, 19-27:0.08"
#: How invalid boards are made (``SudokuConfig.corruption``).
CORRUPTIONS = ("walk", "swaps")
#: Glyph banks (``SudokuConfig.glyph_bank``): one per split (no split shares a glyph with training)
#: or one shared by every split (a speed knob: test glyphs are then training glyphs).
GLYPH_BANKS = ("per_split", "shared")
#: How boards are drawn (``SudokuConfig.renderer``): gathered from glyph banks, or drawn board by
#: board as concept-benchmark 0.4 draws them (``data.v04.*``).
RENDERERS = ("bank", "v04")
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

        def bad(msg: str) -> None:
            raise ValueError(f"SudokuConfig: {msg}")

        if self.valid_board_ratio is not None:
            if isinstance(self.valid_board_ratio, bool) or not isinstance(self.valid_board_ratio, (int, float)):
                bad(f"valid_board_ratio={self.valid_board_ratio!r} must be a number in [0, 1]")
            self.valid_fraction, self.valid_board_ratio = float(self.valid_board_ratio), None
        if self.name != "sudoku":
            bad(f"name must be 'sudoku', got '{self.name}'")
        for k in ("seed", "n_train", "n_val", "n_calib", "n_test"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                bad(f"{k}={v!r} must be a non-negative integer")
        if self.n_train + self.n_val + self.n_calib + self.n_test <= 0:
            bad("all split sizes are zero")
        if not 0.0 <= float(self.valid_fraction) <= 1.0:
            bad(f"valid_fraction={self.valid_fraction} must lie in [0, 1]")
        if not isinstance(self.n_mip_seeds, int) or self.n_mip_seeds < 1:
            bad(f"n_mip_seeds={self.n_mip_seeds!r} must be a positive integer")
        if not isinstance(self.boards_per_mip_seed, int) or isinstance(self.boards_per_mip_seed, bool) or self.boards_per_mip_seed < 0:
            bad(f"boards_per_mip_seed={self.boards_per_mip_seed!r} must be a non-negative integer (0 = always n_mip_seeds)")
        unknown = set(self.negative_ops) - set(FAMILIES)
        if unknown:
            bad(f"negative_ops has unknown families {sorted(unknown)}; expected {list(FAMILIES)}")
        if any(w < 0 for w in self.negative_ops.values()) or sum(self.negative_ops.values()) <= 0:
            bad("negative_ops weights must be non-negative with a positive sum")
        try:
            family_probs(self.negative_ops, parse_fail_counts(self.fail_counts))
        except ValueError as err:
            bad(str(err))
        if self.modality not in ("image", "tabular"):
            bad(f"modality must be 'image' or 'tabular', got '{self.modality}'")
        if not isinstance(self.cell_size, int) or isinstance(self.cell_size, bool) or not 8 <= self.cell_size <= 128:
            bad(f"cell_size={self.cell_size!r} must be an integer in 8..128")
        if self.style not in ("printed", "handwritten"):
            bad(f"style must be 'printed' or 'handwritten', got '{self.style}'")
        if not isinstance(self.glyph_variants, int) or not 1 <= self.glyph_variants <= 1024:
            bad(f"glyph_variants={self.glyph_variants!r} must be an integer in 1..1024")
        if self.glyph_bank not in GLYPH_BANKS:
            bad(f"glyph_bank must be one of {list(GLYPH_BANKS)}, got {self.glyph_bank!r}")
        self.v04 = V04Render.coerce(self.v04)
        if self.renderer not in RENDERERS:
            bad(f"renderer must be one of {list(RENDERERS)}, got {self.renderer!r}")
        if self.renderer != "v04" and self.v04 != V04Render():
            bad("v04.* settings are read only with renderer=v04")
        if self.renderer == "v04":
            drawn = {"style": "handwritten", "pencil_prob": 0.0, "blur": 0.0, "noise": 0.0, "block_size": 3}
            off = [k for k, v in drawn.items() if getattr(self, k) != v]
            if off:
                bad(f"renderer=v04 draws 9x9 boards its own way (handwriting, starters, bubbles): {off[0]}="
                    f"{getattr(self, off[0])!r} does not apply (needs {drawn[off[0]]!r})")  # fmt: skip
            if self.v04.handwriting == "font":
                self.v04.font()  # a missing font is one line now, not a failure when the boards are drawn
        if not 0.0 <= float(self.pencil_prob) <= 1.0:
            bad(f"pencil_prob={self.pencil_prob} must lie in [0, 1]")
        if not isinstance(self.pencil_max, int) or not 1 <= self.pencil_max <= 8:
            bad(f"pencil_max={self.pencil_max!r} must be an integer in 1..8")
        if float(self.blur) < 0 or float(self.noise) < 0:
            bad("blur and noise must be non-negative")
        if self.corruption not in CORRUPTIONS:
            bad(f"corruption must be one of {list(CORRUPTIONS)}, got {self.corruption!r}")
        if not isinstance(self.max_cell_swaps, int) or isinstance(self.max_cell_swaps, bool) or not 1 <= self.max_cell_swaps <= 9:
            bad(f"max_cell_swaps={self.max_cell_swaps!r} must be an integer in 1..9")
        if isinstance(self.block_size, bool) or self.block_size not in BOXES:
            bad(f"block_size={self.block_size!r} must be one of {list(BOXES)} (4x4 or 9x9 boards)")
        if self.block_size != 3 and self.corruption != "swaps":
            bad(f"block_size={self.block_size} makes its invalid boards by swaps: set corruption=swaps (the 'walk' "
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
        ``block_size`` only when not 3 and ``v04`` only with ``renderer=v04`` (the cache key and
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
