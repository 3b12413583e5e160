"""Training pairs for the retrievers: reading them and mining hard negatives.

    read_pairs      (query, positive[, negatives]) rows of a JSONL/CSV/TSV file with named
                    columns, or SQuAD JSON (each question with its paragraph)
    mine_negatives  hard negatives per query: the best-ranked passages of the collection that
                    are not its positives, by BM25 or by the current encoder (`embed`)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from kbert import progress
from kbert.retrieval.metrics import RetrievalData


class PairsError(ValueError):
    """A training file that cannot be used (one line, naming the file, line or column)."""


@dataclasses.dataclass
class Pairs:
    """Training rows: a query, its positive passage and its negatives (k per row, or none)."""

    queries: list[str]
    positives: list[str]
    negatives: list[list[str]] | None = None
    where: list[str] = dataclasses.field(default_factory=list)   # "FILE:LINE" per row

    def __len__(self) -> int:
        return len(self.queries)

    def passages(self) -> list[str]:
        """Every distinct positive and negative, in order of appearance."""
        return list(dict.fromkeys(self.positives + [n for row in self.negatives or []
                                                    for n in row]))

    def positives_of(self) -> dict[str, set[str]]:
        """query text → every passage given as its positive (a query may repeat)."""
        out: dict[str, set[str]] = {}
        for q, p in zip(self.queries, self.positives):
            out.setdefault(q, set()).add(p)
        return out

    def retrieval_data(self) -> RetrievalData:
        """As retrieval data: each distinct query against all the passages."""
        corpus = self.passages()
        row = {text: i for i, text in enumerate(corpus)}
        relevant = self.positives_of()
        queries = list(relevant)
        return RetrievalData(corpus, queries, [{row[p] for p in relevant[q]} for q in queries],
                             [0] * len(queries))


def read_pairs(path: str, query_column: str = "query", positive_column: str = "positive",
               negative_column: str | None = None) -> Pairs:
    """Rows of a `.jsonl`, `.csv` or `.tsv` file with named columns (a JSONL negative may be a
    list of texts; every row then needs as many), or a SQuAD `.json` file (question,
    its paragraph). An `id` column, where present, must not repeat."""
    if not os.path.isfile(path):
        raise PairsError(f"{path}: no such file")
    if path.endswith(".json"):
        return _squad_pairs(path)
    from kbert.tasks.userdata import table_rows
    pairs = Pairs([], [], [] if negative_column else None)
    ids: dict[str, str] = {}
    try:
        for number, row in table_rows(path):
            where = f"{path}:{number}"
            values = [_text(row, query_column, where), _text(row, positive_column, where)]
            pairs.queries.append(values[0])
            pairs.positives.append(values[1])
            pairs.where.append(where)
            if negative_column:
                negatives = _texts(row, negative_column, where)
                if pairs.negatives and len(negatives) != len(pairs.negatives[0]):
                    raise PairsError(f"{where}: {len(negatives)} negatives where the first row "
                                     f"has {len(pairs.negatives[0])}")
                pairs.negatives.append(negatives)  # type: ignore[union-attr]
            if "id" in row:
                key = str(row["id"])
                if key in ids:
                    raise PairsError(f"{where}: id {key!r} repeats {ids[key]}")
                ids[key] = where
    except PairsError:
        raise
    except (ValueError, FileNotFoundError) as e:
        raise PairsError(str(e)) from None
    if not pairs.queries:
        raise PairsError(f"{path}: no rows")
    return pairs


_MISSING = object()


def _text(row: dict, column: str, where: str, value: Any = _MISSING) -> str:
    """`row[column]` (or `value`, one text of its list), refused unless it is a text with a
    non-space character: missing, null (JSON `null`), empty or not a string."""
    if value is _MISSING:
        value = row.get(column, _MISSING)
    if not isinstance(value, str) or not value.strip():
        found = ("missing" if value is _MISSING else "null" if value is None
                 else "empty" if isinstance(value, str)
                 else f"a {type(value).__name__}, not a string")
        raise PairsError(f"{where}: column {column!r} is {found} (columns: {', '.join(row)})")
    return value


def _texts(row: dict, column: str, where: str) -> list[str]:
    """One text, or a JSONL list of them."""
    value = row.get(column, _MISSING)
    if isinstance(value, list) and not value:
        raise PairsError(f"{where}: column {column!r} is an empty list")
    return [_text(row, column, where, v) for v in (value if isinstance(value, list)
                                                  else [value])]


def _squad_pairs(path: str) -> Pairs:
    from kbert.retrieval.metrics import RetrievalDataError, read_data
    try:
        data = read_data(path)
    except RetrievalDataError as e:
        raise PairsError(str(e)) from None
    return Pairs(data.queries, [data.corpus[min(r)] for r in data.relevant],
                 where=[f"{path}: question {i + 1}" for i in range(len(data.queries))])


def mine_negatives(pairs: Pairs, count: int, method: str = "bm25", encoder: Any = None,
                   corpus: Sequence[str] | None = None, skip: int = 0,
                   batch_size: int = 64) -> Pairs:
    """`pairs` with `count` hard negatives per row: the passages of `corpus` (default: every
    positive and negative of `pairs`) ranked best for the query by `method` — "bm25" or
    "encoder" (`encoder`, a `BertBiEncoder` with its preprocessor) — that are none of the
    query's positives, after skipping the `skip` best (which may be unlabelled positives).
    Given negatives are kept first; the mined ones fill up to `count`."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if method not in ("bm25", "encoder"):
        raise ValueError(f"method must be 'bm25' or 'encoder', got {method!r}")
    corpus = list(dict.fromkeys(corpus if corpus is not None else pairs.passages()))
    queries = list(dict.fromkeys(pairs.queries))
    depth = min(len(corpus), count + skip + 20)
    if method == "bm25":
        from kbert.retrieval.fusion import top_rows
        from kbert.retrieval.lexical import BM25
        ranked = top_rows(BM25(corpus).scores(queries), depth)
    else:
        if encoder is None:
            raise ValueError("mining with the encoder needs `encoder`")
        q = embed(encoder, queries, batch_size, desc="mining: encoding queries")
        c = embed(encoder, corpus, batch_size, desc="mining: encoding passages")
        ranked = np.argsort(-(q @ c.T), axis=1, kind="stable")[:, :depth]
    positives = pairs.positives_of()
    mined: dict[str, list[str]] = {}
    for query, rows in zip(queries, ranked):
        picks = [corpus[r] for r in rows if corpus[r] not in positives[query]]
        mined[query] = picks[skip:]
    negatives = []
    for i, query in enumerate(pairs.queries):
        given = list(pairs.negatives[i]) if pairs.negatives else []
        extra = [p for p in mined[query] if p not in given][:max(0, count - len(given))]
        row = (given + extra)[:max(count, len(given))]
        if len(row) < count:
            raise PairsError(f"{pairs.where[i] if pairs.where else f'row {i + 1}'}: only "
                             f"{len(row)} passages to mine {count} negatives from")
        negatives.append(row)
    return dataclasses.replace(pairs, negatives=negatives)


def embed(encoder: Any, texts: Sequence[str], batch_size: int = 64,
          desc: str | None = None) -> np.ndarray:
    """Unit vectors [n, H] from a `BertBiEncoder` with its preprocessor (length-sorted
    batches); `desc`: a progress bar over the texts (`kbert.progress`)."""
    texts = list(texts)
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.zeros((len(texts), encoder.config.hidden_size), np.float32)
    if texts:
        out[order] = np.asarray(encoder.predict(
            [texts[i] for i in order], batch_size=batch_size, verbose=0,
            callbacks=progress.predict_callbacks(desc, len(texts), batch_size, "text")))
    return out
