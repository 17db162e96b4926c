"""Tiny datasets in the exact published layouts, for tests and for trying a command without the data.

Images come from the robot renderer and the concepts are what the robots show, so a model trained on
a fixture learns something (a test can tell a working reader from a scrambled one); file names, line
formats, id conventions and the published quirks (``image_attribute_labels.txt`` lines with an extra
field) are the real ones. A fixture proves the readers, the layout checks and the commands end to end;
it says nothing about accuracy on the real data (see docs/guides/real-data.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cbm.core.atomic import write_text_atomic

#: Robot concept -> (CUB attribute group, value when present, value when absent).
CUB_GROUPS = {
    "head_round": ("has_head_pattern", "plain", "capped"),
    "body_round": ("has_shape", "duck-like", "perching-like"),
    "knees": ("has_leg_color", "black", "buff"),
    "antennae": ("has_crown_color", "red", "grey"),
    "ears_triangle": ("has_tail_shape", "pointed_tail", "rounded_tail"),
    "mouth_closed": ("has_bill_shape", "cone", "curved_(up_or_down)"),
    "foot_pointy": ("has_wing_shape", "pointed-wings", "rounded-wings"),
}
#: Attributes no fixture bird has (``voted`` drops them: present in no class).
CUB_NEVER = ("has_size::very_large_(32_-_72_in)", "has_eye_color::purple")
#: ``attributes/certainties.txt`` as published.
CUB_CERTAINTIES = "1 not visible\n2 guessing\n3 probably\n4 definitely\n"


def write_cub(root: str | Path, per_class: int = 8, image_size: int = 48, seed: int = 0, train_share: float = 0.6) -> Path:
    """A CUB-200-2011 in its published layout under ``root`` (``root/attributes.txt`` and
    ``root/CUB_200_2011/...``): four classes (head round x body round of the robots), ``per_class``
    images each; returns ``root``."""
    from PIL import Image

    from synthetic.robot import RobotConfig
    from synthetic.robot import load as load_robots

    root = Path(root)
    base = root / "CUB_200_2011"
    pool = load_robots(RobotConfig(n_train=max(400, 40 * per_class), val_fraction=0.0, n_calib=0, n_test=0, image_size=image_size, seed=seed))
    cls_of = (2 * pool.c[:, 0] + pool.c[:, 1]).astype(int)  # head round, body round
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.choice(np.flatnonzero(cls_of == k), per_class, replace=False) for k in range(4)])
    rows = rng.permutation(rows)
    class_names = ["001.Capped_Perching_Bird", "002.Capped_Duck", "003.Plain_Perching_Bird", "004.Plain_Duck"]
    attr_names = [f"{g}::{v}" for g, yes, no in CUB_GROUPS.values() for v in (yes, no)] + list(CUB_NEVER)
    images, labels, split = [], [], []
    for i, r in enumerate(rows, 1):
        folder = class_names[cls_of[r]]
        rel = f"{folder}/{folder.split('.', 1)[1]}_{i:04d}_{1000 + i}.jpg"
        path = base / "images" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pool.x[r]).save(path, quality=95)
        images.append(f"{i} {rel}")
        labels.append(f"{i} {cls_of[r] + 1}")
        split.append(f"{i} {int(rng.random() < train_share)}")
    lines = []
    names = list(CUB_GROUPS)
    for i, r in enumerate(rows, 1):
        for j, name in enumerate(pool.concept_names):
            if name not in CUB_GROUPS:
                continue
            on = int(pool.c[r, j])
            a = 2 * names.index(name) + 1
            for att, present in ((a, on), (a + 1, 1 - on)):
                # an absent answer is now and then "not visible" (certainty 1): it does not vote
                cert = 1 if not present and rng.random() < 0.2 else int(rng.choice([3, 4]))
                extra = " 0" if (i, att) == (2, 1) else ""  # the published file has a few lines with an extra field
                lines.append(f"{i} {att} {present} {cert} {rng.uniform(1, 30):.3f}{extra}")
        for att in range(len(attr_names) - len(CUB_NEVER) + 1, len(attr_names) + 1):
            lines.append(f"{i} {att} 0 4 {rng.uniform(1, 30):.3f}")
    (base / "attributes").mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "attributes.txt", "".join(f"{k} {n}\n" for k, n in enumerate(attr_names, 1)))
    write_text_atomic(base / "images.txt", "\n".join(images) + "\n")
    write_text_atomic(base / "image_class_labels.txt", "\n".join(labels) + "\n")
    write_text_atomic(base / "train_test_split.txt", "\n".join(split) + "\n")
    write_text_atomic(base / "classes.txt", "".join(f"{k} {n}\n" for k, n in enumerate(class_names, 1)))
    write_text_atomic(base / "attributes" / "image_attribute_labels.txt", "\n".join(lines) + "\n")
    write_text_atomic(base / "attributes" / "certainties.txt", CUB_CERTAINTIES)
    write_text_atomic(base / "bounding_boxes.txt", "".join(f"{i} 0.0 0.0 {image_size}.0 {image_size}.0\n" for i in range(1, len(rows) + 1)))
    return root
