"""Fixtures shared by the fine-tuning tests."""

import keras
import pytest

import kbert
from helpers import tiny_vocab
from kbert import BertConfig, checkpoint


@pytest.fixture(scope="module")
def tiny_init(tmp_path_factory):
    """A randomly initialised tiny encoder (no heads), saved as a checkpoint. Seeded here: a
    module fixture is built before the per-test seed, so unseeded it would start from whatever
    state the process is in (fresh processes differ)."""
    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("init") / "tiny"
    config = BertConfig.preset("tiny", vocab_size=len(tiny_vocab()), max_position_embeddings=64,
                               dropout=0.0, attention_dropout=0.0)
    checkpoint.save(path, kbert.BertBackbone(config), vocab=tiny_vocab())
    return str(path)
