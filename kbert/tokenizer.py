"""WordPiece tokenization in the TensorFlow graph (tensorflow-text), and BERT input packing.

One tokenizer path serves training data, inference, the playground and the exported graph. It is
BERT's basic tokenization (`kbert.basic_tokenizer`: steps 1-2) followed by WordPiece, built from
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
route takes ~0.5 ms; TensorFlow's batched routes are faster from about eight texts on. Every
route gives the same ids and offsets (tests hold each to HF's); a text with a literal `[MASK]`
stays on TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.basic_tokenizer import normalize_texts, split_and_normalize
from kbert.config import SPECIAL_TOKENS, read_vocab, write_vocab  # noqa: F401  (re-exported)
from kbert.hints import Tensor

MAX_CHARS_PER_WORD = 100  # longer words become [UNK], as in google-research/bert

# A run of more than MAX_CHARS_PER_WORD characters without a space may hold a too-long word.
_LONG_RUN = r"(?s).*[^ ]{%d,}.*" % (MAX_CHARS_PER_WORD + 1)
_PRINTABLE_ASCII = r"[\t\n\r\x20-\x7e]*"    # nothing to normalize but the case
_TEXTS = tf.TensorSpec([None], tf.string)
_FEW = 16
_SMALL_TEXTS, _SMALL_CHARS = 8, 3000   # at most: a request for the Rust tokenizer


def _byte_length(strings):
    return tf.cast(tf.strings.length(strings, unit="BYTE"), tf.int64)


def _rows(ragged):
    """A RaggedTensor [B, (N)] → B numpy rows (two transfers, not one per row)."""
    return _split(ragged.flat_values.numpy(), ragged.row_splits.numpy())


def _merge(texts: Tensor, fast: tuple, exact: Tensor, slow) -> tuple:
    """Ragged rows [B, (n)]: `fast`'s where `exact`, the others from `slow(the other texts)`
    (a tuple like `fast`), in input order; merged in numpy (eager ragged ops cost ~30 ms)."""
    exact = exact.numpy()
    if exact.all():
        return fast
    redo = np.flatnonzero(~exact)
    redone = iter(zip(*(_rows(r) for r in slow(tf.gather(texts, redo)))))
    rows = [next(redone) if not keep else row
            for keep, row in zip(exact, zip(*(_rows(f) for f in fast)))]
    splits = np.cumsum([0] + [len(row[0]) for row in rows])
    return tuple(tf.RaggedTensor.from_row_splits(
        np.concatenate([row[k] for row in rows]).astype(np.int64), splits, validate=False)
        for k in range(len(fast)))


def _split(values: np.ndarray, splits: np.ndarray) -> list[np.ndarray]:
    return [values[a:b] for a, b in zip(splits[:-1], splits[1:])]


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


def _rust_wordpiece(vocab: Sequence[str], lower_case: bool) -> Any:
    """HF `tokenizers`' BERT pipeline over `vocab` (what `BertWordPieceTokenizer` builds), or
    None where the package is not installed."""
    try:
        from tokenizers import Tokenizer as RustTokenizer
        from tokenizers import models, normalizers, pre_tokenizers
    except ImportError:
        return None
    rust = RustTokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                          max_input_chars_per_word=MAX_CHARS_PER_WORD))
    rust.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                 strip_accents=None, lowercase=lower_case)
    rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return rust


class Tokenizer:
    """BERT's basic tokenization + WordPiece, as TensorFlow ops.

    Args:
        vocab: a `vocab.txt` path or a list of tokens.
        lower_case: True for uncased vocabularies (strip accents, lower-case).

    Example:
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"])
    >>> tok.tokenize(["Hello worlds"]).to_list()
    [[5, 6, 7]]
    >>> tok.tokenize(["hello [MASK]"], mask_literal=True).to_list()
    [[5, 4]]
    """

    def __init__(self, vocab, lower_case=True):
        self.vocab = read_vocab(vocab)
        self.lower_case = lower_case
        self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.token_to_id[t] for t in SPECIAL_TOKENS)
        # Keys once each: a token listed twice maps to its later line, as in transformers.
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(self.token_to_id)),
                tf.constant(list(self.token_to_id.values()), tf.int64)),
            num_oov_buckets=1)
        # 4 bytes a character: every word within MAX_CHARS_PER_WORD reaches WordPiece.
        self._wordpiece = tf_text.WordpieceTokenizer(
            table, token_out_type=tf.int64, unknown_token="[UNK]",
            max_bytes_per_word=4 * MAX_CHARS_PER_WORD)
        self._compiled = {}   # mask_literal -> tf.function over a batch of strings [B]
        # The ids-only route (see the module docstring); ids are line numbers, so a vocabulary
        # with a repeated token (the later line wins) stays on the offsets route.
        self._fast_wordpiece = None if len(self.token_to_id) < len(self.vocab) else \
            tf_text.FastWordpieceTokenizer(
                self.vocab, token_out_type=tf.int64, unknown_token="[UNK]",
                no_pretokenization=False, support_detokenization=False,
                max_bytes_per_word=4 * MAX_CHARS_PER_WORD)
        # Concrete functions with flat outputs: a call on one short text costs ~0.2 ms, where
        # a tf.function returning RaggedTensors spends ~1 ms packing and checking its structure.
        self._fast_ids = self._fast_offsets = None
        self._rust = None                  # built on the first small request; False: none
        if self._fast_wordpiece is not None:
            self._fast_ids = tf.function(self._ids_and_long_runs,
                                         input_signature=[_TEXTS]).get_concrete_function()
            self._fast_offsets = tf.function(self._ascii_offsets,
                                             input_signature=[_TEXTS]).get_concrete_function()

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize_with_offsets(self, texts: Tensor | Sequence[str],
                              mask_literal: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Strings [B] → token ids, start and end byte offsets, RaggedTensors [B, (tokens)].

        Offsets are [start, end) into each input's UTF-8 bytes. With `mask_literal`, the text
        `[MASK]` becomes the mask token (for fill-mask inputs).
        """
        if tf.executing_eagerly():
            # A few texts of which one is not ASCII: one call of the offsets route beats two.
            mixed = (isinstance(texts, (list, tuple)) and len(texts) <= _FEW
                     and not all(isinstance(t, str) and t.isascii() for t in texts))
            texts = tf.convert_to_tensor(texts, tf.string)
            if texts.shape.rank == 1:   # one traced graph for every batch: no per-op dispatch
                if mask_literal or self._fast_offsets is None or mixed:
                    return self._offsets_route(texts, mask_literal)
                *values, splits, exact = self._fast_offsets(texts)
                fast = tuple(tf.RaggedTensor.from_row_splits(v, splits, validate=False)
                             for v in values)
                return _merge(texts, fast, exact, self._offsets_route)
        return self._tokenize_with_offsets(texts, mask_literal)

    def _offsets_route(self, texts, mask_literal=False):
        *values, splits = self._compiled_tokenize(mask_literal)(texts)
        return tuple(tf.RaggedTensor.from_row_splits(v, splits, validate=False) for v in values)

    def _compiled_tokenize(self, mask_literal):
        """The offsets route as a concrete function: texts [B] → flat ids, starts, ends and
        their row splits [B + 1]."""
        fn = self._compiled.get(mask_literal)
        if fn is None:
            def flat(texts):
                ids, starts, ends = self._tokenize_with_offsets(texts, mask_literal)
                return ids.flat_values, starts.flat_values, ends.flat_values, ids.row_splits
            fn = tf.function(flat, input_signature=[_TEXTS]).get_concrete_function()
            self._compiled[mask_literal] = fn
        return fn

    def _tokenize_with_offsets(self, texts, mask_literal):
        words, word_starts, chars, norm = split_and_normalize(texts, self.lower_case, mask_literal)
        flat_words = words.flat_values                                             # [N]
        norm_words = tf.strings.reduce_join(chars.with_flat_values(norm), axis=-1)  # [N]

        # Running byte positions of each character, original and normalized, over all words.
        orig_end = tf.cumsum(_byte_length(chars.flat_values))                       # [NC]
        norm_end = tf.cumsum(_byte_length(norm))
        zero = tf.zeros([1], tf.int64)
        orig_begin, norm_begin = tf.concat([zero, orig_end], 0), tf.concat([zero, norm_end], 0)
        first_char = chars.row_splits[:-1]                                          # [N]
        word_orig_begin = tf.gather(orig_begin, first_char)
        word_norm_begin = tf.gather(norm_begin, first_char)

        ids, starts, ends = self._wordpiece.tokenize_with_offsets(norm_words)       # [N, (P)]
        word = ids.value_rowids()                                                   # [NP]
        first_piece = tf.equal(tf.ragged.range(ids.row_lengths()).flat_values, 0)
        too_long = tf.strings.length(norm_words, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
        is_mask = tf.equal(flat_words, "[MASK]") if mask_literal else tf.zeros_like(too_long)
        whole_word = tf.gather(too_long | is_mask, word)
        ids, starts, ends = ids.flat_values, starts.flat_values, ends.flat_values
        ids = tf.where(tf.gather(too_long, word), tf.constant(self.unk_id, tf.int64), ids)
        ids = tf.where(tf.gather(is_mask, word), tf.constant(self.mask_id, tf.int64), ids)

        # Normalized offsets → character → original offsets.
        wb = tf.gather(word_norm_begin, word)
        start_char = tf.searchsorted(norm_end, starts + wb, "right")
        end_char = tf.searchsorted(norm_end, ends + wb, "left")
        shift = tf.gather(word_starts.flat_values, word) - tf.gather(word_orig_begin, word)
        starts = tf.gather(orig_begin, start_char) + shift
        ends = tf.gather(orig_end, tf.minimum(end_char, tf.size(orig_end) - 1)) + shift
        # Unknown whole words keep their whole original span (combining marks included).
        starts = tf.where(whole_word, tf.gather(word_starts.flat_values, word), starts)
        ends = tf.where(whole_word, tf.gather(word_starts.flat_values, word) + tf.gather(
            _byte_length(flat_words), word), ends)

        keep_piece = ~whole_word | first_piece
        batch = tf.boolean_mask(tf.gather(words.value_rowids(), word), keep_piece)
        nrows = words.nrows()

        def ragged(values):
            return tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(tf.cast(values, tf.int64), keep_piece), batch, nrows=nrows)
        return ragged(ids), ragged(starts), ragged(ends)

    def tokenize(self, texts: Tensor | Sequence[str], mask_literal: bool = False) -> Tensor:
        """Strings [B] → token ids, a RaggedTensor [B, (tokens)] of int64."""
        if mask_literal or self._fast_wordpiece is None or not tf.executing_eagerly():
            return self.tokenize_with_offsets(texts, mask_literal)[0]
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank != 1:
            return self.tokenize_with_offsets(texts)[0]
        values, splits, long_run = self._fast_ids(texts)
        ids = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
        # The texts that may hold a word over MAX_CHARS_PER_WORD: the offsets route, in place.
        return _merge(texts, (ids,), ~long_run, lambda rest: self._offsets_route(rest)[:1])[0]

    def _ids_and_long_runs(self, texts):
        """Texts [B] → the fast route's flat ids, their row splits [B + 1], and which texts
        hold a run long enough to need the offsets route."""
        texts = normalize_texts(texts, self.lower_case)
        ids = self._fast_wordpiece.tokenize(texts)
        return ids.flat_values, ids.row_splits, tf.strings.regex_full_match(texts, _LONG_RUN)

    def _ascii_offsets(self, texts):
        """Texts [B] → the fast route's flat ids, start and end byte offsets, their row splits
        [B + 1], and the texts it is exact for (printable ASCII without a long run)."""
        cased = tf.strings.lower(texts) if self.lower_case else texts
        ids, starts, ends = self._fast_wordpiece.tokenize_with_offsets(cased)
        exact = (tf.strings.regex_full_match(texts, _PRINTABLE_ASCII)
                 & ~tf.strings.regex_full_match(texts, _LONG_RUN))
        return ids.flat_values, starts.flat_values, ends.flat_values, ids.row_splits, exact

    def tokenize_with_char_offsets(self, text: str) -> tuple[list[int], list[int], list[int]]:
        """One Python string → (ids, starts, ends) lists, offsets in characters of `text`."""
        return self.batch_tokenize_with_char_offsets([text])[0]

    def batch_tokenize_with_char_offsets(
            self, texts: Sequence[str]) -> list[tuple[list[int], list[int], list[int]]]:
        """Python strings → one (ids, starts, ends) of lists each, offsets in characters (a
        small request: the Rust tokenizer, whose offsets are characters already)."""
        if not texts:
            return []
        rust = self._small_request(texts)
        if rust:
            out = []
            for text in texts:
                encoding = rust.encode(text, add_special_tokens=False)
                spans = encoding.offsets
                out.append((encoding.ids, [a for a, _ in spans], [b for _, b in spans]))
            return out
        ids, starts, ends = (_rows(x) for x in self.tokenize_with_offsets(list(texts)))
        out = []
        for text, i, s, e in zip(texts, ids, starts, ends):
            out.append((i.tolist(), *char_offsets(text, s, e)))
        return out

    def encode(self, text: str) -> list[int]:
        """One string → a Python list of ids; `[MASK]` in the text becomes the mask token."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Strings → one Python list of ids each: one graph call for the whole list, or the
        Rust tokenizer for a small request (see the module docstring)."""
        texts = list(texts)
        if not texts:
            return []
        rust = self._small_request(texts)
        if rust:
            return [rust.encode(text, add_special_tokens=False).ids for text in texts]
        if self._fast_ids is None or not all(
                isinstance(t, str) and "[MASK]" not in t for t in texts):
            return [row.tolist() for row in _rows(self.tokenize(texts, mask_literal=True))]
        # Without a literal [MASK] both routes give the same ids; the fast one, flat to lists.
        values, splits, long_run = (x.numpy() for x in self._fast_ids(tf.constant(texts)))
        rows = [row.tolist() for row in _split(values, splits)]
        long = np.flatnonzero(long_run)
        if long.size:   # the texts with a long run: the offsets route, in one call
            exact = _rows(self.tokenize([texts[i] for i in long], mask_literal=True))
            for i, row in zip(long, exact):
                rows[i] = row.tolist()
        return rows

    def _small_request(self, texts: Sequence[str]) -> Any:
        """The Rust tokenizer where `texts` are few and short strings without a literal
        `[MASK]` and the vocabulary has no repeated token; else None."""
        if (len(texts) > _SMALL_TEXTS or self._fast_wordpiece is None or self._rust is False
                or not all(isinstance(t, str) and "[MASK]" not in t for t in texts)
                or sum(len(t) for t in texts) > _SMALL_CHARS):
            return None
        if self._rust is None:
            self._rust = _rust_wordpiece(self.vocab, self.lower_case) or False
        return self._rust or None

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.vocab[i] if 0 <= i < len(self.vocab) else "[UNK]" for i in ids]

    def pack(self, first: Sequence[Sequence[int]],
             second: Sequence[Sequence[int] | None] | None = None,
             max_seq_length: int = 512) -> tuple[dict[str, np.ndarray], list[int]]:
        """Id lists → `[CLS] A [SEP] (B [SEP])` features padded to the longest in the batch.

        The longer side is truncated first, as the original `_truncate_seq_pair` does.
        Returns numpy `input_ids`, `segment_ids`, `input_mask` [B, T] and the number of
        tokens cut from each example.

        Twin: `kbert.serving.graph_ops.pack` (with `truncate_pair`) does this in the graph;
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
