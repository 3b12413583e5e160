"""`rerank`: a cross-encoder scores (query, passage) pairs jointly, `[CLS] q [SEP] p [SEP]`.

The score comes from a pair-classification head: a 'classifier' with one output (a regression
score, as MS MARCO cross-encoders have, through the sigmoid where the cross-encoder's
conversion recorded one, as `CrossEncoder.predict` gives it) or with labels, whose last label
is taken as "relevant" (probability); else the 'nsp' head (the probability that the passage
follows the query).

Given the first stage's scores of the passages (a search's cosines, BM25, or a hybrid's), the
order is by the two fused: `FIRST_STAGE_WEIGHT` · minmax(first stage) + the rest · minmax(the
reranker's log-odds), over the passages of one query (`kbert.retrieval.fusion.fuse`). Measured
on SQuAD as open retrieval (docs/retrieval.md), a cross-encoder trained on 4,449 questions
reorders a bi-encoder's top 50 to MRR@10 +0.6 alone and +7.8 fused: the two make different
mistakes. The weight was fixed at 0.5 before measuring, not tuned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from kbert.inference.protocol import Encoder
from kbert.retrieval.fusion import fuse
from kbert.tokenizer import check_texts

FIRST_STAGE_WEIGHT = 0.5   # the first stage's share of a fused order (fixed, not tuned)


def fused_rows(first: np.ndarray, log_odds: np.ndarray) -> np.ndarray:
    """Fused scores [q, k] of each query's k passages: `fuse` of the first stage's scores and
    the reranker's log-odds, row by row, at `FIRST_STAGE_WEIGHT`."""
    return np.stack([fuse(f, r, FIRST_STAGE_WEIGHT) for f, r in zip(first, log_odds)])


def scorer(model: Encoder) -> str:
    """The head `rerank` scores with: 'classifier' where present, else 'nsp'."""
    from kbert.checkpoint.files import MissingHeadError  # Keras is loaded with the model
    for head in ("classifier", "nsp"):
        if head in model.checkpoint.heads:
            return head
    raise MissingHeadError(
        f"rerank needs a cross-encoder: a 'classifier' head trained on (query, passage) pairs "
        f"or an 'nsp' head, but checkpoint {model.checkpoint.path} has "
        f"{', '.join(model.checkpoint.heads) or 'no heads'}")


def pair_scores(model: Encoder, queries: Sequence[str], passages: Sequence[str],
                batch_size: int = 32, log_odds: bool = False) -> list[float]:
    """One relevance score per (query, passage) pair, higher is more relevant: a probability
    (`log_odds`: log(p / (1 - p)), which keeps near-certain pairs apart), or a one-output
    head's raw score."""
    head = scorer(model)
    if head == "nsp":   # lists in, lists out
        nsp = cast("list[dict[str, float]]", model.next_sentence(
            list(queries), list(passages), batch_size=batch_size))
        probabilities = [r["is_next"] for r in nsp]
    else:
        results = cast("list[dict[str, float]]", model.classify(
            list(queries), list(passages), batch_size=batch_size))
        if results and set(results[0]) == {"score"}:
            activation = model.checkpoint.head_options.get("classifier", {}).get("activation")
            if activation != "sigmoid" or not log_odds:
                return [r["score"] for r in results]
        probabilities = [list(r.values())[-1] for r in results]
    if not log_odds:
        return probabilities
    p = np.clip(np.asarray(probabilities, np.float64), 1e-15, 1 - 1e-15)
    return (np.log(p) - np.log1p(-p)).tolist()


def rerank(model: Encoder, query: str, passages: Sequence[str], top_k: int | None = None,
           batch_size: int = 32, log_odds: bool = False,
           first_scores: Sequence[float] | None = None) -> list[dict]:
    """[{"index", "text", "score"}] of `passages` sorted by relevance to `query`, best first
    (ties keep the given order); the first `top_k` when given. The score is P(relevant)
    (`log_odds`: its log-odds).

    With `first_scores` (the first stage's score of each passage, e.g. search hits' "score"),
    the order and "score" are the fused one (the module's note) and "rerank_score" is the
    reranker's log-odds.
    """
    if not isinstance(query, str):
        raise ValueError(f"rerank: the query must be a string, got {type(query).__name__}")
    check_texts("rerank", query, "query")
    if isinstance(passages, str):
        raise ValueError("rerank: passages must be a list of strings, got one string")
    passages, _ = check_texts("rerank", passages, "passage")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                              or top_k < 1):
        raise ValueError(f"rerank: top_k must be an integer >= 1, got {top_k!r}")
    first = None
    if first_scores is not None:
        first = np.asarray(first_scores, np.float64)
        if first.shape != (len(passages),) or not np.isfinite(first).all():
            raise ValueError(f"rerank: first_scores must be {len(passages)} finite numbers, "
                             f"one per passage")
        log_odds = True
    scores = pair_scores(model, [query] * len(passages), passages, batch_size, log_odds)
    extra: list[dict] = [{} for _ in passages]
    if first is not None:
        extra = [{"rerank_score": float(s)} for s in scores]
        scores = fuse(first, np.asarray(scores), FIRST_STAGE_WEIGHT).tolist()
    order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))
    return [{"index": i, "text": passages[i], "score": float(scores[i]), **extra[i]}
            for i in order[:top_k]]
