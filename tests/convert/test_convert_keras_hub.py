"""keras-hub presets ↔ kbert: random keras-hub BertBackbone / BertMaskedLM / BertTextClassifier
presets convert with keras-hub's own numbers, and kbert checkpoints export to presets keras-hub
loads with the same numbers (on every backend: keras-hub runs on each)."""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

keras_hub = pytest.importorskip("keras_hub")

from helpers import max_abs_diff, random_inputs, tiny_vocab  # noqa: E402
from kbert import checkpoint  # noqa: E402
from kbert.convert import convert, export  # noqa: E402
from kbert.models import BertBackbone  # noqa: E402
from kbert.models.task_models import task_model  # noqa: E402
from kbert.network.config import BertConfig  # noqa: E402

pytestmark = pytest.mark.multibackend
TOL = 1e-4
VOCAB = 120
POSITIONS = np.array([[1, 4, 7], [2, 3, 5], [1, 2, 6]], "int32")


def _perturb(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(ops.convert_to_numpy(v) + rng.normal(scale=0.2, size=v.shape).astype("float32"))


def _kh_backbone():
    return keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=64)


def _tokenizer():
    return keras_hub.models.BertTokenizer(vocabulary=tiny_vocab(VOCAB), lowercase=True)


def _kh_inputs(x, positions=None):
    out = {"token_ids": x["input_ids"], "segment_ids": x["segment_ids"],
           "padding_mask": x["input_mask"]}
    if positions is not None:
        out["mask_positions"] = positions
    return out


def test_backbone_preset_matches(tmp_path):
    bb = _kh_backbone()
    _perturb(bb)
    bb.save_to_preset(str(tmp_path / "kh"))
    _tokenizer().save_to_preset(str(tmp_path / "kh"))
    ckpt = convert("keras-hub", str(tmp_path / "kh"), str(tmp_path / "kbert"))
    assert ckpt.heads == {} and ckpt.do_lower_case
    x = random_inputs(3, 16, VOCAB)
    ref, out = bb(_kh_inputs(x)), ckpt.backbone(x)
    mask = x["input_mask"]
    diffs = {"sequence": max_abs_diff(out["sequence_output"], ref["sequence_output"], mask),
             "pooled": max_abs_diff(out["pooled_output"], ref["pooled_output"])}
    print("keras-hub backbone max abs diff", diffs)
    assert max(diffs.values()) < TOL, diffs


def test_masked_lm_and_classifier_presets_match(tmp_path):
    pre = keras_hub.models.BertMaskedLMPreprocessor(_tokenizer(), sequence_length=16)
    mlm = keras_hub.models.BertMaskedLM(_kh_backbone(), preprocessor=pre)
    _perturb(mlm)
    mlm.save_to_preset(str(tmp_path / "mlm"))
    ckpt = convert("keras-hub", str(tmp_path / "mlm"), str(tmp_path / "k1"))
    assert set(ckpt.heads) == {"mlm"}
    weights_only = convert("keras-hub", str(tmp_path / "mlm" / "model.weights.h5"),
                           str(tmp_path / "k0"))
    assert weights_only.heads == {}  # the backbone's weight file: no task head
    assert ckpt.head_options["mlm"] == {"hidden_act": "gelu", "layer_norm_epsilon": 1e-5}
    x = random_inputs(3, 16, VOCAB)
    ref = mlm(_kh_inputs(x, POSITIONS))
    reloaded = checkpoint.load(str(tmp_path / "k1"))  # the head options survive a reload
    ours = reloaded.heads["mlm"](reloaded.backbone(x)["sequence_output"], POSITIONS)
    print("keras-hub BertMaskedLM max abs diff", max_abs_diff(ours, ref))
    assert max_abs_diff(ours, ref) < TOL

    cls = keras_hub.models.BertTextClassifier(_kh_backbone(), num_classes=3, preprocessor=None)
    _perturb(cls, seed=1)
    cls.save_to_preset(str(tmp_path / "cls"))
    _tokenizer().save_to_preset(str(tmp_path / "cls"))
    ckpt = convert("keras-hub", str(tmp_path / "cls"), str(tmp_path / "k2"))
    assert list(ckpt.heads) == ["classifier"]
    assert max_abs_diff(task_model(ckpt, "classifier")(x), cls(_kh_inputs(x))) < TOL


def _kbert_checkpoint(path, hidden_act="gelu_approximate", mlm_options=None):
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4,
                        intermediate_size=64, max_position_embeddings=64, hidden_act=hidden_act)
    backbone = BertBackbone(config)
    options = {"mlm": mlm_options or {}, "nsp": {}}
    heads = {name: checkpoint.make_head(name, backbone, o) for name, o in options.items()}
    for layer in [backbone, *heads.values()]:
        _perturb(layer)
    checkpoint.save(path, vocab=tiny_vocab(VOCAB), head_options=options, backbone=backbone,
                    heads=heads)
    return checkpoint.load(path)


def test_export_reloads_in_keras_hub(tmp_path):
    ckpt = _kbert_checkpoint(str(tmp_path / "kbert"),
                             mlm_options={"hidden_act": "gelu", "layer_norm_epsilon": 1e-5})
    with pytest.warns(UserWarning, match="nsp"):
        export("keras-hub", ckpt, str(tmp_path / "kh"))
    mlm = keras_hub.models.BertMaskedLM.from_preset(str(tmp_path / "kh"))
    bb = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "kh"))
    x = random_inputs(3, 16, VOCAB)
    ref, out = bb(_kh_inputs(x)), ckpt.backbone(x)
    mask = x["input_mask"]
    diffs = {"sequence": max_abs_diff(out["sequence_output"], ref["sequence_output"], mask),
             "pooled": max_abs_diff(out["pooled_output"], ref["pooled_output"]),
             "mlm": max_abs_diff(ckpt.heads["mlm"](out["sequence_output"], POSITIONS),
                          mlm(_kh_inputs(x, POSITIONS)))}
    print("export to keras-hub max abs diff", diffs)
    assert max(diffs.values()) < TOL, diffs
    tok = keras_hub.models.BertTokenizer.from_preset(str(tmp_path / "kh"))
    assert tok.vocabulary_size() == VOCAB


def test_export_of_exact_gelu_warns(tmp_path):
    ckpt = _kbert_checkpoint(str(tmp_path / "kbert"), hidden_act="gelu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export("keras-hub", ckpt, str(tmp_path / "kh"))
    assert any("tanh-approximate GELU" in str(w.message) for w in caught)
    bb = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "kh"))
    x = random_inputs(2, 12, VOCAB)
    diff = max_abs_diff(ckpt.backbone(x)["sequence_output"], bb(_kh_inputs(x))["sequence_output"],
                 x["input_mask"])
    print("export of an exact-GELU checkpoint to keras-hub: max abs diff", diff)
    assert diff < 0.1


def test_bad_presets(tmp_path):
    roberta = keras_hub.models.RobertaBackbone(
        vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=16)
    roberta.save_to_preset(str(tmp_path / "roberta"))
    with pytest.raises(ValueError, match="not a keras-hub BERT preset .*RobertaBackbone"):
        convert("keras-hub", str(tmp_path / "roberta"), str(tmp_path / "out"))
    bb = _kh_backbone()
    bb.save_to_preset(str(tmp_path / "kh"))
    keras_hub.models.BertTokenizer(vocabulary=tiny_vocab(100)).save_to_preset(str(tmp_path / "kh"))
    with pytest.raises(ValueError, match="vocabulary has 100 tokens but the word embeddings have"):
        convert("keras-hub", str(tmp_path / "kh"), str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="missing config.json"):
        convert("keras-hub", str(tmp_path), str(tmp_path / "out"))
    assert keras.backend.backend() in ("tensorflow", "jax", "torch")
