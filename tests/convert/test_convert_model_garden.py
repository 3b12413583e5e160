"""TF Model Garden checkpoints (BertEncoder, BertEncoderV2, BertPretrainerV2): built here with
random weights, saved with tf.train.Checkpoint, converted, and compared with Model Garden's own
outputs. TensorFlow only (Model Garden is tf_keras)."""

import numpy as np
import pytest

from helpers import max_abs_diff, random_inputs, tiny_vocab, write_vocab
from kbert.convert import convert

tf = pytest.importorskip("tensorflow")
pytest.importorskip("official.nlp.modeling")
from official.modeling import tf_utils  # noqa: E402
from official.nlp.modeling import layers, models, networks  # noqa: E402

from kbert.models.task_models import task_model  # noqa: E402

TOL = 1e-4
VOCAB = 120
ENCODER = dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_attention_heads=4,
               inner_dim=64, max_sequence_length=64, type_vocab_size=2)


def _perturb(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(v.numpy() + rng.normal(scale=0.2, size=v.shape).astype("float32"))


def _mg_inputs(x):
    return dict(input_word_ids=x["input_ids"], input_mask=x["input_mask"],
                input_type_ids=x["segment_ids"])


def _save(directory, vocab_size=VOCAB, config_text=None, **objects):
    directory.mkdir(parents=True, exist_ok=True)
    tf.train.Checkpoint(**objects).write(str(directory / "ckpt"))
    write_vocab(str(directory), tiny_vocab(vocab_size))
    if config_text:
        (directory / "params.yaml").write_text(config_text)
    return str(directory)


@pytest.mark.parametrize("cls", [networks.BertEncoder, networks.BertEncoderV2])
def test_encoder_matches(tmp_path, cls):
    encoder = cls(**ENCODER)
    x = random_inputs(3, 16, VOCAB)
    encoder(_mg_inputs(x))
    _perturb(encoder)
    ref = encoder(_mg_inputs(x))
    if isinstance(ref, (list, tuple)):  # BertEncoder without dict_outputs
        ref = {"sequence_output": ref[0], "pooled_output": ref[1]}
    src = _save(tmp_path / "mg", encoder=encoder)
    ckpt = convert("model-garden", src, str(tmp_path / "kbert"))
    assert ckpt.heads == {} and ckpt.config.num_heads == 4
    out = ckpt.backbone(x)
    mask = x["input_mask"]
    diffs = {"sequence": max_abs_diff(out["sequence_output"], ref["sequence_output"], mask),
             "pooled": max_abs_diff(out["pooled_output"], ref["pooled_output"])}
    print(cls.__name__, "max abs diff", diffs)
    assert max(diffs.values()) < TOL, diffs


def _pretrainer(mlm_activation="gelu"):
    encoder = networks.BertEncoderV2(**ENCODER)
    nsp = layers.ClassificationHead(inner_dim=32, num_classes=2, name="next_sentence")
    model = models.BertPretrainerV2(
        encoder_network=encoder, classification_heads=[nsp],
        mlm_activation=tf_utils.get_activation(mlm_activation) if mlm_activation else None)
    return model, encoder, nsp


def test_pretrainer_matches(tmp_path):
    model, encoder, nsp = _pretrainer()
    x = random_inputs(3, 16, VOCAB)
    positions = np.array([[1, 4, 7], [2, 3, 5], [1, 2, 6]], "int32")
    model({**_mg_inputs(x), "masked_lm_positions": positions})
    _perturb(model)
    nsp.dense.set_weights(encoder.pooler_layer.get_weights())  # as in converted checkpoints
    ref = model({**_mg_inputs(x), "masked_lm_positions": positions})
    src = _save(tmp_path / "mg", model=model)
    ckpt = convert("model-garden", src, str(tmp_path / "kbert"))
    assert set(ckpt.heads) == {"mlm", "nsp"}
    out = task_model(ckpt, "pretraining")({**x, "masked_lm_positions": positions})
    seq = ckpt.backbone(x)
    mask = x["input_mask"]
    diffs = {"sequence": max_abs_diff(seq["sequence_output"], ref["sequence_output"], mask),
             "pooled": max_abs_diff(seq["pooled_output"], ref["pooled_output"]),
             "mlm": max_abs_diff(out["mlm_logits"], ref["mlm_logits"]),
             "nsp": max_abs_diff(out["nsp_logits"], ref["next_sentence"])}
    print("BertPretrainerV2 max abs diff", diffs)
    assert max(diffs.values()) < TOL, diffs


def test_nsp_head_with_its_own_pooler_is_left_out(tmp_path):
    model, _, _ = _pretrainer()
    x = random_inputs(2, 12, VOCAB)
    model({**_mg_inputs(x), "masked_lm_positions": np.array([[1], [2]], "int32")})
    _perturb(model)  # the NSP head's dense now differs from the encoder's pooler
    src = _save(tmp_path / "mg", model=model)
    with pytest.warns(UserWarning, match="has its own pooler"):
        ckpt = convert("model-garden", src, str(tmp_path / "kbert"))
    assert set(ckpt.heads) == {"mlm"}


def test_checkpoint_items_and_config_file(tmp_path):
    model, encoder, _ = _pretrainer(mlm_activation=None)  # a linear MLM transform
    x = random_inputs(2, 12, VOCAB)
    positions = np.array([[1, 4], [2, 3]], "int32")
    model({**_mg_inputs(x), "masked_lm_positions": positions})
    _perturb(model)
    ref = model({**_mg_inputs(x), "masked_lm_positions": positions})
    params = ("task:\n  model:\n    mlm_activation: null\n    encoder:\n      type: bert\n"
              "      bert:\n        hidden_activation: gelu\n        num_attention_heads: 4\n")
    src = _save(tmp_path / "mg", config_text=params, **model.checkpoint_items)
    ckpt = convert("model-garden", src, str(tmp_path / "kbert"))
    assert set(ckpt.heads) == {"mlm"}  # checkpoint_items hold no NSP output layer
    out = ckpt.heads["mlm"](ckpt.backbone(x)["sequence_output"], positions)
    assert max_abs_diff(out, ref["mlm_logits"]) < TOL


def test_bad_inputs(tmp_path):
    encoder = networks.BertEncoderV2(**ENCODER)
    encoder(_mg_inputs(random_inputs(1, 4, VOCAB)))
    src = _save(tmp_path / "v", vocab_size=100, encoder=encoder)
    with pytest.raises(ValueError, match="vocab.txt has 100 tokens but .* 120 rows"):
        convert("model-garden", src, str(tmp_path / "out"))
    extra = tf.Variable(tf.zeros([3]))
    src = _save(tmp_path / "x", encoder=encoder, adapter=tf.train.Checkpoint(w=extra))
    with pytest.raises(ValueError, match="unexpected variables adapter/w"):
        convert("model-garden", src, str(tmp_path / "out"))
    src = _save(tmp_path / "h", encoder=encoder,
                config_text="encoder:\n  type: bert\n  bert:\n    num_attention_heads: 8\n")
    with pytest.raises(ValueError, match="num_attention_heads 8 but .* 4 heads"):
        convert("model-garden", src, str(tmp_path / "out"))
    src = _save(tmp_path / "o", other=tf.train.Checkpoint(kernel=tf.Variable(tf.zeros([2, 2]))))
    with pytest.raises(ValueError, match="not a Model Garden BERT encoder checkpoint"):
        convert("model-garden", src, str(tmp_path / "out"))
