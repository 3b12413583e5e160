"""Text files into documents of sentences in TensorFlow ops: the graph twin of
`kbert.data.sentences` (tests/data/test_text_stream.py holds the two equal).

- `split_sentences_graph`: `kbert.data.sentences.split_sentences`, the same rules in RE2.
- `read_group`: the file layouts of `kbert.data.sentences.read_documents`.

In graph ops because tf.data service runs the dataset graph on other hosts, where Python
functions cannot go (`kbert.data.text`, the pretraining pipeline, reads text through these).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from kbert.data.sentences import ABBREVIATIONS
from kbert.hints import Tensor

# The patterns of `kbert.data.sentences` (its `_END`, `_OPENERS`, `_DOTTED`) in RE2 syntax.
_PUNCT = "[.!?\u2026]"
_CLOSERS = "[\"'\u201d\u2019)\\]\u00bb]"
_OPENERS = "[\"'\u201c\u2018(\\[\u00ab]"
_SPACE = r"[\s\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]+"
# str.splitlines' line ends (a lone \r, \v, \f, file/group/record separators, NEL, LS, PS).
_LINE_END = r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x{85}\x{2028}\x{2029}]"


def split_sentences_graph(lines: Tensor, split: Tensor = None) -> Tensor:
    """Lines [L] → their sentences, a RaggedTensor [L, (S)] of strings.

    `kbert.data.sentences.split_sentences` in TensorFlow ops, the same rules: a sentence ends
    after `.`, `!`, `?` or `…` (and closing quotes) before whitespace and a word not in lower
    case, unless the period follows an abbreviation, an initial or a dotted abbreviation. The
    words of a sentence are joined by one space (the tokenizer splits on any whitespace anyway).
    Lines where `split` [L] is False are taken whole, as one sentence each.

    >>> split_sentences_graph(["Mr. Smith paid $3.50 at 5 p.m. today. Yes! ok"]).to_list()
    [[b'Mr. Smith paid $3.50 at 5 p.m. today.', b'Yes! ok']]
    """
    words = tf_text.regex_split(tf.convert_to_tensor(lines, tf.string), _SPACE)   # [L, (W)]
    flat = words.flat_values
    row = words.value_rowids()
    is_last = tf.concat([row[1:] != row[:-1], tf.ones([tf.minimum(tf.size(row), 1)], bool)], 0)
    ends = tf.strings.regex_full_match(flat, f"(?s).*{_PUNCT}{_CLOSERS}*")
    before = tf.strings.regex_replace(flat, f"(?s)^(.*?){_PUNCT}+{_CLOSERS}*$", r"\1")
    # A mark standing alone ("a ." in tokenized text) looks at the word before it.
    is_first = tf.concat([tf.ones([tf.minimum(tf.size(row), 1)], bool), row[1:] != row[:-1]], 0)
    previous = tf.where(is_first, "", tf.concat([[""], flat[:-1]], 0))
    before = tf.where(before == "", previous, before)
    before = tf.strings.regex_replace(before, f"^{_OPENERS}+", "")
    punct = tf.strings.regex_replace(flat, f"(?s)^.*?({_PUNCT}+){_CLOSERS}*$", r"\1")
    following = tf.strings.regex_replace(tf.concat([flat[1:], [""]], 0), f"^{_OPENERS}+", "")
    lower_next = tf.strings.regex_full_match(following, r"(?s)\p{Ll}.*")
    lowered = tf.strings.lower(before, encoding="utf-8")
    abbreviation = (tf.strings.regex_full_match(before, r"\pL")
                    | tf.strings.regex_full_match(before, r"(?:[A-Za-z]\.)+[A-Za-z]")
                    | _ABBREVIATIONS.lookup(lowered))
    next_is_last = tf.concat([is_last[1:], [False]], 0)
    nothing_after = next_is_last & (following == "")        # only opening quotes follow
    boundary = ends & ~is_last & ~lower_next & ~nothing_after & (
        (punct != ".") | (before == "") | ~abbreviation)
    if split is not None:
        boundary &= tf.gather(tf.convert_to_tensor(split, bool), row)
    closes = boundary | is_last
    sentence = tf.cumsum(tf.cast(closes, tf.int64), exclusive=True)
    count = tf.reduce_sum(tf.cast(closes, tf.int64))
    text = tf.strings.unsorted_segment_join(flat, sentence, count, separator=" ")
    sentence_row = tf.boolean_mask(row, closes)
    return tf.RaggedTensor.from_value_rowids(text, sentence_row, nrows=words.nrows())


class _Abbreviations:
    """The abbreviation list as a lookup table, made on first use (not at import)."""

    table: Tensor = None      # a tf.lookup.StaticHashTable once made

    def lookup(self, words: Tensor) -> Tensor:
        if self.table is None:
            with tf.init_scope():               # made eagerly, even when first used in a graph
                keys = tf.constant(sorted(ABBREVIATIONS))
                self.table = tf.lookup.StaticHashTable(
                    tf.lookup.KeyValueTensorInitializer(keys, tf.ones_like(keys, tf.int64)), 0)
        return self.table.lookup(words) > 0


_ABBREVIATIONS = _Abbreviations()


def read_group(files: Tensor, input_format: str = "auto") -> tuple[Tensor, Tensor]:
    """Files [F] → (sentences [S] strings, document index of each [S]), in reading order.

    The layouts of `kbert.data.sentences.read_documents`: `documents` (one document per file,
    a paragraph a line, split into sentences), `sentences` (one sentence a line, blank lines
    between documents) or `auto` (per file: `sentences` when two non-empty lines follow each
    other). Bytes that are not UTF-8 become U+FFFD.
    """
    texts = tf.map_fn(tf.io.read_file, files, fn_output_signature=tf.string)
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    lines = tf.strings.split(tf.strings.regex_replace(texts, _LINE_END, "\n"), "\n")  # [F, (L)]
    filled = tf.strings.strip(lines) != ""
    if input_format == "auto":
        by_lines = tf.reduce_any(filled[:, 1:] & filled[:, :-1], axis=1)     # [F]
    elif input_format in ("documents", "sentences"):
        by_lines = tf.fill([tf.size(files)], input_format == "sentences")
    else:
        raise ValueError(f"unknown input format {input_format!r}: use auto, documents or "
                         "sentences")
    after_blank = tf.concat([tf.ones_like(filled[:, :1]), ~filled[:, :-1]], axis=1)
    first = tf.cumsum(tf.cast(filled, tf.int64), axis=1) == 1
    line_by_lines = tf.gather(by_lines, lines.value_rowids())
    starts = filled.flat_values & (first.flat_values | (line_by_lines & after_blank.flat_values))
    keep = filled.flat_values
    sentences = split_sentences_graph(tf.boolean_mask(lines.flat_values, keep),
                                      ~tf.boolean_mask(line_by_lines, keep))
    document = tf.cumsum(tf.cast(tf.boolean_mask(starts, keep), tf.int64)) - 1
    return sentences.flat_values, tf.gather(document, sentences.value_rowids())


__all__ = ["read_group", "split_sentences_graph"]
