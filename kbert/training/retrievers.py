"""Training retrievers on your own pairs: `kbert finetune retrieve|rerank`.

    train_retriever a bi-encoder (`kbert.models.BertBiEncoder`, in-batch negatives)
    train_reranker  a cross-encoder (`kbert.models.BertReranker`, pointwise on positives and
                    negatives)

Both keep the epoch with the best dev MRR@10 (recall@k, MRR@10, nDCG@10 on the dev pairs: a
retriever searches all the dev passages, a reranker reorders BM25's top candidates) and write
the checkpoint atomically; without a dev file, the last epoch. The run's curves go beside it
(`history.json`, `curves.png`: `kbert.training.curves`). The pairs (`read_pairs`) and their
hard negatives (`mine_negatives`) are `kbert.training.pairs`', importable from here too.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from kbert import outputs, progress
from kbert.hardware import mixed_precision_policy
from kbert.retrieval.metrics import RetrievalData, score
from kbert.training.pairs import Pairs, PairsError, embed, mine_negatives, read_pairs

__all__ = ["MAIN_METRIC", "Pairs", "PairsError", "TrainResult", "embed", "mine_negatives",
           "read_pairs", "reranker_rankings", "reranker_scores", "retriever_rankings",
           "train_reranker", "train_retriever"]

MAIN_METRIC = "mrr@10"


def retriever_rankings(encoder: Any, data: RetrievalData, depth: int = 100,
                       batch_size: int = 64) -> list[list[int]]:
    """Corpus rows best first per query, by the bi-encoder's cosine similarity."""
    q = embed(encoder, data.queries, batch_size, desc="dev: encoding queries")
    c = embed(encoder, data.corpus, batch_size, desc="dev: encoding passages")
    return np.argsort(-(q @ c.T), axis=1, kind="stable")[:, :depth].tolist()


def reranker_rankings(reranker: Any, data: RetrievalData, candidates: int = 20,
                      batch_size: int = 64, first: Any = None) -> list[list[int]]:
    """The first stage's corpus rows per query (`first` [q, k], default BM25's top
    `candidates`), reordered by a `BertReranker`'s log-odds of relevance."""
    if first is None:
        from kbert.retrieval.fusion import top_rows
        from kbert.retrieval.lexical import BM25
        first = top_rows(BM25(data.corpus).scores(data.queries), candidates)
    first = np.asarray(first)
    order = np.argsort(-reranker_scores(reranker, data, first, batch_size), axis=1,
                       kind="stable")
    return np.take_along_axis(first, order, 1).tolist()


def reranker_scores(reranker: Any, data: RetrievalData, first: Any,
                    batch_size: int = 64) -> np.ndarray:
    """A `BertReranker`'s log-odds of relevance [q, k] for each query's corpus rows `first`
    [q, k]."""
    first = np.asarray(first)
    queries = [q for q, rows in zip(data.queries, first) for _ in rows]
    passages = [data.corpus[r] for rows in first for r in rows]
    logits = np.asarray(reranker.predict(
        (queries, passages), batch_size=batch_size, verbose=0,
        callbacks=progress.predict_callbacks("dev: reranking", len(queries), batch_size,
                                            "pair")),
        np.float64)
    return (logits[:, 1] - logits[:, 0]).reshape(len(first), -1)


@dataclasses.dataclass
class TrainResult:
    output: str
    best_epoch: int
    best_scores: dict       # dev scores of the kept epoch (empty without a dev file)
    history: list           # per epoch: loss, seconds, dev scores
    train_rows: int
    train_seconds: float


def _keep_best(evaluate: Any, save: Any, epochs: int, fit: Any, verbose: bool,
               log_dir: str | os.PathLike | None = None) -> tuple[int, dict, list, float, list]:
    """Runs `fit(epoch, callbacks)` per epoch (with a progress bar over its batches where
    `verbose`), `KeepBest` scoring with `evaluate(model)` at its end and saving the best.
    Returns the best epoch, its scores, the history, the training seconds and the curve's
    points (`kbert.training.curves.Recorder`)."""
    import keras

    from kbert.training import curves  # Keras, on use
    from kbert.training.callbacks import KeepBest
    keeper = KeepBest(evaluate, save, MAIN_METRIC, verbose=verbose, epochs=epochs)
    recorder = curves.Recorder("epoch")
    callbacks = [keeper, recorder] + (
        [keras.callbacks.TensorBoard(os.fspath(log_dir))] if log_dir else [])
    for epoch in range(1, epochs + 1):
        bar = [progress.fit_callback(f"training (epoch {epoch}/{epochs})"
                                     if epochs > 1 else "training")] if verbose else []
        fit(epoch, callbacks + bar)      # the bar last: its logs hold the dev scores
    return (keeper.best_epoch, keeper.best_scores, keeper.history, keeper.train_seconds,
            recorder.points)


def _record(kind: str, output: str, settings: dict, points: list, best_epoch: int,
            has_dev: bool) -> None:
    """The run's history.json and curves.png beside its checkpoint (`kbert.training.curves`)."""
    from kbert.training import curves  # Keras, on use
    curves.record(output, curves.document(
        f"kbert finetune {kind}", "epoch", settings, points,
        dev_metric=f"dev_{MAIN_METRIC}" if has_dev else None, best_epoch=best_epoch))


def _card(kind: str, init: str, train: str | None, dev: str | None, settings: dict,
          history: list) -> str:
    lines = [f"# A {kind} fine-tuned with kbert", "",
             f"Fine-tuned with `kbert finetune {'retrieve' if kind == 'retriever' else 'rerank'}`"
             f" from `{init}`.", "", f"- train file: `{train}`",
             f"- dev file: `{dev}`" if dev else "- no dev file: the last epoch is kept",
             "- " + ", ".join(f"{k} {v}" for k, v in settings.items()), "", "Per epoch:", ""]
    lines += ["- " + json.dumps({**h, "loss": round(h["loss"], 4)}) for h in history]
    return "\n".join(lines) + "\n"


@outputs.claims("checkpoint")
def train_retriever(init: str, train: str | Pairs, output: str, dev: str | Pairs | None = None,
                    epochs: int = 1, batch_size: int = 32, learning_rate: float = 2e-5,
                    warmup: float = 0.1, max_seq_length: int | None = None,
                    temperature: float = 0.05, mine_negatives_count: int = 0,
                    mine_with: str = "bm25", seed: int = 0, verbose: bool = True,
                    save_dtype: str = "float32", mixed_precision: str | None = None,
                    overwrite: bool = False, log_dir: str | os.PathLike | None = None,
                    **columns: Any) -> TrainResult:
    """Fine-tunes `init`'s encoder as a bi-encoder on `train` (a file for `read_pairs`, with
    `columns`: query_column, positive_column, negative_column) and writes the best epoch's
    sentence encoder to `output`, with the run's `history.json` and `curves.png`
    (`kbert.training.curves`) beside it.

    mine_negatives_count: add this many hard negatives per row, mined from the training
    passages by `mine_with` ("bm25", or "encoder": the initial encoder).
    save_dtype: "float32", or "float16" (half the size; loads into float32 variables).
    overwrite: replace a checkpoint already at `output` (refused otherwise, before any work;
    anything else there always is); `output` is locked for the run (`kbert.outputs`).
    mixed_precision: as `kbert finetune --mixed-precision` (`kbert.hardware.
    mixed_precision_policy`: "auto", "float32", "mixed_bfloat16", "mixed_float16").
    log_dir: a TensorBoard log directory (`keras.callbacks.TensorBoard`); default none.
    """
    import keras

    from kbert.models import BertBiEncoder
    from kbert.models.optimization import check_schedule
    from kbert.tasks.batching import distinct_batch_count
    check_schedule(epochs, batch_size, learning_rate, warmup, min_batch_size=2)
    policy = mixed_precision_policy(mixed_precision)                 # None: float32
    keras.utils.set_random_seed(seed)
    pairs = train if isinstance(train, Pairs) else read_pairs(train, **columns)
    if not mine_negatives_count:                 # mined negatives: a check of their own
        _check_in_batch_negatives(pairs, train)
    dev_data = _dev_data(dev, columns)
    encoder = BertBiEncoder.from_checkpoint(init, max_seq_length=max_seq_length,
                                            temperature=temperature, dtype=policy)
    if mine_negatives_count:
        pairs = mine_negatives(pairs, mine_negatives_count, mine_with, encoder)
    x = (pairs.queries, pairs.positives) + ((pairs.negatives,) if pairs.negatives else ())
    per_epoch = distinct_batch_count(len(pairs), batch_size, join_single=not pairs.negatives)
    encoder.compile(learning_rate=learning_rate, warmup=warmup,
                    num_train_steps=per_epoch * epochs,
                    jit_compile=_jit_compile(), loss_scale=policy == "mixed_float16")
    settings = dict(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                    warmup=warmup, max_seq_length=encoder.preprocessor.max_seq_length,
                    temperature=temperature, negatives=len(pairs.negatives[0])
                    if pairs.negatives else 0, seed=seed, precision=policy or "float32")

    def fit(epoch: int, callbacks: list) -> dict:
        return encoder.fit(x=x, batch_size=batch_size, epochs=epoch, initial_epoch=epoch - 1,
                           callbacks=callbacks, verbose=0).history

    def save(history: list) -> None:
        encoder.save_checkpoint(output, dtype=save_dtype, model_card=_card(
            "retriever", init, _name(train), _name(dev), settings, history))

    best_epoch, best, history, seconds, points = _keep_best(
        _scorer(retriever_rankings, dev_data), save, epochs, fit, verbose, log_dir)
    _record("retrieve", output, _run_settings(init, train, dev, settings), points, best_epoch,
            dev_data is not None)
    return TrainResult(os.path.abspath(output), best_epoch, best, history, len(pairs), seconds)


@outputs.claims("checkpoint")
def train_reranker(init: str, train: str | Pairs, output: str, dev: str | Pairs | None = None,
                   epochs: int = 1, batch_size: int = 32, learning_rate: float = 2e-5,
                   warmup: float = 0.1, max_seq_length: int | None = None,
                   mine_negatives_count: int = 0, mine_with: str = "bm25",
                   candidates: int = 20, seed: int = 0, verbose: bool = True,
                   save_dtype: str = "float32", mixed_precision: str | None = None,
                   overwrite: bool = False, log_dir: str | os.PathLike | None = None,
                   **columns: Any) -> TrainResult:
    """Fine-tunes `init` as a cross-encoder on (query, positive) pairs labelled relevant and
    (query, negative) pairs labelled irrelevant; the negatives come from the file's negative
    column and/or are mined (`mine_negatives_count`, by BM25 or — `mine_with="encoder"` —
    by `init`'s encoder as a bi-encoder). Dev: BM25's top `candidates` reordered.
    save_dtype, mixed_precision, overwrite, log_dir: as `train_retriever`'s (history.json and
    curves.png too)."""
    import keras

    from kbert.models import BertBiEncoder, BertReranker
    from kbert.models.optimization import check_schedule
    check_schedule(epochs, batch_size, learning_rate, warmup, min_batch_size=2)
    policy = mixed_precision_policy(mixed_precision)                 # None: float32
    keras.utils.set_random_seed(seed)
    pairs = train if isinstance(train, Pairs) else read_pairs(train, **columns)
    dev_data = _dev_data(dev, columns)
    if mine_negatives_count:
        encoder = BertBiEncoder.from_checkpoint(init) if mine_with == "encoder" else None
        pairs = mine_negatives(pairs, mine_negatives_count, mine_with, encoder)
    if not pairs.negatives:
        raise PairsError("a reranker needs negatives: give a negative column "
                         "(--negative-column) or mine them (--mine-negatives N)")
    reranker: Any = BertReranker.from_checkpoint(init, max_seq_length=max_seq_length,
                                                 dtype=policy)
    queries = [q for q, negs in zip(pairs.queries, pairs.negatives) for _ in range(1 + len(negs))]
    passages = [p for pos, negs in zip(pairs.positives, pairs.negatives) for p in [pos, *negs]]
    labels = [int(j == 0) for negs in pairs.negatives for j in range(1 + len(negs))]
    reranker.compile(learning_rate=learning_rate, warmup=warmup,
                     num_train_steps=-(-len(labels) // batch_size) * epochs,
                     jit_compile=_jit_compile(), loss_scale=policy == "mixed_float16")
    settings = dict(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                    warmup=warmup, max_seq_length=reranker.preprocessor.max_seq_length,
                    negatives=len(pairs.negatives[0]), seed=seed, precision=policy or "float32")

    def fit(epoch: int, callbacks: list) -> dict:
        return reranker.fit(x=(queries, passages), y=labels, batch_size=batch_size,
                            epochs=epoch, initial_epoch=epoch - 1, callbacks=callbacks,
                            verbose=0).history

    def save(history: list) -> None:
        reranker.save_checkpoint(output, dtype=save_dtype, model_card=_card(
            "reranker", init, _name(train), _name(dev), settings, history))

    best_epoch, best, history, seconds, points = _keep_best(
        _scorer(lambda m, d: reranker_rankings(m, d, candidates), dev_data), save, epochs, fit,
        verbose, log_dir)
    _record("rerank", output, _run_settings(init, train, dev, settings), points, best_epoch,
            dev_data is not None)
    return TrainResult(os.path.abspath(output), best_epoch, best, history, len(labels),
                       seconds)


def _jit_compile() -> bool | str:
    """No XLA for TensorFlow on CPU: batch shapes vary (each batch padded to its longest
    row) and XLA compiles one program per shape, more time than it saves; a traced graph
    that generalizes over the shapes runs instead. Keras' choice elsewhere."""
    import keras
    import tensorflow as tf
    if keras.backend.backend() == "tensorflow" and not tf.config.list_logical_devices("GPU"):
        return False
    return "auto"


def _check_in_batch_negatives(pairs: Pairs, train: str | Pairs) -> None:
    """Without hard negatives a query's only negatives are the other positives of its batch:
    a file with one positive passage would train on a loss of 0, learning nothing."""
    distinct = len(set(pairs.positives))
    if not pairs.negatives and distinct < 2:
        rows = f"{len(pairs)} pair{'s' if len(pairs) > 1 else ''}"
        raise PairsError(f"{_name(train)}: {rows} with {distinct} distinct positive passage: "
                         "in-batch negatives need at least 2 (each query's negatives are the "
                         "other positives of its batch); add pairs, or negatives "
                         "(--negative-column, --mine-negatives N)")


def _dev_data(dev: str | Pairs | None, columns: dict) -> RetrievalData | None:
    if dev is None:
        return None
    return (dev if isinstance(dev, Pairs) else read_pairs(dev, **columns)).retrieval_data()


def _scorer(rankings: Any, data: RetrievalData | None) -> Any:
    """model → dev scores of `rankings(model, data)`; None without dev data."""
    if data is None:
        return None
    return lambda model: score(rankings(model, data), data.relevant)


def _run_settings(init: str, train: str | Pairs, dev: str | Pairs | None,
                  settings: dict) -> dict:
    """history.json's settings: the files, then the model card's settings."""
    return {"init": init, "train": _name(train), "dev": _name(dev), **settings}


def _name(source: str | Pairs | None) -> str | None:
    return None if source is None else source if isinstance(source, str) else "(in memory)"
