"""The tokenizer's TensorFlow routes (tensorflow-text): `GraphWordPiece` over one vocabulary.

`kbert.tokenizer.Tokenizer` holds one and sends it what runs in the TensorFlow graph: every
graph-mode call (exported models, tf.data pipelines), and the eager batches where TensorFlow is
the faster route. The pipeline and its two eager shortcuts are described in `kbert.tokenizer`;
this module is its TensorFlow half, so that a process that tokenizes with the Rust route only
(a graph runtime's, `kbert.load(..., runtime="onnx")`) never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.hints import Tensor
from kbert.network.config import MAX_CHARS_PER_WORD
from kbert.tokenizer.basic import normalize_texts, split_and_normalize

# A run of more than MAX_CHARS_PER_WORD characters without a space may hold a too-long word.
_LONG_RUN = r"(?s).*[^ ]{%d,}.*" % (MAX_CHARS_PER_WORD + 1)
_PRINTABLE_ASCII = r"[\t\n\r\x20-\x7e]*"    # nothing to normalize but the case
_TEXTS = tf.TensorSpec([None], tf.string)
_FEW = 16

def _byte_length(strings: Tensor) -> Tensor:
    return tf.cast(tf.strings.length(strings, unit="BYTE"), tf.int64)


def _rows(ragged: Tensor) -> list[np.ndarray]:
    """A RaggedTensor [B, (N)] → B numpy rows (two transfers, not one per row)."""
    return _split(ragged.flat_values.numpy(), ragged.row_splits.numpy())


def _merge(texts: Tensor, fast: tuple[Tensor, ...], exact: Tensor,
           slow: Callable[[Tensor], tuple[Tensor, ...]]) -> tuple[Tensor, ...]:
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


class GraphWordPiece:
    """BERT's basic tokenization + WordPiece over `vocab` as TensorFlow ops (see
    `kbert.tokenizer` for the routes). Build it eagerly: its vocabulary tables are resources
    that traced functions and exported graphs capture."""

    def __init__(self, vocab: Sequence[str], token_to_id: dict[str, int], lower_case: bool,
                 unk_id: int, mask_id: int) -> None:
        self.lower_case, self.unk_id, self.mask_id = lower_case, unk_id, mask_id
        # Eagerly even where first asked for inside a traced function (`Tokenizer(graph=False)`
        # in a tf.function): later traces capture its tables and the fast tokenizer's model.
        with tf.init_scope():
            self._build(vocab, token_to_id)

    def _build(self, vocab: Sequence[str], token_to_id: dict[str, int]) -> None:
        # Keys once each: a token listed twice maps to its later line, as in transformers.
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(token_to_id)),
                tf.constant(list(token_to_id.values()), tf.int64)),
            num_oov_buckets=1)
        # 4 bytes a character: every word within MAX_CHARS_PER_WORD reaches WordPiece.
        self.wordpiece = tf_text.WordpieceTokenizer(
            table, token_out_type=tf.int64, unknown_token="[UNK]",
            max_bytes_per_word=4 * MAX_CHARS_PER_WORD)
        # mask_literal -> tf.function over a batch of strings [B]
        self._compiled: dict[bool, Any] = {}
        # The ids-only route (see `kbert.tokenizer`); ids are line numbers, so a vocabulary
        # with a repeated token (the later line wins) stays on the offsets route.
        self._fast_wordpiece: Any = None if len(token_to_id) < len(vocab) else \
            tf_text.FastWordpieceTokenizer(
                list(vocab), token_out_type=tf.int64, unknown_token="[UNK]",
                no_pretokenization=False, support_detokenization=False,
                max_bytes_per_word=4 * MAX_CHARS_PER_WORD)
        # Concrete functions with flat outputs: a call on one short text costs ~0.2 ms, where
        # a tf.function returning RaggedTensors spends ~1 ms packing and checking its structure.
        self._fast_ids: Any = None
        self._fast_offsets: Any = None
        if self._fast_wordpiece is not None:
            self._fast_ids = tf.function(self._ids_and_long_runs,
                                         input_signature=[_TEXTS]).get_concrete_function()
            self._fast_offsets = tf.function(self._ascii_offsets,
                                             input_signature=[_TEXTS]).get_concrete_function()

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

    def _offsets_route(self, texts: Tensor,
                       mask_literal: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        *values, splits = self._compiled_tokenize(mask_literal)(texts)
        return tuple(tf.RaggedTensor.from_row_splits(v, splits, validate=False) for v in values)

    def _compiled_tokenize(self, mask_literal: bool) -> Any:
        """The offsets route as a concrete function: texts [B] → flat ids, starts, ends and
        their row splits [B + 1]."""
        fn = self._compiled.get(mask_literal)
        if fn is None:
            def flat(texts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
                ids, starts, ends = self._tokenize_with_offsets(texts, mask_literal)
                return ids.flat_values, starts.flat_values, ends.flat_values, ids.row_splits
            fn = tf.function(flat, input_signature=[_TEXTS]).get_concrete_function()
            self._compiled[mask_literal] = fn
        return fn

    def _tokenize_with_offsets(self, texts: Tensor,
                               mask_literal: bool) -> tuple[Tensor, Tensor, Tensor]:
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

        ids, starts, ends = self.wordpiece.tokenize_with_offsets(norm_words)       # [N, (P)]
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

        def ragged(values: Tensor) -> Tensor:
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

    def _ids_and_long_runs(self, texts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Texts [B] → the fast route's flat ids, their row splits [B + 1], and which texts
        hold a run long enough to need the offsets route."""
        texts = normalize_texts(texts, self.lower_case)
        ids = self._fast_wordpiece.tokenize(texts)
        return ids.flat_values, ids.row_splits, tf.strings.regex_full_match(texts, _LONG_RUN)

    def _ascii_offsets(self, texts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Texts [B] → the fast route's flat ids, start and end byte offsets, their row splits
        [B + 1], and the texts it is exact for (printable ASCII without a long run)."""
        cased = tf.strings.lower(texts) if self.lower_case else texts
        ids, starts, ends = self._fast_wordpiece.tokenize_with_offsets(cased)
        exact = (tf.strings.regex_full_match(texts, _PRINTABLE_ASCII)
                 & ~tf.strings.regex_full_match(texts, _LONG_RUN))
        return ids.flat_values, starts.flat_values, ends.flat_values, ids.row_splits, exact

    def encode_batch(self, texts: list[str], mask_literal: bool = True) -> list[list[int]]:
        """Strings → one Python list of ids each, in one graph call (`Tokenizer.encode_batch`'s
        TensorFlow route)."""
        literal = mask_literal and not all(isinstance(t, str) and "[MASK]" not in t
                                           for t in texts)
        if self._fast_ids is None or literal:
            return [row.tolist() for row in _rows(self.tokenize(texts, mask_literal))]
        # Without a literal [MASK] both routes give the same ids; the fast one, flat to lists.
        values, splits, long_run = (x.numpy() for x in self._fast_ids(tf.constant(texts)))
        rows = [row.tolist() for row in _split(values, splits)]
        long = np.flatnonzero(long_run)
        if long.size:   # the texts with a long run: the offsets route, in one call
            exact = _rows(self.tokenize([texts[i] for i in long], mask_literal=mask_literal))
            for i, row in zip(long, exact):
                rows[i] = row.tolist()
        return rows

    def offsets_batch(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Strings → (ids, start, end byte offsets) numpy rows, in one graph call."""
        return list(zip(*(_rows(x) for x in self.tokenize_with_offsets(texts))))


__all__ = ["GraphWordPiece"]
