"""The encoder, heads and task models: config, shapes, parameter counts, fit, save/load."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import kbert
from helpers import random_inputs
from kbert import BertConfig

# Config handling and parameter counts are plain Python over Keras layers: the TensorFlow pass
# checks them; the model math, fitting and saving are marked `multibackend`.
TINY = dict(vocab_size=120, max_position_embeddings=64)


def test_config_presets_and_json_round_trip():
    shapes = {name: (c.num_layers, c.hidden_size, c.num_heads, c.intermediate_size)
              for name in kbert.PRESETS for c in [BertConfig.preset(name)]}
    assert shapes == {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024),
                      "small": (4, 512, 8, 2048), "medium": (8, 512, 8, 2048),
                      "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
    c = BertConfig.preset("mini", vocab_size=1000)
    assert BertConfig.from_json(c.to_json()) == c
    assert json.loads(c.to_json())["hidden_act"] == "gelu"
    assert (c.max_position_embeddings, c.type_vocab_size, c.dropout) == (512, 2, 0.1)


@pytest.mark.parametrize("kwargs,message", [
    (dict(hidden_size=100, num_heads=3), "divisible"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(dropout=1.5), "dropout"),
])
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BertConfig(**kwargs)


@pytest.mark.parametrize("preset,expected", [("base", 110e6), ("large", 340e6)])
def test_paper_parameter_counts(preset, expected):
    backbone = kbert.BertBackbone(BertConfig.preset(preset))     # built from config, no weights
    count = backbone.count_params()
    assert abs(count - expected) / expected < 0.02, count
    lines = []
    backbone.summary(print_fn=lines.append)
    assert f"{count:,}" in "\n".join(lines)


@pytest.mark.multibackend
def test_padding_does_not_change_real_tokens():
    backbone = kbert.BertBackbone(BertConfig.preset("tiny", **TINY))
    x = random_inputs(1, 10, 120)
    padded = {k: np.pad(v, ((0, 0), (0, 6))) for k, v in x.items()}
    a = ops.convert_to_numpy(backbone(x)["sequence_output"])
    b = ops.convert_to_numpy(backbone(padded)["sequence_output"])[:, :10]
    m = x["input_mask"][0].astype(bool)
    np.testing.assert_allclose(a[0, m], b[0, m], atol=1e-5)


@pytest.mark.multibackend
def test_pooled_only_computes_cls_alone_with_the_same_values():
    backbone = kbert.BertBackbone(BertConfig.preset("tiny", **TINY))
    x = random_inputs(3, 10, 120)
    x["input_mask"][1, 6:] = 0
    full, cls = backbone(x), backbone(x, pooled_only=True)
    assert tuple(cls["sequence_output"].shape) == (3, 1, 128)
    np.testing.assert_allclose(ops.convert_to_numpy(cls["pooled_output"]),
                               ops.convert_to_numpy(full["pooled_output"]), atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(cls["sequence_output"])[:, 0],
                               ops.convert_to_numpy(full["sequence_output"])[:, 0], atol=1e-5)


@pytest.mark.multibackend
def test_fused_attention_equals_explicit_probabilities():
    backbone = kbert.BertBackbone(BertConfig.preset("tiny", **TINY))
    x = random_inputs(2, 12, 120)
    fast = ops.convert_to_numpy(backbone(x)["sequence_output"])
    slow = backbone(x, output_attentions=True)
    np.testing.assert_allclose(fast, ops.convert_to_numpy(slow["sequence_output"]), atol=1e-5)
    probs = ops.convert_to_numpy(slow["attentions"][0])
    assert probs.shape == (2, 2, 12, 12)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    padded_keys = ~x["input_mask"][1].astype(bool)
    assert probs[1][..., padded_keys].max() < 1e-6          # no attention to padding


@pytest.mark.multibackend
def test_mlm_head_is_tied_to_word_embeddings():
    model = kbert.BertPretrainer(BertConfig.preset("tiny", **TINY))
    emb = model.backbone.word_embeddings.embeddings
    assert sum(v is emb for v in model.weights) == 1
    assert "mlm/output_bias" in [v.path for v in model.weights]


def _pretraining_dataset(n=16, seq_len=16, predictions=4):
    x = random_inputs(n, seq_len, 120)
    rng = np.random.default_rng(1)
    positions = np.sort(rng.integers(1, seq_len // 2, (n, predictions)), axis=1).astype("int32")
    features = dict(x, masked_lm_positions=positions,
                    masked_lm_ids=np.take_along_axis(x["input_ids"], positions, 1),
                    masked_lm_weights=np.ones((n, predictions), "float32"),
                    next_sentence_labels=rng.integers(0, 2, (n,)).astype("int32"))
    features["masked_lm_weights"][:, -1] = 0.0          # padded prediction slots
    return tf.data.Dataset.from_tensor_slices(features).batch(8).map(
        lambda f: kbert.pretraining_targets(f))


@pytest.mark.multibackend
def test_pretrainer_fits_a_tf_data_dataset():
    model = kbert.BertPretrainer(BertConfig.preset("tiny", **TINY))
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    history = model.fit(_pretraining_dataset(), epochs=6, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    assert {"mlm_logits_accuracy", "nsp_logits_accuracy"} <= set(history.history)


@pytest.mark.multibackend
@pytest.mark.parametrize("cls,kwargs,label_shape", [
    (kbert.BertClassifier, dict(num_labels=3), ()),
    (kbert.BertTokenClassifier, dict(num_labels=4), (16,)),
])
def test_task_models_fit(cls, kwargs, label_shape):
    model = cls(BertConfig.preset("tiny", **TINY), **kwargs)
    x = random_inputs(16, 16, 120)
    y = np.random.default_rng(0).integers(0, kwargs["num_labels"], (16,) + label_shape)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=5, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.multibackend
def test_question_answerer_and_multiple_choice_shapes():
    config = BertConfig.preset("tiny", **TINY)
    qa = kbert.BertQuestionAnswerer(config)
    out = qa(random_inputs(2, 10, 120))
    assert out["start_logits"].shape == (2, 10) and out["end_logits"].shape == (2, 10)
    choice = kbert.BertMultipleChoice(config)
    x = {k: v.reshape(2, 4, 5) for k, v in random_inputs(8, 5, 120).items()}
    assert tuple(choice(x).shape) == (2, 4)


@pytest.mark.multibackend
def test_keras_save_and_load_give_identical_outputs(tmp_path):
    model = kbert.BertPretrainer(BertConfig.preset("tiny", **TINY))
    x = dict(random_inputs(2, 10, 120), masked_lm_positions=np.array([[1, 2], [3, 4]], "int32"))
    before = model(x)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    after = restored(x)
    for key in ("mlm_logits", "nsp_logits"):
        np.testing.assert_array_equal(ops.convert_to_numpy(before[key]),
                                      ops.convert_to_numpy(after[key]))


def _task_batch(cls, n=16, t=12):
    """Features and targets for a task model, learnable from the first token."""
    x = random_inputs(n, t, 120, seed=1)
    first = x["input_ids"][:, 1] % 2
    if cls is kbert.BertMultipleChoice:         # the right choice has token 7 at position 1
        marked = dict(x, input_ids=x["input_ids"].copy())
        marked["input_ids"][:, 1] = 7
        pick = first.astype(bool)[:, None]
        x = {k: np.stack([np.where(pick, x[k], marked[k]), np.where(pick, marked[k], x[k])], 1)
             for k in x}                                                   # [n, 2, t]
        return x, first
    if cls is kbert.BertQuestionAnswerer:
        return x, {"start_logits": first + 1, "end_logits": first + 2}
    if cls is kbert.BertTokenClassifier:
        return x, np.repeat(first[:, None], t, 1)
    return x, first


@pytest.mark.multibackend
@pytest.mark.parametrize("cls", [kbert.BertClassifier, kbert.BertTokenClassifier,
                                 kbert.BertQuestionAnswerer, kbert.BertMultipleChoice])
def test_compile_without_arguments_trains_every_task_model(cls):
    model = cls(BertConfig.preset("tiny", **TINY))
    # XLA where it pays: on JAX an un-jitted step runs op by op; on TensorFlow's CPU the compile
    # costs more than these few steps (Keras' "auto" would compile there).
    model.compile(learning_rate=3e-3, warmup=0.25,
                  jit_compile=keras.backend.backend() == "jax")
    x, y = _task_batch(cls)
    history = model.fit(x, y, batch_size=8, epochs=8, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    schedule = model.optimizer._learning_rate      # set by fit: 2 batches x 8 epochs
    assert (schedule.total_steps, schedule.warmup_steps) == (16, 4)
    assert any(k.endswith("accuracy") for k in history)


@pytest.mark.parametrize("cls", [kbert.BertPretrainer, kbert.BertClassifier,
                                 kbert.BertTokenClassifier, kbert.BertQuestionAnswerer,
                                 kbert.BertMultipleChoice])
def test_task_models_round_trip_their_config(cls):
    model = cls(BertConfig.preset("tiny", **TINY))
    again = cls.from_config(model.get_config())
    assert type(again) is cls and again.get_config() == model.get_config()
