"""`Index`: passages, their unit vectors from one encoder, and search over them.

A saved index is a directory, written atomically (a temporary directory, then a rename):

    index.json        the manifest: format version, the encoder's identity (weights and
                      vocabulary hashes, pooling, maximum length), counts, options
    embeddings.npy    float32 [passages, hidden], unit rows
    passages.jsonl    one {"text", "source", "start", "end", ...metadata} per row
    faiss.index       the approximate (HNSW) index, when built with approximate=True

Search is exact inner product in NumPy by default (cosine: the rows are unit length); an
approximate HNSW index (faiss-cpu, the optional `retrieval` extra) serves collections beyond
~100k passages. BM25 (hybrid search) is rebuilt from the passages when first needed.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert import outputs
from kbert.inference.protocol import Encoder, Loader, default_loader
from kbert.retrieval import encoder as encoder_lib
from kbert.retrieval import fusion
from kbert.retrieval.passages import split_passages
from kbert.tokenizer import check_texts
from kbert.wording import plural

if TYPE_CHECKING:   # BM25 loads on use
    from kbert.retrieval.lexical import BM25

FORMAT, VERSION = "kbert-index", 1
MANIFEST, VECTORS, PASSAGES, FAISS = "index.json", "embeddings.npy", "passages.jsonl", "faiss.index"
OVERLAP = 32        # WordPieces shared by neighbouring windows of a split text
# Texts per batch: on CPUs, batches of 16 long passages ran 1.3-1.7x faster than batches of 64
# (attention over 256 tokens stays in cache); short queries lose little to it.
BATCH_SIZE = 16


class IndexDirectoryError(ValueError):
    """A directory that is not a complete kbert index: says what is missing or wrong."""


class EncoderMismatchError(ValueError):
    """An index searched with (or extended by) another encoder than it was built with."""


def _faiss() -> Any:
    try:
        import faiss  # optional: pip install "kbert[retrieval]"
    except ModuleNotFoundError:
        raise ValueError("an approximate index needs faiss: pip install 'kbert[retrieval]' "
                         "(or use the exact index, approximate=False)") from None
    return faiss


class Index:
    """Passages and their vectors from one encoder, searchable by that encoder's queries.

    Example:
    >>> import kbert                                                        # doctest: +SKIP
    >>> m = kbert.load("minilm-l6-v2")                                      # doctest: +SKIP
    >>> texts = ["Paris is in France.", "Cats purr."]
    >>> index = kbert.retrieval.Index.build(m, texts)                      # doctest: +SKIP
    >>> index.save("my-index")                                              # doctest: +SKIP
    >>> index = kbert.retrieval.Index.load("my-index")                      # doctest: +SKIP
    >>> index.search("Where is Paris?", m, top_k=1)                         # doctest: +SKIP
    [{'index': 0, 'text': 'Paris is in France.', 'score': 0.68, 'source': 0, ...}]
    """

    def __init__(self, vectors: np.ndarray, passages: list[dict], encoder: dict,
                 approximate: bool = False, hybrid: bool = False, path: str | None = None,
                 split: bool = True, dense_weight: float = fusion.DENSE_WEIGHT,
                 runtime: str | None = None) -> None:
        self.vectors = np.ascontiguousarray(vectors, np.float32)
        self.passages = passages
        self.encoder = encoder
        self.approximate = bool(approximate)
        self.hybrid = bool(hybrid)
        self.split = bool(split)
        self.dense_weight = float(dense_weight)
        self.path = path
        self.runtime = runtime           # what ran the encoder last (`load_encoder`'s default)
        self.notes: list[str] = []       # what building or adding did (texts split)
        self._bm25: BM25 | None = None
        self._ann: Any = None
        self._revision: str | None = None   # the saved version this index was loaded from

    # --- building --------------------------------------------------------------------------
    @classmethod
    def build(cls, model: Encoder, texts: Sequence[str], metadata: Sequence[dict] | None = None,
              batch_size: int = BATCH_SIZE, approximate: bool = False, hybrid: bool = False,
              overlap: int = OVERLAP, split: bool = True,
              dense_weight: float = fusion.DENSE_WEIGHT) -> Index:
        """Embeds `texts` with `model` (its pooling, at most its trained length: texts longer
        than that are split into overlapping passages, with a warning that says so; with
        `split=False` truncated, as sentence-transformers does). `hybrid`: search fuses BM25
        by default, `dense_weight` the dense side's share (`kbert.retrieval.fusion`)."""
        index = cls(np.zeros((0, model.config.hidden_size), np.float32), [],
                    encoder_lib.identity(model), approximate=approximate, hybrid=hybrid,
                    split=split, dense_weight=dense_weight)
        index.add(model, texts, metadata, batch_size=batch_size, overlap=overlap)
        return index

    def add(self, model: Encoder, texts: Sequence[str], metadata: Sequence[dict] | None = None,
            batch_size: int = BATCH_SIZE, overlap: int = OVERLAP) -> int:
        """Adds texts (split where too long) embedded by `model`, which must be the index's
        encoder (a progress bar over the passages, `kbert.progress`); returns the number of
        passages added."""
        texts, _ = check_texts("index", texts, empty="the collection is empty (no texts to index)")
        if metadata is not None and len(metadata) != len(texts):
            raise ValueError(f"index: {len(metadata)} metadata records for {len(texts)} texts")
        self.check_encoder(model)
        self.runtime = model.runtime
        limit = self.encoder["max_seq_length"] - 2         # [CLS] and [SEP]
        overlap = min(overlap, limit // 4)                  # short encoders: a quarter
        passages, split = split_passages(model.tokenizer, texts, limit if self.split else
                                         1 << 62, overlap)
        if not self.split:
            long = sum(len(ids) > limit for ids in model.tokenizer.encode_batch(texts))
            if long:
                self.notes.append(f"{_of(long, texts)} longer than the encoder's {limit + 2} "
                                  f"tokens and truncated")
        if split:
            note = (f"{_of(split, texts)} longer than the encoder's {limit + 2} tokens "
                    f"and split into overlapping passages "
                    f"({overlap} tokens shared)")
            self.notes.append(note)
            warnings.warn(note, stacklevel=2)
        first = self.sources
        vectors = encoder_lib.embed(model, [p.text for p in passages], batch_size,
                                    desc="encoding passages", unit="passage")
        bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
        if len(bad):
            text = " ".join(passages[bad[0]].text.split())[:60]
            raise ValueError(f"index: the encoder gave NaN or infinite vectors for {len(bad)} of "
                             f"{len(passages)} passages (the first from text "
                             f"{passages[bad[0]].source}: {text!r}); is the checkpoint damaged? "
                             f"Nothing was added")
        for p in passages:
            record = {"text": p.text, "source": first + p.source, "start": p.start,
                      "end": p.end}
            if metadata is not None:
                record.update({k: v for k, v in dict(metadata[p.source]).items()
                               if k not in record})
            self.passages.append(record)
        self.vectors = np.concatenate([self.vectors, vectors]) if len(self.vectors) else vectors
        self._bm25 = None
        if self._ann is not None:
            self._ann.add(vectors)
        return len(passages)

    @property
    def sources(self) -> int:
        """How many texts the passages come from."""
        return self.passages[-1]["source"] + 1 if self.passages else 0

    def __len__(self) -> int:
        return len(self.passages)

    def check_encoder(self, model: Encoder) -> None:
        """Refuses a model other than the index's encoder, naming both."""
        theirs = encoder_lib.identity(model)
        ours = self.encoder
        keys = ("weights_sha256", "vocab_sha256", "pooling", "max_seq_length", "hidden_size")
        if any(ours.get(k) != theirs.get(k) for k in keys):
            where = f"the index {self.path}" if self.path else "the index"
            raise EncoderMismatchError(
                f"{where} was built with encoder {encoder_lib.describe(ours)}, not "
                f"{encoder_lib.describe(theirs)}; search it with the encoder it was built with, "
                f"or rebuild it")

    # --- search ----------------------------------------------------------------------------
    def search(self, queries: str | Sequence[str], model: Encoder | None = None, top_k: int = 10,
               hybrid: bool | None = None, batch_size: int = BATCH_SIZE) -> list:
        """The `top_k` passages for each query, best first: {"index" (the row), "text",
        "score", "source", "start", "end", ...metadata}. `model` defaults to the encoder the
        manifest names (loaded by name or path); `hybrid` to the index's option."""
        single = isinstance(queries, str)
        queries, _ = check_texts("search", queries, "query", plural="queries")
        top_k = _check_top_k(top_k)
        if not self.passages:
            raise ValueError("search: the index is empty")
        if model is None:
            model = self.load_encoder()
        self.check_encoder(model)
        vectors = encoder_lib.embed(model, queries, batch_size, desc="encoding queries",
                                      unit="query")
        use_hybrid = self.hybrid if hybrid is None else hybrid
        rows: Sequence[np.ndarray] | np.ndarray
        scores: Sequence[np.ndarray] | np.ndarray
        if use_hybrid:
            rows, scores = self._hybrid(queries, vectors, top_k)
        else:
            scores, rows = self.search_vectors(vectors, top_k)
        hits = [[self._hit(int(r), float(s)) for r, s in zip(row, score)]
                for row, score in zip(rows, scores)]
        return hits[0] if single else hits

    def _hit(self, row: int, score: float) -> dict:
        return {"index": row, "text": self.passages[row]["text"], "score": score,
                **{k: v for k, v in self.passages[row].items() if k != "text"}}

    def search_vectors(self, queries: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) [q, k] of the best inner products, best first (ties: lower row)."""
        queries = np.asarray(queries, np.float32).reshape(-1, self.vectors.shape[1])
        k = min(top_k, len(self.vectors))
        if self.approximate:
            index = self._approximate_index()
            index.hnsw.efSearch = max(64, 2 * k)
            scores, rows = index.search(queries, k)
            return scores, rows
        out_s, out_r = np.zeros((len(queries), k), np.float32), np.zeros((len(queries), k), int)
        chunk = max(1, (1 << 24) // max(1, len(self.vectors)))   # ~64 MB of scores at a time
        for start in range(0, len(queries), chunk):
            scores = queries[start:start + chunk] @ self.vectors.T          # [chunk, passages]
            out_r[start:start + chunk] = fusion.top_rows(scores, k)
            out_s[start:start + chunk] = np.take_along_axis(scores, out_r[start:start + chunk], 1)
        return out_s, out_r

    def _approximate_index(self) -> Any:
        if self._ann is None:
            faiss = _faiss()
            self._ann = faiss.IndexHNSWFlat(self.vectors.shape[1], 32,
                                            faiss.METRIC_INNER_PRODUCT)
            self._ann.hnsw.efConstruction = 80
            if len(self.vectors):
                self._ann.add(self.vectors)
        return self._ann

    def bm25(self) -> BM25:
        """The passages' BM25 (built on first use, after each `add`)."""
        if self._bm25 is None:
            from kbert.retrieval.lexical import BM25
            self._bm25 = BM25([p["text"] for p in self.passages])
        return self._bm25

    def _hybrid(self, queries: list[str], vectors: np.ndarray,
                top_k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Rows and fused scores of the dense and BM25 candidates (`fusion.hybrid`)."""
        depth = min(len(self.passages), max(fusion.CANDIDATES, top_k))
        _, dense_rows = self.search_vectors(vectors, depth)
        return fusion.hybrid(dense_rows, lambda i, rows: self.vectors[rows] @ vectors[i],
                             self.bm25().scores(queries), top_k, self.dense_weight)

    def load_encoder(self, runtime: str | None = None, dtype: str | None = None,
                     loader: Loader | None = None) -> Encoder:
        """The encoder the manifest names, loaded by path (else by name) with `loader` (default:
        `kbert.load`) and its `runtime` and `dtype`. `runtime` defaults to the one that built
        the index where its package is installed (an index built through ONNX Runtime is
        searched through it: from a fresh shell in under a second, without TensorFlow), else
        Keras."""
        from kbert.runtime.options import RuntimeOptionError, require_package
        load = loader or default_loader()
        if runtime is None and self.runtime not in (None, "keras"):
            try:
                require_package(self.runtime)
                runtime = self.runtime
            except RuntimeOptionError:
                pass                            # not installed here: Keras
        for where in (self.encoder.get("path"), self.encoder.get("name")):
            if where and (os.path.isdir(where) or os.sep not in where):
                try:
                    return load(where, dtype=dtype, runtime=runtime)
                except RuntimeOptionError:
                    raise                       # the encoder is there; the option is not
                except ValueError:
                    continue
        raise ValueError(f"the index was built with encoder {encoder_lib.describe(self.encoder)}"
                         f", which cannot be found at {self.encoder.get('path')}; pass the model")

    # --- saving and loading ----------------------------------------------------------------
    def manifest(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "encoder": self.encoder,
                "passages": len(self.passages), "sources": self.sources,
                "dimension": int(self.vectors.shape[1]), "approximate": self.approximate,
                "hybrid": self.hybrid, "split": self.split, "dense_weight": self.dense_weight,
                "runtime": self.runtime, "files": [VECTORS, PASSAGES] + (
                    [FAISS] if self.approximate else [])}

    def save(self, directory: str | os.PathLike, overwrite: bool = True) -> str:
        """Writes the index directory atomically (`kbert.outputs`): an index already there is
        replaced (with `overwrite`, the default, as Keras' `model.save`), anything else is
        refused. Saving over the index this one was loaded from is refused if another writer
        saved it in between (load it again and repeat the change: no silent loss)."""
        directory = os.path.abspath(os.fspath(directory))
        with outputs.Output(directory, "index", overwrite=overwrite) as out:
            if self.path == directory and self._revision is not None:
                on_disk = _read_manifest(directory).get("revision") if os.path.isdir(
                    directory) else None
                if on_disk != self._revision:
                    raise IndexDirectoryError(
                        f"{directory} was changed by another writer since this index was "
                        f"loaded; load it again and repeat the change")
            tmp = out.staging()
            np.save(os.path.join(tmp, VECTORS), self.vectors)
            with open(os.path.join(tmp, PASSAGES), "w", encoding="utf-8") as f:
                for p in self.passages:
                    f.write(json.dumps(p, ensure_ascii=False) + "\n")
            if self.approximate:
                _faiss().write_index(self._approximate_index(), os.path.join(tmp, FAISS))
            revision = uuid.uuid4().hex
            with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:   # last
                json.dump(dict(self.manifest(), revision=revision), f, indent=2)
                f.write("\n")
            out.commit(tmp)                                  # whole old or whole new
        self.path, self._revision = directory, revision
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Index:
        """Reads an index directory, checking that every file is there and agrees."""
        directory = os.fspath(directory)
        outputs.recover_missing(directory)            # a swap cut short: the old one back
        manifest = _read_manifest(directory)
        for name in manifest["files"]:
            if not os.path.isfile(os.path.join(directory, name)):
                raise IndexDirectoryError(f"{directory}: missing {name} (an incomplete index; "
                                          f"rebuild it)")
        try:
            vectors = np.load(os.path.join(directory, VECTORS), allow_pickle=False)
        except Exception as e:          # numpy's header parser raises assorted types (even
            # tokenize.TokenError) on a damaged file: each means "unreadable"
            raise IndexDirectoryError(f"{directory}: {VECTORS} is unreadable ({e})") from None
        passages = _read_passages(os.path.join(directory, PASSAGES))
        want = (manifest["passages"], manifest["dimension"])
        if vectors.ndim != 2 or vectors.shape != want or len(passages) != want[0]:
            raise IndexDirectoryError(
                f"{directory}: the manifest says {want[0]} passages of dimension {want[1]}, but "
                f"{VECTORS} holds {vectors.shape} and {PASSAGES} {len(passages)} rows")
        finite = (np.isfinite(vectors).all(axis=1) if vectors.dtype.kind == "f"
                  else np.zeros(len(vectors), bool))
        if not finite.all():
            rows = np.flatnonzero(~finite)
            raise IndexDirectoryError(f"{directory}: {VECTORS} has {len(rows)} rows that are not "
                                      f"finite numbers (the first: row {rows[0]}); a damaged "
                                      f"index, rebuild it")
        index = cls(vectors, passages, manifest["encoder"], manifest["approximate"],
                    manifest["hybrid"], path=os.path.abspath(directory),
                    split=manifest.get("split", True),
                    dense_weight=manifest.get("dense_weight", fusion.DENSE_WEIGHT),
                    runtime=manifest.get("runtime"))
        index._revision = manifest.get("revision", "")
        if index.approximate:
            index._ann = _faiss().read_index(os.path.join(directory, FAISS))
            if index._ann.ntotal != len(passages):
                raise IndexDirectoryError(f"{directory}: {FAISS} holds {index._ann.ntotal} "
                                          f"vectors, the manifest {len(passages)}")
        return index


def _read_manifest(directory: str) -> dict:
    if not os.path.isdir(directory):
        raise IndexDirectoryError(f"index directory not found: {directory}")
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise IndexDirectoryError(f"{directory}: missing {MANIFEST} (not a kbert index, or one "
                                  f"whose writing did not finish)")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IndexDirectoryError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexDirectoryError(f"{path}: not a kbert index manifest")
    if manifest.get("version") != VERSION:
        raise IndexDirectoryError(f"{path}: index format version {manifest.get('version')!r}; "
                                  f"this kbert reads version {VERSION}")
    need = ("encoder", "passages", "dimension", "approximate", "hybrid", "files")
    missing = [k for k in need if k not in manifest]
    if missing:
        raise IndexDirectoryError(f"{path}: the manifest lacks {', '.join(missing)}")
    return manifest


def _read_passages(path: str) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise IndexDirectoryError(f"{path}:{n}: not valid JSON (a damaged index; "
                                          f"rebuild it)") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise IndexDirectoryError(f"{path}:{n}: expected an object with a 'text'")
            out.append(record)
    return out


def _check_top_k(top_k: object) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"search: top_k must be an integer >= 1, got {top_k!r}")
    return int(top_k)


def _of(count: int, texts: Sequence[str]) -> str:
    """"1 of 3 texts was", "2 of 3 texts were"."""
    return f"{count} of {plural(len(texts), 'text')} {'was' if count == 1 else 'were'}"
