"""Test set-up. Keras picks its backend at import, so the suite runs once per backend:

    KERAS_BACKEND=tensorflow pytest tests            # everything
    KERAS_BACKEND=jax pytest -m multibackend tests   # the code whose path differs per backend
    KERAS_BACKEND=torch pytest -m multibackend tests

`make test` adds `-n 2 --dist loadfile --no-loadscope-reorder`: see `LONGEST_FIRST`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("KBERT_COMPILATION_CACHE", "off")   # tests that need it set it

import keras  # noqa: E402
import pytest  # noqa: E402

from helpers import SHARED_DATA  # noqa: E402

# The served playground the tests in tests/app share (a plugin, not tests/app/conftest.py: with
# --doctest-modules two files named conftest.py collide).
pytest_plugins = ["app_fixtures"]


def pytest_report_header(config):
    return f"keras backend: {keras.backend.backend()}"


# `make test` runs `pytest -n 2 --dist loadfile --no-loadscope-reorder` (pytest-xdist): each
# file's tests run on one worker, so module-scoped fixtures (an export of every head, fitted
# models, a running app, a tf.data service, a mirrored run) are built once, not once per worker,
# and files are handed out in the order below: the longest first (CPU seconds on a quiet
# 2-core machine, TensorFlow pass), so that no long file starts last and keeps one worker
# busy alone. Files not listed follow in collection order.
LONGEST_FIRST = ("serving/test_export.py", "runtime/test_runtimes.py", "training/test_training.py",
                 "finetune/test_own_data.py", "model/test_models.py", "data/test_text_stream.py",
                 "app/test_app.py", "test_readme.py", "finetune/test_finetuning.py",
                 "model/test_attention.py", "test_benchmarks_input_rate.py",
                 "experiments/test_experiments.py", "training/test_pretrain_arrays.py",
                 "test_layout.py", "model/test_pipeline.py", "model/test_tokenizer.py",
                 "training/test_backup.py", "reliability/test_kills.py")


def pytest_collection_modifyitems(config, items):
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].removeprefix("tests/"),
                                         len(rank)))


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
