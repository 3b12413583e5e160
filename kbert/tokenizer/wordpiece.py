"""WordPiece tokenization in the TensorFlow graph (tensorflow-text), and BERT input packing.

One tokenizer path serves training data, inference, the playground and the exported graph. It is
BERT's basic tokenization (`kbert.tokenizer.basic`: steps 1-2) followed by WordPiece, built from
ops that TF Serving 2.20 ships
(`RegexSplitWithOffsets`, `NormalizeUTF8`, `StaticRegexReplace`, `StringLower`, `UnicodeDecode`,
`WordpieceTokenizeWithOffsets`), and it gives the same ids as HF `tokenizers`' BERT pipeline:

1. split the ORIGINAL text on whitespace (Rust's `char::is_whitespace`), keeping punctuation
   (ASCII symbols and Unicode `P*`) and CJK ideographs as one-character words — so word offsets
   are exact byte offsets into the input;
2. normalize each word character by character: drop control/format characters (`\\p{C}`, U+FFFD),
   and for uncased vocabularies NFD, drop combining marks (`Mn`), lower-case — in HF's order;
3. WordPiece on the normalized word; a word longer than 100 characters (counted in characters,
   as HF does, not in bytes as tf-text does) becomes one `[UNK]`;
4. each piece's offsets go back through the per-character lengths to the original bytes.

`char_offsets` turns the byte offsets into character offsets of a Python string (for QA).

Ids alone (`tokenize` called eagerly on a batch, the path of pretraining data and fine-tuning
features) take a faster route with the same ids: the whole text is normalized as HF's
`BertNormalizer` does (controls dropped, NFD, combining marks dropped, lower case),
then tf-text's `FastWordpieceTokenizer` (LinMaxMatch, C++) splits on spaces, punctuation and CJK
and runs WordPiece in one op. Texts with a run of more than 100 non-space characters (where a
word may exceed `MAX_CHARS_PER_WORD`, counted in characters) and vocabularies with a repeated
token go the offsets route instead. Offsets called eagerly take the same fast route for printable
ASCII texts (tab, newline and carriage return allowed) without a long run: there lower-casing is
the whole normalization and keeps every byte in place, so `FastWordpieceTokenizer`'s offsets are
the original's (the ~1.1 ms of a QA request's tokenization becomes ~0.3 ms). Graph-mode calls
(exported models) keep the offsets route, built only from the ops above.

A small request (a few short texts: one query, one QA pair) is tokenized by HF `tokenizers`'
BERT pipeline (Rust) on the same vocabulary where that package is installed: ~20 µs a question
where a TensorFlow call costs ~0.3 ms, and ~0.1 ms a paragraph with offsets where the offsets
route takes ~0.5 ms; TensorFlow's batched ids route is faster from about eight texts on (1,038
SQuAD paragraphs: 48 ms against Rust's 195 ms on two cores). A tokenizer made with
`graph=False` (a graph runtime's) builds its TensorFlow half (`kbert.tokenizer.graph`) on first
use only, and in a process that has not imported TensorFlow takes the Rust route for every
request, so that serving from ONNX or OpenVINO graphs needs no TensorFlow. Every route gives
the same ids and offsets, a literal `[MASK]` included (tests hold each to HF's).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert.hints import Tensor
from kbert.network.config import (  # noqa: F401  (re-exported)
    MAX_CHARS_PER_WORD,
    SPECIAL_TOKENS,
    read_vocab,
    write_vocab,
)

if TYPE_CHECKING:
    from kbert.tokenizer.graph import GraphWordPiece

_SMALL_TEXTS, _SMALL_CHARS = 8, 3000   # at most: a request for the Rust tokenizer


def check_texts(method: str, value: object, what: str = "text", allow_empty: bool = False,
                plural: str | None = None, empty: str | None = None) -> tuple[list[str], bool]:
    """(list of strings, whether one string was given): the one check of the texts every
    entry point takes (the inference methods, `Index.add` and `Index.search`). A bad value is
    one `ValueError` line naming `method` and the text: not a string or a list of strings,
    an empty list (`empty`, or "the list of {plural} is empty"), an empty text (unless
    `allow_empty`), text that is not valid Unicode (`unicode_problem`).

    >>> check_texts("search", "where?", "query")
    (['where?'], True)
    >>> check_texts("search", ["ok", " "], "query")
    Traceback (most recent call last):
    ValueError: search: query 1 is empty
    """
    single = isinstance(value, str)
    items = [value] if single else value
    if not isinstance(items, Sequence) or isinstance(items, (bytes, dict)):
        raise ValueError(f"{method}: {what} must be a string or a list of strings, "
                         f"got {type(value).__name__}")
    items = list(items)
    if not items:
        raise ValueError(f"{method}: " + (empty or f"the list of {plural or what + 's'} is empty"))
    for i, item in enumerate(items):
        where = f"the {what}" if single else f"{what} {i}"
        if not isinstance(item, str):
            raise ValueError(f"{method}: {where} is a {type(item).__name__}, not a string")
        if not allow_empty and not item.strip():
            raise ValueError(f"{method}: {where} is empty")
        problem = unicode_problem(item)
        if problem:
            raise ValueError(f"{method}: {where} has {problem}")
    return items, single


def unicode_problem(text: str) -> str | None:
    """Why `text` is not Unicode that can be tokenized (UTF-8 encoded), else None: "a lone
    surrogate U+D800 at position 1" — half of a pair, as a bad JSON escape (`"\\ud800"`) or
    bytes decoded with `errors="surrogateescape"` leave it.

    >>> unicode_problem("a\\ud800b"), unicode_problem("café")
    ('a lone surrogate U+D800 at position 1 (not valid Unicode)', None)
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"a lone surrogate U+{ord(text[e.start]):04X} at position {e.start} "
                "(not valid Unicode)")
    return None


def check_unicode(texts: Sequence[str]) -> None:
    """A one-line ValueError naming the first text (its index) that `unicode_problem` refuses."""
    for i, text in enumerate(texts):
        problem = unicode_problem(text) if isinstance(text, str) else None
        if problem:
            raise ValueError(f"text {i}: {problem}")


def char_offsets(text: str, starts: Iterable[int],
                 ends: Iterable[int]) -> tuple[list[int], list[int]]:
    """Byte offsets into `text`'s UTF-8 encoding → character offsets into the Python string.

    Twin: `kbert.serving.graph_ops.char_offset` does this in the exported graph;
    tests/serving/test_graph_ops.py holds the two equal.

    >>> char_offsets("héllo wörld", [0, 7], [6, 13])
    ([0, 6], [5, 11])
    """
    char_at = char_index(text)
    return (char_at[np.asarray(starts, np.int64)].tolist(),
            char_at[np.asarray(ends, np.int64)].tolist())


def char_index(text: str) -> np.ndarray:
    """char_at[b]: the character that byte b of `text`'s UTF-8 belongs to; char_at[len] =
    len(text)."""
    data = np.frombuffer(text.encode("utf-8"), np.uint8)
    return np.concatenate([np.cumsum((data & 0xC0) != 0x80) - 1, [len(text)]]).astype(np.int64)


def _rust_wordpiece(vocab: Sequence[str], lower_case: bool, mask_literal: bool) -> Any:
    """HF `tokenizers`' BERT pipeline over `vocab` (what `BertWordPieceTokenizer` builds; with
    `mask_literal`, the text `[MASK]` is the mask token), or None where the package is not
    installed."""
    try:
        from tokenizers import AddedToken, Regex, models, normalizers, pre_tokenizers
        from tokenizers import Tokenizer as RustTokenizer
    except ImportError:
        return None
    rust = RustTokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                          max_input_chars_per_word=MAX_CHARS_PER_WORD))
    rust.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                 strip_accents=None, lowercase=lower_case)
    # `tokenizers`' CJK test starts a range at U+2B920 where BERT's (`_is_chinese_char`, and
    # the graph route) starts it at U+2B820: those 256 characters are split off here first.
    rust.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("[\U0002B820-\U0002B91F]"), behavior="isolated"),
        pre_tokenizers.BertPreTokenizer()])
    if mask_literal:    # matched in the original text, case and all, as the graph route does
        rust.add_special_tokens([AddedToken("[MASK]", normalized=False, special=True)])
    return rust


class Tokenizer:
    """BERT's basic tokenization + WordPiece: TensorFlow ops, and the Rust tokenizer's shortcut.

    Args:
        vocab: a `vocab.txt` path or a list of tokens.
        lower_case: True for uncased vocabularies (strip accents, lower-case).
        graph: False defers the TensorFlow routes (`graph`) to their first use, and a process
            that has not imported TensorFlow tokenizes every request with the Rust tokenizer:
            how a graph runtime's `kbert.load` runs without TensorFlow. Same ids and offsets.

    Example:
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"])
    >>> tok.tokenize(["Hello worlds"]).to_list()
    [[5, 6, 7]]
    >>> tok.tokenize(["hello [MASK]"], mask_literal=True).to_list()
    [[5, 4]]
    """

    def __init__(self, vocab: str | Sequence[str], lower_case: bool = True,
                 graph: bool = True) -> None:
        self.vocab = read_vocab(vocab)
        self.lower_case = lower_case
        self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.token_to_id[t] for t in SPECIAL_TOKENS)
        # Ids are line numbers on the Rust route (and tf-text's fast one): a vocabulary with a
        # repeated token (the later line wins, as in transformers) takes TensorFlow's only.
        self._unique = len(self.token_to_id) == len(self.vocab)
        self._rust: dict[bool, Any] = {}     # mask_literal -> Rust tokenizer; False: none
        self._graph: GraphWordPiece | None = None
        if graph:
            self.graph  # noqa: B018  (built now, eagerly: traced functions capture its tables)

    @property
    def graph(self) -> GraphWordPiece:
        """The TensorFlow routes (`kbert.tokenizer.graph`), built on first use."""
        if self._graph is None:
            # Imported here to keep TensorFlow out of processes that never need it.
            from kbert.tokenizer.graph import GraphWordPiece
            self._graph = GraphWordPiece(self.vocab, self.token_to_id, self.lower_case,
                                         self.unk_id, self.mask_id)
        return self._graph

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize_with_offsets(self, texts: Tensor | Sequence[str],
                              mask_literal: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Strings [B] → token ids, start and end byte offsets, RaggedTensors [B, (tokens)].

        Offsets are [start, end) into each input's UTF-8 bytes. With `mask_literal`, the text
        `[MASK]` becomes the mask token (for fill-mask inputs).
        """
        return self.graph.tokenize_with_offsets(texts, mask_literal)

    def tokenize(self, texts: Tensor | Sequence[str], mask_literal: bool = False) -> Tensor:
        """Strings [B] → token ids, a RaggedTensor [B, (tokens)] of int64."""
        return self.graph.tokenize(texts, mask_literal)

    def tokenize_with_char_offsets(self, text: str) -> tuple[list[int], list[int], list[int]]:
        """One Python string → (ids, starts, ends) lists, offsets in characters of `text`."""
        return self.batch_tokenize_with_char_offsets([text])[0]

    def batch_tokenize_with_char_offsets(
            self, texts: Sequence[str]) -> list[tuple[list[int], list[int], list[int]]]:
        """Python strings → one (ids, starts, ends) of lists each, offsets in characters (the
        Rust tokenizer's are characters already; TensorFlow's bytes are turned into them)."""
        texts = list(texts)
        if not texts:
            return []
        check_unicode(texts)
        rust = self._rust_route(texts, mask_literal=False)
        if rust:
            out = []
            for encoding in _encode(rust, texts):
                spans = encoding.offsets
                out.append((encoding.ids, [a for a, _ in spans], [b for _, b in spans]))
            return out
        return [(i.tolist(), *char_offsets(text, s, e))
                for text, (i, s, e) in zip(texts, self.graph.offsets_batch(texts))]

    def encode(self, text: str) -> list[int]:
        """One string → a Python list of ids; `[MASK]` in the text becomes the mask token."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str], mask_literal: bool = True) -> list[list[int]]:
        """Strings → one Python list of ids each (`[MASK]` in a text is the mask token unless
        `mask_literal` is False): one graph call for the whole list, or the Rust tokenizer
        (see the module docstring)."""
        texts = list(texts)
        if not texts:
            return []
        check_unicode(texts)
        rust = self._rust_route(texts, mask_literal)
        if rust:
            return [encoding.ids for encoding in _encode(rust, texts)]
        return self.graph.encode_batch(texts, mask_literal)

    def _rust_route(self, texts: list[str], mask_literal: bool) -> Any:
        """The Rust tokenizer for `texts` where it is the route to take, else None: for a small
        request (a few short texts), and for every request where large ones do not take
        TensorFlow's routes (`_large_take_tensorflow`)."""
        if not all(isinstance(t, str) for t in texts):
            return None
        small = len(texts) <= _SMALL_TEXTS and sum(len(t) for t in texts) <= _SMALL_CHARS
        return self._rust_tokenizer(mask_literal) if small or not self._large_take_tensorflow() \
            else None

    def _large_take_tensorflow(self) -> bool:
        """Whether a large request takes TensorFlow's batched routes: where they are built or
        TensorFlow is loaded anyway (a `graph=False` tokenizer in a process without it takes
        the Rust tokenizer), or where there is no Rust tokenizer."""
        return (self._graph is not None or "tensorflow" in sys.modules
                or self._rust_tokenizer(True) is None)

    def _rust_tokenizer(self, mask_literal: bool) -> Any:
        """HF `tokenizers`' pipeline (built once per `mask_literal`), or None where it is not
        installed or the vocabulary has a repeated token (ids are line numbers there)."""
        if not self._unique:
            return None
        if mask_literal not in self._rust:
            self._rust[mask_literal] = _rust_wordpiece(self.vocab, self.lower_case,
                                                       mask_literal) or False
        return self._rust[mask_literal] or None

    def prepare(self) -> None:
        """Builds and traces now the TensorFlow routes this process's large requests take
        (nothing where they take the Rust tokenizer), so that no request waits for them."""
        if self._large_take_tensorflow():
            self.graph.encode_batch(["a [MASK] ."])
            self.graph.offsets_batch(["é ."])

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.vocab[i] if 0 <= i < len(self.vocab) else "[UNK]" for i in ids]

    def pack(self, first: Sequence[Sequence[int]],
             second: Sequence[Sequence[int] | None] | None = None,
             max_seq_length: int = 512) -> tuple[dict[str, np.ndarray], list[int]]:
        """Id lists → `[CLS] A [SEP] (B [SEP])` features padded to the longest in the batch.

        The longer side is truncated first, as the original `_truncate_seq_pair` does.
        Returns numpy `input_ids`, `segment_ids`, `input_mask` [B, T] and the number of
        tokens cut from each example.

        Twin: `kbert.tokenizer.packing.pack` (with `truncate_pair`) does this in the graph;
        tests/serving/test_export.py holds the exported answers equal to the pipeline's.
        """
        second = second if second is not None else [None] * len(first)
        rows, truncated = [], []
        for a, b in zip(first, second):
            a, b = list(a), (list(b) if b is not None else None)
            budget = max_seq_length - (3 if b is not None else 2)
            cut = 0
            while len(a) + (len(b) if b is not None else 0) > budget:
                if b is not None and len(b) >= len(a):
                    b.pop()
                else:
                    a.pop()
                cut += 1
            ids = [self.cls_id] + a + [self.sep_id]
            segments = [0] * len(ids)
            if b is not None:
                ids += b + [self.sep_id]
                segments += [1] * (len(b) + 1)
            rows.append((ids, segments))
            truncated.append(cut)
        length = max(len(ids) for ids, _ in rows)
        input_ids = np.full((len(rows), length), self.pad_id, dtype="int32")
        segment_ids = np.zeros((len(rows), length), dtype="int32")
        input_mask = np.zeros((len(rows), length), dtype="int32")
        for i, (ids, segments) in enumerate(rows):
            input_ids[i, :len(ids)] = ids
            segment_ids[i, :len(ids)] = segments
            input_mask[i, :len(ids)] = 1
        return {"input_ids": input_ids, "segment_ids": segment_ids,
                "input_mask": input_mask}, truncated


def _encode(rust: Any, texts: list[str]) -> list:
    """The Rust tokenizer's encodings of `texts`, no special tokens: one by one for a few (its
    batch call costs ~2 ms of thread start-up), else in parallel."""
    if len(texts) <= _SMALL_TEXTS:
        return [rust.encode(text, add_special_tokens=False) for text in texts]
    return rust.encode_batch(texts, add_special_tokens=False)
