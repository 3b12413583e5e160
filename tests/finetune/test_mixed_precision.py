"""The training precision switch: `kbert.hardware.mixed_precision_policy` ("auto" follows the
hardware), fine-tuning in mixed precision (finite losses, a float32 checkpoint `kbert.load`
reads, the global policy untouched), and a bad name as one CLI line."""

import os

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import kbert
from helpers import tiny_vocab, write_vocab
from kbert import cli, finetune, hardware
from kbert.models import TASK_MODELS

FAST = dict(batch_size=8, warmup=0.1, verbose=False, epochs=1, learning_rate=1e-3,
            jit_compile=keras.backend.backend() == "jax")


@pytest.fixture(scope="module")
def sst2_files(tmp_path_factory):
    """A few rows of random words; label 1 iff "good" appears."""
    rng = np.random.default_rng(0)
    words = "man dog cat fox store milk mat the a sat on".split()
    d = tmp_path_factory.mktemp("sst2")
    paths = []
    for name, n in (("train.tsv", 32), ("dev.tsv", 16)):
        rows = [" ".join(rng.choice(words, size=5)) + (" good" if i % 2 else "") + f"\t{i % 2}"
                for i in range(n)]
        (d / name).write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
        paths.append(str(d / name))
    return paths


@pytest.mark.multibackend
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_finetuning_in_mixed_precision_saves_a_float32_checkpoint(tiny_init, sst2_files,
                                                                   tmp_path, policy):
    out = str(tmp_path / "sst2")
    result = finetune.finetune("sst2", tiny_init, *sst2_files, out, mixed_precision=policy,
                               **FAST)
    assert result.precision == policy
    assert np.isfinite(result.history[0]["loss"])
    assert keras.mixed_precision.dtype_policy().name == "float32"   # no global policy left set
    stored = load_file(os.path.join(out, "model.safetensors"))
    assert {str(w.dtype) for w in stored.values()} == {"float32"}
    bert = kbert.load(out)
    assert {str(w.dtype) for w in bert.checkpoint.backbone.weights} == {"float32"}
    assert f"precision {policy}" in open(os.path.join(out, "MODEL_CARD.md")).read()


@pytest.mark.multibackend
def test_mixed_precision_heads_give_float32_logits(tiny_init):
    """The encoder computes in bfloat16, the head (and so the logits the loss sees) in
    float32: the checkpoint read as `finetune` reads it."""
    from kbert import checkpoint
    ckpt = checkpoint.load(tiny_init, dtype="mixed_bfloat16", head_dtype="float32")
    head = checkpoint.make_head("classifier", ckpt.backbone, {"labels": ["0", "1"]},
                                dtype="float32")
    model = TASK_MODELS["classifier"].with_head(ckpt.backbone, head)
    x = {"input_ids": np.ones((2, 8), "int32"), "segment_ids": np.zeros((2, 8), "int32"),
         "input_mask": np.ones((2, 8), "int32")}
    assert ckpt.backbone.compute_dtype == "bfloat16"
    assert keras.backend.standardize_dtype(model(x).dtype) == "float32"


@pytest.mark.multibackend
def test_mixed_pretraining_scores_float32_logits_with_an_unrounded_bias():
    """The masked-LM logits leave the head in float32 (cast once, after the product), with the
    output bias added as stored: a bias bfloat16 would round (1 + 2^-10) is kept."""
    keras.utils.set_random_seed(0)
    config = kbert.BertConfig.preset("tiny", vocab_size=50)
    model = kbert.BertPretrainer(config, dtype="mixed_bfloat16")
    x = {"input_ids": np.ones((2, 8), "int32"), "masked_lm_positions": np.zeros((2, 2), "int32")}
    before = keras.ops.convert_to_numpy(model(x)["mlm_logits"])
    model.mlm_head.output_bias.assign(np.full(50, 1 + 2.0 ** -10, "float32"))
    after = model(x)["mlm_logits"]
    assert keras.backend.standardize_dtype(after.dtype) == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(after) - before, 1 + 2.0 ** -10,
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("hardware_dtype, expected", [("float32", None),
                                                      ("bfloat16", "mixed_bfloat16")])
def test_auto_follows_the_hardware(monkeypatch, hardware_dtype, expected):
    monkeypatch.setattr(hardware, "auto_dtype", lambda: hardware_dtype)
    assert hardware.mixed_precision_policy("auto") == expected


def test_named_policies_and_a_bad_name():
    assert hardware.mixed_precision_policy(None) is None
    assert hardware.mixed_precision_policy("float32") is None
    for name in ("mixed_bfloat16", "mixed_float16"):
        assert hardware.mixed_precision_policy(name) == name
    with pytest.raises(ValueError, match="choose one of auto, float32, mixed_bfloat16, "
                                         "mixed_float16"):
        hardware.mixed_precision_policy("bfloat16")


def _error(capsys, *argv):
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


MESSAGE = ("unknown mixed precision 'fp8'; choose one of auto, float32, mixed_bfloat16, "
           "mixed_float16")


def test_cli_bad_precision_is_one_line(tmp_path, capsys, sst2_files):
    out = tmp_path / "out"
    err = _error(capsys, "finetune", "sst2", "--init", str(tmp_path), "--train", sst2_files[0],
                 "--dev", sst2_files[1], "--output", str(out), "--mixed-precision", "fp8")
    assert err == f"kbert finetune: error: {MESSAGE}"
    (tmp_path / "data").mkdir()
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    err = _error(capsys, "pretrain", "--data", str(tmp_path / "data"), "--config", "tiny",
                 "--vocab", vocab, "--output", str(out), "--mixed-precision", "fp8")
    assert err == f"kbert pretrain: error: {MESSAGE}"
    assert not out.exists()
