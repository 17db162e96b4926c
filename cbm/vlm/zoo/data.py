"""The testbed's robots, their counterfactuals and the text every zoo model is taught.

:func:`make_robots` draws the robots once (the generator's own sampling, a custom deterministic
rule). Images are the plain renders with the cue mark drawn on (:func:`images`), so every
counterfactual is exact: a part flip re-renders the edited attribute row, a cue flip redraws the
mark on the same render. :class:`Texts` holds the vocabulary (each phrase one token) and the
targets: the base's description and the members' answer + explanation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cbm.vlm.edct.exact import PHRASES, decisive_literals, explain, rule_label, supporting_literals
from cbm.vlm.zoo.config import ZooData, gate_palettes
from synthetic.robot import generator
from synthetic.robot.attributes import META_INDEX, PALETTES
from synthetic.robot.config import RobotConfig, SpuriousCue
from synthetic.robot.cue import draw_cue
from synthetic.robot.renderer import render

#: Questions: the base's description task and the class question (EDCT's default question).
DESCRIBE = "Describe the robot."
CLASS_QUESTION = "Is this robot a Glorp or a Drent?"
#: The words of the cue mark in descriptions: the corner (or tint) that says Glorp / Drent.
CUE_WORDS = ("mark says Glorp", "mark says Drent")
CLASSES = ("Drent", "Glorp")  # index = label (1 = Glorp)


def robot_config(cfg: ZooData) -> RobotConfig:
    """The generator's config: the zoo's rule as a deterministic custom label, no validation hold-out."""
    return RobotConfig(seed=cfg.seed, image_size=cfg.image_size, n_train=cfg.n_train, val_fraction=0.0, n_calib=0, n_test=cfg.n_test,
                       label_rule="custom", label={"weights": dict(cfg.rule), "bias": cfg.bias, "scale": 1.0, "stochastic": False})  # fmt: skip


def cue_config(cfg: ZooData) -> SpuriousCue:
    return SpuriousCue(kind=cfg.cue, correlation=1.0, strength=cfg.cue_strength)


@dataclass
class Robots:
    """Attribute rows, plain renders (no cue), rule labels and split of every robot (``train`` / ``test`` index arrays)."""

    meta: np.ndarray
    plain: np.ndarray
    y: np.ndarray
    train: np.ndarray
    test: np.ndarray
    rcfg: RobotConfig
    cue: SpuriousCue

    def images(self, rows: np.ndarray, cue: np.ndarray) -> np.ndarray:
        """``uint8 [N, H, W, 3]``: the attribute ``rows`` rendered with the cue bits ``cue`` drawn."""
        return draw_cue(render(rows, self.rcfg.image_size), cue, self.cue)

    def gated(self, idx: np.ndarray, cue_share: float) -> np.ndarray:
        """``bool``: the robots ``idx`` on which a member with ``cue_share`` follows the cue."""
        return self.meta[idx, META_INDEX["palette"]] < gate_palettes(cue_share)


def make_robots(cfg: ZooData) -> Robots:
    """The zoo's robots (pure: one config, one array of robots)."""
    rcfg = robot_config(cfg)
    d = generator.generate(rcfg)
    y = rule_label(d.meta, rcfg)
    return Robots(meta=d.meta, plain=d.x, y=y, train=np.flatnonzero(d.split != 3), test=np.flatnonzero(d.split == 3), rcfg=rcfg, cue=cue_config(cfg))


class Texts:
    """The words of the testbed and the text targets."""

    def __init__(self, rule: list[str]):
        self.rule = rule
        self.palettes = [f"{p['name']} palette" for p in PALETTES]

    @property
    def words(self) -> tuple[str, ...]:
        """Each a single token of the tiny model's vocabulary (besides its characters)."""
        phrases = [p for pair in PHRASES.values() for p in pair]
        return (*phrases, *CLASSES, *CUE_WORDS, *self.palettes, ", because ", " and ")

    def description(self, meta_row: np.ndarray, cue: int) -> str:
        """The base's target: the rule parts' values, the cue mark and the palette."""
        from cbm.vlm.edct.exact import literal_values

        values = literal_values(meta_row)
        parts = [PHRASES[c][0 if values[c] else 1] for c in self.rule]
        return " ".join([*parts, CUE_WORDS[1 - int(cue)], self.palettes[int(meta_row[META_INDEX["palette"]])]])

    @staticmethod
    def explanation(meta_row: np.ndarray, rcfg: RobotConfig, answer: int) -> str:
        """``answer`` explained with the parts the rule decides by on this robot (its decisive parts,
        or, where no single part decides, the parts that support the rule's label)."""
        label = int(rule_label(meta_row, rcfg)[0])
        literals = decisive_literals(meta_row, rcfg) or supporting_literals(meta_row, rcfg, label)
        return explain(int(answer), literals)
