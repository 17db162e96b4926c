"""Chunked, memory-mapped image generation (``storage="disk"``): byte-identical to the in-memory
path, memory-mapped on return, and a killed generation resumes (or restarts) cleanly without a
half-written chunk ever being read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from synthetic.robot import generator as robot_gen
from synthetic.robot.config import RobotConfig
from synthetic.sudoku import dataset as sudoku_gen
from synthetic.sudoku.config import SudokuConfig

ROBOT = dict(n_train=90, n_calib=40, n_test=70, image_size=24, blur=0.6, pixel_noise=12.0)
SUDOKU = dict(n_train=30, n_val=8, n_calib=0, n_test=12, cell_size=14, style="handwritten", glyph_variants=6, pencil_prob=0.3,
              blur=0.4, noise=6.0, n_mip_seeds=3)  # fmt: skip


def assert_same(a, b) -> None:
    for k, v in a.to_arrays().items():
        np.testing.assert_array_equal(v, b.to_arrays()[k], err_msg=k)


@pytest.mark.parametrize("chunk", [1, 37, 4096])
def test_robot_disk_storage_is_byte_identical_and_mapped(tmp_path, chunk):
    cfg = RobotConfig(**ROBOT)
    memory = robot_gen.generate(cfg)
    disk = robot_gen.load(cfg, str(tmp_path), storage="disk", chunk_rows=chunk)
    assert isinstance(disk.x, np.memmap) and not disk.x.flags.writeable
    assert_same(disk, memory)
    again = robot_gen.load(cfg, str(tmp_path), storage="disk", chunk_rows=chunk)  # served from the file
    assert_same(again, memory)
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob("*.progress.json"))


def test_sudoku_disk_storage_is_byte_identical(tmp_path):
    cfg = SudokuConfig(**SUDOKU)
    memory = sudoku_gen.generate(cfg)
    disk = sudoku_gen.load(cfg, tmp_path, storage="disk", chunk_rows=7)
    assert isinstance(disk.x, np.memmap) and disk.x.ndim == 3
    assert_same(disk, memory)


def test_killed_generation_resumes_and_never_serves_a_partial_file(tmp_path, monkeypatch):
    cfg = RobotConfig(**ROBOT)
    memory = robot_gen.generate(cfg)
    calls = {"n": 0}
    real = robot_gen.ImageRows.rows

    def dying(self, a, b):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("killed")
        return real(self, a, b)

    monkeypatch.setattr(robot_gen.ImageRows, "rows", dying)
    with pytest.raises(KeyboardInterrupt):
        robot_gen.load(cfg, str(tmp_path), storage="disk", chunk_rows=25)
    (partial,) = tmp_path.glob("*-x.npy.partial")
    (progress,) = tmp_path.glob("*-x.npy.progress.json")
    assert json.loads(progress.read_text())["done"] == 75  # three whole chunks recorded, the fourth never
    assert not list(tmp_path.glob("*-x.npy"))  # no reader can open a half-made array
    monkeypatch.setattr(robot_gen.ImageRows, "rows", real)
    rendered = []
    monkeypatch.setattr(robot_gen.ImageRows, "rows", lambda self, a, b: rendered.append(a) or real(self, a, b))
    resumed = robot_gen.load(cfg, str(tmp_path), storage="disk", chunk_rows=25)
    assert rendered[0] == 75 and len(rendered) == 5  # rows 75..199 only: the noise streams skipped ahead
    assert_same(resumed, memory)
    assert not partial.exists() and not progress.exists()


def test_a_progress_file_of_another_config_restarts_from_scratch(tmp_path):
    from synthetic.chunked import render_to_npy

    target = tmp_path / "x.npy"
    rows = lambda a, b: np.arange(a, b, dtype=np.uint8)[:, None].repeat(3, 1)  # noqa: E731
    np.lib.format.open_memmap(str(target) + ".partial", mode="w+", dtype=np.uint8, shape=(10, 3))[:] = 99
    (tmp_path / "x.npy.progress.json").write_text(json.dumps({"key": "other", "shape": [10, 3], "done": 8}))
    out = render_to_npy(target, (10, 3), rows, 4, key="mine")
    np.testing.assert_array_equal(out, rows(0, 10))
    with pytest.raises(ValueError, match=r"render\(0, 4\) gave shape"):
        render_to_npy(tmp_path / "bad.npy", (10, 3), lambda a, b: np.zeros((1, 3), np.uint8), 4, key="k")


def test_datamodule_reads_mapped_images_batch_by_batch(tmp_path):
    import torch

    from synthetic.datamodule import MappedRows, SyntheticDataModule

    cfg = RobotConfig(**ROBOT)
    memory = SyntheticDataModule(lambda: robot_gen.generate(cfg), batch_size=16, eval_batch_size=32, seed=3)
    disk = SyntheticDataModule(lambda: robot_gen.load(cfg, str(tmp_path), storage="disk", chunk_rows=50), batch_size=16, eval_batch_size=32, seed=3)
    assert isinstance(disk.split("train").tensors["x"], MappedRows)
    for name, shuffle in (("train", True), ("test", False)):
        a, b = list(memory.loader(name, shuffle=shuffle)), list(disk.loader(name, shuffle=shuffle))
        assert len(a) == len(b) > 1
        for x, y in zip(a, b):
            for k in x:
                assert torch.equal(x[k], y[k]), (name, k)
    mapped = disk.split("test").tensors["x"]
    assert torch.equal(mapped[torch.tensor([5, 1, 5])], memory.split("test").tensors["x"][torch.tensor([5, 1, 5])])
    assert mapped.to("cpu").shape == memory.split("test").tensors["x"].shape


def test_cbm_train_with_disk_storage_gives_the_same_run(tmp_path, compose_train):
    import json as _json

    from cbm.experiments import train

    results = {}
    for storage in ("memory", "disk", "render"):
        cfg = compose_train(f"output_dir={tmp_path / storage}", "data.modality=image", "data.n_train=200", "data.n_calib=0",
                            "data.n_test=100", "data.image_size=16", "trainer.max_epochs=1", f"data_storage={storage}",
                            f"cache_dir={tmp_path / ('cache-' + storage)}")  # fmt: skip
        train.run(cfg)
        m = _json.loads((tmp_path / storage / "metrics.json").read_text())
        results[storage] = {k: v for k, v in m.items() if k.startswith("test/") or k == "oracle_random"}
    assert results["disk"] == results["memory"] == results["render"]
    assert set(results["disk"]) == {"oracle_random", "test/concept_acc", "test/concept_auroc", "test/concept_f1", "test/task_acc",
                                    "test/task_loss"}  # fmt: skip
    assert list((tmp_path / "cache-disk").glob("robot-*-x.npy"))


def test_rendering_per_batch_gives_the_cached_images(tmp_path):
    import torch

    from synthetic.datamodule import SyntheticDataModule
    from synthetic.lazy import RenderedImages

    rng = np.random.default_rng(0)
    for gen, cfg in ((sudoku_gen, SudokuConfig(**SUDOKU)), (robot_gen, RobotConfig(**{**ROBOT, "pixel_noise": 0.0}))):
        memory = gen.generate(cfg)
        lazy = gen.load(cfg, str(tmp_path), storage="render")
        assert isinstance(lazy.x, RenderedImages) and lazy.x.nbytes == 0 and lazy.x.shape == memory.x.shape
        idx = rng.permutation(len(memory.x))[:17]
        np.testing.assert_array_equal(lazy.x[idx], memory.x[idx])  # any rows, any order
        np.testing.assert_array_equal(lazy.x[3], memory.x[3])
        np.testing.assert_array_equal(np.asarray(lazy.x), memory.x)
        a = list(SyntheticDataModule(lambda m=memory: m, batch_size=8, seed=1).loader("train", shuffle=True))
        b = list(SyntheticDataModule(lambda d=lazy: d, batch_size=8, seed=1).loader("train", shuffle=True))
        assert len(a) == len(b) and all(torch.equal(x["x"], y["x"]) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="cannot draw robots with pixel_noise > 0 row by row"):
        robot_gen.load(RobotConfig(**ROBOT), str(tmp_path), storage="render")


@pytest.mark.parametrize("storage", ["disk", "render"])
def test_a_second_load_reads_the_labels_instead_of_generating(tmp_path, monkeypatch, storage):
    """disk / render: every array but the images is cached beside them (``*-labels-<key>.npz``), so
    a later load samples nothing; the images come from the file (or are rendered) from the cached
    attributes, the same bytes."""
    for gen, cfg, prefix in ((robot_gen, RobotConfig(**{**ROBOT, "pixel_noise": 0.0 if storage == "render" else 12.0}), "robot"),
                             (sudoku_gen, SudokuConfig(**SUDOKU), "sudoku")):  # fmt: skip
        memory = gen.generate(cfg)
        first = gen.load(cfg, str(tmp_path), storage=storage)
        assert len(list(tmp_path.glob(f"{prefix}-labels-*.npz"))) == 1
        with monkeypatch.context() as m:
            m.setattr(gen, "generate", lambda *a, **k: pytest.fail("generated again"))
            again = gen.load(cfg, str(tmp_path), storage=storage)
            assert type(again.x) is type(first.x)
            assert_same(again, memory)
            if storage == "disk":  # the image file lost: re-rendered from the cached attributes, same bytes
                (xfile,) = tmp_path.glob(f"{prefix}-*-x.npy")
                xfile.unlink()
                assert_same(gen.load(cfg, str(tmp_path), storage=storage), memory)
                assert xfile.exists()


def test_read_ahead_threads_give_the_same_batches_and_live_across_epochs(tmp_path):
    """storage=disk with prefetch: batches gathered by background threads, in order (identical to
    reading in the loop), by the same threads every epoch (never restarted), and an epoch cut short
    leaves nothing running."""
    import threading

    import torch

    from synthetic.datamodule import MappedRows, SyntheticDataModule

    cfg = RobotConfig(**ROBOT)
    make = lambda: robot_gen.load(cfg, str(tmp_path), storage="disk", chunk_rows=50)  # noqa: E731
    plain = SyntheticDataModule(make, batch_size=16, seed=3, prefetch=0)
    ahead = SyntheticDataModule(make, batch_size=16, seed=3, prefetch=3)
    seen: set[str] = set()
    real = MappedRows.index_select
    MappedRows.index_select = lambda self, dim, idx: seen.add(threading.current_thread().name) or real(self, dim, idx)
    try:
        for epoch in range(3):
            a, b = plain.loader("train", shuffle=True), ahead.loader("train", shuffle=True)
            a.sampler.set_epoch(epoch), b.sampler.set_epoch(epoch)
            got_a, got_b = list(a), list(b)
            assert len(got_a) == len(got_b) == len(a) > 3
            assert all(torch.equal(x[k], y[k]) for x, y in zip(got_a, got_b) for k in x)
        assert ahead.loader("train").reader is ahead.reader() is not None  # one pool for every loader and epoch
        assert {n.split("_")[0] for n in seen} == {"MainThread", "cbm-read"}
        assert len({n for n in seen if n.startswith("cbm-read")}) <= 3
        it = iter(ahead.loader("train", shuffle=True))
        next(it)
        it.close()  # cut short: the read-ahead futures are dropped
    finally:
        MappedRows.index_select = real
    threads = list(ahead.reader()._threads)
    ahead.teardown()
    assert ahead._reader is None and threads and not any(t.is_alive() for t in threads)
    memory = SyntheticDataModule(lambda: robot_gen.generate(cfg), batch_size=16, prefetch=3)
    assert memory.loader("train").reader is None  # in-memory tensors: nothing to read ahead
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        SyntheticDataModule(make, prefetch=-1)
