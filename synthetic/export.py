"""Datasets to share: a generated dataset as a Hugging Face ``datasets`` directory or parquet files.

``format="hf"`` writes ``out/`` with ``save_to_disk`` (``datasets.load_from_disk(out)``: a
``DatasetDict`` keyed by split, or one ``Dataset`` for a single split); ``format="parquet"`` writes
``out/<split>.parquet`` (``datasets.load_dataset("parquet", data_files=...)``, or
``load_dataset(out)`` through the card's ``configs``). Both hold the same columns:

* ``x``: images as ``datasets.Image()`` (lossless PNG, so the pixels round-trip exactly; grey
  Sudoku boards as 8-bit grey PNGs); tabular / text inputs as a fixed-length sequence;
* ``c``, ``c_true``: fixed-length ``float32`` sequences in the order of ``concept_names`` /
  ``true_concept_names``. One sequence rather than a column per concept: the columns are the same
  for every concept set, ``with_format("numpy")`` gives the ``[B, m]`` matrix of the batch
  contract, and a concept named like an attribute (``knees``) cannot collide with its column;
  the names are in the card;
* ``y``: ``ClassLabel`` with the class names; ``split``: ``ClassLabel`` whose codes are
  :data:`~synthetic.base.SPLITS`'s;
* the generator's extra arrays (robot ``c_clean``, Sudoku ``board``) under their names;
* one ``int64`` column per attribute of the generator's meta table (enough to re-render a sample).

``README.md`` in ``out`` is the dataset card: YAML front matter whose ``cbm_export`` key holds the
resolved data config, the concept / class / attribute names and the generator's description
(for ``hf`` it is also the ``DatasetInfo.description``, as JSON). The card also marks the
directory as an export, so a later export may replace it; any other non-empty directory is refused.

Rows are rendered, PNG-encoded and written a chunk of about ``chunk_mb`` MiB of arrays at a time
(arrow record batches / parquet row groups of ``row_group_rows``), so peak memory is a few chunks
plus the labels and attributes, whatever the size of the dataset or of its images. ``out`` is written atomically (:func:`~cbm.core.atomic.atomic_dir`).
``datasets`` is imported only here, on the export path.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import atomic_dir
from synthetic.base import SPLITS, SyntheticData

#: ``cbm-data export format=``: one ``.npz`` file, a ``save_to_disk`` directory, parquet files.
FORMATS = ("npz", "hf", "parquet")
#: Formats whose ``out`` is a directory (written by :func:`export_dataset`).
DIR_FORMATS = ("hf", "parquet")
CARD = "README.md"
#: Front-matter key of the card: its presence marks a directory as a ``cbm-data`` export.
CARD_KEY = "cbm_export"
#: Bump when the columns or the card change meaning.
EXPORT_VERSION = 1
#: Where ``format=hf`` writes its arrow files before ``save_to_disk`` (inside the temp directory).
SCRATCH = ".scratch"
#: Column names the exporter itself uses (an extra array or attribute may not take them).
BASE_COLUMNS = ("x", "c", "c_true", "y", "split")
#: PNG file signature and colour types (8-bit grey, 8-bit RGB; PNG spec section 11.2.2).
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_GREY, PNG_RGB, PNG_RGB_CHANNELS = 0, 2, 3
#: ``datasets`` array features by the number of dimensions of one row.
_ARRAY_FEATURES = {2: "Array2D", 3: "Array3D", 4: "Array4D", 5: "Array5D"}


# ----------------------------------------------------------------------------- checks
def check_out_dir(value: Any, fmt: str) -> Path:
    """``out`` of a directory format, checked before the data are made: a usable name (a trailing
    ``/`` is fine), not an existing file, and not a non-empty directory other than a previous
    export (which is replaced). ``ValueError`` with one line otherwise."""
    from cbm.core.safe_paths import check_component, check_creatable, check_file_path

    s = "" if value is None else str(value)
    if not s:
        raise ValueError(f"export format={fmt} needs out=DIR (a new or empty directory, or a previous export)")
    trimmed = s.rstrip("/\\") or s
    check_component(trimmed.replace("\\", "/").rsplit("/", 1)[-1], "out", shown=s)
    path = check_file_path(trimmed, "out")  # control characters anywhere in the path
    if path.exists() and not path.is_dir():
        raise ValueError(f"out: {s} is a file; format={fmt} writes a directory (choose a new name)")
    if path.is_dir() and any(path.iterdir()) and read_card(path) is None:
        raise ValueError(f"out: {s} is a non-empty directory that is not a cbm-data export; "
                         "refusing to overwrite it (choose a new or empty directory)")  # fmt: skip
    check_creatable(path, "out")
    return path


def export_splits(data: SyntheticData, split: str | None) -> list[str]:
    """The splits to write: every non-empty one for ``None`` / ``"all"``, else that one (not empty)."""
    if split in (None, "all"):
        names = [name for name in SPLITS if len(data.indices(name))]
        if not names:
            raise ValueError("export: every split is empty")
        return names
    if not len(data.indices(split)):
        raise ValueError(f"export: split '{split}' is empty (set its size, or split=all)")
    return [split]


def export_storage(data_cfg: Any, cache_dir: str | None) -> str:
    """How to load a dataset for a directory export: images rendered per chunk (``render``) where
    each image is a function of its own row; robots with pixel noise (a per-split stream) rendered
    once into the cache (``disk``), or in memory without a cache."""
    if getattr(data_cfg, "modality", "image") != "image":
        return "memory"
    if getattr(data_cfg, "pixel_noise", 0):
        return "disk" if cache_dir is not None else "memory"
    return "render"


# ----------------------------------------------------------------------------- card
def read_card(out: str | Path) -> dict[str, Any] | None:
    """The ``cbm_export`` metadata of the card in ``out`` (``None``: no card, or not an export)."""
    import yaml

    try:
        text = (Path(out) / CARD).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("---\n") or "\n---\n" not in text[3:]:
        return None
    try:
        front = yaml.safe_load(text[4 : text.index("\n---\n", 3)])
    except yaml.YAMLError:
        return None
    meta = front.get(CARD_KEY) if isinstance(front, dict) else None
    return meta if isinstance(meta, dict) else None


def card_metadata(data: SyntheticData, fmt: str, splits: Sequence[str], data_config: dict[str, Any]) -> dict[str, Any]:
    """What the card records (plain JSON types): names, shapes, split sizes, config, generator info."""
    x = data.x
    meta = {
        "version": EXPORT_VERSION,
        "format": fmt,
        "dataset": data_config.get("name"),
        "modality": data.modality,
        "x": {"feature": "image" if data.modality == "image" else "sequence", "shape": list(x.shape[1:]),
              "dtype": str(np.dtype(x.dtype))},  # fmt: skip
        "splits": {name: int(len(data.indices(name))) for name in splits},
        "concept_names": list(data.concept_names),
        "true_concept_names": list(data.true_concept_names),
        "class_names": list(data.class_names),
        "split_names": list(SPLITS),
        "attribute_names": list(data.meta_names),
        "extra_names": list(data.extra),
        "data_config": data_config,
        "generator_info": data.info,
    }
    return json.loads(json.dumps(meta))  # plain JSON types (tuples -> lists); numpy scalars fail here, early


def card_text(meta: dict[str, Any], splits: Sequence[str]) -> str:
    """``README.md``: YAML front matter (``cbm_export``; for parquet also ``configs``, so
    ``load_dataset(out)`` finds the files) and a short description of the columns."""
    import yaml

    front: dict[str, Any] = {"pretty_name": f"cbm {meta['dataset']} (synthetic)", "tags": ["synthetic", "concept-bottleneck"]}
    if meta["format"] == "parquet":
        files = [{"split": s, "path": f"{s}.parquet"} for s in splits]
        front["configs"] = [{"config_name": "default", "data_files": files}]
    front[CARD_KEY] = meta
    load = ("datasets.load_from_disk(out)" if meta["format"] == "hf"
            else 'datasets.load_dataset("parquet", data_files={split: f"{out}/{split}.parquet"})')  # fmt: skip
    body = f"""# cbm {meta['dataset']} (synthetic)

Generated by `cbm-data export` from the data config under `{CARD_KEY}.data_config` (same config,
same bytes). Load with `{load}`.

- `x`: {meta['x']['feature']} {meta['x']['shape']} {meta['x']['dtype']} ({meta['modality']}; images are lossless PNG)
- `c`: annotated concepts, float32 0/1 in the order of `{CARD_KEY}.concept_names`
- `c_true`: the generator's true concepts, in the order of `{CARD_KEY}.true_concept_names`
- `y`: class label ({', '.join(meta['class_names'])}); `split`: {', '.join(meta['split_names'])}
- extra arrays: {', '.join(meta['extra_names']) or 'none'}
- one int64 column per generator attribute (`{CARD_KEY}.attribute_names`), enough to re-render a sample
"""
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n" + body


# ----------------------------------------------------------------------------- features and rows
def _array_feature(arr: Any) -> Any:
    """The ``datasets`` feature of one row of ``arr`` (``[N]``, ``[N, k]`` or ``[N, ...]``)."""
    import datasets

    dtype = str(np.dtype(arr.dtype))
    shape = tuple(int(s) for s in arr.shape[1:])
    if not shape:
        return datasets.Value(dtype)
    if len(shape) == 1:
        return datasets.Sequence(datasets.Value(dtype), length=shape[0])
    if len(shape) not in _ARRAY_FEATURES:
        raise ValueError(f"export: arrays of {len(shape)} dimensions per row are not supported")
    return getattr(datasets, _ARRAY_FEATURES[len(shape)])(shape=shape, dtype=dtype)


def features(data: SyntheticData) -> Any:
    """The ``datasets.Features`` of an export of ``data`` (column order: x, c, c_true, y, split,
    extra arrays, attributes)."""
    import datasets

    names = [*BASE_COLUMNS, *data.extra, *data.meta_names]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"export: column name(s) {twice} are used twice")
    cols: dict[str, Any] = {
        "x": datasets.Image() if data.modality == "image" else _array_feature(data.x),
        "c": _array_feature(data.c),
        "c_true": _array_feature(data.c_true),
        "y": datasets.ClassLabel(names=list(data.class_names)),
        "split": datasets.ClassLabel(names=list(SPLITS)),
    }
    for name, arr in data.extra.items():
        cols[name] = _array_feature(arr)
    for name in data.meta_names:
        cols[name] = datasets.Value(str(data.meta.dtype))
    return datasets.Features(cols)


def _png_chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)


def png_images(x: np.ndarray, compress_level: int) -> list[bytes]:
    """``uint8`` images ``[B,H,W]`` (grey) or ``[B,H,W,3]`` (RGB) as PNG files, lossless at every level.

    Encoded here rather than with PIL: 8-bit grey / RGB, no interlace, every scanline with filter
    type 0 (the rendered images are flat colour areas, which zlib packs best unfiltered): about 3x
    PIL's speed and 30% smaller files for 32 px robots; any PNG reader (PIL for ``datasets``)
    decodes them to the same bytes."""
    if x.dtype != np.uint8 or x.ndim not in (3, 4) or (x.ndim == 4 and x.shape[3] != PNG_RGB_CHANNELS):
        raise ValueError(f"export: images must be uint8 [N,H,W] or [N,H,W,3], got {x.dtype} {list(x.shape)}")
    b, h, w = x.shape[:3]
    colour = PNG_RGB if x.ndim == 4 else PNG_GREY
    header = PNG_SIGNATURE + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0))
    end = _png_chunk(b"IEND", b"")
    lines = np.zeros((b, h, 1 + x[0, 0].size), dtype=np.uint8)  # a 0 byte (filter: none) before each row
    lines[:, :, 1:] = x.reshape(b, h, -1)
    return [header + _png_chunk(b"IDAT", zlib.compress(lines[i].tobytes(), compress_level)) + end for i in range(b)]


def chunk_rows(data: SyntheticData, chunk_mb: float) -> int:
    """Rows per chunk: about ``chunk_mb`` MiB of the rows' arrays (a 32 px robot takes 3 KB, a
    Sudoku board of 50 px cells 200 KB), at least one row."""
    arrays = [data.x, data.c, data.c_true, data.y, data.split, data.meta, *data.extra.values()]
    row = sum(int(np.prod(a.shape[1:], dtype=np.int64)) * np.dtype(a.dtype).itemsize for a in arrays)
    return max(1, int(chunk_mb * 2**20) // max(1, row))


def row_batches(data: SyntheticData, rows: np.ndarray, chunk: int, png_level: int) -> Iterator[dict[str, Any]]:
    """Columns of ``rows`` in chunks of ``chunk`` rows (images rendered / read and PNG-encoded per
    chunk: only one chunk of pixels is held)."""
    import pyarrow as pa

    for a in range(0, len(rows), chunk):
        r = rows[a : a + chunk]
        sel = slice(int(r[0]), int(r[-1]) + 1) if r[-1] - r[0] == len(r) - 1 else r  # contiguous: a slice
        x = np.asarray(data.x[sel])
        batch: dict[str, Any] = {}
        if data.modality == "image":
            blobs = pa.array(png_images(x, png_level), type=pa.binary())
            batch["x"] = pa.StructArray.from_arrays([blobs, pa.nulls(len(r), pa.string())], names=["bytes", "path"])
        else:
            batch["x"] = x
        del x
        batch.update(c=data.c[sel], c_true=data.c_true[sel], y=data.y[sel], split=data.split[sel].astype(np.int64))
        for name, arr in data.extra.items():
            batch[name] = np.asarray(arr[sel])
        meta = data.meta[sel]
        for j, name in enumerate(data.meta_names):
            batch[name] = meta[:, j]
        yield batch


@contextmanager
def _quiet() -> Iterator[None]:
    """No ``datasets`` progress bars inside the block (a CLI prints its own one line)."""
    import datasets

    was_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_on:
            datasets.enable_progress_bars()


def _write_split(writer_cls: Any, path: Path, feats: Any, data: SyntheticData, split: str, opts: dict[str, Any]) -> int:
    writer = writer_cls(features=feats, path=str(path), writer_batch_size=opts["row_group_rows"])
    try:
        rows = data.indices(split)
        for batch in row_batches(data, rows, chunk_rows(data, opts["chunk_mb"]), opts["png_compress_level"]):
            writer.write_batch(batch)
        writer.finalize()
    finally:
        writer.close()
    return len(rows)


def export_dataset(
    data: SyntheticData,
    out: str | Path,
    fmt: str,
    data_config: dict[str, Any],
    split: str | None,
    *,
    chunk_mb: float,
    row_group_rows: int,
    png_compress_level: int,
) -> dict[str, int]:
    """Write ``data`` (the splits of :func:`export_splits`) to the directory ``out`` as ``fmt``
    (``hf`` or ``parquet``), atomically; the rows written per split. ``data_config``: the resolved
    data config, recorded in the card; the knobs are ``cbm-data``'s (``conf/data_cli.yaml``)."""
    import datasets
    from datasets.arrow_writer import ArrowWriter, ParquetWriter

    if fmt not in DIR_FORMATS:
        raise ValueError(f"export_dataset: format must be one of {list(DIR_FORMATS)}, got '{fmt}'")
    splits = export_splits(data, split)
    feats = features(data)
    meta = card_metadata(data, fmt, splits, data_config)
    opts = {"chunk_mb": chunk_mb, "row_group_rows": row_group_rows, "png_compress_level": png_compress_level}
    written: dict[str, int] = {}
    with _quiet(), atomic_dir(out) as tmp:
        if fmt == "parquet":
            for name in splits:
                written[name] = _write_split(ParquetWriter, tmp / f"{name}.parquet", feats, data, name, opts)
        else:
            scratch = tmp / SCRATCH
            scratch.mkdir()
            info = datasets.DatasetInfo(description=json.dumps({CARD_KEY: meta}, sort_keys=True), features=feats)
            parts = {}
            for name in splits:
                written[name] = _write_split(ArrowWriter, scratch / f"{name}.arrow", feats, data, name, opts)
                parts[name] = datasets.Dataset.from_file(str(scratch / f"{name}.arrow"), info=info.copy(),
                                                         split=datasets.NamedSplit(name))  # fmt: skip
            whole = datasets.DatasetDict(parts) if split in (None, "all") else parts[splits[0]]
            whole.save_to_disk(str(tmp))
            del whole, parts  # release the memory maps before the scratch files go
            shutil.rmtree(scratch)
        (tmp / CARD).write_text(card_text(meta, splits))
    return written
