"""Fixtures of the bad-input corpus (``test_bad_inputs*.py``)."""

from __future__ import annotations

import pytest
from badinput import build_fixtures


@pytest.fixture(scope="session")
def fx(tmp_path_factory):
    """Fixture files: trained runs, hostile checkpoints, broken metrics and concept sets."""
    return build_fixtures(tmp_path_factory.mktemp("bad-inputs"))
