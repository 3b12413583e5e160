"""BM25 over passages (bm25s: Lucene's BM25, scikit-learn's word pattern, lower case, English
stopwords), the lexical half of hybrid search. Rebuilt from the texts when an index loads:
indexing is seconds for 100k passages, and the texts are the one thing to keep in sync."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULTS = {"k1": 1.5, "b": 0.75, "stopwords": "en"}


def _bm25s() -> Any:
    try:
        import bm25s  # optional: pip install "kbert[retrieval]"
    except ModuleNotFoundError:
        raise ValueError("hybrid search needs bm25s: pip install 'kbert[retrieval]'") from None
    return bm25s


class BM25:
    """BM25 scores of every passage for a query.

    >>> bm25 = BM25(["the cat sat on the mat", "dogs bark at night", "a cat and a dog"])
    >>> bm25.scores(["a cat on a mat", "dogs"]).argmax(axis=1).tolist()
    [0, 1]
    >>> bool(bm25.scores(["zebra"]).any())
    False
    """

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75,
                 stopwords: str = "en"):
        bm25s = _bm25s()
        self.options = {"k1": k1, "b": b, "stopwords": stopwords}
        self.count = len(texts)
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._retriever.index(self._tokenize(texts), show_progress=False)

    def _tokenize(self, texts: Sequence[str], ids: bool = True) -> Any:
        return _bm25s().tokenize(list(texts), stopwords=self.options["stopwords"],
                                 show_progress=False, return_ids=ids)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """float32 [queries, passages]; 0 where no query word occurs."""
        out = np.zeros((len(queries), self.count), np.float32)
        vocab = self._retriever.vocab_dict
        for i, words in enumerate(self._tokenize(queries, ids=False)):
            known = [w for w in words if w in vocab]
            if known:
                out[i] = self._retriever.get_scores(known)
        return out
