"""Retrieval: index passages with a sentence encoder, search them (dense, BM25, fused), rerank
with a cross-encoder, and measure it.

    index.py     `Index`: build (split, embed, normalize), add, save/load (atomic, a manifest
                 with the encoder's identity), exact NumPy or approximate faiss search, hybrid
    encoder.py   how a model embeds (pooling, trained length, unit vectors); its identity
    passages.py  long texts → overlapping passages; the text/JSONL/CSV files of `kbert index`
    lexical.py   BM25 (bm25s); fusion.py: min-max weighted fusion, RRF, top-k
    search.py    `search` (what `Bert.search` calls); rerank.py: `rerank` (`Bert.rerank`)
    metrics.py   recall@k, MRR@10, nDCG@10 by ranx; SQuAD/JSONL retrieval data; evaluate
    open_qa.py   `ask`: retrieve, rerank, `read` — answers over a collection (`evaluate_open_qa`)

Training retrievers and rerankers is `kbert.training.retrievers`'.
BM25, faiss and ranx come with the optional extra: pip install "kbert[retrieval]".
"""

from kbert._lazy import lazy_attributes

_LAZY = {
    **dict.fromkeys(["Index", "IndexDirectoryError", "EncoderMismatchError"],
                    "kbert.retrieval.index"),
    **dict.fromkeys(["evaluate_retrieve", "evaluate_rerank", "read_data", "score", "METRICS"],
                    "kbert.retrieval.metrics"),
    **dict.fromkeys(["ask", "read", "evaluate_open_qa"], "kbert.retrieval.open_qa"),
    "Passage": "kbert.retrieval.passages",
    "split_passages": "kbert.retrieval.passages",
}
__all__ = list(_LAZY)

# the retrievers' training is `kbert.training`'s (above this package, so not loaded from here)
_MOVED = {name: f"kbert.training.{name}" for name in (
    "Pairs", "PairsError", "read_pairs", "mine_negatives", "train_retriever", "train_reranker")}

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY, _MOVED)
