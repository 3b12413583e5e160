"""Retrieval metrics (recall@k, MRR@10, nDCG@10, computed by ranx) and the data they are
measured on: SQuAD JSON as open retrieval (each question → the paragraph that holds its answer,
among every paragraph of the file), or JSONL of {"query", "positive" | "positives",
"negative(s)"?} (the corpus: every distinct positive and negative).

`evaluate_retrieve` and `evaluate_rerank` are `kbert evaluate retrieve|rerank`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import numpy as np

from kbert import progress
from kbert.inference.protocol import Encoder
from kbert.jsonl import json_lines

METRICS = ("recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10")


class RetrievalDataError(ValueError):
    """A retrieval data file that cannot be read (one line, naming the file and line)."""


@dataclasses.dataclass
class RetrievalData:
    """Queries, a corpus, and for each query the corpus rows that answer it."""

    corpus: list[str]
    queries: list[str]
    relevant: list[set[int]]
    groups: list[int]          # per query: its SQuAD article (0 for JSONL)

    def subset(self, keep: Sequence[bool]) -> RetrievalData:
        """The same corpus, only the queries where `keep` is true."""
        idx = [i for i, k in enumerate(keep) if k]
        return RetrievalData(self.corpus, [self.queries[i] for i in idx],
                             [self.relevant[i] for i in idx], [self.groups[i] for i in idx])


def read_data(path: str) -> RetrievalData:
    """SQuAD JSON (`.json`) or JSONL (`.jsonl`) retrieval data (see the module docstring)."""
    if not os.path.isfile(path):
        raise RetrievalDataError(f"{path}: no such file")
    if path.endswith(".jsonl"):
        return _read_jsonl(path)
    with open(path, encoding="utf-8") as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise RetrievalDataError(f"{path}: not valid JSON ({e.msg}); give SQuAD JSON or "
                                     f"JSONL") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise RetrievalDataError(f"{path}: expected SQuAD JSON ({{'data': [articles]}})")
    corpus: list[str] = []
    queries: list[str] = []
    relevant: list = []
    groups: list = []
    for a, article in enumerate(raw["data"]):
        for p in article.get("paragraphs", []):
            row = len(corpus)
            corpus.append(p["context"])
            for qa in p.get("qas", []):
                queries.append(qa["question"])
                relevant.append({row})
                groups.append(a)
    if not queries:
        raise RetrievalDataError(f"{path}: no questions found")
    return RetrievalData(corpus, queries, relevant, groups)


def _strings(record: dict, key: str, where: str) -> list[str]:
    value = record.get(key)
    if value is None:
        return []
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise RetrievalDataError(f"{where}: '{key}' should be a non-empty string or a list of "
                                 f"them")
    return value


def _read_jsonl(path: str) -> RetrievalData:
    corpus: list[str] = []
    rows: dict[str, int] = {}
    queries: list[str] = []
    relevant: list = []

    def row_of(text: str) -> int:
        if text not in rows:
            rows[text] = len(corpus)
            corpus.append(text)
        return rows[text]

    for n, record in json_lines(path, error=RetrievalDataError,
                                invalid="not valid JSON ({msg})"):
        where = f"{path}:{n}"
        if not isinstance(record, dict) or not isinstance(record.get("query"), str) \
                or not record["query"].strip():
            raise RetrievalDataError(f"{where}: expected an object with a 'query' string")
        positives = _strings(record, "positive", where) + _strings(record, "positives", where)
        if not positives:
            raise RetrievalDataError(f"{where}: no 'positive' (or 'positives') passage")
        for key in ("negative", "negatives"):
            for text in _strings(record, key, where):
                row_of(text)
        queries.append(record["query"])
        relevant.append({row_of(t) for t in positives})
    if not queries:
        raise RetrievalDataError(f"{path}: no queries found")
    return RetrievalData(corpus, queries, relevant, [0] * len(queries))


def score(rankings: Sequence[Sequence[int]], relevant: Sequence[set[int]],
          metrics: Sequence[str] = METRICS) -> dict[str, float]:
    """{metric: percentage} of ranked corpus rows (best first) per query, by ranx.

    >>> score([[3, 1], [0, 2]], [{1}, {5}], ["recall@1", "recall@5", "mrr@10"])
    {'recall@1': 0.0, 'recall@5': 50.0, 'mrr@10': 25.0}
    """
    import warnings

    import ranx  # optional: pip install "kbert[retrieval]"
    qrels = {f"q{i}": {f"d{r}": 1 for r in rel} for i, rel in enumerate(relevant)}
    run = {f"q{i}": {f"d{r}": float(len(ranked) - j) for j, r in enumerate(ranked)}
           for i, ranked in enumerate(rankings)}
    for q in run:                   # ranx needs every query in the run; none found: a miss
        if not run[q]:
            run[q] = {"d-none": 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # numba's notes on its own casts
        values = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(metrics))
    if len(metrics) == 1:
        values = {metrics[0]: values}
    return {m: round(100.0 * float(values[m]), 2) for m in metrics}


def evaluate_retrieve(model: Encoder, path: str, hybrid: bool = False, batch_size: int = 16,
                      depth: int = 100) -> dict[str, float]:
    """Indexes the data's corpus with `model`, searches every query (`depth` hits) and scores
    the rankings (`kbert evaluate retrieve`)."""
    from kbert.retrieval.index import Index
    data = read_data(path)
    index = Index.build(model, data.corpus, batch_size=batch_size, hybrid=hybrid)
    hits = index.search(data.queries, model, top_k=depth, batch_size=batch_size)
    return score([_sources(h) for h in hits], data.relevant)


def _sources(hits: list[dict]) -> list[int]:
    """Corpus rows in hit order, each once (a split text counts at its best passage)."""
    out = []
    for h in hits:
        if h["source"] not in out:
            out.append(h["source"])
    return out


def evaluate_rerank(model: Encoder, path: str, candidates: int = 20, batch_size: int = 32,
                    max_queries: int | None = None, fuse: bool = False) -> dict[str, float]:
    """BM25's top `candidates` per query, reordered by the cross-encoder `model`, scored
    (`kbert evaluate rerank`); the first `max_queries` queries when given. `fuse`: reordered
    by the reranker's log-odds fused with BM25's scores (`kbert.retrieval.rerank`)."""
    from kbert.retrieval import fusion
    from kbert.retrieval.lexical import BM25
    from kbert.retrieval.rerank import fused_rows, scorer
    scorer(model)                                   # a clear error before any work
    data = read_data(path)
    if max_queries:
        data = data.subset([i < max_queries for i in range(len(data.queries))])
    lexical = BM25(data.corpus).scores(data.queries)
    first = fusion.top_rows(lexical, candidates)
    scores = _reranked(model, data, first, batch_size, fuse)
    if fuse:
        scores = fused_rows(np.take_along_axis(lexical, first, 1), scores)
    order = np.argsort(-scores, axis=1, kind="stable")
    return score(np.take_along_axis(first, order, 1).tolist(), data.relevant)


def _reranked(model: Encoder, data: RetrievalData, first: np.ndarray, batch_size: int,
              log_odds: bool) -> np.ndarray:
    """The cross-encoder's scores [q, k] of each query's first-stage rows `first` [q, k],
    a few batches of pairs per call (a progress bar over the queries)."""
    from kbert.retrieval.encoder import CALL_BATCHES
    from kbert.retrieval.rerank import pair_scores
    step = max(1, batch_size * CALL_BATCHES // max(1, first.shape[1]))   # queries per call
    out = np.zeros(first.shape, np.float64)
    with progress.bar(total=len(first), desc="reranking", unit="query") as shown:
        for start in range(0, len(first), step):
            rows = first[start:start + step]
            queries = [q for q, r in zip(data.queries[start:start + step], rows) for _ in r]
            out[start:start + step] = np.reshape(pair_scores(
                model, queries, [data.corpus[r] for r in rows.ravel()], batch_size,
                log_odds=log_odds), rows.shape)
            shown.update(len(rows))
    return out
