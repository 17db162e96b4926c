"""Attribute vocabulary of the robot generator: the columns of ``meta``.

Every robot is described by nine integer *body* attributes (the visible features)
and nine integer *nuisance* attributes (pose, position, colours), plus the id of
the sampled robot (``renders_per_robot`` copies share it). All are stored in
``SyntheticData.meta`` (``int64``, columns :data:`META_NAMES`) and are enough to
re-render a sample exactly with :func:`synthetic.robot.renderer`.

Encodings (1 = the named property holds):

==============  ==========================================================
head_round      1 round head, 0 square head
body_round      1 round body, 0 square body
knees           1 has knee joints
elbows          1 has elbow joints
antennae        1 has antennae
ears_triangle   1 triangular ears, 0 square ears
mouth_closed    1 closed mouth, 0 open mouth
hand_subtype    0..5, see :data:`HAND_SUBTYPES` (0-2 round, 3-5 edgy)
foot_subtype    0..9, see :data:`FOOT_SUBTYPES` (0-4 flat, 5-9 pointy)
shift_x/y       translation in units of 1/32 of the image side (+ = right/down)
arm_left/right  arm angle bin 0..4, see :data:`ARM_ANGLES` (0 = lowered, 4 = raised)
leg_spread      0..3, stance width (0 = narrow)
palette         0..7, see :data:`PALETTES`
tint_r/g/b      per-channel colour jitter added to the robot's colours
robot_id        index of the sampled robot inside its split
==============  ==========================================================

Derived (evaluator-only) names: ``hand_edgy = hand_subtype >= 3`` and
``foot_pointy = foot_subtype >= 5``.
"""

from __future__ import annotations

import numpy as np

BODY_NAMES: list[str] = [
    "head_round",
    "body_round",
    "knees",
    "elbows",
    "antennae",
    "ears_triangle",
    "mouth_closed",
    "hand_subtype",
    "foot_subtype",
]
NUISANCE_NAMES: list[str] = [
    "shift_x",
    "shift_y",
    "arm_left",
    "arm_right",
    "leg_spread",
    "palette",
    "tint_r",
    "tint_g",
    "tint_b",
]
META_NAMES: list[str] = [*BODY_NAMES, *NUISANCE_NAMES, "robot_id"]
META_INDEX: dict[str, int] = {name: i for i, name in enumerate(META_NAMES)}

#: Hand sub-types: the first three are round, the last three edgy.
HAND_SUBTYPES: list[str] = ["ball", "ring", "clover", "block", "wedge", "star"]
#: Foot sub-types: the first five are flat, the last five pointy.
FOOT_SUBTYPES: list[str] = ["block", "slab", "dome", "flare", "arch", "spike", "diamond", "fork", "arrow", "saw"]
N_HAND = len(HAND_SUBTYPES)
N_FOOT = len(FOOT_SUBTYPES)

#: Arm angle of each ``arm_left`` / ``arm_right`` bin, degrees above horizontal.
ARM_ANGLES: tuple[float, ...] = (-50.0, -25.0, 0.0, 25.0, 50.0)
#: Number of ``leg_spread`` bins.
N_LEG_SPREADS = 4
#: Largest ``|shift_x|``, ``|shift_y|`` the renderer accepts (units of 1/32 side).
MAX_SHIFT = 4
#: Largest ``|tint_*|``.
MAX_TINT = 64

#: Colour schemes: background and the four robot colour roles (RGB).
PALETTES: list[dict] = [
    {"name": "silver", "bg": (214, 228, 240), "body": (190, 192, 200), "limb": (110, 112, 120),
     "joint": (240, 170, 40), "extremity": (70, 72, 80)},
    {"name": "steel", "bg": (240, 232, 214), "body": (150, 165, 180), "limb": (80, 90, 105),
     "joint": (220, 60, 60), "extremity": (40, 50, 60)},
    {"name": "red", "bg": (225, 240, 225), "body": (225, 85, 70), "limb": (130, 40, 40),
     "joint": (250, 215, 60), "extremity": (90, 30, 30)},
    {"name": "orange", "bg": (215, 230, 245), "body": (245, 150, 60), "limb": (150, 80, 30),
     "joint": (60, 120, 220), "extremity": (100, 50, 20)},
    {"name": "yellow", "bg": (220, 220, 245), "body": (240, 210, 70), "limb": (150, 120, 30),
     "joint": (200, 60, 160), "extremity": (110, 80, 20)},
    {"name": "green", "bg": (245, 225, 230), "body": (110, 190, 110), "limb": (50, 110, 50),
     "joint": (240, 120, 40), "extremity": (30, 70, 30)},
    {"name": "blue", "bg": (245, 240, 215), "body": (90, 140, 220), "limb": (40, 70, 130),
     "joint": (250, 200, 60), "extremity": (25, 40, 90)},
    {"name": "purple", "bg": (225, 245, 235), "body": (170, 110, 200), "limb": (90, 50, 120),
     "joint": (120, 220, 120), "extremity": (60, 30, 80)},
]
PALETTE_NAMES: list[str] = [p["name"] for p in PALETTES]
#: Colour of eyes and mouth (not jittered).
FACE_COLOUR = (20, 20, 28)
#: Colour of occluder patches.
OCCLUDER_COLOUR = (128, 128, 128)
COLOUR_ROLES: list[str] = ["bg", "body", "limb", "joint", "extremity", "face", "occluder"]

#: Number of values of each body attribute (features are sampled uniformly).
BODY_CARDINALITY: dict[str, int] = {name: 2 for name in BODY_NAMES} | {"hand_subtype": N_HAND, "foot_subtype": N_FOOT}

#: Tabular modality: column names of ``x`` (float32 0/1).
TABULAR_NAMES: list[str] = [
    "head_round",
    "body_round",
    "knees",
    "elbows",
    "antennae",
    "ears_triangle",
    "mouth_closed",
    "hand_edgy",
    "foot_pointy",
    *[f"hand_{s}" for s in HAND_SUBTYPES],
    *[f"foot_{s}" for s in FOOT_SUBTYPES],
]


def attribute_table(meta: np.ndarray) -> dict[str, np.ndarray]:
    """Named ``int64`` columns of ``meta`` plus the derived ``hand_edgy`` / ``foot_pointy``."""
    meta = np.asarray(meta)
    if meta.ndim != 2 or meta.shape[1] != len(META_NAMES):
        raise ValueError(f"meta must have shape [N, {len(META_NAMES)}] (columns {META_NAMES}), got {meta.shape}")
    table = {name: meta[:, i].astype(np.int64) for i, name in enumerate(META_NAMES)}
    table["hand_edgy"] = (table["hand_subtype"] >= N_HAND // 2).astype(np.int64)
    table["foot_pointy"] = (table["foot_subtype"] >= N_FOOT // 2).astype(np.int64)
    return table


def body_table(body: np.ndarray) -> dict[str, np.ndarray]:
    """The attribute table of robots given by their body attributes ``[N, len(BODY_NAMES)]`` alone
    (nuisance columns 0): what label rules and training-split constraints read."""
    meta = np.zeros((len(body), len(META_NAMES)), dtype=np.int64)
    meta[:, : len(BODY_NAMES)] = body
    return attribute_table(meta)


#: Names an expression (concept set, label rule) may use.
EXPRESSION_NAMES: list[str] = [*META_NAMES, "hand_edgy", "foot_pointy"]


def tabular_features(meta: np.ndarray) -> np.ndarray:
    """``float32 [N, 25]`` attribute vector of the tabular modality (columns :data:`TABULAR_NAMES`)."""
    t = attribute_table(meta)
    n = len(meta)
    binary = np.stack([t[name] for name in TABULAR_NAMES[:9]], axis=1)
    hand = np.zeros((n, N_HAND), dtype=np.int64)
    hand[np.arange(n), t["hand_subtype"]] = 1
    foot = np.zeros((n, N_FOOT), dtype=np.int64)
    foot[np.arange(n), t["foot_subtype"]] = 1
    return np.concatenate([binary, hand, foot], axis=1).astype(np.float32)


def colours(meta: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample ``uint16 [N,3]`` colour of each role in :data:`COLOUR_ROLES`."""
    t = attribute_table(meta)
    pal = t["palette"]
    if pal.min(initial=0) < 0 or pal.max(initial=0) >= len(PALETTES):
        raise ValueError(f"palette index out of range 0..{len(PALETTES) - 1}")
    tint = np.stack([t["tint_r"], t["tint_g"], t["tint_b"]], axis=1)
    out = {}
    for role in ("bg", "body", "limb", "joint", "extremity"):
        table = np.array([p[role] for p in PALETTES], dtype=np.int64)
        col = table[pal]
        if role != "bg":
            col = col + tint
        out[role] = np.clip(col, 0, 255).astype(np.uint16)
    n = len(pal)
    out["face"] = np.broadcast_to(np.array(FACE_COLOUR, dtype=np.uint16), (n, 3))
    out["occluder"] = np.broadcast_to(np.array(OCCLUDER_COLOUR, dtype=np.uint16), (n, 3))
    return out
