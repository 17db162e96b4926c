"""CUB-200-2011 read from its published layout (synthetic.real.cub) on a fixture in that layout:
the files parsed as published, Koh et al.'s class-level votes recomputed by hand, the splits, the
images, and the cache keyed by the files' bytes rather than where they lie."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from synthetic.real.cub import CUBConfig, class_votes, generate, load
from synthetic.real.fixtures import CUB_NEVER, write_cub
from synthetic.real.layout import LayoutError, load_image


@pytest.fixture(scope="module")
def cub_root(tmp_path_factory) -> Path:
    return write_cub(tmp_path_factory.mktemp("cub") / "data", per_class=8)


def published(root: Path) -> dict:
    """The fixture's files read line by line, independently of the reader."""
    base = root / "CUB_200_2011"
    rows = lambda name: [line.split() for line in (base / name).read_text().splitlines() if line.strip()]  # noqa: E731
    n = len(rows("images.txt"))
    n_attr = len((root / "attributes.txt").read_text().splitlines())
    present, cert = np.zeros((n, n_attr), int), np.zeros((n, n_attr), int)
    for f in rows("attributes/image_attribute_labels.txt"):
        present[int(f[0]) - 1, int(f[1]) - 1], cert[int(f[0]) - 1, int(f[1]) - 1] = int(f[2]), int(f[3])
    return {"images": [r[1] for r in rows("images.txt")], "label": np.array([int(r[1]) - 1 for r in rows("image_class_labels.txt")]),
            "train": np.array([r[1] == "1" for r in rows("train_test_split.txt")]), "present": present, "cert": cert,
            "names": [line.split()[1] for line in (root / "attributes.txt").read_text().splitlines()]}  # fmt: skip


def test_instance_concepts_labels_and_splits_are_the_files(cub_root):
    pub = published(cub_root)
    d = generate(CUBConfig(root=str(cub_root), concepts="instance", image_size=32))
    assert d.concept_names == pub["names"] and d.class_names[0] == "001.Capped_Perching_Bird"
    np.testing.assert_array_equal(d.c, pub["present"])  # the line with an extra field read as the others
    np.testing.assert_array_equal(d.y, pub["label"])
    n_train = int(pub["train"].sum())
    assert (d.split == 3).sum() == (~pub["train"]).sum() and not (d.split[~pub["train"]] != 3).any()
    assert (d.split == 1).sum() == int(0.2 * n_train) and (d.split == 0).sum() == n_train - int(0.2 * n_train)
    assert d.x.shape == (32, 32, 32, 3) and d.x.dtype == np.uint8
    np.testing.assert_array_equal(d.x[5], load_image(cub_root / "CUB_200_2011" / "images" / pub["images"][5], 32, "cub"))
    assert d.meta[:, 0].tolist() == list(range(1, 33)) and (d.meta[:, 1] == d.y + 1).all()


def test_voted_concepts_are_koh_et_al_class_majorities_on_the_training_images(cub_root):
    pub = published(cub_root)
    d = generate(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=1))
    train = d.split == 0
    expected = np.zeros((4, len(pub["names"])), int)
    for k in range(4):  # by hand: per class and attribute, visible yes / no answers of its training images
        rows = np.flatnonzero(train & (pub["label"] == k))
        for a in range(len(pub["names"])):
            yes = sum(pub["present"][r, a] == 1 for r in rows)
            no = sum(pub["present"][r, a] == 0 and pub["cert"][r, a] != 1 for r in rows)
            expected[k, a] = int(yes >= no)  # a tie (none included) counts as present
    keep = np.flatnonzero(expected.sum(0) >= 1)
    assert d.concept_names == [pub["names"][a] for a in keep] and d.info["attribute_ids"] == [int(a) + 1 for a in keep]
    assert not set(CUB_NEVER) & set(d.concept_names)  # present in no class: dropped
    np.testing.assert_array_equal(d.c, expected[:, keep][pub["label"]])  # every image carries its class's votes
    groups = d.info["intervention_groups"]
    assert groups["has_bill_shape"] == ["has_bill_shape::cone", "has_bill_shape::curved_(up_or_down)"] and len(groups) == 7
    strict = generate(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=3))
    assert strict.concept_names == [pub["names"][a] for a in np.flatnonzero(expected.sum(0) >= 3)]
    with pytest.raises(LayoutError, match="no attribute is present in 5 classes"):
        generate(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=5))


def test_koh112_is_the_published_list_and_needs_the_published_attributes(cub_root):
    from synthetic.real.cub import KOH_112

    assert len(KOH_112) == len(set(KOH_112)) == 112 and list(KOH_112) == sorted(KOH_112) and KOH_112[-1] == 312
    with pytest.raises(LayoutError, match="koh112 names attributes of the published 312; .*attributes.txt has 16"):
        generate(CUBConfig(root=str(cub_root)))


def test_class_votes_rules():
    present = np.array([[1, 0, 0], [0, 0, 1], [0, 0, 0]])
    cert = np.array([[4, 1, 1], [4, 1, 4], [2, 1, 1]])
    # attribute 0: one yes, two visible noes -> absent; 1: no visible answer -> tie -> present;
    # 2: one yes, one visible no (row 1 is yes, rows 0 and 2 not visible) -> present
    assert class_votes(present, cert, np.zeros(3, int), 1).tolist() == [[0, 1, 1]]


def test_root_may_be_the_dataset_folder_and_splits_follow_the_seed(cub_root):
    a = CUBConfig(root=str(cub_root), min_class_count=1)
    b = CUBConfig(root=str(cub_root / "CUB_200_2011"), min_class_count=1)
    assert a.base == b.base and a.split_sizes == b.split_sizes == {"train": 16, "val": 4, "calib": 0, "test": 12}
    assert CUBConfig(root=str(cub_root), calib_fraction=0.25).split_sizes == {"train": 11, "val": 4, "calib": 5, "test": 12}
    s0, s1 = (generate(CUBConfig(root=str(cub_root), seed=s, concepts="voted", min_class_count=1, image_size=8)).split for s in (0, 1))
    assert not np.array_equal(s0, s1) and np.array_equal(s0 == 3, s1 == 3)  # another validation draw, the same test


def test_the_cache_follows_the_files_not_where_they_lie(cub_root, tmp_path):
    cache = tmp_path / "cache"
    first = load(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=1, image_size=16), cache)
    files = sorted(cache.glob("cub*.npz"))
    assert len(files) == 1
    moved = shutil.copytree(cub_root, tmp_path / "moved")
    again = load(CUBConfig(root=str(moved), concepts="voted", min_class_count=1, image_size=16), cache)
    assert sorted(cache.glob("cub*.npz")) == files and np.array_equal(again.x, first.x)
    labels = moved / "CUB_200_2011" / "image_class_labels.txt"
    labels.write_text(labels.read_text().replace("1 ", "1 ", 1) + "\n")  # the same labels, other bytes
    load(CUBConfig(root=str(moved), concepts="voted", min_class_count=1, image_size=16), cache)
    assert len(sorted(cache.glob("cub*.npz"))) == 2


def test_cbm_intervene_reveals_concepts_or_whole_attribute_groups(cub_root, tmp_path):
    """cbm-intervene on a CUB model: by concept (k counts the 14 attributes) and with groups=true (k
    counts the 7 groups, every attribute of an asked group answered); revealing everything is the same
    either way."""
    from checkpoints import make_checkpoint

    from cbm.experiments import intervene

    cub = {"name": "cub", "root": str(cub_root), "concepts": "voted", "min_class_count": 1, "image_size": 16}
    make_checkpoint(tmp_path / "run" / "checkpoints" / "best.ckpt", tmp_path / "cache", base=cub)
    base = {"checkpoint": str(tmp_path / "run"), "cache_dir": str(tmp_path / "cache"), "policy": {"random": {}}, "intervener": {"oracle": {}},
            "ks": [0, 1, "max"], "per_example": True}  # fmt: skip
    by_concept = intervene.run({**base, "output_dir": str(tmp_path / "c")})
    by_group = intervene.run({**base, "output_dir": str(tmp_path / "g"), "groups": True})
    assert [r["k"] for r in by_concept.rows] == [0, 1, 14] and [r["k"] for r in by_group.rows] == [0, 1, 7]
    assert by_group.meta["k_max"] == 7 and by_group.meta["units"] == "groups"
    one = by_group.examples[("oracle", "random", 1)]["mask"]
    assert (one.sum(1) == 2).all()  # one group asked: both of its attributes answered
    names = by_group.meta["concepts"]
    cols = one[0].nonzero().flatten().tolist()
    assert len({names[j].split("::")[0] for j in cols}) == 1
    assert by_group.row("oracle", "random", 1)["mean_requested"] == 1.0
    assert by_group.row("oracle", "random", 7)["accuracy"] == by_concept.row("oracle", "random", 14)["accuracy"]
    with pytest.raises(ValueError, match="groups=true: this data declares no concept groups"):
        make_checkpoint(tmp_path / "robot" / "checkpoints" / "best.ckpt", tmp_path / "cache")
        intervene.run({**base, "checkpoint": str(tmp_path / "robot"), "output_dir": str(tmp_path / "r"), "groups": True})


def test_the_first_classes_only_as_cub25_reads_them(cub_root):
    pub = published(cub_root)
    d = generate(CUBConfig(root=str(cub_root), concepts="instance", classes=2, image_size=8))
    rows = np.flatnonzero(pub["label"] < 2)
    assert d.meta[:, 0].tolist() == (rows + 1).tolist() and d.class_names == ["001.Capped_Perching_Bird", "002.Capped_Duck"]
    np.testing.assert_array_equal(d.c, pub["present"][rows])
    assert (d.split == 3).sum() == (~pub["train"][rows]).sum()
    with pytest.raises(LayoutError, match="data.classes=5 but .*classes.txt has 4 classes"):
        _ = CUBConfig(root=str(cub_root), classes=5).split_sizes


def test_a_broken_image_is_never_served_from_a_good_copys_cache(cub_root, tmp_path):
    """The same label files, one image replaced: the cache of the good copy does not answer for it."""
    cache = tmp_path / "cache"
    load(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=1, image_size=8), cache)
    broken = shutil.copytree(cub_root, tmp_path / "broken")
    first = (broken / "CUB_200_2011" / "images.txt").read_text().split()[1]
    (broken / "CUB_200_2011" / "images" / first).write_bytes(b"not a jpeg")
    with pytest.raises(LayoutError, match="does not open"):
        load(CUBConfig(root=str(broken), concepts="voted", min_class_count=1, image_size=8), cache)
