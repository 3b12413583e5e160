"""next_sentence: the NSP head's probability that B follows A."""

from __future__ import annotations

import numpy as np

from kbert.checkpoint.files import Contents
from kbert.inference.arguments import Texts, pairs, positive_int, require_head, softmax
from kbert.inference.runner import TextRunner


def next_sentence(runner: TextRunner, ckpt: Contents, sentence_a: Texts, sentence_b: Texts,
                  batch_size: int = 32) -> dict | list[dict]:
    """{"is_next": P(B follows A)} (see `kbert.pipeline.Bert.next_sentence`)."""
    a, b, single = pairs("next_sentence", sentence_a, sentence_b)
    batch_size = positive_int("next_sentence", "batch_size", batch_size)
    require_head(ckpt, "nsp", "next_sentence")
    ids_a, ids_b = runner.encode_pairs(a, b)
    results: list = [None] * len(a)
    for idx, _, logits in runner.batched("nsp", ids_a, ids_b, batch_size):
        probs = softmax(logits.astype(np.float64))
        for r, i in enumerate(idx):
            results[i] = {"is_next": float(probs[r, 0])}
    return results[0] if single else results
