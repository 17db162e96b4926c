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


def write_cub(root: str | Path, per_class: int = 8, image_size: int = 48, seed: int = 0, train_share: float = 0.6,
              n_classes: int = 4) -> Path:  # fmt: skip
    """A CUB-200-2011 in its published layout under ``root`` (``root/attributes.txt`` and
    ``root/CUB_200_2011/...``): ``n_classes`` classes (the first robot features read as a binary number:
    head round x body round for four), ``per_class`` images each; returns ``root``."""
    from PIL import Image

    from synthetic.robot import RobotConfig
    from synthetic.robot import load as load_robots

    root = Path(root)
    base = root / "CUB_200_2011"
    bits = max(1, int(np.ceil(np.log2(n_classes))))
    n_pool = max(400, 40 * per_class) * 2 ** max(0, bits - 2)
    pool = load_robots(RobotConfig(n_train=n_pool, val_fraction=0.0, n_calib=0, n_test=0, image_size=image_size, seed=seed))
    cls_of = (pool.c[:, :bits] @ (2 ** np.arange(bits - 1, -1, -1))).astype(int)  # head round, body round, ...
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.choice(np.flatnonzero(cls_of == k), per_class, replace=False) for k in range(n_classes)])
    rows = rng.permutation(rows)
    class_names = (["001.Capped_Perching_Bird", "002.Capped_Duck", "003.Plain_Perching_Bird", "004.Plain_Duck"] if n_classes == 4
                   else [f"{k + 1:03d}.Fixture_Bird_{k + 1}" for k in range(n_classes)])  # fmt: skip
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


#: ``meta/meta.csv``'s columns in the published order.
DERM7PT_COLUMNS = ("case_num", "diagnosis", "seven_point_score", "pigment_network", "streaks", "pigmentation", "regression_structures",
                   "dots_and_globules", "blue_whitish_veil", "vascular_structures", "level_of_diagnostic_difficulty", "elevation",
                   "location", "sex", "management", "clinic", "derm", "case_id", "notes")  # fmt: skip


def write_derm7pt(root: str | Path, n_cases: int = 40, image_size: int = 48, seed: int = 0) -> Path:
    """A Derm7pt ``release_v0`` under ``root``: ``meta/meta.csv`` (its 19 columns), the three index files
    (column ``indexes``) and ``images/`` with the published mixed-case names; melanomas are the robots
    with a round head and lean to the melanoma-indicating value of each criterion; a few cases have other
    diagnoses (left out by the melanoma-vs-nevus task). Returns ``root``."""
    import csv
    import io

    from PIL import Image

    from synthetic.real.derm7pt import CRITERIA, V04_BITS
    from synthetic.robot import RobotConfig
    from synthetic.robot import load as load_robots

    root = Path(root)
    pool = load_robots(RobotConfig(n_train=n_cases, val_fraction=0.0, n_calib=0, n_test=0, image_size=image_size, seed=seed))
    rng = np.random.default_rng(seed)
    others = ("basal cell carcinoma", "seborrheic keratosis", "dermatofibroma")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(DERM7PT_COLUMNS)
    for i in range(n_cases):
        mel = bool(pool.c[i, 0])
        diagnosis = others[i % 3] if i % 10 == 9 else ("melanoma (less than 0.76 mm)" if mel else "clark nevus")
        values = {}
        for k, vals in CRITERIA.items():
            bad = [v for v in vals if V04_BITS[k](v)]
            good = [v for v in vals if not V04_BITS[k](v)]
            values[k] = str(rng.choice(bad if (rng.random() < 0.8) == mel else good))
        folder = "NEL" if i % 2 else "Fgl"
        clinic, derm = f"{folder}/{folder.upper()}{2 * i + 25:03d}.JPG", f"{folder}/{folder.capitalize()}{2 * i + 26:03d}.jpg"
        for rel in (clinic, derm):
            p = root / "images" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pool.x[i]).save(p, format="JPEG", quality=95)
        score = sum(2 if k in ("pigment_network", "blue_whitish_veil", "vascular_structures") else 1 for k in CRITERIA if V04_BITS[k](values[k]))
        w.writerow([i + 1, diagnosis, score, *(values[k] for k in CRITERIA), "low", "flat", "back", "female", "excision", clinic, derm, "", ""])
    (root / "meta").mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "meta" / "meta.csv", buf.getvalue())
    order = rng.permutation(n_cases)
    cut1, cut2 = int(0.4 * n_cases), int(0.6 * n_cases)
    for name, part in (("train", order[:cut1]), ("valid", order[cut1:cut2]), ("test", order[cut2:])):
        write_text_atomic(root / "meta" / f"{name}_indexes.csv", "indexes\n" + "".join(f"{int(j)}\n" for j in sorted(part)))
    return root


#: AwA2's 85 predicates in ``predicates.txt`` order.
AWA2_PREDICATES = (
    "black", "white", "blue", "brown", "gray", "orange", "red", "yellow", "patches", "spots", "stripes", "furry", "hairless",
    "toughskin", "big", "small", "bulbous", "lean", "flippers", "hands", "hooves", "pads", "paws", "longleg", "longneck", "tail",
    "chewteeth", "meatteeth", "buckteeth", "strainteeth", "horns", "claws", "tusks", "smelly", "flys", "hops", "swims", "tunnels",
    "walks", "fast", "slow", "strong", "weak", "muscle", "bipedal", "quadrapedal", "active", "inactive", "nocturnal", "hibernate",
    "agility", "fish", "meat", "plankton", "vegetation", "insects", "forager", "grazer", "hunter", "scavenger", "skimmer", "stalker",
    "newworld", "oldworld", "arctic", "coastal", "desert", "bush", "plains", "forest", "fields", "jungle", "mountains", "ocean",
    "ground", "water", "tree", "cave", "fierce", "timid", "smart", "group", "solitary", "nestspot", "domestic",
)  # fmt: skip
AWA2_CLASSES = ("antelope", "grizzly+bear", "killer+whale", "beaver", "dalmatian", "persian+cat", "horse", "german+shepherd")


def write_awa2(root: str | Path, per_class: int = 6, image_size: int = 48, seed: int = 0) -> Path:
    """An ``Animals_with_Attributes2`` folder under ``root``: eight classes (the robots' first three
    features as a binary number; the first seven predicates are each class's seven robot features),
    ``classes.txt`` / ``predicates.txt`` with padded ids and tabs, the 0/1 matrix, and
    ``JPEGImages/<class>/<class>_NNNNN.jpg``. Returns ``root``."""
    from PIL import Image

    from synthetic.robot import RobotConfig
    from synthetic.robot import load as load_robots

    root = Path(root)
    pool = load_robots(RobotConfig(n_train=max(800, 40 * per_class), val_fraction=0.0, n_calib=0, n_test=0, image_size=image_size, seed=seed))
    cls_of = (pool.c[:, :3] @ np.array([4, 2, 1])).astype(int)
    rng = np.random.default_rng(seed)
    matrix = (rng.random((len(AWA2_CLASSES), len(AWA2_PREDICATES))) < 0.3).astype(int)
    for k, cls in enumerate(AWA2_CLASSES):
        rows = rng.choice(np.flatnonzero(cls_of == k), per_class, replace=False)
        matrix[k, :7] = np.round(pool.c[rows, :7].mean(0))  # the class's robot features, by majority
        for i, r in enumerate(rows):
            p = root / "JPEGImages" / cls / f"{cls}_{10001 + i:05d}.jpg"
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pool.x[r]).save(p, quality=95)
    write_text_atomic(root / "classes.txt", "".join(f"{k:>7}\t{c}\n" for k, c in enumerate(AWA2_CLASSES, 1)))
    write_text_atomic(root / "predicates.txt", "".join(f"{k:>7}\t{p}\n" for k, p in enumerate(AWA2_PREDICATES, 1)))
    write_text_atomic(root / "predicate-matrix-binary.txt", "".join(" ".join(map(str, row)) + "\n" for row in matrix))
    write_text_atomic(root / "trainclasses.txt", "".join(c + "\n" for c in AWA2_CLASSES[:6]))
    write_text_atomic(root / "testclasses.txt", "".join(c + "\n" for c in AWA2_CLASSES[6:]))
    return root


#: CelebA's 40 attributes in ``list_attr_celeba.txt`` order.
CELEBA_ATTRIBUTES = (
    "5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Bags_Under_Eyes", "Bald", "Bangs", "Big_Lips", "Big_Nose", "Black_Hair",
    "Blond_Hair", "Blurry", "Brown_Hair", "Bushy_Eyebrows", "Chubby", "Double_Chin", "Eyeglasses", "Goatee", "Gray_Hair",
    "Heavy_Makeup", "High_Cheekbones", "Male", "Mouth_Slightly_Open", "Mustache", "Narrow_Eyes", "No_Beard", "Oval_Face",
    "Pale_Skin", "Pointy_Nose", "Receding_Hairline", "Rosy_Cheeks", "Sideburns", "Smiling", "Straight_Hair", "Wavy_Hair",
    "Wearing_Earrings", "Wearing_Hat", "Wearing_Lipstick", "Wearing_Necklace", "Wearing_Necktie", "Young",
)  # fmt: skip


#: ``write_celeba``: the attribute -> the robot feature (column of the robots' concepts) it is.
CELEBA_FROM_ROBOT = {"Attractive": 0, "Male": 1, "Eyeglasses": 2, "Wearing_Hat": 3, "Black_Hair": 4, "Smiling": 5, "Young": 6}
#: ``write_celeba``: how often each other attribute is set.
RARE = 0.15


def write_celeba(root: str | Path, n_images: int = 40, image_size: int = 48, seed: int = 0) -> Path:
    """CelebA's files under ``root``: ``img_align_celeba/NNNNNN.jpg``, ``list_attr_celeba.txt`` (the count,
    the 40 names with the published trailing space, then -1 / 1 values with the double spaces before a
    positive one) and ``list_eval_partition.txt`` (0 / 1 / 2). Seven attributes are the robot's seven
    features, so the images show them (``Attractive`` its round head, ``Smiling`` its closed mouth, see
    :data:`CELEBA_FROM_ROBOT`); the 33 others are random and rare (15%), so the most balanced attributes
    (``task=composite``'s concepts) are the visible ones. Returns ``root``."""
    from PIL import Image

    from synthetic.robot import RobotConfig
    from synthetic.robot import load as load_robots

    root = Path(root)
    pool = load_robots(RobotConfig(n_train=n_images, val_fraction=0.0, n_calib=0, n_test=0, image_size=image_size, seed=seed))
    rng = np.random.default_rng(seed)
    values = (rng.random((n_images, len(CELEBA_ATTRIBUTES))) < RARE).astype(np.int64)
    for attribute, feature in CELEBA_FROM_ROBOT.items():
        values[:, CELEBA_ATTRIBUTES.index(attribute)] = pool.c[:, feature]
    lines = [f"{n_images}\n", " ".join(CELEBA_ATTRIBUTES) + " \n"]
    parts = []
    for i in range(n_images):
        name = f"{i + 1:06d}.jpg"
        p = root / "img_align_celeba" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pool.x[i]).save(p, quality=95)
        lines.append(name + "".join(" -1" if v == 0 else "  1" for v in values[i]) + "\n")
        parts.append(f"{name} {0 if i < 0.6 * n_images else 1 if i < 0.8 * n_images else 2}\n")
    write_text_atomic(root / "list_attr_celeba.txt", "".join(lines))
    write_text_atomic(root / "list_eval_partition.txt", "".join(parts))
    return root
