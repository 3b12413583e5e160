"""tag: named entities from the tagger head, each word labelled at its first WordPiece and IOB
tags grouped into entities by conlleval's rules (`kbert.tasks.metrics.entities`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kbert.checkpoint.files import Contents
from kbert.inference.arguments import Texts, positive_int, require_head, softmax, texts
from kbert.inference.runner import TextRunner
from kbert.tasks.metrics import entities


def tag(runner: TextRunner, ckpt: Contents, text: Texts,
        batch_size: int = 32) -> list[dict] | list[list[dict]]:
    """Named entities in `text` (see `kbert.pipeline.Bert.tag`)."""
    items, single = texts("tag", text, allow_empty=True)
    batch_size = positive_int("tag", "batch_size", batch_size)
    require_head(ckpt, "tagger", "tag")
    labels = ckpt.head_options["tagger"]["labels"]
    tokens = runner.tokenizer.batch_tokenize_with_char_offsets(items)
    results: list = [[] for _ in items]
    ids = [t[0][:runner.max_seq_length - 2] for t in tokens]
    keep = [i for i, row in enumerate(ids) if row]       # no tokens (e.g. only symbols HF
    if not keep:                                         # drops): no entities
        return results[0] if single else results
    batches = runner.batched("tagger", [ids[i] for i in keep], [None] * len(keep), batch_size)
    for idx, _, logits in batches:
        for r, j in enumerate(idx):
            i = keep[j]
            results[i] = word_entities(runner, items[i], ids[i], tokens[i][1], tokens[i][2],
                                       logits[r], labels)
    return results[0] if single else results


def word_entities(runner: TextRunner, text: str, ids: Sequence[int], starts: Sequence[int],
                  ends: Sequence[int], logits: np.ndarray, labels: Sequence[str]) -> list[dict]:
    """One text's entities from its tagger logits: {"text", "label", "start", "end", "score"}
    with character offsets, the score the mean top probability of the entity's words."""
    pieces = runner.tokenizer.convert_ids_to_tokens(ids)
    first = [i for i, t in enumerate(pieces) if i == 0 or not t.startswith("##")]
    word_end = [(first[k + 1] if k + 1 < len(first) else len(ids)) - 1
                for k in range(len(first))]
    probs = softmax(logits.astype(np.float64))[1:len(ids) + 1]     # drop [CLS]
    word_labels = [labels[int(probs[i].argmax())] for i in first]
    out = []
    for kind, a, b in entities(word_labels):
        start, end = starts[first[a]], ends[word_end[b]]
        score = float(np.mean([probs[first[k]].max() for k in range(a, b + 1)]))
        out.append({"text": text[start:end], "label": kind, "start": int(start),
                    "end": int(end), "score": score})
    return out
