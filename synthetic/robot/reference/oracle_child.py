"""Run ``concept-benchmark`` 0.4.1 itself: the child process of :mod:`synthetic.robot.reference.oracle`.

Stand-alone on purpose (numpy, Pillow and the reference; nothing from this project), so that it
runs in any interpreter that has the reference installed, with the reference's global side
effects (it seeds numpy, torch and ``PYTHONHASHSEED``) kept out of the caller's process.

``dataset OUT --seed S --renders R --size PX --image-dir DIR [--label-rule --n-train --n-test --val-share]``
    The reference's own ``DatasetGenerator(seed=S, renders_per_robot=R, label_rule=...).generate_splits()``
    at PX pixels (its ``create_synthetic_dataset`` given ``resolution=PX``; the split sizes are its
    ``generators`` module's constants, set here), PNGs drawn into DIR. Writes
    ``OUT`` (npz): every catalogue row's features in the project's coding (``body``), colour
    scheme, label and PNG file, and the row ids of its train / validation / test splits.
``draw IN OUT``
    Draws the robots of ``IN`` (npz: ``body [N, 9]``, ``scheme [N]``, ``size``) with the reference's
    ``draw_robot`` and PNG export, read back as ``uint8 [N, PX, PX, 3]`` RGB into ``OUT``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

#: The reference's feature values, in its order; the project's code of each (``body`` columns).
HAND = ("round_circle", "round_oval", "round_oval2", "edgy_triangle", "edgy_square", "edgy_trapezoid")
FOOT = ("flat_trapezoid", "flat_rounded", "flat_square", "flat_5sided", "flat_lshaped",
        "pointy_trapezoid", "pointy_rounded", "pointy_square", "pointy_3sided", "pointy_4sided")  # fmt: skip
_NO_YES = ("false", "true")
#: The seven two-valued features: the reference's value for the project's code 0 and 1.
BINARY = (("head_shape", ("square", "round")), ("body_shape", ("square", "round")), ("has_knees", _NO_YES),
          ("has_elbows", _NO_YES), ("has_antennae", _NO_YES), ("ears_shape", ("square", "triangle")),
          ("mouth_type", ("open", "closed")))  # fmt: skip


def features(body: np.ndarray, scheme: int) -> dict:
    """``draw_robot`` keyword arguments of one robot (project coding -> the reference's values)."""
    out = {name: values[int(value)] for (name, values), value in zip(BINARY, body[:7])}
    out["hand_shape"], out["foot_shape"] = HAND[int(body[7])], FOOT[int(body[8])]
    out["color_scheme"] = int(scheme)
    return out


def decode(df) -> np.ndarray:
    """``int64 [rows, 9]``: the catalogue's features (collapsed into type + ``_subtype`` columns) coded as the project's."""
    cols = [np.asarray(df[name].astype(str)) == values[1] for name, values in BINARY]
    hand = np.char.add(np.char.add(np.asarray(df["hand_shape"].astype(str)), "_"), np.asarray(df["hand_shape_subtype"].astype(str)))
    foot = np.char.add(np.char.add(np.asarray(df["foot_shape"].astype(str)), "_"), np.asarray(df["foot_shape_subtype"].astype(str)))
    cols.append(np.array([HAND.index(h) for h in hand]))
    cols.append(np.array([FOOT.index(f) for f in foot]))
    return np.stack(cols, axis=1).astype(np.int64)


def dataset(args: argparse.Namespace) -> None:
    os.environ["CONCEPT_BENCHMARK_DATA_DIR"] = str(Path(args.image_dir).resolve())
    import functools

    import concept_benchmark.generators as generators
    from concept_benchmark.robots import DatasetGenerator

    # the reference's own generate_splits, at the asked size and split sizes (module constants there)
    generators.create_synthetic_dataset = functools.partial(generators.create_synthetic_dataset, resolution=args.size)
    generators.ROBOT_TRAIN_SIZE, generators.ROBOT_TEST_SIZE = args.n_train, args.n_test
    generators.ROBOT_VALIDATION_SHARE = args.val_share
    ds = DatasetGenerator(seed=args.seed, renders_per_robot=args.renders, label_rule=args.label_rule).generate_splits()
    df = ds.meta["catalog_df"]
    ids = {name: np.asarray(getattr(ds, name).meta["robot_ids"], dtype=np.int64) for name in ("train", "validation", "test")}
    np.savez(
        args.out,
        body=decode(df),
        scheme=np.asarray(df["color_scheme"], dtype=np.int64),
        row=np.asarray(df["id"], dtype=np.int64),
        y=np.asarray(df["robot_type"], dtype=np.int64),
        png=np.asarray(df["png_filename"]).astype(str),  # not an object array: read without pickle
        image_dir=np.array(str(Path(ds.meta["image_dir"]).resolve())),
        **{f"split_{k}": v for k, v in ids.items()},
    )


def draw(args: argparse.Namespace) -> None:
    from concept_benchmark.synthetic.robot.draw import draw_robot
    from PIL import Image

    data = np.load(args.inp)
    body, scheme, size = data["body"], data["scheme"], int(data["size"])
    out = np.zeros((len(body), size, size, 3), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "robot.png")
        for i in range(len(body)):
            draw_robot(filetype="png", width=size, height=size, **features(body[i], scheme[i])).export(path)
            with Image.open(path) as img:
                out[i] = np.asarray(img.convert("RGB"))
    np.savez(args.out, x=out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="oracle_child")
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dataset")
    d.add_argument("out")
    d.add_argument("--seed", type=int, required=True)
    d.add_argument("--renders", type=int, required=True)
    d.add_argument("--size", type=int, required=True)
    d.add_argument("--image-dir", required=True)
    d.add_argument("--label-rule", default="balanced")
    d.add_argument("--n-train", type=int, default=3800)
    d.add_argument("--n-test", type=int, default=10000)
    d.add_argument("--val-share", type=float, default=0.2)
    r = sub.add_parser("draw")
    r.add_argument("inp")
    r.add_argument("out")
    args = parser.parse_args(argv)
    (dataset if args.cmd == "dataset" else draw)(args)


if __name__ == "__main__":
    sys.exit(main())
