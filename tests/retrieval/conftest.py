"""Tiny checkpoints for the retrieval tests: two different random encoders (a sentence encoder
with mean pooling and a 16-token limit, so splitting shows on short texts), and cross-encoders."""

import keras
import pytest

import kbert
from helpers import tiny_vocab
from kbert import BertConfig, checkpoint

VOCAB = tiny_vocab(size=120)


def _encoder(path, seed, max_seq_length=16):
    keras.utils.set_random_seed(seed)
    backbone = kbert.BertBackbone(BertConfig.preset("tiny", vocab_size=len(VOCAB)))
    checkpoint.save(path, backbone, vocab=VOCAB,
                    embedding={"pooling": "mean", "normalize": True,
                               "max_seq_length": max_seq_length})
    return kbert.load(str(path))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return _encoder(tmp_path_factory.mktemp("enc") / "tiny-encoder", 0)


@pytest.fixture(scope="module")
def other_encoder(tmp_path_factory):
    return _encoder(tmp_path_factory.mktemp("enc") / "other-encoder", 1)


@pytest.fixture(scope="module")
def cross_encoders(tmp_path_factory):
    """{"nsp": Bert with an NSP head, "classifier": Bert with a 2-label pair classifier}."""
    root = tmp_path_factory.mktemp("cross")
    keras.utils.set_random_seed(2)
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB))
    checkpoint.save(root / "nsp", kbert.BertPretrainer(config), vocab=VOCAB)
    checkpoint.save(root / "clf", kbert.BertClassifier(config, num_labels=2), vocab=VOCAB,
                    head_options={"classifier": {"labels": ["irrelevant", "relevant"]}})
    return {"nsp": kbert.load(str(root / "nsp")), "classifier": kbert.load(str(root / "clf"))}
