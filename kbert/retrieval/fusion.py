"""Fusing dense and BM25 scores (hybrid search), and the top-k selection both use.

`fuse` is a convex combination of the two sides' scores, each min-max normalized over the
candidates (the union of each side's top `CANDIDATES`): measured on SQuAD v1.1 as open
retrieval (docs/retrieval.md) it beats both sides alone at every cut-off, where reciprocal rank
fusion (`rrf`, kept for comparison) loses recall@1 to BM25. The dense weight was chosen on the
questions of the 18 training articles and reported on the 6 held-out ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

CANDIDATES = 100          # each side's top passages that are fused
DENSE_WEIGHT = 0.55       # tuned on the 18 training articles' questions (docs/retrieval.md)


def top_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices [q, k] of each row's k largest scores, best first; ties go to the lower index.

    >>> top_rows(np.array([[0.1, 0.9, 0.5, 0.9]]), 3).tolist()
    [[1, 3, 2]]
    """
    scores = np.asarray(scores)
    k = min(k, scores.shape[1])
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, part, 1).min(axis=1, keepdims=True)
        # every index tied with the k-th score competes, so ties resolve by index
        out = np.zeros((len(scores), k), int)
        for i in range(len(scores)):
            cand = np.flatnonzero(scores[i] >= kth[i])
            out[i] = cand[np.lexsort((cand, -scores[i, cand]))][:k]
        return out
    return np.lexsort((np.broadcast_to(np.arange(scores.shape[1]), scores.shape), -scores))[:, :k]


def min_max(scores: np.ndarray) -> np.ndarray:
    """Scores mapped to [0, 1] (all equal: all 0)."""
    scores = np.asarray(scores, np.float64)
    if scores.size == 0:
        return scores
    lo, hi = scores.min(), scores.max()
    return (scores - lo) / (hi - lo) if hi > lo else np.zeros_like(scores)


def fuse(dense: np.ndarray, lexical: np.ndarray, weight: float = DENSE_WEIGHT) -> np.ndarray:
    """`weight` · minmax(dense) + (1 − `weight`) · minmax(lexical), over the same candidates.

    >>> fuse(np.array([0.9, 0.5, 0.1]), np.array([0.0, 4.0, 2.0]), 0.5).round(3).tolist()
    [0.5, 0.75, 0.25]
    """
    return weight * min_max(dense) + (1.0 - weight) * min_max(lexical)


def hybrid(dense_rows: np.ndarray, dense_score: Callable[[int, np.ndarray], np.ndarray],
           lexical: np.ndarray, top_k: int,
           weight: float = DENSE_WEIGHT) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(rows, fused scores) per query, best first: the union of the dense side's best rows
    (`dense_rows` [q, depth]) and BM25's best `depth` (`lexical` [q, passages]), fused.

    `dense_score(i, rows)` gives query i's dense scores at `rows` (exact inner products, also
    for the candidates only BM25 found).
    """
    depth = dense_rows.shape[1]
    lexical_rows = top_rows(lexical, depth)
    rows, scores = [], []
    for i in range(len(dense_rows)):
        candidates = np.union1d(dense_rows[i], lexical_rows[i])
        fused = fuse(dense_score(i, candidates), lexical[i, candidates], weight)
        best = top_rows(fused[None], min(top_k, len(candidates)))[0]
        rows.append(candidates[best])
        scores.append(fused[best])
    return rows, scores


def rrf(ranks: list[np.ndarray], k: int = 60) -> np.ndarray:
    """Reciprocal rank fusion (Cormack et al., 2009): Σ 1 / (k + rank), ranks from 1."""
    return cast(np.ndarray, sum(1.0 / (k + np.asarray(r, np.float64)) for r in ranks))
