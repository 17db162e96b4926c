"""``data.source=concept_benchmark`` against a fake, minimal reference package (CI has no reference).

The fake has the surface the adapter's child process uses (``concept_benchmark.robots.DatasetGenerator``,
``concept_benchmark.generators`` with its split-size constants and ``create_synthetic_dataset``), draws
each row as a flat PNG whose colour encodes the row, and counts its calls, so the test sees the
reference's rows, labels and pixels arrive, and the cache spare a second run.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from synthetic.robot import RobotConfig
from synthetic.robot.attributes import META_INDEX
from synthetic.robot.generator import load
from synthetic.robot.reference import oracle
from synthetic.robot.reference.catalog import catalogue

FAKE_GENERATORS = '''
import itertools, os
from pathlib import Path
import numpy as np
from PIL import Image

ROBOT_TRAIN_SIZE, ROBOT_TEST_SIZE, ROBOT_VALIDATION_SHARE = 3800, 10000, 0.2
VALUES = {"head_shape": ["square", "round"], "body_shape": ["square", "round"], "has_knees": ["false", "true"],
          "has_elbows": ["false", "true"], "has_antennae": ["false", "true"], "ears_shape": ["square", "triangle"],
          "mouth_type": ["closed", "open"],
          "hand_shape": ["round_circle", "round_oval", "round_oval2", "edgy_triangle", "edgy_square", "edgy_trapezoid"],
          "foot_shape": ["flat_trapezoid", "flat_rounded", "flat_square", "flat_5sided", "flat_lshaped", "pointy_trapezoid",
                         "pointy_rounded", "pointy_square", "pointy_3sided", "pointy_4sided"]}


def colour(row, seed):
    return (row % 251, (row // 251) % 251, seed % 251)


def create_synthetic_dataset(rows=(), seed=0, renders=1, resolution=600, **_):
    out = Path(os.environ["CONCEPT_BENCHMARK_DATA_DIR"]) / "robot_images"
    out.mkdir(parents=True, exist_ok=True)
    for r in rows:
        Image.new("RGB", (resolution, resolution), colour(int(r), seed)).save(out / f"robot_{r:03d}.png")
    return out


class Part:
    def __init__(self, ids):
        self.meta = {"robot_ids": np.sort(ids)}


class DatasetGenerator:
    def __init__(self, benchmark="robot", seed=1014, renders_per_robot=4, label_rule="balanced"):
        self.seed, self.renders = seed, renders_per_robot

    def generate_splits(self):
        with open(os.environ["FAKE_CB_CALLS"], "a") as f:
            f.write(f"{self.seed}\\n")
        combos = list(itertools.product(*VALUES.values())) * self.renders
        n = len(combos)
        df = {k: np.array([c[j] for c in combos]) for j, k in enumerate(VALUES)}
        for k in ("hand_shape", "foot_shape"):
            df[k], df[k + "_subtype"] = (np.array([v.split("_", 1)[i] for v in df[k]]) for i in (0, 1))
        df["id"] = np.arange(n)
        df["color_scheme"] = np.arange(n) % 71
        df["png_filename"] = np.array([f"robot_{k:03d}.png" for k in range(n)])
        rng = np.random.default_rng(self.seed)
        df["robot_type"] = (rng.random(n) < 0.5).astype(np.int32)
        order = rng.permutation(n)
        n_val = int((n - ROBOT_TEST_SIZE - ROBOT_TRAIN_SIZE) * ROBOT_VALIDATION_SHARE)
        test, train = order[:ROBOT_TEST_SIZE], order[ROBOT_TEST_SIZE:ROBOT_TEST_SIZE + ROBOT_TRAIN_SIZE]
        val = order[ROBOT_TEST_SIZE + ROBOT_TRAIN_SIZE:][:n_val]
        from concept_benchmark import generators
        image_dir = generators.create_synthetic_dataset(rows=np.arange(n), seed=self.seed, renders=self.renders)
        self.meta = {"catalog_df": df, "image_dir": str(image_dir)}
        self.train, self.validation, self.test = Part(train), Part(val), Part(test)
        return self
'''


@pytest.fixture
def fake_reference(tmp_path, monkeypatch):
    root = tmp_path / "fake"
    pkg = root / "concept_benchmark"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "generators.py").write_text(textwrap.dedent(FAKE_GENERATORS))
    (pkg / "robots.py").write_text("from concept_benchmark.generators import DatasetGenerator\n")
    for dep in ("pero", "cairo", "colorir"):  # the reference's drawing stack: present, never used by the fake
        (root / dep).mkdir()
        (root / dep / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    monkeypatch.setenv("FAKE_CB_CALLS", str(calls))
    return calls


def cfg(**kw) -> RobotConfig:
    base = {"render": "reference", "source": "concept_benchmark", "renders_per_robot": 1, "n_train": 30, "n_test": 40,
            "val_fraction": 0.005, "n_calib": 5, "image_size": 8, "label_rule": "balanced", "train_constraints": "rule",
            "seed": 7}  # fmt: skip
    return RobotConfig(**{**base, **kw})


def test_the_references_rows_labels_and_pixels_arrive_and_are_cached(fake_reference, tmp_path):
    c = cfg()
    data = load(c, cache_dir=str(tmp_path / "cache"))
    sizes = {s: len(data.indices(s)) for s in ("train", "val", "calib", "test")}
    assert sizes == {"train": 30, "val": int((7680 - 70) * 0.005), "calib": 5, "test": 40}
    rows = data.meta[:, META_INDEX["robot_id"]]
    body, scheme = catalogue(1)
    np.testing.assert_array_equal(data.meta[:, :9], body[rows])  # the reference's features, decoded
    np.testing.assert_array_equal(data.meta[:, META_INDEX["palette"]], scheme[rows])
    np.testing.assert_array_equal(data.x[:, 3, 3], np.stack([rows % 251, (rows // 251) % 251, np.full_like(rows, 7)], 1))
    rng = np.random.default_rng(7)
    y_all = (rng.random(7680) < 0.5).astype(np.int64)
    np.testing.assert_array_equal(data.y, y_all[rows])  # its labels, per row
    order = rng.permutation(7680)
    assert set(rows[data.indices("test")]) == set(order[:40]) and set(rows[data.indices("train")]) == set(order[40:70])
    assert data.info["render"]["source"] == "concept_benchmark"
    again = load(c, cache_dir=str(tmp_path / "cache"))
    np.testing.assert_array_equal(again.x, data.x)
    assert fake_reference.read_text().split() == ["7"]  # the reference ran once; the cache served the second load


def test_a_missing_reference_is_one_line(monkeypatch):
    real = oracle.importlib.util.find_spec
    monkeypatch.setattr(oracle.importlib.util, "find_spec", lambda name, *a: None if name == "concept_benchmark" else real(name, *a))
    with pytest.raises(ValueError) as err:
        cfg()
    msg = str(err.value)
    assert msg.startswith("RobotConfig.source: source=concept_benchmark needs the reference package, not importable here (missing: concept-benchmark==0.4.1")
    assert "\n" not in msg


def test_the_adapter_needs_the_references_rules(fake_reference):
    with pytest.raises(ValueError, match="label_rule balanced or sparse"):
        cfg(label_rule="custom", train_constraints=[])
    with pytest.raises(ValueError, match="set train_constraints=rule"):
        cfg(train_constraints=[])
    with pytest.raises(ValueError, match="needs modality=image"):
        cfg(modality="tabular")
    with pytest.raises(ValueError, match="storage='render' is not supported"):
        load(cfg(), cache_dir=None, storage="render")


def test_a_failing_reference_is_reported_in_one_line(fake_reference, monkeypatch):
    monkeypatch.setenv("FAKE_CB_CALLS", "/nonexistent/dir/calls.txt")
    with pytest.raises(oracle.ReferenceError, match=r"^concept-benchmark failed to make the robots: FileNotFoundError"):
        load(cfg(), cache_dir=None)
