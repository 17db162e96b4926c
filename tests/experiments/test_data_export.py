"""``cbm-data export format=hf|parquet``: what ``datasets`` loads back is byte-identical to the generator's
arrays (pixels, concepts, labels, splits, attributes, names and the config in the card), writes are
atomic, and only a previous export is ever overwritten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cbm.core.common import CONF_DIR
from cbm.experiments.data_cli import run
from synthetic import export as export_mod
from synthetic.base import SPLITS, SyntheticData
from synthetic.export import PNG_SIGNATURE, read_card
from synthetic.registry import data_config, load_data

datasets = pytest.importorskip("datasets")

ROBOT = ["data=robot", "data.n_train=40", "data.n_calib=8", "data.n_test=12"]
SUDOKU = ["data=sudoku", "data.n_train=12", "data.n_val=4", "data.n_calib=4", "data.n_test=4", "data.n_mip_seeds=1"]
CASES = {
    "robot_image": ROBOT,
    "robot_tabular": [*ROBOT, "data.modality=tabular"],
    "robot_text": [*ROBOT, "data.modality=text"],
    "sudoku_image": [*SUDOKU, "data.cell_size=18"],
    "sudoku_tabular": [*SUDOKU, "data.modality=tabular"],
}
#: Tiny chunks and row groups: every export crosses several of each.
SMALL_CHUNKS = ["chunk_mb=0.02", "row_group_rows=5"]


def data_overrides(args: list[str]) -> dict:
    """The resolved ``data`` config ``cbm-data`` composes from ``args``."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="data_cli", overrides=args)
    return OmegaConf.to_container(cfg.data, resolve=True)


def export(out: Path, cache: Path, fmt: str, args: list[str], *extra: str) -> Path:
    run(["export", *args, f"format={fmt}", f"out={out}", f"cache_dir={cache}", *extra])
    return out


def load(out: Path, fmt: str, hf_cache: Path) -> dict:
    """Split name -> ``datasets.Dataset``, read the documented way."""
    if fmt == "hf":
        loaded = datasets.load_from_disk(str(out))
        return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {str(loaded.split): loaded}
    files = {p.stem: str(p) for p in sorted(out.glob("*.parquet"))}
    return dict(datasets.load_dataset("parquet", data_files=files, cache_dir=str(hf_cache)))


def images(ds) -> np.ndarray:
    """The decoded ``x`` column as one uint8 array (what a user gets from PIL)."""
    return np.stack([np.asarray(im) for im in ds["x"]])


def stored_dtype(feature) -> str:
    """The dtype a column holds on disk (``datasets``' numpy format widens integers to int64)."""
    inner = getattr(feature, "feature", feature)  # a fixed-length sequence: its items
    return "int64" if isinstance(inner, datasets.ClassLabel) else inner.dtype


def assert_exact(ds, ref: SyntheticData, split: str) -> None:
    """Every column of ``ds`` equals the generator's rows of ``split``: values, stored dtypes, shapes."""
    rows = ref.indices(split)
    cols = ds.with_format("numpy", columns=[c for c in ds.column_names if c != "x" or ref.modality != "image"])[:]
    if ref.modality == "image":
        x = images(ds)
        assert x.dtype == ref.x.dtype
    else:
        x = cols["x"]
        assert stored_dtype(ds.features["x"]) == str(ref.x.dtype)
    assert x.shape == ref.x[rows].shape
    np.testing.assert_array_equal(x, ref.x[rows])
    for name, arr in (("c", ref.c), ("c_true", ref.c_true), ("y", ref.y), *ref.extra.items()):
        assert stored_dtype(ds.features[name]) == str(arr.dtype), name
        np.testing.assert_array_equal(cols[name], arr[rows], err_msg=name)
        assert cols[name].shape == arr[rows].shape, name
    np.testing.assert_array_equal(cols["split"], np.full(len(rows), SPLITS[split]))
    for j, name in enumerate(ref.meta_names):
        assert stored_dtype(ds.features[name]) == str(ref.meta.dtype), name
        np.testing.assert_array_equal(cols[name], ref.meta[rows, j], err_msg=name)
    assert ds.features["y"].names == ref.class_names and ds.features["split"].names == list(SPLITS)
    expected = {"x", "c", "c_true", "y", "split", *ref.extra, *ref.meta_names}
    assert set(ds.column_names) == expected


def assert_card(card: dict, ref: SyntheticData, raw: dict, fmt: str) -> None:
    assert card["format"] == fmt and card["data_config"] == raw
    assert card["concept_names"] == ref.concept_names and card["true_concept_names"] == ref.true_concept_names
    assert card["class_names"] == ref.class_names and card["attribute_names"] == ref.meta_names
    assert card["generator_info"] == json.loads(json.dumps(ref.info))


@pytest.mark.parametrize("fmt", ["hf", "parquet"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_export_round_trips_byte_exact(tmp_path, shared_cache, case, fmt):
    args = CASES[case]
    out = export(tmp_path / "out", shared_cache, fmt, args, *SMALL_CHUNKS)
    raw = data_overrides(args)
    card = read_card(out)
    ref = load_data(data_config(card["data_config"]), shared_cache)  # in memory, all at once: the reference bytes
    assert_card(card, ref, raw, fmt)
    loaded = load(out, fmt, tmp_path / "hf-cache")
    assert sorted(loaded) == sorted(n for n in SPLITS if len(ref.indices(n)))
    for split, ds in loaded.items():
        assert_exact(ds, ref, split)
        if fmt == "hf":  # the card's metadata is the DatasetInfo description too
            assert json.loads(ds.info.description) == {"cbm_export": card}


def test_images_are_stored_as_png_and_a_lossy_encoder_would_be_caught(tmp_path, shared_cache, monkeypatch):
    """The stored bytes are PNG files; an exporter re-encoding lossily (JPEG, even at quality 95)
    gives other pixels, which the round-trip comparison of :func:`assert_exact` sees."""
    import io

    from PIL import Image

    out = export(tmp_path / "png", shared_cache, "hf", ROBOT, "split=test")
    raw = datasets.load_from_disk(str(out)).cast_column("x", datasets.Image(decode=False))
    blobs = [row["bytes"] for row in raw.select(range(4))["x"]]
    assert all(b.startswith(PNG_SIGNATURE) for b in blobs)

    def jpeg(x: np.ndarray, level: int) -> list[bytes]:
        outs = []
        for img in x:
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=95)
            outs.append(buf.getvalue())
        return outs

    monkeypatch.setattr(export_mod, "png_images", jpeg)
    lossy = export(tmp_path / "jpeg", shared_cache, "hf", ROBOT, "split=test")
    ref = load_data(data_config(data_overrides(ROBOT)), shared_cache)
    with pytest.raises(AssertionError):
        assert_exact(datasets.load_from_disk(str(lossy)), ref, "test")


def test_one_split_is_one_dataset_and_parquet_loads_through_the_card(tmp_path, shared_cache):
    hf = export(tmp_path / "hf", shared_cache, "hf", ROBOT, "split=val")
    ds = datasets.load_from_disk(str(hf))
    assert isinstance(ds, datasets.Dataset) and str(ds.split) == "val" and len(ds) == 8
    pq = export(tmp_path / "pq", shared_cache, "parquet", ROBOT, "split=calib", "row_group_rows=3")
    assert sorted(p.name for p in pq.iterdir()) == ["README.md", "calib.parquet"]
    import pyarrow.parquet as pq_lib

    assert pq_lib.ParquetFile(pq / "calib.parquet").metadata.num_row_groups == 3  # 8 rows, 3 a group
    by_card = datasets.load_dataset(str(pq), cache_dir=str(tmp_path / "hf-cache"))  # the card's ``configs``
    assert list(by_card) == ["calib"] and by_card["calib"].features == ds.features


def test_a_previous_export_is_replaced_anything_else_refused(tmp_path, shared_cache, capsys):
    out = export(tmp_path / "out", shared_cache, "hf", ROBOT)
    export(out, shared_cache, "parquet", ROBOT)  # a previous export: replaced whole
    assert not (out / "dataset_dict.json").exists() and read_card(out)["format"] == "parquet"
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me\n")
    with pytest.raises(SystemExit):
        export(foreign, shared_cache, "hf", ROBOT)
    assert "is a non-empty directory that is not a cbm-data export" in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    export(empty, shared_cache, "parquet", ROBOT, "split=test")  # an empty directory is fine
    assert (empty / "test.parquet").exists()


def test_a_failed_export_leaves_nothing(tmp_path, shared_cache, monkeypatch):
    """Killed mid-way (an error in the second chunk), neither ``out`` nor a temp directory remains."""
    original, calls = export_mod.png_images, []

    def fail_second(x: np.ndarray, level: int) -> list[bytes]:
        calls.append(len(x))
        if len(calls) == 2:
            raise RuntimeError("boom")
        return original(x, level)

    monkeypatch.setattr(export_mod, "png_images", fail_second)
    with pytest.raises(RuntimeError, match="boom"):
        export(tmp_path / "out", shared_cache, "parquet", ROBOT, *SMALL_CHUNKS)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_npz_stays_the_default_and_refuses_one_split(tmp_path, shared_cache, capsys):
    run(["export", *ROBOT, f"out={tmp_path / 'r.npz'}", f"cache_dir={shared_cache}"])
    with np.load(tmp_path / "r.npz") as f:
        assert f["x"].shape == (60, 32, 32, 3)
    with pytest.raises(SystemExit):
        run(["export", *ROBOT, "split=test", f"out={tmp_path / 's.npz'}", f"cache_dir={shared_cache}"])
    assert "format=npz holds every split" in capsys.readouterr().err


def test_cbm_data_does_not_import_datasets_until_it_exports():
    code = "import sys, cbm.experiments.data_cli; print(sorted(m for m in ('datasets', 'pyarrow') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr[-2000:]


def test_export_and_load_need_no_network(tmp_path):
    """With every connection refused (``tests/netguard``) and no ``HF_HUB_OFFLINE`` set, exporting
    both formats and ``load_from_disk`` work. ``load_dataset("parquet")`` only pings a download
    counter (a 3 s best-effort HEAD, failures ignored), switched off here by
    ``HF_UPDATE_DOWNLOAD_COUNTS=0``; nothing on this path reaches for the Hub."""
    code = f"""
import datasets
from cbm.experiments.data_cli import run
for fmt in ("hf", "parquet"):
    run(["export", *{ROBOT!r}, "split=test", f"format={{fmt}}", f"out={tmp_path}/{{fmt}}", "cache_dir={tmp_path}/cache"])
assert len(datasets.load_from_disk("{tmp_path}/hf")) == 12
files = {{"test": "{tmp_path}/parquet/test.parquet"}}
assert len(datasets.load_dataset("parquet", data_files=files, cache_dir="{tmp_path}/hf-cache")["test"]) == 12
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(PYTHONPATH=str(Path(__file__).parents[1] / "netguard"), HF_UPDATE_DOWNLOAD_COUNTS="0")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
