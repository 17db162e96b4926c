"""The bad-input corpus harness: run a real entry point in a subprocess and check its refusal.

A refusal is exactly one line on stderr, ``<prog>: error: ...``, naming the field or file and
the problem; exit code 2; no traceback; and no new file or directory (the working directory and
the fixture directory are compared before and after). The corpus is split by command into
``test_bad_inputs*.py``; each module's ``CASES`` list is counted by ``test_the_corpus_is_large``.

A case is ``(prog, args, message, marks)``: ``FX`` in an argument or message is replaced by the
shared fixture directory (``fx``: trained runs, hostile checkpoints and files).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch
from forked import run_forked

from cbm.core import forkserver

SLOW = pytest.mark.slow
#: Tiny tabular robots, shared by the fixture runs (every data read hits the cache).
DATA = ["data.modality=tabular", "data.n_train=300", "data.n_calib=100", "data.n_test=100"]
Case = tuple[str, list[str], str, tuple]


class Payload:
    """Unpickling this would create the marker file: a checkpoint must never be unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def build_fixtures(root: Path) -> Path:
    """Trained runs, hostile checkpoints, broken metrics and concept sets under ``root``."""
    cache = root / "cache"
    exe = Path(sys.executable).parent
    for name, model in (("run", "cbm"), ("bb", "blackbox")):
        args = [*DATA, f"model={model}", "trainer.max_epochs=1", "logger=csv_only", f"hydra.run.dir={root / name}", f"cache_dir={cache}"]
        if forkserver.available():
            res = run_forked("cbm-train", args, root, dict(os.environ))
        else:
            res = subprocess.run([str(exe / "cbm-train"), *args], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
    f = root / "files"
    f.mkdir()
    torch.save({"state_dict": {}, "hyper_parameters": Payload(f / "PWNED")}, f / "evil.ckpt")
    (f / "random.ckpt").write_bytes(os.urandom(4096))
    (f / "truncated.ckpt").write_bytes((root / "run" / "checkpoints" / "best.ckpt").read_bytes()[:3000])
    torch.save({"weights": torch.zeros(3)}, f / "other.ckpt")
    good = torch.load(root / "run" / "checkpoints" / "best.ckpt", weights_only=True, map_location="cpu")
    good["hyper_parameters"]["model"]["_target_"] = "os.system"  # plain data naming a function: never called
    torch.save(good, f / "target_system.ckpt")
    torch.save([1, 2, 3], f / "list.ckpt")
    (f / "empty_dir").mkdir()
    (f / "a_file").write_text("not a directory\n")
    (f / "malformed.yaml").write_text("concepts: [a, b\n  - : :\n")
    (f / "list.yaml").write_text("- a\n- b\n")
    (f / "noexpr.yaml").write_text("concepts:\n  - name: x\n")
    (f / "badexpr.yaml").write_text("concepts:\n  - name: x\n    expr: __import__('os')\n")
    (f / "overlap.yaml").write_text("concepts:\n  - {name: foot, kind: categorical, values: {a: 'foot_subtype < 5', b: 'foot_subtype < 6'}}\n")
    (f / "outside.yaml").write_text("concepts:\n  - {name: hands, kind: continuous, expr: hand_subtype}\n")
    (f / "ordinal.yaml").write_text("concepts:\n  - {name: foot, kind: ordinal, expr: foot_subtype}\n")
    (f / "list_metrics").mkdir()
    (f / "list_metrics" / "metrics.json").write_text("[1, 2]")
    (f / "max_metrics").mkdir()
    (f / "max_metrics" / "metrics.json").write_text(json.dumps({"model": "cbm", "dataset": "robot", "oracle_random": {"max": 1.0}}))
    (f / "bb_list.json").write_text("[1, 2]")
    cub_layouts(f)
    return root


def cub_layouts(f: Path) -> None:
    """Tiny CUB-200-2011 copies, each with one defect: a missing attribute file, a split file naming
    an image that does not exist, an image that does not open."""
    import shutil

    from synthetic.real.fixtures import write_cub

    good = write_cub(f / "cub_good", per_class=2)
    for name in ("cub_noattr", "cub_badsplit", "cub_badimage"):
        shutil.copytree(good, f / name)
    (f / "cub_noattr" / "CUB_200_2011" / "attributes" / "image_attribute_labels.txt").unlink()
    split = f / "cub_badsplit" / "CUB_200_2011" / "train_test_split.txt"
    split.write_text(split.read_text().replace("\n3 ", "\n999 ", 1))
    first = (f / "cub_badimage" / "CUB_200_2011" / "images.txt").read_text().split()[1]
    (f / "cub_badimage" / "CUB_200_2011" / "images" / first).write_bytes(b"not a jpeg")


def run_cli(fx: Path, prog: str, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``prog args`` in ``cwd`` (``FX`` in an argument -> the fixture directory); forked where the OS
    can (:func:`run_forked`: a ``PYTHONPATH`` in ``env``, such as the network guard's, gets a server
    of its own), else a fresh process."""
    exe = Path(sys.executable).parent / prog
    args = [a.replace("FX", str(fx)) for a in args]
    full = {**os.environ, "CBM_CACHE_DIR": str(fx / "cache"), "PYTHONWARNINGS": "ignore", **(env or {})}
    if forkserver.available():
        return run_forked(prog, args, cwd, full)
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=full)


def tree(*roots: Path) -> set[str]:
    """Every path under ``roots`` but the shared data caches."""
    return {str(p) for r in roots for p in r.rglob("*") if "cache" not in p.parts}


def assert_refused(fx: Path, tmp_path: Path, prog: str, args: list[str], message: str,
                   env: dict[str, str] | None = None) -> str:  # fmt: skip
    """Run the case and check the refusal contract; the error line."""
    before = tree(tmp_path, fx)
    res = run_cli(fx, prog, args, tmp_path, env)
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert len(err) == 1, res.stderr[-3000:]
    assert err[0].startswith(f"{prog}: error: ") and "Traceback" not in res.stderr
    assert message.replace("FX", str(fx)) in err[0], err[0]
    assert tree(tmp_path, fx) == before, sorted(tree(tmp_path, fx) ^ before)
    assert not (fx / "files" / "PWNED").exists()  # a pickled payload never ran
    return err[0]


def params(cases: Iterable[Case]) -> list:
    """``pytest.param`` per case, with its marks and a readable id."""
    return [pytest.param(p, a, m, marks=marks, id=f"{p}:{' '.join(a)[:60]}") for p, a, m, marks in cases]
