"""The bad-input corpus of ``cbm-data export format=hf|parquet`` (harness: ``badinput.py``).

The new knobs (``format``, ``chunk_mb``, ``row_group_rows``, ``png_compress_level``, ``split`` with
``format=npz``) and the output directory (missing, a file, under a file, a non-empty directory that
is not a previous export, ``.``): each is refused with one line, exit 2, nothing left behind, and
all but the empty-split case before any data is made. ``FX`` is a small fixture of its own here,
so the file runs in the default suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from badinput import DATA, assert_refused, params

FORMATS = "format must be one of ['npz', 'hf', 'parquet']"
#: A valid export command line but for what each case adds.
HF = ["export", *DATA, "format=hf"]

EXPORT = [
    (["export", *DATA, "format=bogus", "out=x"], f"{FORMATS}, got 'bogus'"),
    (["export", *DATA, "format=HF", "out=x"], f"{FORMATS}, got 'HF'"),
    (["export", *DATA, "format=1", "out=x"], f"{FORMATS}, got '1'"),
    (["export", *DATA, "format=[hf]", "out=x"], "Cannot convert 'ListConfig' to string: '['hf']' (key: format)"),
    (["export", *DATA, "format={a:1}", "out=x"], "Cannot convert 'DictConfig' to string"),
    (["export", *DATA, "format=null", "out=x"], "Incompatible value 'None' for field of type 'str' (key: format)"),
    (["info", *DATA, "format=bogus"], f"{FORMATS}, got 'bogus'"),
    (HF, "export format=hf needs out=DIR"),
    (["export", *DATA, "format=parquet", "out="], "export format=parquet needs out=DIR"),
    ([*HF, "out=FX/files/a_file"], "out: FX/files/a_file is a file; format=hf writes a directory"),
    (["export", *DATA, "format=parquet", "out=FX/files/a_file"], "is a file; format=parquet writes a directory"),
    ([*HF, "out=FX/files/a_file/sub"], "is a file, not a directory"),
    ([*HF, "out=FX/files/mine"], "out: FX/files/mine is a non-empty directory that is not a cbm-data export"),
    ([*HF, "out=FX/files/fake_card"], "is a non-empty directory that is not a cbm-data export"),
    ([*HF, "out=."], "out: '.' is not usable as a file or directory name"),
    ([*HF, "out=.."], "out: '..' is not usable as a file or directory name"),
    ([*HF, "out=x", "chunk_mb=0"], "chunk_mb must be > 0, got 0"),
    ([*HF, "out=x", "chunk_mb=abc"], "could not be converted to Float (key: chunk_mb)"),
    ([*HF, "out=x", "row_group_rows=0"], "row_group_rows must be >= 1, got 0"),
    ([*HF, "out=x", "png_compress_level=10"], "png_compress_level must be in [0, 9], got 10"),
    ([*HF, "out=x", "split=everything"], "split must be one of"),
    (["export", *DATA, "split=test", "out=x.npz"], "split=test: format=npz holds every split"),
    ([*HF, "out=x", "split=val", "data.val_fraction=0"], "export: split 'val' is empty"),
]

CASES = [("cbm-data", a, m, ()) for a, m in EXPORT]


@pytest.fixture(scope="module")
def efx(tmp_path_factory) -> Path:
    """A plain file, a directory of someone else's files, and one whose README looks like a card
    but is not an export's."""
    root = tmp_path_factory.mktemp("bad-export")
    files = root / "files"
    (files / "mine").mkdir(parents=True)
    (files / "a_file").write_text("not a directory\n")
    (files / "mine" / "notes.txt").write_text("keep me\n")
    (files / "fake_card").mkdir()
    (files / "fake_card" / "README.md").write_text("---\npretty_name: mine\n---\n# not an export\n")
    return root


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_export_input_gives_one_line_and_leaves_nothing(efx, tmp_path, prog, args, message):
    assert_refused(efx, tmp_path, prog, args, message)
