"""Test set-up. Keras picks its backend at import, so the suite runs once per backend:

    KERAS_BACKEND=tensorflow pytest tests            # everything
    KERAS_BACKEND=jax pytest -m multibackend tests   # the backend-independent model code
    KERAS_BACKEND=torch pytest -m multibackend tests
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import keras  # noqa: E402
import pytest  # noqa: E402

from helpers import SHARED_DATA  # noqa: E402


def pytest_report_header(config):
    return f"keras backend: {keras.backend.backend()}"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "multibackend: runs on the tensorflow, jax and torch backends")


@pytest.fixture
def shared_data():
    """The real data sets in ../shared/data; tests that need them skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not available")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
