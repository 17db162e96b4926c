"""Typed knobs of concept-benchmark 0.4's board drawing (``data.renderer=v04``, ``data.v04.*``).

Defaults are 0.4.1's (``concept_benchmark/synthetic/sudoku/__init__.py`` ``image_transform`` and
``handwriting.py``): boards drawn at 50 px per cell with a 2 px margin at the target size, 35%
printed starters, 22% of the other cells seeding a candidate-bubble pair, handwriting in blue ink
with rotation ±15°, offset ±1/4 of the glyph canvas, scale 0.8–1.2, blur in {0, 0, 0, 0.5, 1},
30% of glyphs 1 px thicker or thinner, 50% elastically warped (alpha 5–15, sigma 2–4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from cbm.core.validation import integer, number, one_of, span

#: Where the handwriting's shapes come from: this project's stroke glyphs, or a font file.
HANDWRITING = ("strokes", "font")
#: Which stroke shapes a digit is written in: one per digit (as a font has), or every allograph.
ALLOGRAPHS = ("one", "all")


@dataclass
class V04Render:
    """0.4's per-board drawing. Every random choice is a hash of the board's render seed.

    Attributes
    ----------
    draw_cell_px : cell size the board is drawn at before the LANCZOS resize to ``cell_size``.
    margin_px : white margin around the grid at the target size (0.4: 2; 94 px boards at 10 px).
    starter_share : share of cells drawn as printed starters (Pillow's font, ``starter_ink``).
    bubble_share : share of the handwritten cells that seed a candidate bubble with a handwritten
        neighbour (both cells get a wobbly circle with the pair's digits, small, in the top-left corner).
    handwriting : ``strokes`` (this project's stroke skeletons, ``synthetic.sudoku.glyphs``) or
        ``font`` (a handwriting font: ``font_file``, or else the Pecita font of an installed
        concept-benchmark package; nothing is copied into this repository).
    font_file : path of a TrueType / OpenType font for ``handwriting=font``.
    stroke_em : pen width of the stroke glyphs in em (Pecita's strokes: about 0.065 em).
    allographs : ``one`` (each digit in one stroke shape, as a font writes it: the shape read most
        reliably at 10 px, :data:`synthetic.sudoku.v04_glyphs.ONE_ALLOGRAPH`) or ``all`` (every
        allograph of :data:`synthetic.sudoku.glyphs.STROKES`: 1 of 2-3 shapes per glyph, a harder read).
    ink, starter_ink : grey level of the handwriting (the luma of 0.4's blue ink (26, 71, 180)) and
        of the printed starters ((30, 30, 30)).
    rotation_deg : rotations drawn uniformly in ``[-rotation_deg, rotation_deg]``.
    offset : offsets drawn uniformly in ``[-offset, offset]`` of the glyph canvas (0.4: 1/4).
    scale : font scale range ``[lo, hi]``.
    blur : blur radii (px at the drawing canvas) chosen uniformly (repeats weight a value).
    thickness_prob : share of glyphs drawn 1 px thicker or thinner (half each).
    elastic_prob, elastic_alpha, elastic_sigma : share of glyphs warped elastically, and the
        warp's strength and smoothness ranges ``[lo, hi]`` in px.
    """

    draw_cell_px: int = 50
    margin_px: int = 2
    starter_share: float = 0.35
    bubble_share: float = 0.22
    handwriting: str = "strokes"
    font_file: str | None = None
    stroke_em: float = 0.065
    allographs: str = "one"
    ink: int = 70
    starter_ink: int = 30
    rotation_deg: float = 15.0
    offset: float = 0.25
    scale: list[float] = field(default_factory=lambda: [0.8, 1.2])
    blur: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.5, 1.0])
    thickness_prob: float = 0.3
    elastic_prob: float = 0.5
    elastic_alpha: list[float] = field(default_factory=lambda: [5.0, 15.0])
    elastic_sigma: list[float] = field(default_factory=lambda: [2.0, 4.0])

    def __post_init__(self) -> None:
        w = "SudokuConfig.v04"
        for name, lo, hi in (("draw_cell_px", 20, 200), ("margin_px", 0, 32), ("ink", 0, 254), ("starter_ink", 0, 254)):
            integer(f"{w}.{name}", getattr(self, name), lo, hi)
        for name in ("starter_share", "bubble_share", "thickness_prob", "elastic_prob"):
            setattr(self, name, number(f"{w}.{name}", getattr(self, name), 0.0, 1.0))
        self.stroke_em = number(f"{w}.stroke_em", self.stroke_em, 0.005, 0.3)
        self.rotation_deg = number(f"{w}.rotation_deg", self.rotation_deg, 0.0, 90.0)
        self.offset = number(f"{w}.offset", self.offset, 0.0, 0.5)
        self.scale = span(f"{w}.scale", self.scale, 0.1, 4.0)
        self.elastic_alpha = span(f"{w}.elastic_alpha", self.elastic_alpha, 0.0, 100.0)
        self.elastic_sigma = span(f"{w}.elastic_sigma", self.elastic_sigma, 0.5, 20.0)
        blur = list(self.blur)
        if not blur:
            raise ValueError(f"{w}.blur: expected a non-empty list of radii in [0, 10], got []")
        self.blur = [number(f"{w}.blur[{i}]", x, 0.0, 10.0) for i, x in enumerate(blur)]
        one_of(f"{w}.handwriting", self.handwriting, HANDWRITING)
        one_of(f"{w}.allographs", self.allographs, ALLOGRAPHS)
        if self.font_file is not None and (not isinstance(self.font_file, str) or not self.font_file.strip()):
            raise ValueError(f"{w}.font_file: expected a path (or null), got {self.font_file!r}")
        if self.handwriting == "strokes" and self.font_file is not None:
            raise ValueError(f"{w}.font_file: read only with handwriting=font")

    def font(self) -> str:
        """The font file of ``handwriting=font``: ``font_file``, else the Pecita font an installed
        concept-benchmark package ships (``concept_benchmark/data/fonts/Pecita.otf``, SIL OFL; read
        where it is installed, never copied here). One line when there is none."""
        import importlib.util
        from pathlib import Path

        if self.font_file is not None:
            path = Path(self.font_file).expanduser()
            if not path.is_file():
                raise ValueError(f"SudokuConfig: v04.font_file={self.font_file!r} is not a file")
            return str(path)
        spec = importlib.util.find_spec("concept_benchmark")
        origin = None if spec is None or not spec.submodule_search_locations else list(spec.submodule_search_locations)[0]
        path = None if origin is None else Path(origin) / "data" / "fonts" / "Pecita.otf"
        if path is None or not path.is_file():
            raise ValueError("SudokuConfig: v04.handwriting=font needs v04.font_file, or concept-benchmark installed "
                             "(its Pecita font, pip install concept-benchmark==0.4.1 --no-deps)")  # fmt: skip
        return str(path)

    @classmethod
    def coerce(cls, value: Any) -> V04Render:
        """From a mapping (YAML, OmegaConf, ``from_dict``); unknown keys fail with one line."""
        if isinstance(value, cls):
            return value
        d = dict(value or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"SudokuConfig: unknown v04 keys {unknown}; expected a subset of {sorted(names)}")
        return cls(**d)
