"""SyntheticData round trips, the atomic cache and the in-memory DataModule."""

import numpy as np
import pytest
import torch

from synthetic.base import SPLITS, SyntheticData, split_codes
from synthetic.cache import cached_arrays, config_hash
from synthetic.datamodule import SyntheticDataModule


def toy(n: int = 50, image: bool = True) -> SyntheticData:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(n, 8, 8, 3), dtype=np.uint8) if image else rng.normal(size=(n, 4)).astype(np.float32)
    c = rng.integers(0, 2, size=(n, 3)).astype(np.float32)
    return SyntheticData(
        x=x, c=c, c_true=c[:, :2].copy(), y=c[:, 0].astype(np.int64),
        split=split_codes({"train": 20, "val": 10, "calib": 10, "test": n - 40}),
        meta=np.arange(n)[:, None], concept_names=["a", "b", "c"], true_concept_names=["a", "b"],
        class_names=["no", "yes"], meta_names=["id"], modality="image" if image else "tabular",
        extra={"board": np.zeros((n, 2, 2), dtype=np.int8)}, info={"vocab": []},
    )


def test_roundtrip_is_exact(tmp_path):
    d = toy()
    d.save(tmp_path / "d.npz")
    e = SyntheticData.load(tmp_path / "d.npz")
    for k, v in d.to_arrays().items():
        np.testing.assert_array_equal(v, e.to_arrays()[k])
    assert e.concept_names == ["a", "b", "c"] and e.extra["board"].shape == (50, 2, 2)


def test_mismatched_rows_are_refused():
    d = toy()
    with pytest.raises(ValueError, match="'c' has 49 rows"):
        SyntheticData(**{**d.__dict__, "c": d.c[:-1]})


def test_split_codes_layout():
    codes = split_codes({"train": 3, "val": 2, "calib": 1, "test": 4})
    assert codes.tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 3, 3]
    assert set(SPLITS) == {"train", "val", "calib", "test"}


def test_cache_builds_once_and_recovers_from_corruption(tmp_path):
    calls = []

    def build():
        calls.append(1)
        return {"a": np.arange(5)}

    cfg = {"name": "x", "seed": 1}
    np.testing.assert_array_equal(cached_arrays(cfg, build, tmp_path)["a"], np.arange(5))
    np.testing.assert_array_equal(cached_arrays(cfg, build, tmp_path)["a"], np.arange(5))
    assert len(calls) == 1
    path = tmp_path / f"data-{config_hash(cfg)}.npz"
    path.write_bytes(path.read_bytes()[:20])  # truncated by a crash of some other tool
    np.testing.assert_array_equal(cached_arrays(cfg, build, tmp_path)["a"], np.arange(5))
    assert len(calls) == 2
    assert not list(tmp_path.glob("*.tmp"))


def test_failed_build_leaves_no_cache_entry(tmp_path):
    def build():
        raise RuntimeError("generator crashed")

    with pytest.raises(RuntimeError):
        cached_arrays({"k": 1}, build, tmp_path)
    assert not list(tmp_path.glob("*.npz"))


def test_config_hash_is_order_independent():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_datamodule_batches_follow_the_contract():
    d = toy()
    dm = SyntheticDataModule(lambda: d, batch_size=8, eval_batch_size=16)
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (8, 3, 8, 8) and batch["x"].dtype == torch.float32
    assert 0.0 <= float(batch["x"].min()) and float(batch["x"].max()) <= 1.0
    assert batch["c"].shape == (8, 3) and batch["c_true"].shape == (8, 2) and batch["y"].dtype == torch.long
    assert batch["board"].shape == (8, 2, 2)
    test_rows = [int(i) for b in dm.test_dataloader() for i in b["idx"]]
    assert test_rows == d.indices("test").tolist()
    xs = torch.cat([b["x"] for b in dm.test_dataloader()])
    expected = torch.from_numpy(d.x[d.indices("test")]).permute(0, 3, 1, 2).float() / 255
    torch.testing.assert_close(xs, expected, rtol=0, atol=0)


def test_cache_entry_of_another_config_or_missing_arrays_is_regenerated(tmp_path):
    calls = []

    def build(tag):
        def _build():
            calls.append(tag)
            return {"a": np.arange(5) if tag == "mine" else np.zeros(3), "b": np.ones(2)}

        return _build

    mine, other = {"name": "x", "seed": 1}, {"name": "x", "seed": 2}
    cached_arrays(other, build("other"), tmp_path, required=("a", "b"))
    path_mine = tmp_path / f"data-{config_hash(mine)}.npz"
    path_other = tmp_path / f"data-{config_hash(other)}.npz"
    path_mine.write_bytes(path_other.read_bytes())  # a valid file of another config, copied over
    np.testing.assert_array_equal(cached_arrays(mine, build("mine"), tmp_path, required=("a", "b"))["a"], np.arange(5))
    assert calls == ["other", "mine"]
    np.savez(path_mine, a=np.arange(5))  # a valid npz lacking an array (and the key)
    assert set(cached_arrays(mine, build("mine"), tmp_path, required=("a", "b"))) == {"a", "b"}
    assert calls == ["other", "mine", "mine"]
    assert set(cached_arrays(mine, build("mine"), tmp_path, required=("a", "b"))) == {"a", "b"}
    assert calls == ["other", "mine", "mine"]  # the regenerated entry is served from now on
