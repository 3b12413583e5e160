"""The checkpoint directory: round trip, float16 storage, clear errors on bad input."""

import json
import os
import shutil

import numpy as np
import pytest
from keras import ops

import kbert
from helpers import random_inputs, tiny_vocab
from kbert import BertConfig, checkpoint, cli
from kbert.models.task_models import task_model

VOCAB = tiny_vocab(size=120)


def _pretrainer():
    return kbert.BertPretrainer(BertConfig.preset("tiny", vocab_size=120,
                                                  max_position_embeddings=64))


def _outputs(model, x):
    out = model(dict(x, masked_lm_positions=np.array([[1, 2], [3, 4]], "int32")))
    return {k: ops.convert_to_numpy(v) for k, v in out.items()}


@pytest.mark.multibackend
def test_round_trip_is_exact(tmp_path):
    model = _pretrainer()
    x = random_inputs(2, 10, 120)
    path = checkpoint.save(tmp_path / "ckpt", model, vocab=VOCAB)
    assert sorted(os.listdir(path)) == [".kbert-output.json", "config.json", "model.safetensors",
                                       "vocab.txt"]
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["heads"] == {"mlm": {}, "nsp": {}} and config["do_lower_case"] is True
    for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                "hidden_act", "max_position_embeddings", "type_vocab_size", "dropout",
                "attention_dropout", "layer_norm_epsilon", "initializer_range"):
        assert key in config
    restored = task_model(checkpoint.load(path), "pretraining")
    for key, value in _outputs(model, x).items():
        np.testing.assert_array_equal(value, _outputs(restored, x)[key])


@pytest.mark.multibackend
def test_float16_storage_is_close(tmp_path):
    model = _pretrainer()
    x = random_inputs(2, 10, 120)
    checkpoint.save(tmp_path / "half", model, vocab=VOCAB, dtype="float16")
    restored = task_model(checkpoint.load(tmp_path / "half"), "pretraining")
    a, b = _outputs(model, x), _outputs(restored, x)
    assert np.abs(a["mlm_logits"] - b["mlm_logits"]).max() < 1e-2
    size32 = os.path.getsize(checkpoint.save(tmp_path / "full", model, vocab=VOCAB)
                             + "/model.safetensors")
    assert os.path.getsize(tmp_path / "half" / "model.safetensors") < 0.6 * size32


@pytest.mark.multibackend
def test_classifier_labels_are_kept(tmp_path):
    model = kbert.BertClassifier(BertConfig.preset("tiny", vocab_size=120), num_labels=2)
    checkpoint.save(tmp_path / "c", model, vocab=VOCAB,
                    head_options={"classifier": {"labels": ["negative", "positive"]}})
    m = kbert.load(str(tmp_path / "c"))
    probs = m.classify("the dog sat on the mat")
    assert list(probs) == ["negative", "positive"]
    assert abs(sum(probs.values()) - 1) < 1e-6


@pytest.mark.multibackend
def test_missing_file_is_named(tmp_path):
    path = checkpoint.save(tmp_path / "ckpt", _pretrainer(), vocab=VOCAB)
    os.remove(os.path.join(path, "vocab.txt"))
    with pytest.raises(checkpoint.CheckpointError, match="missing vocab.txt"):
        checkpoint.load(path)
    with pytest.raises(checkpoint.CheckpointError, match="not found"):
        checkpoint.load(tmp_path / "nowhere")


@pytest.mark.multibackend
def test_shape_mismatch_is_named(tmp_path):
    path = checkpoint.save(tmp_path / "ckpt", _pretrainer(), vocab=VOCAB)
    config = json.loads(open(os.path.join(path, "config.json")).read())
    config["intermediate_size"] = 256
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(checkpoint.CheckpointError, match=r"layer_0/intermediate/kernel has shape"):
        checkpoint.load(path)


@pytest.mark.multibackend
def test_vocab_size_mismatch_is_named(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="vocabulary has 119 tokens"):
        checkpoint.save(tmp_path / "ckpt", _pretrainer(), vocab=VOCAB[:-1])


@pytest.mark.multibackend
def test_missing_head_is_named(tmp_path):
    checkpoint.save(tmp_path / "enc", kbert.BertBackbone(BertConfig.preset("tiny", vocab_size=120)),
                    vocab=VOCAB)
    m = kbert.load(str(tmp_path / "enc"))
    with pytest.raises(ValueError, match="fill_mask needs a 'mlm' head"):
        m.fill_mask("the [MASK] sat")
    with pytest.raises(ValueError, match="has no mlm or nsp head"):
        m.task_model("pretraining")


@pytest.mark.multibackend
def test_save_replaces_atomically(tmp_path):
    model = _pretrainer()
    checkpoint.save(tmp_path / "ckpt", model, vocab=VOCAB)
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.save(tmp_path / "ckpt", model, vocab=VOCAB[:-1])
    assert checkpoint.load(tmp_path / "ckpt").heads.keys() == {"mlm", "nsp"}  # old one intact
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "ckpt").st_mode & 0o777 == 0o777 & ~umask
    assert os.stat(tmp_path / "ckpt" / "vocab.txt").st_mode & 0o777 == 0o666 & ~umask


def _cli(capsys, *args):
    """`kbert ARGS` in this process: (exit status, stderr lines)."""
    code = cli.main(list(args))
    return code, capsys.readouterr().err.strip().splitlines()


# The CLI's error handling is backend-independent: these run in the TensorFlow pass only.
def test_cli_bad_input_is_one_line(tmp_path, capsys):
    code, err = _cli(capsys, "convert", "--from", "nonsense", str(tmp_path), "--output",
                     str(tmp_path / "o"))
    assert code == 2
    assert err == ["kbert convert: error: unknown source format 'nonsense'; choose one of "
                   + ", ".join(sorted(__import__("kbert.convert").convert.SOURCES))]
    code, err = _cli(capsys, "convert", "--from", "hf", str(tmp_path / "missing"), "--output",
                     str(tmp_path / "o"))
    assert code == 2 and len(err) == 1 and "not found" in err[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One saved tiny pretrainer; each config test edits its own copy."""
    return checkpoint.save(tmp_path_factory.mktemp("saved") / "ckpt", _pretrainer(), vocab=VOCAB)


def _with_config(tmp_path, saved, edit):
    path = str(shutil.copytree(saved, tmp_path / "ckpt"))
    config_path = os.path.join(path, "config.json")
    config = json.loads(open(config_path).read())
    with open(config_path, "w") as f:
        json.dump(edit(config), f)
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda c: None, r"config.json: expected a JSON object of hyper-parameters, found null"),
    (lambda c: [c], r"config.json: expected a JSON object of hyper-parameters, found a list"),
    (lambda c: dict(c, heads=["mlm", "nsp"]), r"config.json: 'heads' should be an object"),
    (lambda c: dict(c, heads=None), r"config.json: 'heads' should be an object .* found null"),
    (lambda c: dict(c, heads={"mlm": [], "nsp": {}}), r"config.json: heads.mlm should be an obj"),
    (lambda c: dict(c, heads={"mlm": {}, "mystery": {}}), r"config.json: heads: unknown head"),
    (lambda c: dict(c, dropout="0.1"), r"config.json: BertConfig.dropout must be a number"),
    (lambda c: dict(c, num_heads=[2]), r"config.json: BertConfig.num_heads must be a positive"),
    (lambda c: dict(c, do_lower_case="yes"), r"config.json: 'do_lower_case' should be true"),
])
def test_malformed_config_json_names_file_and_field(tmp_path, saved, edit, message):
    path = _with_config(tmp_path, saved, edit)
    with pytest.raises(checkpoint.CheckpointError, match=message):
        checkpoint.load(path)


def test_cli_malformed_config_is_one_line_exit_2(tmp_path, saved, capsys):
    path = _with_config(tmp_path, saved, lambda c: dict(c, heads=["mlm"]))
    code, err = _cli(capsys, "convert", "--to", "hf", path, "--output", str(tmp_path / "o"))
    assert code == 2, err
    assert err == [
        f"kbert convert: error: {path}/config.json: 'heads' should be an object "
        "{name: options}, found a list"]
