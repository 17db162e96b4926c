"""The bad-input corpus of inputs whose refusal depends on the environment (harness:
``badinput.py``): a user's ``_target_`` module on ``PYTHONPATH`` whose own code fails as it is
imported, and W&B's ``mode=online`` without an API key. Every case runs with ``HOME``, ``NETRC`` and
``WANDB_CONFIG_DIR`` in this module's fixture directory, ``WANDB_API_KEY`` empty and ``WANDB_MODE``
online (the test session's ``offline`` would need no key), so the key of the user running the tests
is never read (and a case cannot pass or fail by it).

``FX`` is this module's own fixture: ``FX/code`` (on ``PYTHONPATH``: modules that raise or exit
when imported), an empty ``FX/home`` and the one-cell ``tiny`` experiment preset under ``FX/conf``.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from badinput import assert_refused, params, run_cli
from test_bad_inputs_experiment import PRESETS

TINY = ["--config-dir", "FX/conf", "+experiment=tiny"]
NO_KEY = "mode=online but no W&B API key was found"

TRAIN = [
    (["++model._target_=boom_model.Model"], "model._target_: cannot import 'boom_model.Model' (RuntimeError: boom at import)"),
    (["++model._target_=exit_model.Model"], "model._target_: cannot import 'exit_model.Model' (SystemExit: bye)"),
    (["logger.wandb.mode=online"], f"logger.wandb.{NO_KEY}"),
]
EXPERIMENT = [
    ([*TINY, "models.cbm=[model=cbm,++model._target_=boom_model.Model]"], "tab/cbm (train): model._target_: cannot import 'boom_model.Model' (RuntimeError: boom at import)"),
    ([*TINY, "wandb=true", "wandb_settings.mode=online"], f"tab/cbm (train): logger.wandb.{NO_KEY}"),
]

CASES = [("cbm-train", a, m, ()) for a, m in TRAIN] + [("cbm-experiment", a, m, ()) for a, m in EXPERIMENT]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-env-inputs")
    code = root / "code"
    code.mkdir()
    (code / "boom_model.py").write_text('raise RuntimeError("boom at import\\nsecond line")\n')
    (code / "exit_model.py").write_text('import sys\n\nsys.exit("bye")\n')
    (root / "home").mkdir()
    conf = root / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "tiny.yaml").write_text(textwrap.dedent(PRESETS["tiny"]))
    (root / "cache").mkdir()
    return root


def case_env(fx: Path, **extra: str) -> dict[str, str]:
    """No W&B key anywhere W&B looks (the user's own is never read); ``FX/code`` importable."""
    home = fx / "home"
    path = os.pathsep.join(p for p in (str(fx / "code"), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "HOME": str(home), "NETRC": str(home / ".netrc"), "WANDB_CONFIG_DIR": str(home / ".config" / "wandb"),
            "WANDB_API_KEY": "", "WANDB_IDENTITY_TOKEN_FILE": "", "WANDB_MODE": "online", "MPLCONFIGDIR": str(fx / "cache" / "matplotlib"), **extra}  # fmt: skip


def test_the_env_corpus_has_no_duplicates():
    assert len({(p, tuple(a)) for p, a, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_input_gives_one_line_and_leaves_nothing(fx, tmp_path, prog, args, message):
    line = assert_refused(fx, tmp_path, prog, args, message, env=case_env(fx))
    assert "second line" not in line


def test_a_key_lets_an_online_run_start(fx, tmp_path):
    """The positive control: with a key in ``WANDB_API_KEY``, or in the ``.netrc`` entry of W&B's
    host, the same command line passes the check (a dry run: nothing is started or written)."""
    from wandb.sdk.wandb_settings import Settings

    args = ["logger.wandb.mode=online", "data.modality=tabular"]
    res = run_cli(fx, "cbm-train", args, tmp_path, case_env(fx, WANDB_API_KEY="x" * 40, CBM_DRY_RUN="1"))
    assert res.returncode == 0, res.stderr[-2000:]
    host = Settings().base_url.split("//")[1].split("/")[0]
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host}\n  login user\n  password {'y' * 40}\n")
    netrc.chmod(0o600)
    res = run_cli(fx, "cbm-train", args, tmp_path, case_env(fx, NETRC=str(netrc), CBM_DRY_RUN="1"))
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_cli(fx, "cbm-train", args, tmp_path, case_env(fx, WANDB_MODE="offline", CBM_DRY_RUN="1"))
    assert res.returncode == 0, res.stderr[-2000:]  # the environment makes the run offline: no key needed
