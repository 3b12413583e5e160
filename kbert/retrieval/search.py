"""`search`: queries against a list of passages or an `Index` (what `Bert.search` calls)."""

from __future__ import annotations

from collections.abc import Sequence

from kbert.inference.protocol import Encoder
from kbert.retrieval.index import Index


def search(model: Encoder, queries: str | Sequence[str], passages_or_index: Sequence[str] | Index,
           top_k: int = 10, hybrid: bool | None = None, batch_size: int = 16) -> list:
    """The `top_k` best passages per query: [{"index", "text", "score"}], best first.

    `passages_or_index`: an `Index` built with `model` (hits carry its rows' fields too), or a
    list of texts (indexed on the fly; "index" is the position in the list, and a text longer
    than the encoder's length is split and scored by its best passage). `hybrid` fuses BM25
    with the dense scores (`kbert.retrieval.fusion`); None: the index's option (an index
    built with `hybrid=True` fuses), off for a list.
    """
    if isinstance(passages_or_index, Index):
        return passages_or_index.search(queries, model, top_k=top_k, hybrid=hybrid,
                                        batch_size=batch_size)
    if isinstance(passages_or_index, str):
        passages_or_index = [passages_or_index]
    index = Index.build(model, passages_or_index, batch_size=batch_size, hybrid=bool(hybrid))
    texts = list(passages_or_index)
    depth = top_k if len(index) == len(texts) else len(index)   # split: rank all passages
    hits = index.search(queries, model, top_k=depth, batch_size=batch_size)
    single = isinstance(queries, str)
    out = [_best_per_text(row, texts, top_k) for row in ([hits] if single else hits)]
    return out[0] if single else out


def _best_per_text(hits: list[dict], texts: Sequence[str], top_k: int) -> list[dict]:
    out, seen = [], set()
    for hit in hits:                      # best first: a text's first hit is its best passage
        if hit["source"] not in seen:
            seen.add(hit["source"])
            out.append({"index": hit["source"], "text": texts[hit["source"]],
                        "score": hit["score"]})
    return out[:top_k]
