"""fill_mask: the masked LM's top-k fillers for each `[MASK]`."""

from __future__ import annotations

import numpy as np

from kbert.checkpoint.files import Contents
from kbert.inference.arguments import Texts, positive_int, require_head, texts
from kbert.inference.runner import TextRunner
from kbert.runtime.batching import bucket_batch


def fill_mask(runner: TextRunner, ckpt: Contents, text: Texts, top_k: int = 5,
              batch_size: int = 32) -> list[list[dict]] | list[list[list[dict]]]:
    """Top-k fillers for each `[MASK]` in `text` (see `kbert.pipeline.Bert.fill_mask`)."""
    items, single = texts("fill_mask", text)
    top_k = positive_int("fill_mask", "top_k", top_k)
    batch_size = positive_int("fill_mask", "batch_size", batch_size)
    require_head(ckpt, "mlm", "fill_mask")
    tokenizer = runner.tokenizer
    ids = tokenizer.encode_batch(items)
    mask_id = tokenizer.mask_id
    for i, row in enumerate(ids):
        if mask_id not in row:
            where = "the text has" if single else f"text {i} has"
            raise ValueError(f"fill_mask: {where} no [MASK] token to fill")
    positions: dict[int, np.ndarray] = {}

    # twin of `kbert.serving.graph_ops.mask_positions` (in the exported graph)
    def mask_positions(idx: np.ndarray, features: dict) -> dict:
        found = [np.flatnonzero(row == mask_id) for row in features["input_ids"]]
        for i, p in zip(idx, found):
            if len(p) < ids[i].count(mask_id):
                where = "a [MASK]" if single else f"a [MASK] of text {i}"
                raise ValueError(f"fill_mask: {where} lies beyond the first "
                                 f"{runner.max_seq_length} tokens, which the model cannot see")
            positions[i] = p
        width = bucket_batch(max(len(p) for p in found), 1 << 30)
        out = np.zeros((len(found), width), "int32")
        for r, p in enumerate(found):
            out[r, :len(p)] = p
        return {"masked_lm_positions": out}

    results: list = [None] * len(items)
    vocab = tokenizer.vocab
    k = min(top_k, len(vocab))
    kind = ("mlm", min(bucket_batch(k, 1 << 30), len(vocab)))   # few distinct graphs
    for idx, _, (values, best, lse) in runner.batched(kind, ids, [None] * len(ids),
                                                      batch_size, mask_positions):
        probs = np.exp(values[..., :k].astype(np.float64) - lse[..., None])
        for r, i in enumerate(idx):
            results[i] = [[{"token": vocab[j], "score": float(p)}
                           for j, p in zip(best[r, m, :k], probs[r, m])]
                          for m in range(len(positions[i]))]
    return results[0] if single else results
