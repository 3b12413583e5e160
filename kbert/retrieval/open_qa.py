"""`ask`: answer questions over a collection — retrieve passages, optionally rerank them (the
cross-encoder's log-odds fused with the search scores, `kbert.retrieval.rerank`), read the best
ones with an extractive reader (a SQuAD checkpoint), keep the best span.

A span's score is P(passage) × P(span | passage): P(span | passage) is the reader's
probability among its n-best spans in that passage, P(passage) a softmax over the retrieved
passages' scores (the encoder's cosine similarities at `temperature`, or the reranker's
log-odds of relevance at temperature 1).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from kbert import progress
from kbert.inference.protocol import Encoder, Loader, default_loader
from kbert.retrieval.encoder import CALL_BATCHES
from kbert.retrieval.index import Index

PASSAGES = 5   # the best passages `read` reads (the playground's Search tab reads as many)
ANSWER = ("text", "score", "start", "end", "passage", "rank", "reader_score")  # what `ask` gives


def ask(question: str | Sequence[str], index: Index, reader: Encoder | str | os.PathLike | None,
        encoder: Encoder | str | os.PathLike | None = None,
        reranker: Encoder | str | os.PathLike | None = None,
        passages: int = PASSAGES, candidates: int = 20, temperature: float = 0.05,
        hybrid: bool | None = None, batch_size: int = 32,
        hits: int | None = None, loader: Loader | None = None) -> dict | list[dict]:
    """The best answer to `question` (or each of a list) found in `index`'s passages: the
    passages retrieved (and reranked), then `read`. The playground's Search tab and
    `kbert evaluate open-qa` answer through it.

    Args:
        index: a `kbert.retrieval.Index`; `encoder` the model it was built with (default: the
            one its manifest names).
        reader: a checkpoint with a span head (e.g. `kbert.load("minilm-l6-squad")`); None
            retrieves (and reranks) only: the answer's "text" is None.
        reranker: a cross-encoder that reorders the first `candidates` hits by their fused
            score (`kbert.retrieval.rerank`; optional).
        passages: how many of the best passages the reader reads.
        hits: also return the first `hits` search hits (as the Search tab shows them).
        loader: loads `reader`, `encoder` and `reranker` where given as a path or name
            (default: `kbert.load`).
    Returns {"text", "score", "start", "end" (character offsets into the passage),
    "passage": the search hit the answer is in ({"index", "text", "score", ...}), "rank"
    (the passage's position among the hits, from 0), "reader_score"}; a list of them for a
    list of questions. With `hits`, each also has "hits" (best first: the search hit, with
    "fused_score" and "rerank_score" where reranked, and "answer": its passage's best span
    where read, else None) and "seconds" ({"search", "rerank", "read"}: the question's share
    of each stage).
    """
    single = isinstance(question, str)
    questions: list[str] = [question] if isinstance(question, str) else list(question)
    if passages < 1 or candidates < 1:
        raise ValueError("ask: passages and candidates must be >= 1")
    if not temperature > 0:
        raise ValueError(f"ask: temperature must be > 0, got {temperature!r}")
    reader, encoder, reranker = (_loaded(m, loader) for m in (reader, encoder, reranker))
    shown = max(passages, hits or 0)
    depth = max(shown, candidates) if reranker is not None else shown
    started = time.perf_counter()
    retrieved = index.search(questions, encoder, top_k=depth, hybrid=hybrid,
                             batch_size=batch_size)
    search_seconds = (time.perf_counter() - started) / max(len(questions), 1)
    answers = []
    with (progress.bar(total=len(questions), desc="reading", unit="question")
          if len(questions) > 1 else contextlib.nullcontext()) as bar:
        for q, found in zip(questions, retrieved):
            found = list(found)
            seconds = {"search": search_seconds, "rerank": 0.0, "read": 0.0}
            if reranker is not None:
                from kbert.retrieval.rerank import rerank
                started = time.perf_counter()
                order = rerank(reranker, q, [h["text"] for h in found], batch_size=batch_size,
                               first_scores=[h["score"] for h in found])
                found = [dict(found[r["index"]], fused_score=r["score"],
                              rerank_score=r["rerank_score"]) for r in order]
                seconds["rerank"] = time.perf_counter() - started
            got: dict = {"best": None, "spans": []}
            if reader is not None:
                started = time.perf_counter()
                got = read(q, found, reader, passages, temperature, batch_size)
                seconds["read"] = time.perf_counter() - started
            best = got["best"] or dict.fromkeys(ANSWER)
            answer = {k: best[k] for k in ANSWER}
            if hits is not None:
                spans = {s["rank"]: s for s in got["spans"]}
                answer["hits"] = [dict(hit, answer=spans.get(rank)) for rank, hit in
                                  enumerate(found[:hits])]
                answer["seconds"] = seconds
            answers.append(answer)
            if bar is not None:
                bar.update(1)
    return answers[0] if single else answers


def _loaded(model: Encoder | str | os.PathLike | None,
            loader: Loader | None) -> Encoder | None:
    """`model`, loaded with `loader` (default: `kbert.load`) where it is a path or name."""
    if not isinstance(model, (str, os.PathLike)):
        return model
    return (loader or default_loader())(os.fspath(model))


def read(question: str, hits: Sequence[dict], reader: Encoder, passages: int = PASSAGES,
         temperature: float = 0.05, batch_size: int = 32) -> dict:
    """The reader's answer to `question` in the best `passages` of `hits` (search hits, best
    first: {"text", "score"}, and "rerank_score" where reranked): each passage read on its
    own, its best span weighted by the passage's probability (the module's docstring).

    Returns {"best": the best span (None where `hits` is empty), "spans": each passage read's
    best span, in `hits`' order}; a span is {"text", "score" (P(passage) × P(span | passage)),
    "start", "end" (character offsets into the passage), "passage" (its hit), "rank" (the
    passage's position in `hits`, from 0), "reader_score" (P(span | passage))}. For a SQuAD
    v2.0 reader a passage's best span may be the empty answer ("" text, offsets -1).
    """
    if passages < 1:
        raise ValueError("read: passages must be >= 1")
    if not temperature > 0:
        raise ValueError(f"read: temperature must be > 0, got {temperature!r}")
    found = list(hits)[:passages]
    if not found:
        return {"best": None, "spans": []}
    if all("rerank_score" in h for h in found):
        weights = _softmax([h["rerank_score"] for h in found], 1.0)
    else:
        weights = _softmax([h["score"] for h in found], temperature)
    answers: Any = reader.answer([question] * len(found), [h["text"] for h in found],
                                 batch_size=batch_size)
    spans = [{"text": a[0]["text"], "score": float(w * a[0]["score"]), "start": a[0]["start"],
              "end": a[0]["end"], "passage": hit, "rank": i, "reader_score": float(a[0]["score"])}
             for i, (hit, w, a) in enumerate(zip(found, weights, answers))]
    best = max(spans, key=lambda s: (s["score"], -s["rank"]))
    return {"best": best, "spans": spans}


def _softmax(scores: Sequence[float], temperature: float) -> np.ndarray:
    z = np.asarray(scores, np.float64) / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


def evaluate_open_qa(reader: Encoder, path: str, encoder: Encoder, reranker: Encoder | None = None,
                     passages: int = 5, candidates: int = 20, hybrid: bool = False,
                     batch_size: int = 32) -> dict[str, float]:
    """SQuAD exact match and F1 (percentages) of `ask` on a SQuAD JSON file, each question
    answered from an index of ALL the file's paragraphs, beside the reader on the question's
    own paragraph (`oracle_exact_match`, `oracle_f1`) and how often the passage read holds
    the paragraph (`passage_recall`): `kbert evaluate open-qa`."""
    import json

    from kbert.retrieval.metrics import RetrievalDataError, read_data
    from kbert.tasks.metrics import squad_exact_f1
    data = read_data(path)
    if path.endswith(".jsonl"):
        raise RetrievalDataError(f"{path}: open-qa needs SQuAD JSON (questions with answers)")
    with open(path, encoding="utf-8") as f:
        gold = [[a["text"] for a in qa.get("answers", [])] for article in json.load(f)["data"]
                for p in article.get("paragraphs", []) for qa in p.get("qas", [])]
    index = Index.build(encoder, data.corpus, batch_size=batch_size, hybrid=hybrid)
    got = ask(data.queries, index, reader, encoder, reranker, passages, candidates,
              hybrid=hybrid, batch_size=batch_size)
    oracle: Any = []
    step = batch_size * CALL_BATCHES
    with progress.bar(total=len(data.queries), desc="reading (oracle)", unit="question") as shown:
        for start in range(0, len(data.queries), step):
            questions = data.queries[start:start + step]
            oracle += reader.answer(questions, [data.corpus[min(r)] for r in
                                                data.relevant[start:start + step]],
                                    batch_size=batch_size)
            shown.update(len(questions))
    out = {}
    for name, texts in (("", [a["text"] for a in got]), ("oracle_", [o[0]["text"]
                                                                     for o in oracle])):
        scored = [squad_exact_f1(t, g) for t, g in zip(texts, gold)]
        out[name + "exact_match"] = round(100.0 * np.mean([s[0] for s in scored]), 2)
        out[name + "f1"] = round(100.0 * np.mean([s[1] for s in scored]), 2)
    out["passage_recall"] = round(100.0 * np.mean(
        [a["passage"]["source"] in r for a, r in zip(got, data.relevant)]), 2)
    return out
