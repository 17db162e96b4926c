"""Glorp/Drent robot benchmark (decision support).

>>> from synthetic.robot import RobotConfig, load
>>> data = load(RobotConfig(modality="tabular", n_train=100, n_calib=0, n_test=100))
>>> data.x.shape, data.c.shape, data.c_true.shape
((200, 25), (200, 7), (200, 7))

Public API: :class:`RobotConfig`, :func:`generate`, :func:`load`, :func:`render`,
:func:`part_mask`; names of ``meta`` columns in :data:`META_NAMES`, drawable
parts in :data:`PART_NAMES`.
"""

from synthetic.robot.attributes import META_NAMES, TABULAR_NAMES, attribute_table
from synthetic.robot.concepts import ConceptSet, evaluate, load_concept_set
from synthetic.robot.config import LabelConfig, NuisanceConfig, RobotConfig
from synthetic.robot.generator import CLASS_NAMES, generate, glorp_probability, load
from synthetic.robot.renderer import PART_NAMES, part_mask, render, render_reference
from synthetic.robot.text import VOCAB, decode

__all__ = [
    "CLASS_NAMES",
    "META_NAMES",
    "PART_NAMES",
    "TABULAR_NAMES",
    "VOCAB",
    "ConceptSet",
    "LabelConfig",
    "NuisanceConfig",
    "RobotConfig",
    "attribute_table",
    "decode",
    "evaluate",
    "generate",
    "glorp_probability",
    "load",
    "load_concept_set",
    "part_mask",
    "render",
    "render_reference",
]
