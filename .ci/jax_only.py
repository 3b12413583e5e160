"""Install check: in a venv holding only keras, jax and kbert[jax] (no TensorFlow), train a tiny
model from arrays with examples/pretrain_arrays.py and load the checkpoint it saves.

    KERAS_BACKEND=jax .venv-jax/bin/python .ci/jax_only.py     (make test runs it)
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORDS = ("the man went to store he bought milk and it was good quick brown fox jumps over lazy "
         "dog cat sat on mat paris is capital of france").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]


def write_corpus(path, documents=8, sentences=10, seed=0):
    """The `.npz` that `pretrain_arrays.py prepare` writes: token ids of sentences and documents."""
    rng = np.random.default_rng(seed)
    tokens, sentence_lengths = [], []
    for _ in range(documents * sentences):
        n = int(rng.integers(4, 12))
        tokens += [int(i) for i in rng.integers(6, len(VOCAB), n)] + [VOCAB.index(".")]
        sentence_lengths.append(n + 1)
    np.savez_compressed(path, tokens=np.asarray(tokens, np.uint16),
                        sentence_lengths=np.asarray(sentence_lengths, np.int32),
                        document_lengths=np.full(documents, sentences, np.int32),
                        vocab=np.asarray(VOCAB))


def main():
    assert importlib.util.find_spec("tensorflow") is None, "TensorFlow is installed in this venv"
    assert os.environ.get("KERAS_BACKEND") == "jax", "run with KERAS_BACKEND=jax"
    with tempfile.TemporaryDirectory() as tmp:
        corpus, output = os.path.join(tmp, "corpus.npz"), os.path.join(tmp, "ckpt")
        write_corpus(corpus)
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "pretrain_arrays.py"), "train", "--corpus",
             corpus, "--config", "tiny", "--output", output, "--batch-size", "8", "--steps", "30",
             "--log-every", "10", "--learning-rate", "5e-3", "--warmup-steps", "3",
             "--dupe-factor", "2"], capture_output=True, text=True, cwd=tmp)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        losses = result["history"]["mlm_logits_loss"]
        assert result["updates"] == 30 and losses[-1] < losses[0], result

        from kbert import checkpoint
        ckpt = checkpoint.load(output)
        assert sorted(ckpt.heads) == ["mlm", "nsp"] and ckpt.vocab == VOCAB
        weights = [np.asarray(w) for w in ckpt.backbone.weights]
        assert all(np.isfinite(w).all() for w in weights)
        assert "tensorflow" not in sys.modules
    print(f"jax-only install: trained {result['updates']} steps (MLM loss {losses[0]:.2f} → "
          f"{losses[-1]:.2f}) and saved a checkpoint without TensorFlow")


if __name__ == "__main__":
    main()
