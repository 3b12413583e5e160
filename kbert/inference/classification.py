"""classify: the classifier head's label probabilities (or a regression head's score)."""

from __future__ import annotations

import numpy as np

from kbert.checkpoint.files import Contents
from kbert.inference.arguments import Texts, pairs, positive_int, require_head, softmax, texts
from kbert.inference.runner import TextRunner


def classify(runner: TextRunner, ckpt: Contents, text: Texts, text_pair: Texts | None = None,
             batch_size: int = 32) -> dict[str, float] | list[dict[str, float]]:
    """{label: probability} or {"score": value} (see `kbert.pipeline.Bert.classify`); a
    one-output cross-encoder's score goes through the activation its conversion recorded
    (the head's `activation`: "sigmoid", as sentence-transformers' `CrossEncoder.predict`)."""
    if text_pair is None:
        first, single = texts("classify", text, allow_empty=True)
        second: list = [None] * len(first)
    else:
        first, second, single = pairs("classify", text, text_pair, ("text", "text_pair"),
                                      allow_empty=True)
    batch_size = positive_int("classify", "batch_size", batch_size)
    require_head(ckpt, "classifier", "classify")
    options = ckpt.head_options.get("classifier", {})
    ids_b: list
    if text_pair is None:
        ids_a, ids_b = runner.tokenizer.encode_batch(first), [None] * len(first)
    else:
        ids_a, ids_b = runner.encode_pairs(first, second)
    results: list = [None] * len(first)
    for idx, _, logits in runner.batched("classifier", ids_a, ids_b, batch_size):
        for r, i in enumerate(idx):
            row = logits[r].astype(np.float64)
            if options.get("problem") == "regression":   # twin: kbert.serving.signatures
                score = row[0]
                if options.get("activation") == "sigmoid":  # a cross-encoder's, as converted
                    score = 1.0 / (1.0 + np.exp(-score))
                results[i] = {"score": float(score)}
                continue
            labels = options.get("labels") or [f"LABEL_{j}" for j in range(len(row))]
            results[i] = {label: float(p) for label, p in zip(labels, softmax(row))}
    return results[0] if single else results
