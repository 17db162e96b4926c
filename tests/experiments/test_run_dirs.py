"""Default run directories: two commands started in the same second (a script's loop, a scheduler's
array) never share one, whatever the command (``${run_stamp:}``: time to the microsecond and pid)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

#: Every command whose default output folder Hydra names from the start time.
APPS = ("train", "intervene", "automate", "zoo", "finetune", "edct", "icl")

#: Compose every app's config in a process whose clock is frozen: what two commands started in the
#: same microsecond would get. Prints {app: [run dir, sweep dir]}.
FROZEN = textwrap.dedent("""
    import json, sys
    from datetime import datetime
    from cbm.core import common
    from cbm.core.cli import compose_plain

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 4, 14, 6, 16, 0)

    common.datetime = Frozen
    common.run_stamp.cache_clear()
    dirs = {}
    for app in sys.argv[1:]:
        cfg = compose_plain(app, [])
        dirs[app] = [str(cfg.hydra.run.dir), str(cfg.hydra.sweep.dir)]
    print(json.dumps(dirs))
""")


def frozen_dirs() -> dict[str, list[str]]:
    res = subprocess.run([sys.executable, "-c", FROZEN, *APPS], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_two_commands_started_in_the_same_second_get_different_default_run_dirs():
    first, second = frozen_dirs(), frozen_dirs()
    for app in APPS:
        run1, run2 = first[app][0], second[app][0]
        assert "2026-12-04_14-06-16-000000-" in run1, run1  # the clock the two processes shared
        assert run1 != run2, app  # the same microsecond, yet two directories
        assert first[app][1] != second[app][1], app  # and two sweep directories
    assert len({d[0] for d in first.values()}) == len(APPS)  # no two commands share one either


def test_one_process_keeps_one_stamp():
    """The precheck composes the config, then Hydra composes it again: both must name one directory."""
    from cbm.core.cli import compose_plain
    from cbm.core.common import run_stamp

    first, again = (str(compose_plain("train", []).hydra.run.dir) for _ in range(2))
    assert first == again and first.endswith(run_stamp()) and run_stamp().endswith(f"-{os.getpid()}")


def test_output_dir_is_the_run_dir_and_nothing_lands_under_outputs(tmp_path):
    """``output_dir=X`` where ``output_dir`` is Hydra's run directory: Hydra writes into X, and no
    time-stamped folder (which the next command started in the same second would have found locked)
    appears in the working directory."""
    from forked import run_forked

    cwd, out = tmp_path / "cwd", tmp_path / "run"
    cwd.mkdir()
    args = ["data.modality=tabular", "data.n_train=200", "data.n_calib=50", "data.n_test=50", "trainer=cpu_smoke",
            "trainer.max_epochs=1", "logger=csv_only", f"cache_dir={tmp_path / 'cache'}", f"output_dir={out}"]  # fmt: skip
    res = run_forked("cbm-train", args, cwd, dict(os.environ))
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "metrics.json").is_file() and (out / ".hydra" / "config.yaml").is_file()
    assert list(cwd.iterdir()) == []
    # what the run's numbers depend on beyond seed and config: the vector kernels torch dispatched to
    import torch

    got = json.loads((out / "metrics.json").read_text())["numerics"]
    assert got["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and got["torch"] == torch.__version__
    assert got["threads"] >= 1 and got["gpu"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)


def test_the_run_dir_follows_output_dir_only_where_it_is_the_run_dir():
    from cbm.core.overrides import RUN_DIR_OUTPUT, run_dir_follows_output_dir

    assert run_dir_follows_output_dir(["seed=1", "output_dir=/x/y"], RUN_DIR_OUTPUT) == ["seed=1", "output_dir=/x/y", "hydra.run.dir=/x/y"]
    assert run_dir_follows_output_dir(["output_dir=/x", "hydra.run.dir=/z"], RUN_DIR_OUTPUT) == ["output_dir=/x", "hydra.run.dir=/z"]
    assert run_dir_follows_output_dir(["-m", "output_dir=/x"], RUN_DIR_OUTPUT) == ["-m", "output_dir=/x"]
    assert run_dir_follows_output_dir(["output_dir=/x"], "experiments/${name}") == ["output_dir=/x"]
    assert run_dir_follows_output_dir(["seed=1"], RUN_DIR_OUTPUT) == ["seed=1"]
