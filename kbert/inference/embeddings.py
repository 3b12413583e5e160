"""Vectors from the encoder: sentence embeddings (`embed`, unit length with `l2_normalize`) and
chosen hidden layers per token (`hidden_states`, the paper's feature-based approach)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kbert.checkpoint.files import Contents
from kbert.inference.arguments import Texts, positive_int, texts
from kbert.inference.runner import TextRunner


def embed(runner: TextRunner, ckpt: Contents, text: Texts, pooling: str | None = None,
          batch_size: int = 32, max_seq_length: int | None = None,
          normalize: bool = False) -> np.ndarray:
    """Sentence vectors [n, hidden_size], unit length if `normalize` (see
    `kbert.pipeline.Bert.embed`)."""
    defaults = ckpt.embedding_defaults   # a sentence encoder's recorded pooling and length
    pooling = pooling or defaults["pooling"]
    if pooling not in ("cls", "mean"):
        raise ValueError(f"embed: pooling must be 'cls' or 'mean', got {pooling!r}")
    items, _ = texts("embed", text, allow_empty=True)
    batch_size = positive_int("embed", "batch_size", batch_size)
    length = min(positive_int("embed", "max_seq_length",
                              max_seq_length or defaults["max_seq_length"], 2),
                 runner.max_seq_length)
    ids = runner.tokenizer.encode_batch(items)
    out = np.zeros((len(items), runner.hidden_size), np.float32)
    for idx, _, vectors in runner.batched("embed_" + pooling, ids, [None] * len(ids),
                                          batch_size, max_seq_length=length):
        out[idx] = vectors
    return l2_normalize(out) if normalize else out


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit (L2) length, float32; a zero row stays zero.

    The one normalization of `embed(normalize=True)` (and so of `kbert.retrieval`'s vectors).
    Twins in a graph, held to it by tests: the SavedModel's `embed` signature
    (`kbert.serving.signatures`, its `embedding` output) and `BertBiEncoder.encode`.

    >>> l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    array([[0.6, 0.8],
           [0. , 0. ]], dtype=float32)
    """
    vectors = np.asarray(vectors, np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)                    # [n, 1]
    return vectors / np.maximum(norms, 1e-12)


def hidden_states(runner: TextRunner, ckpt: Contents, text: Texts,
                  layers: int | Sequence[int] = (-1,),
                  batch_size: int = 32) -> dict | list[dict]:
    """Chosen hidden layers per WordPiece token (see `kbert.pipeline.Bert.hidden_states`)."""
    items, single = texts("hidden_states", text, allow_empty=True)
    batch_size = positive_int("hidden_states", "batch_size", batch_size)
    count = ckpt.config.num_layers + 1
    chosen = [layers] if isinstance(layers, int) else list(layers)
    if not chosen or not all(isinstance(i, int) and -count <= i < count for i in chosen):
        raise ValueError(f"hidden_states: layers must be integers from {-count} to "
                         f"{count - 1} (0 the embeddings, {count - 1} the last layer), "
                         f"got {chosen!r}")
    ids = runner.tokenizer.encode_batch(items)
    vocab = runner.tokenizer.vocab
    results: list = [None] * len(items)
    kind = ("hidden", tuple(i % count for i in chosen))
    for idx, features, states in runner.batched(kind, ids, [None] * len(ids), batch_size):
        for r, i in enumerate(idx):
            n = int(features["input_mask"][r].sum())
            results[i] = {"tokens": [vocab[j] for j in features["input_ids"][r, :n]],
                          "features": states[r, :n]}
    return results[0] if single else results
