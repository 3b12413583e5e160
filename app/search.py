"""Ask a document: pasted text and uploaded text files split into passages, indexed with a
sentence encoder, searched, and the best answer span read from the top passages by a
question-answering model (retrieve, then read). kbert's public API only; plain data in and out.

The index of a set of documents is kept (a few, least recently used out first) under a hash of
their texts and the encoder, so a second question on the same documents only searches and reads.
The tab's default retriever and reader load in the background from the server's start
(`preload`); a search that comes sooner waits for them, and the tab says so.
"""

import collections
import hashlib
import importlib.util
import logging
import os
import re
import threading
import time
from typing import TYPE_CHECKING

from app.registry import EMBEDDING, RERANKER, InputError, Registry

if TYPE_CHECKING:
    from kbert import Bert

log = logging.getLogger("app")

PASSAGE_TOKENS = 128    # WordPieces per passage: a paragraph or two, short enough to rank sharply
OVERLAP = 16            # pieces shared by the windows of a paragraph longer than a passage
READ_PASSAGES = 5       # top passages the reader reads (kbert.retrieval.ask's default)
MAX_TOP_K = 20
MAX_QUESTION_CHARS = 1_000
MAX_FILES = 20
MAX_FILE_BYTES = 2_000_000
MAX_CHARS = 300_000     # all documents together: about 750 passages, under a minute to index
CACHED_INDEXES = 8
PASTED = "pasted text"
NO_READER = "none"      # the reader choice that skips reading (search results only)
NO_RERANKER = "none"    # the reranker choice that keeps the search order
RERANK_CANDIDATES = 20  # the search hits a reranker reorders (at least the passages shown)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")


# --- documents -------------------------------------------------------------------------------
def _file_text(path):
    """The UTF-8 text of an uploaded file (InputError naming the file if it is not text)."""
    path = os.fspath(path)
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise InputError(f"{name} is {size / 1e6:.1f} MB; the playground indexes text files "
                             f"of at most {MAX_FILE_BYTES / 1e6:g} MB.")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"Could not read {name}: {e.strerror or e}.") from None
    if data.startswith(b"%PDF") or b"\x00" in data[:8192]:
        raise InputError(f"{name} is not a text file (a PDF or other binary file); upload "
                         f"plain text, e.g. .txt or .md.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{name} is not UTF-8 text; save it as UTF-8 and upload it "
                         f"again.") from None
    return name, text.replace("\r\n", "\n")


def read_documents(text, files):
    """([(name, text)], notes): the pasted text (if any), then each uploaded file."""
    files = [f for f in (files or []) if f]
    if len(files) > MAX_FILES:
        raise InputError(f"{len(files)} files were uploaded; the playground indexes at most "
                         f"{MAX_FILES} at once.")
    documents, notes = [], []
    if (text or "").strip():
        documents.append((PASTED, text))
    for path in files:
        name, content = _file_text(path)
        if content.strip():
            documents.append((name, content))
        else:
            notes.append(f"{name} is empty and was left out.")
    if not documents:
        raise InputError("The document is empty: paste some text or upload text files "
                         "(.txt, .md).")
    total = sum(len(t) for _, t in documents)
    if total > MAX_CHARS:
        raise InputError(f"The documents have {total:,} characters; the playground indexes at "
                         f"most {MAX_CHARS:,} at once (about {MAX_CHARS // 400:,} passages).")
    return documents, notes


# --- passages --------------------------------------------------------------------------------
def paragraphs(text):
    """[(start, end)] of the blank-line-separated paragraphs of `text`, whitespace trimmed.

    >>> paragraphs("  One.\\n\\n\\nTwo\\nlines. \\n \\n")
    [(2, 6), (9, 19)]
    """
    out, last = [], 0
    for end, after in [(m.start(), m.end()) for m in _PARAGRAPH_BREAK.finditer(text)] + [
            (len(text), len(text))]:
        piece = text[last:end]
        if piece.strip():
            start = last + len(piece) - len(piece.lstrip())
            out.append((start, last + len(piece.rstrip())))
        last = after
    return out


def split_document(tokenizer, text, max_tokens=PASSAGE_TOKENS, overlap=OVERLAP):
    """[(start, end)] passages of `text`: consecutive paragraphs packed together while they fit
    in `max_tokens` WordPieces; a longer paragraph cut into overlapping windows that start at
    a word (`kbert.retrieval.split_passages`)."""
    from kbert.retrieval import split_passages
    spans = paragraphs(text)
    lengths = [len(ids) for ids in tokenizer.encode_batch([text[s:e] for s, e in spans])]
    out, group = [], None                  # group: [start, end, tokens] of packed paragraphs
    for (start, end), n in zip(spans, lengths):
        if group and group[2] + n <= max_tokens:
            group[1], group[2] = end, group[2] + n
            continue
        if group:
            out.append((group[0], group[1]))
            group = None
        if n <= max_tokens:
            group = [start, end, n]
            continue
        windows, _ = split_passages(tokenizer, [text[start:end]], max_tokens, overlap)
        out += [(start + w.start, start + w.end) for w in windows]
    if group:
        out.append((group[0], group[1]))
    return out


# --- the index, kept per set of documents ----------------------------------------------------
class IndexCache:
    """Values built once per key, the `size` most recently used kept; a key being built by one
    request is waited for by the others, not built twice."""

    def __init__(self, size=CACHED_INDEXES):
        self.size = size
        self._items = collections.OrderedDict()
        self._lock = threading.Lock()
        self._building = {}

    def get(self, key, build):
        """(value, whether it was cached)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key], True
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._items:
                    return self._items[key], True
            try:
                value = build()
            finally:
                with self._lock:
                    self._building.pop(key, None)
            with self._lock:
                self._items[key] = value
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return value, False

    def clear(self):
        with self._lock:
            self._items.clear()


_indexes = IndexCache()


def _key(encoder_path, texts, max_tokens):
    h = hashlib.sha256(f"{encoder_path}\0{max_tokens}\0{OVERLAP}\0{len(texts)}".encode())
    for text in texts:
        h.update(b"\0" + hashlib.sha256(text.encode("utf-8")).digest())
    return h.hexdigest()


def _build_index(model, texts, max_tokens):
    """{"index", "seconds"}: each text's passages embedded by `model` into a
    `kbert.retrieval.Index` whose rows record the text they come from and where."""
    from kbert.retrieval import Index
    start = time.perf_counter()
    passages, metadata = [], []
    for i, text in enumerate(texts):
        for s, e in split_document(model.tokenizer, text, max_tokens):
            passages.append(text[s:e])
            metadata.append({"document": i, "document_start": s, "document_end": e})
    index = Index.build(model, passages, metadata=metadata)
    return {"index": index, "seconds": time.perf_counter() - start}


def passage_tokens(model):
    """The WordPieces a passage holds for `model`: PASSAGE_TOKENS, within its input length."""
    return min(PASSAGE_TOKENS, model.embedding_defaults["max_seq_length"] - 2)


def index_for(registry, name, model, texts):
    """(entry, cached): the index of `texts` by encoder `name`, built on first use."""
    max_tokens = passage_tokens(model)
    key = _key(registry.info(name)["path"], texts, max_tokens)
    return _indexes.get(key, lambda: _build_index(model, texts, max_tokens))


def hybrid_available():
    return importlib.util.find_spec("bm25s") is not None


def models(registry: Registry, encoder: str | None = None, reader: str | None = None,
           reranker: str | None = NO_RERANKER) -> list[tuple[str, str]]:
    """[(role, name)]: the checkpoints a search with these choices runs, in the order it runs
    them: the "retriever" (`encoder`; None: the first sentence encoder), the "reranker" (none
    unless one is named) and the "reader" (`reader`; None: the first with a span head, if any;
    NO_READER: none). Each is checked for its head (InputError), none is loaded."""
    encoder = registry.resolve(encoder, EMBEDDING)
    registry.check(encoder, EMBEDDING)
    out = [("retriever", encoder)]
    if reranker not in (None, "", NO_RERANKER):
        registry.check(reranker, RERANKER)
        out.append(("reranker", reranker))
    if reader != NO_READER and (reader or registry.with_head("span")):
        reader = registry.resolve(reader, "span")
        registry.check(reader, "span")
        out.append(("reader", reader))
    return out


def warm_retriever(model: "Bert") -> None:
    """A search of a two-passage document: traces what a search first runs (a batch of
    passages embedded, then a question; BM25 where hybrid search is available)."""
    index = _build_index(model, ["A first passage.\n\nA second one."],
                         passage_tokens(model))["index"]
    model.search("Which passage?", index, top_k=1, hybrid=hybrid_available())


def warm_reader(model: "Bert") -> None:
    """A first answer read from one short passage (traces the reader's pass)."""
    from kbert.retrieval import read
    read("What is read?", [{"text": "A short passage is read.", "score": 1.0}], model)


def preload(registry: Registry) -> threading.Thread | None:
    """Starts loading the Search tab's default checkpoints (the retriever and the reader its
    first search runs) in a background thread, each warmed by one small call, so that the
    first search does not wait for them; a search that comes sooner waits for the load under
    way (`Registry.get`). None where no checkpoint is a sentence encoder (no Search tab)."""
    if not registry.with_head(EMBEDDING):
        return None
    warm = {"retriever": warm_retriever, "reader": warm_reader}
    chosen = models(registry)

    def load() -> None:
        for role, name in chosen:
            try:
                start = time.perf_counter()
                registry.get(name, warm=warm[role])
                log.info("Search tab: the %s %s loaded in %.1f s", role, name,
                         time.perf_counter() - start)
            except Exception:  # noqa: BLE001 - the search that needs it reports the failure
                log.exception("Search tab: loading the %s %s failed", role, name)
    thread = threading.Thread(target=load, name="search-preload", daemon=True)
    thread.start()
    return thread


def plan(registry: Registry, encoder: str | None, reader: str | None, document: str,
            files: list | None, question: str, top_k: int = 5, hybrid: bool = True,
            reranker: str | None = NO_RERANKER) -> dict:
    """The search `ask` runs, its input checked (InputError) and nothing loaded yet:
    {"models" ([(role, name)], `models`), "question", "documents" ([(name, text)]), "top_k",
    "hybrid", "notes"}."""
    chosen = models(registry, encoder, reader, reranker)
    question = (question or "").strip()
    if not question:
        raise InputError("The question is empty: type a question first.")
    if len(question) > MAX_QUESTION_CHARS:
        raise InputError(f"The question has {len(question):,} characters; the playground takes "
                         f"at most {MAX_QUESTION_CHARS:,}.")
    documents, notes = read_documents(document, files)
    if hybrid and not hybrid_available():
        notes.append("Hybrid search needs bm25s (pip install 'kbert[retrieval]'); searched with "
                     "the sentence vectors alone.")
        hybrid = False
    if reader != NO_READER and not any(role == "reader" for role, _ in chosen):
        notes.append("No checkpoint with a span (question answering) head is served: the "
                     "passages are shown without an answer.")
    return {"models": chosen, "question": question, "documents": documents,
            "top_k": max(1, min(int(top_k or 5), MAX_TOP_K)), "hybrid": bool(hybrid),
            "notes": notes}


def ask(registry, encoder, reader, document, files, question, top_k=5, hybrid=True,
        reranker=NO_RERANKER):
    """{"answer", "hits", "index", "search_seconds", "rerank_seconds", "read_seconds", "notes"}:
    the top `top_k` passages of the documents for `question` ({"rank", "score", "document",
    "start", "end" (offsets into the document), "text", "answer" (the reader's span in it, or
    None)}, and "rerank_score" when reranked) and the reader's best answer ({"text", "score",
    "rank", "document", "start", "end"}, or None). A `reranker` (a cross-encoder) reorders the
    first RERANK_CANDIDATES hits, its log-odds fused with their search scores."""
    return run(registry, plan(registry, encoder, reader, document, files, question, top_k,
                              hybrid, reranker))


def run(registry: Registry, planned: dict) -> dict:
    """`ask`'s answer to a search `plan` (the checkpoints it names loaded first, if not yet):
    `kbert.retrieval.ask` retrieves, reranks and reads, the algorithm of the library and of
    `kbert evaluate open-qa`."""
    from kbert.retrieval import ask as ask_index
    chosen = dict(planned["models"])
    encoder, question, documents = chosen["retriever"], planned["question"], planned["documents"]
    top_k, hybrid, notes = planned["top_k"], planned["hybrid"], list(planned["notes"])
    model = registry.get(encoder)
    entry, cached = index_for(registry, encoder, model, [text for _, text in documents])
    index = entry["index"]

    reranker = chosen.get("reranker")
    rerank_model = registry.get(reranker) if reranker else None
    reader_model = registry.get(chosen["reader"]) if "reader" in chosen else None
    got = ask_index(question, index, reader_model, encoder=model, reranker=rerank_model,
                    passages=min(READ_PASSAGES, top_k), candidates=RERANK_CANDIDATES,
                    hybrid=hybrid, hits=top_k)
    hits, seconds = got["hits"], got["seconds"]
    spans = {rank: {k: hit["answer"][k] for k in ("text", "score", "start", "end")}
             for rank, hit in enumerate(hits) if hit["answer"] and hit["answer"]["text"]}
    best = None
    if got["text"]:
        best = dict(spans[got["rank"]], rank=got["rank"] + 1)
    elif got["text"] == "":
        best = {"text": "", "score": got["score"], "rank": None}

    out = []
    for rank, hit in enumerate(hits):
        name, text = documents[hit["document"]]
        out.append({"rank": rank + 1, "score": hit.get("fused_score", hit["score"]),
                    "document": name,
                    "start": hit["document_start"], "end": hit["document_end"],
                    "text": hit["text"], "answer": spans.get(rank),
                    **({"rerank_score": hit["rerank_score"]} if "rerank_score" in hit else {})})
    if best and best["rank"]:
        hit = out[best["rank"] - 1]
        best.update(document=hit["document"], start=hit["start"] + best["start"],
                    end=hit["start"] + best["end"])
    elif best is not None:
        notes.append(f"The reader's best answer is that the top passages do not answer the "
                     f"question (no-answer score {best['score']:.4f}).")
        best = None
    return {"answer": best, "hits": out,
            "index": {"passages": len(index), "documents": len(documents),
                      "seconds": entry["seconds"], "cached": cached, "encoder": encoder,
                      "hybrid": hybrid},
            "reranker": reranker, "search_seconds": seconds["search"],
            "rerank_seconds": seconds["rerank"],
            "read_seconds": seconds["read"],
            "notes": notes}
