"""Pretraining from NumPy arrays (examples/pretrain_arrays.py); kbert imports without TensorFlow."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import tiny_vocab, write_vocab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "pretrain_arrays.py")
SENTENCES = ["the man went to the store.", "he bought milk and it was good.",
             "the quick brown fox jumps over the lazy dog.", "the cat sat on the mat.",
             "paris is the capital of france.", "the dog was bad!", "a man bought a cat."]


def _run(args, backend="jax", timeout=600, ok=True):
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert (out.returncode == 0) == ok, out.stderr[-2000:]
    return out.stdout if ok else out.stderr


def test_models_and_checkpoints_import_without_tensorflow():
    code = ("import sys, kbert\n"
            "from kbert import checkpoint, training\n"
            "from kbert.models import optimization\n"
            "from kbert.training import callbacks, distribution, pretraining\n"
            "from kbert.data import pretraining\n"
            "from kbert.convert import hf\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
            "assert callable(kbert.load)\n")          # lazy: resolving it may import TF
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_prepare_then_train_writes_a_checkpoint_that_learns(tmp_path):
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    files = []
    for d in range(6):
        path = tmp_path / f"doc{d}.txt"
        lines = [SENTENCES[(d + i) % len(SENTENCES)] for i in range(12)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(str(path))
    corpus = str(tmp_path / "corpus.npz")
    _run(["prepare", "--input", *files, "--vocab", vocab, "--output", corpus], "tensorflow")
    data = np.load(corpus)
    assert data["document_lengths"].tolist() == [12] * 6
    assert data["tokens"].max() < len(tiny_vocab())

    out = _run(["train", "--corpus", corpus, "--config", "tiny", "--output",
                str(tmp_path / "ckpt"), "--batch-size", "8", "--steps", "40", "--log-every", "20",
                "--learning-rate", "5e-3", "--warmup-steps", "4", "--dupe-factor", "4",
                "--max-seq-length", "32", "--max-predictions-per-seq", "5"])
    result = json.loads(out.strip().splitlines()[-1])
    assert result["updates"] == 40
    losses = result["history"]["mlm_logits_loss"]
    assert losses[-1] < losses[0] - 0.5, losses          # the tiny model learns the corpus
    from kbert import checkpoint
    ckpt = checkpoint.load(str(tmp_path / "ckpt"))
    assert sorted(ckpt.heads) == ["mlm", "nsp"] and ckpt.vocab == tiny_vocab()
    doc = json.load(open(tmp_path / "ckpt" / "history.json"))      # a point per --log-every
    assert doc["unit"] == "step" and [p["step"] for p in doc["points"]] == [20, 40]
    assert [p["mlm_logits_loss"] for p in doc["points"]] == pytest.approx(losses, abs=1e-4)
    assert (tmp_path / "ckpt" / "curves.png").read_bytes()[:4] == b"\x89PNG"

    # a corpus tokenized with another vocabulary than the checkpoint's: one clear line
    shipped = os.path.join(ROOT, "saved_models", "minilm-l6-mlm-nsp")
    if os.path.isdir(shipped):
        err = _run(["train", "--corpus", corpus, "--init", shipped, "--output",
                    str(tmp_path / "bad"), "--steps", "1", "--dupe-factor", "1",
                    "--max-seq-length", "32"], ok=False)
        assert err.strip().splitlines()[-1].startswith("error:") and "vocabulary" in err
        assert not (tmp_path / "bad").exists()
