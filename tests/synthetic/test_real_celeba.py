"""CelebA read from its published files (synthetic.real.celeba) on a fixture in that format: the
attribute table's header lines and -1 / 1 values, one attribute the task, the official partition,
per-split subsampling, refusals naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from synthetic.real.celeba import CelebAConfig, generate
from synthetic.real.fixtures import CELEBA_ATTRIBUTES, write_celeba
from synthetic.real.layout import LayoutError


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_celeba(tmp_path_factory.mktemp("celeba") / "data", n_images=30)


def table(root: Path) -> np.ndarray:
    return np.array([[int(v) for v in ln.split()[1:]] for ln in (root / "list_attr_celeba.txt").read_text().splitlines()[2:]])


def test_task_concepts_and_split_from_the_files(root):
    values = (table(root) + 1) // 2
    for task in ("Attractive", "Smiling"):
        d = generate(CelebAConfig(root=str(root), task=task, image_size=16))
        t = CELEBA_ATTRIBUTES.index(task)
        assert d.concept_names == [a for a in CELEBA_ATTRIBUTES if a != task] and d.class_names == [f"not {task}", task]
        np.testing.assert_array_equal(d.y, values[:, t])
        np.testing.assert_array_equal(d.c, np.delete(values, t, axis=1))
    parts = [int(ln.split()[1]) for ln in (root / "list_eval_partition.txt").read_text().splitlines()]
    assert d.split.tolist() == [{0: 0, 1: 1, 2: 3}[p] for p in parts]
    assert d.x.shape == (30, 16, 16, 3)


def test_torchvision_layout_and_max_images(root, tmp_path):
    tv = tmp_path / "tv"
    shutil.copytree(root, tv / "celeba")
    assert CelebAConfig(root=str(tv)).split_sizes == CelebAConfig(root=str(root)).split_sizes == {"train": 18, "val": 6, "calib": 0, "test": 6}
    d = generate(CelebAConfig(root=str(root), max_images=4, image_size=8))
    assert [int((d.split == c).sum()) for c in (0, 1, 3)] == [4, 4, 4]
    assert set(d.meta[:, 0]) <= set(range(1, 31))


def test_bad_files_name_the_file(root, tmp_path):
    bad = Path(shutil.copytree(root, tmp_path / "bad"))
    with pytest.raises(LayoutError, match="data.task='Handsome' is neither 'composite' nor an attribute of .*list_attr_celeba.txt"):
        _ = CelebAConfig(root=str(bad), task="Handsome").split_sizes
    part = bad / "list_eval_partition.txt"
    part.write_text(part.read_text().replace(" 2\n", " 7\n", 1))
    with pytest.raises(LayoutError, match=r"list_eval_partition.txt line \d+: expected '<file> 0\|1\|2'"):
        _ = CelebAConfig(root=str(bad)).split_sizes
    attr = bad / "list_attr_celeba.txt"
    attr.write_text("31\n" + "".join(attr.read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(LayoutError, match="says 31 images, lists 30"):
        _ = CelebAConfig(root=str(bad)).split_sizes


@pytest.mark.parametrize("n_concepts, hidden, width", [(6, 2, 1), (3, 3, 2), (4, 0, 1)])
def test_composite_task_is_the_number_the_most_balanced_attributes_spell(root, n_concepts, hidden, width):
    """task=composite (the CEM paper's CelebA): computed here row by row from the file, with Python's
    stable sort for the balance ranking and a binary string per image."""
    from synthetic.real.celeba import CompositeTask

    values = (table(root) + 1) // 2
    share = values.mean(0)
    ranked = sorted(range(40), key=lambda j: abs(share[j] - 0.5))
    shown, hid = sorted(ranked[:n_concepts]), sorted(ranked[n_concepts : n_concepts + hidden])
    cols = shown + hid
    codes = [int("".join(str(int(any(row[cols[i : i + width]]))) for i in range(0, len(cols), width)), 2) for row in values]
    classes = sorted(set(codes))
    d = generate(CelebAConfig(root=str(root), task="composite", composite=CompositeTask(n_concepts, hidden, width), image_size=8))
    assert d.concept_names == [CELEBA_ATTRIBUTES[j] for j in shown]
    assert d.info["hidden"] == [CELEBA_ATTRIBUTES[j] for j in hid] and d.info["task"] == "composite"
    np.testing.assert_array_equal(d.c, values[:, shown])
    assert d.y.tolist() == [classes.index(v) for v in codes]
    n_bits = -(-len(cols) // width)
    assert d.class_names == [format(v, f"0{n_bits}b") for v in classes]


def test_composite_task_refusals(root):
    from synthetic.real.celeba import CompositeTask

    with pytest.raises(ValueError, match="data.composite: concepts \\+ hidden must be at most CelebA's 40 attributes, got 30 \\+ 11"):
        CelebAConfig(root=str(root), task="composite", composite=CompositeTask(30, 11))
    with pytest.raises(ValueError, match="data.composite.width"):
        CelebAConfig(root=str(root), task="composite", composite=CompositeTask(width=0))


def test_cem_protocol_subsample_and_random_split(root):
    """subsample=3 keeps a third of the file (30 // 3 images), split=random cuts them 70 / 10 / 20 by
    their fractions (int(0.2 * 10) test, int(0.1 * 10) val); the official partition is not read."""
    d = generate(CelebAConfig(root=str(root), subsample=3, split="random", image_size=8))
    assert len(d.y) == 10 and [int((d.split == c).sum()) for c in (0, 1, 3)] == [7, 1, 2]
    assert len(set(d.meta[:, 0].tolist())) == 10 and set(d.meta[:, 0]) <= set(range(1, 31))
    again = generate(CelebAConfig(root=str(root), subsample=3, split="random", image_size=8))
    assert np.array_equal(again.split, d.split) and np.array_equal(again.meta, d.meta)
    other = generate(CelebAConfig(root=str(root), subsample=3, split="random", image_size=8, seed=1))
    assert not np.array_equal(other.meta, d.meta)
    values = (table(root) + 1) // 2
    np.testing.assert_array_equal(d.c, np.delete(values[d.meta[:, 0] - 1], CELEBA_ATTRIBUTES.index("Attractive"), axis=1))
    with pytest.raises(ValueError, match="data.split"):
        CelebAConfig(root=str(root), split="kfold")


def default_groups() -> dict[str, list[str]]:
    import yaml

    return yaml.safe_load((Path(__file__).parents[2] / "conf" / "data" / "celeba.yaml").read_text())["groups"]


def test_default_groups_cover_the_40_attributes_once():
    groups = default_groups()
    members = [a for g in groups.values() for a in g]
    assert len(groups) == 9 and sorted(members) == sorted(CELEBA_ATTRIBUTES)


def test_cbm_intervene_reveals_whole_celeba_groups(root, tmp_path):
    """groups=true on a CelebA model (task Attractive): 9 groups over the 39 concepts (``overall`` loses
    the task), one answer reveals every attribute of its group, all 9 groups equal all 39 concepts."""
    from checkpoints import concept_and_group_runs

    groups = default_groups()
    by_concept, by_group = concept_and_group_runs(tmp_path, {"name": "celeba", "root": str(root), "image_size": 16, "groups": groups})
    assert [r["k"] for r in by_group.rows] == [0, 1, 9] and by_group.meta["units"] == "groups"
    names = by_group.meta["concepts"]
    of = {a: g for g, members in groups.items() for a in members}
    for row in by_group.examples[("oracle", "random", 1)]["mask"]:
        asked = [names[j] for j in row.nonzero().flatten().tolist()]
        whole = [a for a in groups[of[asked[0]]] if a != "Attractive"]
        assert sorted(asked) == sorted(whole)
    assert by_group.row("oracle", "random", 9)["accuracy"] == by_concept.row("oracle", "random", 39)["accuracy"]


def test_groups_refusals(root):
    with pytest.raises(ValueError, match="data.groups: 'Smiling' is in two groups \\(a, b\\)"):
        CelebAConfig(root=str(root), groups={"a": ["Smiling"], "b": ["Smiling", "Young"]})
    with pytest.raises(LayoutError, match=r"celeba: data.groups names \['Purple_Hair'\], not attributes of .*list_attr_celeba.txt"):
        _ = CelebAConfig(root=str(root), groups={"hair": ["Black_Hair", "Purple_Hair"]}).split_sizes
