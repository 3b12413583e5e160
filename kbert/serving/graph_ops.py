"""In-graph steps of the serving signatures: character offsets, fill-mask positions, entity
grouping (the packing of ids into rows is the tokenizer's: `kbert.tokenizer.packing`).

Plain TensorFlow core ops only — no newer tf-text trimmer/combiner ops — so a graph built from
them loads in TF Serving 2.20. Each function mirrors one step of the Python reference in
`kbert.pipeline` / `kbert.tokenizer.Tokenizer.pack`; the SQuAD windows and n-best are in
`kbert.serving.squad_graph`. Offsets inside the graph are byte offsets into the UTF-8 input;
`char_offset` turns them into the character offsets the Python API returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from kbert.hints import Tensor
from kbert.tasks.metrics import chunk_ends, chunk_starts, split_tag


def char_offset(texts: Tensor, byte_offsets: Tensor) -> Tensor:
    """Byte offsets into `texts` (same shape, -1 = none) → character offsets (-1 kept).

    Twin: `kbert.tokenizer.char_offsets` does this in Python; tests/serving/test_graph_ops.py
    holds the two equal.

    >>> char_offset(tf.constant(["héllo", "wörld"]), tf.constant([3, -1])).numpy().tolist()
    [2, -1]
    """
    prefix = tf.strings.substr(texts, tf.zeros_like(byte_offsets), tf.maximum(byte_offsets, 0))
    chars = tf.cast(tf.strings.length(prefix, unit="UTF8_CHAR"), byte_offsets.dtype)
    return tf.where(byte_offsets < 0, tf.constant(-1, byte_offsets.dtype), chars)


def cut(texts: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """texts[start:end] in bytes ("" where start < 0)."""
    return tf.strings.substr(texts, tf.maximum(start, 0), tf.maximum(end - start, 0))


def mask_positions(input_ids: Tensor, mask_id: int, max_masks: int) -> tuple[Tensor, Tensor]:
    """Positions of the first `max_masks` mask tokens in each row, [B, M], and which are real.

    Twin of `mask_positions` in `kbert.inference.masked_lm.fill_mask` (Python)."""
    is_mask = tf.equal(input_ids, mask_id)
    width = tf.shape(input_ids, out_type=tf.int64)[1]
    column = tf.range(width)[None, :]
    key = tf.where(is_mask, column, column + width)                         # masks first, in order
    order = tf.argsort(key, axis=1, stable=True)[:, :max_masks]
    order = tf.pad(order, [[0, 0], [0, max_masks - tf.shape(order)[1]]])      # T < M: pad
    valid = tf.gather(is_mask, order, batch_dims=1)
    valid &= tf.range(max_masks)[None, :] < tf.shape(input_ids)[1]
    return tf.where(valid, order, 0), valid


def chunk_tables(labels: Sequence[str]) -> tuple[Tensor, Tensor, Tensor]:
    """conlleval's chunk start / end rules (`kbert.tasks.metrics`) as [L + 1, L + 1] tables over
    (previous label, label); index L is the "O" that surrounds each sentence."""
    parts = [split_tag(label) for label in labels] + [("O", "")]
    ends = [[chunk_ends(p[0], t[0], p[1], t[1]) for t in parts] for p in parts]
    starts = [[chunk_starts(p[0], t[0], p[1], t[1]) for t in parts] for p in parts]
    return tf.constant(starts), tf.constant(ends), tf.constant([p[1] for p in parts])


def group_entities(tables: tuple[Tensor, Tensor, Tensor], word_label: Tensor,
                   word_row: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Word labels (flat over the batch, rows in order) → entities as conlleval groups them:
    the twin of `kbert.tasks.metrics.entities` (tests/serving/test_graph_ops.py holds them
    equal).

    A chunk is open at a word exactly when its tag is not O, so the sequential rule of
    `kbert.tasks.metrics.entities` becomes: a chunk ends at word i when ends[label_i, label_i+1]
    (label_i+1 = the sentinel O at a sentence end) and began at the last word j <= i with
    starts[label_j-1, label_j]. Returns (first word, last word, type) of each entity, flat.
    """
    starts, ends, kinds = tables
    sentinel = tf.cast(tf.shape(kinds)[0] - 1, word_label.dtype)
    n = tf.size(word_label, out_type=tf.int64)
    same = tf.equal(word_row[1:], word_row[:-1])                               # [n - 1]
    same_prev = tf.concat([[False], same], 0)[:n]
    same_next = tf.concat([same, [False]], 0)[:n]
    prev = tf.where(same_prev, tf.roll(word_label, 1, 0), sentinel)
    nxt = tf.where(same_next, tf.roll(word_label, -1, 0), sentinel)
    begins = tf.gather_nd(starts, tf.stack([prev, word_label], 1))
    closes = tf.gather_nd(ends, tf.stack([word_label, nxt], 1))
    begin_words = tf.boolean_mask(tf.range(n), begins)
    open_chunk = tf.cumsum(tf.cast(begins, tf.int64)) - 1                     # last start so far
    last = tf.boolean_mask(tf.range(n), closes)
    first = tf.gather(tf.concat([begin_words, [0]], 0),
                      tf.maximum(tf.boolean_mask(open_chunk, closes), 0))
    return first, last, tf.gather(kinds, tf.gather(word_label, last))
