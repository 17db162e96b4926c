"""AwA2 read from its published folder (synthetic.real.awa2) on a fixture in that layout: every image
its class's attributes, the seeded random split, per-class subsampling, refusals naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from synthetic.real.awa2 import GROUPS, AwA2Config, generate, load, taxonomy_groups
from synthetic.real.fixtures import AWA2_CLASSES, AWA2_PREDICATES, write_awa2
from synthetic.real.layout import LayoutError


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_awa2(tmp_path_factory.mktemp("awa2") / "Animals_with_Attributes2", per_class=5)


def test_images_carry_their_class_attributes(root):
    matrix = np.loadtxt(root / "predicate-matrix-binary.txt", dtype=int)
    d = generate(AwA2Config(root=str(root), image_size=16))
    assert d.concept_names == list(AWA2_PREDICATES) and d.class_names == list(AWA2_CLASSES)
    assert d.x.shape == (40, 16, 16, 3) and np.bincount(d.y).tolist() == [5] * 8
    np.testing.assert_array_equal(d.c, matrix[d.y])
    assert d.meta[:, 0].tolist() == (d.y + 1).tolist()
    sizes = {name: int((d.split == code).sum()) for name, code in (("train", 0), ("val", 1), ("test", 3))}
    assert sizes == {"train": 40 - 4 - 8, "val": 4, "test": 8}  # int(0.1 * 40), int(0.2 * 40)
    other = generate(AwA2Config(root=str(root), image_size=16, seed=1))
    assert not np.array_equal(other.split, d.split) and np.array_equal(other.c, d.c)


def test_per_class_keeps_that_many_of_each(root, tmp_path):
    d = load(AwA2Config(root=str(root), image_size=8, per_class=2), tmp_path / "cache")
    assert np.bincount(d.y).tolist() == [2] * 8
    again = load(AwA2Config(root=str(root), image_size=8, per_class=2), tmp_path / "cache")
    assert np.array_equal(again.x, d.x) and len(list((tmp_path / "cache").glob("awa2-*.npz"))) == 1


def test_bad_layouts_name_the_file(root, tmp_path):
    bad = Path(shutil.copytree(root, tmp_path / "bad"))
    shutil.rmtree(bad / "JPEGImages" / "beaver")
    with pytest.raises(LayoutError, match="awa2: missing .*JPEGImages/beaver .*class 'beaver'"):
        _ = AwA2Config(root=str(bad)).split_sizes
    shutil.copytree(root / "JPEGImages" / "beaver", bad / "JPEGImages" / "beaver")
    lines = (bad / "predicate-matrix-binary.txt").read_text().splitlines()
    (bad / "predicate-matrix-binary.txt").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(LayoutError, match="expected 8 rows of 85 0/1 values .* got 7 rows"):
        _ = AwA2Config(root=str(bad)).split_sizes
    (bad / "classes.txt").unlink()
    with pytest.raises(LayoutError, match="awa2: missing .*classes.txt"):
        _ = AwA2Config(root=str(bad)).split_sizes


def test_the_85_predicates_fall_into_28_groups(root):
    d = generate(AwA2Config(root=str(root), image_size=8, per_class=1))
    groups = d.info["intervention_groups"]
    assert len(groups) == 28 and sorted(p for g in groups.values() for p in g) == sorted(AWA2_PREDICATES)
    assert groups["color"] == ["black", "white", "blue", "brown", "gray", "orange", "red", "yellow"]
    assert groups["tail"] == ["tail"] and len(groups["biome"]) == 13
    assert {g: tuple(m) for g, m in groups.items()} == GROUPS
    # a predicate the taxonomy does not name is a group of its own; the order follows predicates.txt
    assert taxonomy_groups(["white", "wings", "black"]) == {"color": ["white", "black"], "wings": ["wings"]}


def test_cbm_intervene_reveals_whole_awa2_groups(root, tmp_path):
    """groups=true on an AwA2 model: k counts the 28 groups, one answer reveals every predicate of its
    group, and revealing all 28 groups equals revealing all 85 predicates."""
    from checkpoints import concept_and_group_runs

    by_concept, by_group = concept_and_group_runs(tmp_path, {"name": "awa2", "root": str(root), "image_size": 16, "per_class": 2})
    assert [r["k"] for r in by_group.rows] == [0, 1, 28] and by_group.meta["units"] == "groups"
    names = by_group.meta["concepts"]
    of = {p: g for g, members in GROUPS.items() for p in members}
    for row in by_group.examples[("oracle", "random", 1)]["mask"]:
        asked = [names[j] for j in row.nonzero().flatten().tolist()]
        assert len({of[p] for p in asked}) == 1 and len(asked) == len(GROUPS[of[asked[0]]])
    assert by_group.row("oracle", "random", 28)["accuracy"] == by_concept.row("oracle", "random", 85)["accuracy"]
