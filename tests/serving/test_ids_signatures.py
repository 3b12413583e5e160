"""The SavedModel's `<task>_ids` signatures check their inputs in the graph: an id outside the
vocabulary, a segment id outside the segment vocabulary, a row longer than the position
embeddings or inputs of different shapes fail with an error naming the input, in the ops TF
Serving runs (`Assert`), instead of a wrong answer."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from helpers import tiny_vocab
from kbert import BertConfig, checkpoint, serving

IDS = {"input_ids": [[2, 10, 11, 4, 3, 0], [2, 12, 4, 3, 13, 3]],
       "segment_ids": [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]],
       "input_mask": [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The SavedModel version directory of a tiny encoder (16 positions)."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the exported signature is called with TensorFlow")
    root = tmp_path_factory.mktemp("ids")
    keras.utils.set_random_seed(0)
    config = BertConfig.preset("tiny", vocab_size=120, max_position_embeddings=16)
    checkpoint.save(root / "encoder", kbert.BertBackbone(config), vocab=tiny_vocab(size=120))
    return serving.export(str(root / "encoder"), str(root / "sm"), signatures=["embed"])


@pytest.fixture(scope="module")
def embed_ids(exported):
    return tf.saved_model.load(exported).signatures["embed_ids"]


def _call(fn, **changes):
    return fn(**{k: tf.constant(changes.get(k, v), tf.int32) for k, v in IDS.items()})


def test_valid_ids_are_served(embed_ids):
    out = _call(embed_ids)
    assert out["sequence_output"].shape[:2] == (2, 6)
    assert np.isfinite(out["pooled_output"].numpy()).all()
    edge = _call(embed_ids, input_ids=[[119, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    assert edge["sequence_output"].shape[:2] == (2, 6)


@pytest.mark.parametrize("changes, message", [
    ({"input_ids": [[2, -1, 11, 4, 3, 0], [2, 12, 4, 3, 13, 3]]}, "input_ids must be >= 0"),
    ({"input_ids": [[2, 10, 11, 4, 3, 0], [2, 12, 4, 3, 120, 3]]},
     "input_ids must be < 120 (the vocabulary size)"),
    ({"segment_ids": [[0, 0, 0, 0, 0, -2], [0, 0, 0, 0, 1, 1]]}, "segment_ids must be >= 0"),
    ({"segment_ids": [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 2, 2]]},
     "segment_ids must be < 2 (type_vocab_size)"),
    ({"input_mask": [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]},
     "input_mask must have the shape of input_ids"),
    ({k: [row * 3 for row in v] for k, v in IDS.items()},
     "input_ids: at most 16 tokens a row (max_position_embeddings)"),
])
def test_bad_ids_are_refused_naming_the_input(embed_ids, changes, message):
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        _call(embed_ids, **changes)
    assert message in e.value.message


def test_the_checks_are_ops_tf_serving_runs(exported):
    # every op against TF Serving's registry: tests/serving/test_export.py
    ops = serving.saved_model_ops(exported)
    assert {"Assert", "All", "Less", "LessEqual", "Equal"} <= ops
    assert not ops & {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
