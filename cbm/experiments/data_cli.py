"""``cbm-data``: inspect, export or look at a generated dataset.

    cbm-data info   data=robot data.concept_set=fine
    cbm-data export data=robot out=robot.npz
    cbm-data export data=robot format=hf out=robot_hf          # datasets.load_from_disk("robot_hf")
    cbm-data export data=robot format=parquet out=robot_pq     # robot_pq/<split>.parquet
    cbm-data show   data=sudoku_18px out=boards.png n=8
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cbm.core.atomic import save_npz_atomic, savefig_atomic
from cbm.core.common import CONF_DIR, clean_errors, dry_run, fail
from cbm.core.concurrency import stoppable
from cbm.core.safe_paths import check_file_path
from cbm.core.validation import to_dataclass
from synthetic.base import SPLITS, SyntheticData
from synthetic.export import DIR_FORMATS, FORMATS, check_out_dir, export_dataset, export_storage
from synthetic.registry import data_config, load_data

COMMANDS = ("info", "export", "show")
#: zlib's highest compression level (PNG is lossless at every level).
PNG_MAX_LEVEL = 9


@dataclass
class DataCliConfig:
    cache_dir: str | None = ".cache/cbm"
    out: str | None = None
    split: str | None = None
    #: show: how many samples of ``split`` (drawn with ``seed``, at most the whole split) the image holds.
    n: int = 16
    seed: int = 0
    format: str = "npz"
    chunk_mb: float = 32.0
    #: export format=hf / parquet: rows per arrow record batch / parquet row group.
    row_group_rows: int = 1024
    #: export format=hf / parquet: PNG zlib level 0..9 (file size vs speed; lossless at every level).
    png_compress_level: int = 6

    def __post_init__(self) -> None:
        if self.split is not None and self.split not in (*SPLITS, "all"):
            raise ValueError(f"split must be one of {[*SPLITS, 'all']}, got '{self.split}'")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {list(FORMATS)}, got '{self.format}'")
        if not self.chunk_mb > 0:
            raise ValueError(f"chunk_mb must be > 0, got {self.chunk_mb}")
        if self.row_group_rows < 1:
            raise ValueError(f"row_group_rows must be >= 1, got {self.row_group_rows}")
        if not 0 <= self.png_compress_level <= PNG_MAX_LEVEL:
            raise ValueError(f"png_compress_level must be in [0, {PNG_MAX_LEVEL}], got {self.png_compress_level}")


def export_arrays(data: SyntheticData) -> dict[str, np.ndarray]:
    """The exported file: the batch contract's arrays plus names and the attribute table."""
    out = {
        "x": data.x,
        "c": data.c,
        "c_true": data.c_true,
        "y": data.y,
        "split": data.split,
        "split_names": np.array(list(SPLITS)),
        "concept_names": np.array(data.concept_names),
        "true_concept_names": np.array(data.true_concept_names),
        "class_names": np.array(data.class_names),
        "attributes": data.meta,
        "attribute_names": np.array(data.meta_names),
    }
    out.update(data.extra)
    return out


def info_text(data: SyntheticData) -> str:
    lines = [f"modality: {data.modality}   x: {data.x.shape} {data.x.dtype}   concepts: {data.n_concepts}"]
    for name in SPLITS:
        rows = data.indices(name)
        if len(rows):
            counts = np.bincount(data.y[rows], minlength=data.n_classes) / len(rows)
            share = ", ".join(f"{c}={100 * s:.1f}%" for c, s in zip(data.class_names, counts))
            lines.append(f"{name:>6}: {len(rows):6d} samples   {share}")
    prevalence = data.c.mean(0)
    lines.append("concept prevalence: " + ", ".join(f"{n}={p:.2f}" for n, p in zip(data.concept_names, prevalence)))
    return "\n".join(lines)


def show_grid(data: SyntheticData, rows: np.ndarray, path: Path, caption: str | None = None, cols: int = 4) -> None:
    """Save a grid of sample images titled with their label and active concepts (``cols`` per row),
    with ``caption`` (e.g. the label rule) written under it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if data.modality != "image":
        raise ValueError(f"show needs image data, this dataset is {data.modality} (use data.modality=image)")
    cols = min(cols, len(rows))
    nrows = int(np.ceil(len(rows) / cols))
    below = 0.2 + 0.18 * (caption.count("\n") + 1) if caption else 0.0  # inches of caption
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 3.6 * nrows + below), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, i in zip(axes.flat, rows):
        ax.imshow(data.x[i], interpolation="nearest", cmap="gray" if data.x.ndim == 3 else None, vmin=0, vmax=255)
        on = [n for n, v in zip(data.concept_names, data.c[i]) if v > 0.5]
        text = ", ".join(on) if len(on) <= 8 else f"{len(on)}/{data.n_concepts} concepts on"
        ax.set_title(f"y={data.class_names[data.y[i]]}\n{text}", fontsize=7, wrap=True)
    if caption:
        fig.text(0.5, 0.01, caption, ha="center", va="bottom", fontsize=9, wrap=True)
    fig.tight_layout(rect=(0, below / fig.get_figheight(), 1, 1))
    try:
        savefig_atomic(fig, path, dpi=100)
    finally:
        plt.close(fig)


USAGE = f"usage: cbm-data {{{','.join(COMMANDS)}}} [data=<name>] [key=value ...]"
HELP = f"""{USAGE}

Inspect, export or look at a generated dataset (the same cache as cbm-train).

  info     split sizes, class balance and concept prevalence
  export   out=FILE.npz: x, c, c_true, y, split, names, attributes (+ Sudoku boards);
           format=hf out=DIR: a Hugging Face dataset (datasets.load_from_disk), images as lossless PNG;
           format=parquet out=DIR: DIR/<split>.parquet; split=all (default) or one split
  show     out=FILE.png n=16 split=test seed=0: a grid of samples with their labels and concepts

datasets (data=): DATASETS; any data.<key>=value of conf/data/<name>.yaml.
examples:
  cbm-data info data=robot data.concept_set=fine
  cbm-data export data=sudoku format=hf out=sudoku_hf
  cbm-data show data=sudoku_18px out=boards.png n=8"""


@clean_errors("cbm-data")
def run(argv: list[str]) -> None:
    from hydra.errors import HydraException

    from cbm.core.cli import explain, group_options

    if argv and argv[0] in ("-h", "--help", "help"):
        print(HELP.replace("DATASETS", ", ".join(group_options("data"))))
        return
    if not argv or argv[0] not in COMMANDS:
        got = f" (got '{argv[0]}')" if argv else ""
        fail("cbm-data", f"{USAGE}{got}")
    command, overrides = argv[0], argv[1:]
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name="data_cli", overrides=overrides)
    except HydraException as err:  # unknown group option or key, bad override syntax
        fail("cbm-data", explain(err, overrides, "data_cli"))
    raw = OmegaConf.to_container(cfg, resolve=True)
    data_cfg_raw = raw.pop("data")
    data_cfg = data_config(data_cfg_raw)
    opts = to_dataclass(DataCliConfig, raw, "config")
    to_dir = command == "export" and opts.format in DIR_FORMATS
    if to_dir:  # before the data is made: a new or empty directory, or a previous export
        check_out_dir(opts.out, opts.format)
    elif opts.out and command != "info":
        check_file_path(opts.out, "out")  # before the data is made: a file name, not a directory
    if command == "export" and not to_dir and opts.split not in (None, "all"):
        raise ValueError(f"split={opts.split}: format=npz holds every split (format=hf or parquet export one)")
    if dry_run("cbm-data"):  # CBM_DRY_RUN=1: the command line is valid
        return
    if to_dir:
        data = load_data(data_cfg, opts.cache_dir, storage=export_storage(data_cfg, opts.cache_dir))
        written = export_dataset(
            data, opts.out, opts.format, data_cfg_raw, opts.split, chunk_mb=opts.chunk_mb,
            row_group_rows=opts.row_group_rows, png_compress_level=opts.png_compress_level,
        )  # fmt: skip
        sizes = ", ".join(f"{name} {n}" for name, n in written.items())
        print(f"wrote {sum(written.values())} samples ({sizes}) to {opts.out} (format={opts.format})")
        return
    data = load_data(data_cfg, opts.cache_dir)
    if command == "info":
        print(info_text(data))
    elif command == "export":
        if not opts.out:
            raise ValueError("export needs out=FILE.npz")
        save_npz_atomic(Path(opts.out), export_arrays(data))
        print(f"wrote {len(data.y)} samples to {opts.out}")
    else:
        split = opts.split or "test"
        rows = data.indices(split) if split != "all" else np.arange(len(data.y))
        rng = np.random.default_rng(opts.seed)
        rows = np.sort(rng.choice(rows, size=min(opts.n, len(rows)), replace=False))
        out = Path(opts.out or f"{data_cfg.name}_samples.png")
        show_grid(data, rows, out)
        print(f"saved {len(rows)} samples to {out}")


@stoppable("cbm-data")
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
