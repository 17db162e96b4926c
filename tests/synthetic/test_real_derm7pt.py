"""Derm7pt read from its release_v0 layout (synthetic.real.derm7pt) on a fixture in that layout: the
criteria as 0.4.1's seven bits or as categorical concepts, both tasks, the official split, refusals."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest

from synthetic.real.derm7pt import CRITERIA, V04_BITS, Derm7ptConfig, diagnosis5, generate
from synthetic.real.fixtures import write_derm7pt
from synthetic.real.layout import LayoutError


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_derm7pt(tmp_path_factory.mktemp("derm") / "release_v0", n_cases=30)


def meta(root: Path) -> list[dict]:
    with open(root / "meta" / "meta.csv", newline="") as f:
        return list(csv.DictReader(f))


def split_rows(root: Path, name: str) -> list[int]:
    return [int(v) for v in (root / "meta" / f"{name}_indexes.csv").read_text().split()[1:]]


def test_v04_bits_and_melanoma_vs_nevus_from_the_files(root):
    rows = meta(root)
    d = generate(Derm7ptConfig(root=str(root), image_size=16))
    kept = [i for i, r in enumerate(rows) if "melanoma" in r["diagnosis"] or "nevus" in r["diagnosis"]]
    assert d.meta[:, 0].tolist() == kept and len(kept) < len(rows)  # the other diagnoses left out
    assert d.concept_names == list(CRITERIA) and d.class_names == ["nevus", "melanoma"]
    expected = [[float(V04_BITS[k](rows[i][k])) for k in CRITERIA] for i in kept]
    np.testing.assert_array_equal(d.c, expected)
    np.testing.assert_array_equal(d.y, [int("melanoma" in rows[i]["diagnosis"]) for i in kept])
    for name, code in (("train", 0), ("valid", 1), ("test", 3)):
        assert sorted(d.meta[d.split == code, 0].tolist()) == [i for i in split_rows(root, name) if i in kept]
    assert d.x.shape == (len(kept), 16, 16, 3)


def test_categorical_criteria_and_five_diagnoses(root):
    rows = meta(root)
    d = generate(Derm7ptConfig(root=str(root), concepts="categorical", task="diagnosis5", image_size=16))
    assert d.c.shape == (30, sum(len(v) for v in CRITERIA.values())) and (d.c.sum(1) == 7).all()  # one value per criterion
    groups = d.info["concept_types"]["groups"]
    assert groups["vascular_structures"][-1] == "vascular_structures_linear_irregular" and len(groups) == 7
    j = d.concept_names.index("pigmentation_diffuse_irregular")
    np.testing.assert_array_equal(d.c[:, j], [r["pigmentation"] == "diffuse irregular" for r in rows])
    assert [diagnosis5(r["diagnosis"]) for r in rows] == d.y.tolist()
    assert diagnosis5("melanoma metastasis") == 2 and diagnosis5("blue nevus") == 1 and diagnosis5("vascular lesion") == 3


def test_bad_layouts_name_the_file(root, tmp_path):
    bad = Path(shutil.copytree(root, tmp_path / "bad"))
    (bad / "meta" / "valid_indexes.csv").write_text("indexes\n3\n999\n")
    with pytest.raises(LayoutError, match=r"valid_indexes.csv: index 999 is not a row of meta.csv \(0..29\)"):
        _ = Derm7ptConfig(root=str(bad)).split_sizes
    (bad / "meta" / "valid_indexes.csv").write_text("indexes\n3\n")
    text = (bad / "meta" / "meta.csv").read_text().splitlines()
    text[2] = text[2].replace("atypical", "weird", 1).replace("typical", "weird", 1)  # the pigment network of row 2
    (bad / "meta" / "meta.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(LayoutError, match=r"meta.csv line 3: pigment_network is 'weird'"):
        _ = Derm7ptConfig(root=str(bad)).split_sizes
    (bad / "meta" / "meta.csv").unlink()
    with pytest.raises(LayoutError, match=r"derm7pt: missing .*meta/meta.csv"):
        _ = Derm7ptConfig(root=str(bad)).split_sizes
