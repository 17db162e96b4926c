"""Fixtures of the selective-prediction tests (the toy model lives in ``selective_toys.py``)."""

import pytest
from selective_toys import toy_batch, toy_model


@pytest.fixture
def model():
    return toy_model()


@pytest.fixture
def batch():
    return toy_batch()
