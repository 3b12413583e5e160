"""The encoder side of an index: how a model embeds passages and queries (pooling, length,
unit vectors), and its identity (hashes of its weights and vocabulary), which an index records
so that it is never searched with vectors from another encoder."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from kbert import progress
from kbert.inference.protocol import Encoder


def options(model: Encoder) -> dict:
    """{"pooling", "max_seq_length"} a model embeds with (`Bert.embedding_defaults`: e.g.
    all-MiniLM-L6-v2's mean pooling and 256 tokens)."""
    return dict(model.embedding_defaults)


# Batches per call of the model, at most: the first call is one batch and each next one twice
# the last, so the progress bar moves soon on a small build and calls stay large on a big one.
CALL_BATCHES = 8


def _calls(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each call over `n` texts: 1, 2, 4 ... `CALL_BATCHES` batches."""
    spans, start, batches = [], 0, 1
    while start < n:
        stop = min(n, start + batch_size * batches)
        spans.append((start, stop))
        start, batches = stop, min(batches * 2, CALL_BATCHES)
    return spans


def embed(model: Encoder, texts: Sequence[str], batch_size: int = 16, desc: str | None = None,
          unit: str = "text") -> np.ndarray:
    """Unit-length float32 vectors [n, hidden] (the model's `embed(normalize=True)`,
    length-sorted batches). `desc`: a progress bar over the texts (counted in `unit`s), where
    they fill more than one batch, moved by the texts each call of the model encoded.

    The texts go to the model in calls of up to `CALL_BATCHES` batches, by character length (so
    each call's length-sorted batches are as even as one call's over all of them)."""
    if not len(texts):
        return np.zeros((0, model.config.hidden_size), np.float32)
    opts = options(model)
    texts = list(texts)
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.zeros((len(texts), model.config.hidden_size), np.float32)
    shown = desc and len(texts) > batch_size
    with (progress.bar(total=len(texts), desc=desc, unit=unit) if shown
          else contextlib.nullcontext()) as bar:
        for start, stop in _calls(len(texts), batch_size):
            rows = order[start:stop]
            out[rows] = model.embed([texts[i] for i in rows], pooling=opts["pooling"],
                                    batch_size=batch_size,
                                    max_seq_length=opts["max_seq_length"], normalize=True)
            if bar is not None:
                bar.update(len(rows))
    return out


_IDENTITY_CACHE: dict = {}


def identity(model: Encoder) -> dict:
    """{"name", "path", "weights_sha256", "vocab_sha256", "pooling", "max_seq_length",
    "hidden_size"}:
    the encoder's weights hashed as the checkpoint stores them (the backbone's tensors only,
    so adding or changing a head changes nothing), its vocabulary and casing."""
    ckpt = model.checkpoint
    path = ckpt.path
    key = None
    if path and os.path.isfile(os.path.join(path, "model.safetensors")):
        stat = os.stat(os.path.join(path, "model.safetensors"))
        key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)
    if key is None or key not in _IDENTITY_CACHE:
        digest = _weights_digest(path, model)
        if key is not None:
            _IDENTITY_CACHE[key] = digest
    else:
        digest = _IDENTITY_CACHE[key]
    vocab = hashlib.sha256(("\n".join(ckpt.vocab) + f"\nlower_case={ckpt.do_lower_case}")
                           .encode("utf-8")).hexdigest()
    return {"name": os.path.basename(os.path.normpath(path)) if path else "(in memory)",
            "path": os.path.abspath(path) if path else None, "weights_sha256": digest,
            "vocab_sha256": vocab, "hidden_size": model.config.hidden_size, **options(model)}


def _weights_digest(path: str | None, model: Encoder) -> str:
    """sha256 over the backbone's tensors (name, dtype, shape, bytes) in name order: from the
    checkpoint file where there is one, else from the weights in memory."""
    h = hashlib.sha256()
    if path and os.path.isfile(os.path.join(path, "model.safetensors")):
        from safetensors import safe_open
        with safe_open(os.path.join(path, "model.safetensors"), "numpy") as f:
            for name in sorted(k for k in f.keys() if k.startswith("backbone/")):
                _update(h, name, f.get_tensor(name))
        return h.hexdigest()
    for v in sorted(model.backbone.weights, key=lambda v: v.path):
        _update(h, "backbone/" + v.path.split("/", 1)[-1], np.asarray(v.numpy()))
    return h.hexdigest()


def _update(h: Any, name: str, array: np.ndarray) -> None:
    h.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
    h.update(np.ascontiguousarray(array).tobytes())


def describe(ident: dict) -> str:
    """'NAME (weights 1a2b3c4d, vocabulary 5e6f7a8b)' for messages."""
    return (f"{ident.get('name', '?')} (weights {str(ident.get('weights_sha256', '?'))[:8]}, "
            f"vocabulary {str(ident.get('vocab_sha256', '?'))[:8]})")
