"""In-graph steps of the serving signatures: packing, fill-mask positions, entity grouping.

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

# (cls_id, sep_id, pad_id)
Special = tuple[int, int, int]


def truncate_pair(len_a: Tensor, len_b: Tensor, budget: int) -> tuple[Tensor, Tensor]:
    """Lengths after google-research/bert's `_truncate_seq_pair`: one token at a time from the
    longer side (the second on a tie) until both fit in `budget`.

    The loop ends with the shorter side untouched if the longer alone can absorb the cut,
    else with floor(budget / 2) tokens for the second and the rest for the first.
    Twin of the truncation loop in `kbert.tokenizer.Tokenizer.pack`.
    """
    len_b = tf.minimum(len_b, tf.maximum(budget - len_a, budget // 2))
    return tf.minimum(len_a, budget - len_b), len_b


def _gather_padded(values: Tensor, index: Tensor, valid: Tensor, fill: Tensor) -> Tensor:
    """values[index] where valid, else fill; index may run outside values where not valid."""
    values = tf.concat([values, tf.zeros([1], values.dtype)], 0)
    index = tf.where(valid, index, tf.cast(tf.size(values) - 1, index.dtype))
    return tf.where(valid, tf.gather(values, index), tf.cast(fill, values.dtype))


def assemble(special: Special, a_values: Tensor, a_begin: Tensor, a_len: Tensor,
             b_values: Tensor = None, b_begin: Tensor = None,
             b_len: Tensor = None) -> tuple[dict[str, Tensor], Tensor]:
    """Rows `[CLS] A [SEP] (B [SEP])` padded to the longest, from flat token values.

    Row r takes `a_len[r]` tokens of `a_values` from `a_begin[r]` (and likewise for B).
    special: (cls_id, sep_id, pad_id). Returns the features (int32 [N, T]) and `b_index`
    [N, T], the index into `b_values` of each B token (-1 elsewhere).
    """
    cls_id, sep_id, pad_id = special
    a_len = tf.cast(a_len, tf.int64)
    length = a_len + 2
    if b_values is not None:
        b_len = tf.cast(b_len, tf.int64)
        length += b_len + 1
    width = tf.maximum(tf.reduce_max(tf.concat([length, [0]], 0)), 2)
    t = tf.range(width, dtype=tf.int64)[None, :]                              # [1, T]
    a_len_, length_ = a_len[:, None], length[:, None]                         # [N, 1]
    in_a = (t >= 1) & (t <= a_len_)
    ids = _gather_padded(a_values, tf.cast(a_begin, tf.int64)[:, None] + t - 1, in_a, pad_id)
    ids = tf.where(t == 0, tf.cast(cls_id, ids.dtype), ids)
    ids = tf.where(t == a_len_ + 1, tf.cast(sep_id, ids.dtype), ids)
    segment = tf.zeros_like(t + a_len_)
    b_index = -tf.ones_like(segment)
    if b_values is not None:
        in_b = (t >= a_len_ + 2) & (t < a_len_ + 2 + b_len[:, None])
        b_index = tf.where(in_b, tf.cast(b_begin, tf.int64)[:, None] + t - a_len_ - 2, -1)
        ids = tf.where(in_b, _gather_padded(b_values, b_index, in_b, pad_id), ids)
        ids = tf.where(t == length_ - 1, tf.cast(sep_id, ids.dtype), ids)
        segment = tf.cast(t >= a_len_ + 2, tf.int64)
    mask = t < length_
    ids = tf.where(mask, ids, tf.cast(pad_id, ids.dtype))
    segment = tf.where(mask, segment, 0)
    features = {"input_ids": tf.cast(ids, tf.int32), "segment_ids": tf.cast(segment, tf.int32),
                "input_mask": tf.cast(mask, tf.int32)}
    return features, b_index


def pack(special: Special, first: Tensor, second: Tensor | None = None,
         max_seq_length: int = 512) -> dict[str, Tensor]:
    """Ragged ids [B, (n)] → `Tokenizer.pack`'s features, in the graph (same truncation).

    Twin of `kbert.tokenizer.Tokenizer.pack` (Python); tests/serving/test_export.py holds the
    exported answers equal to the pipeline's."""
    len_a = first.row_lengths()
    if second is None:
        len_a = tf.minimum(len_a, max_seq_length - 2)
        return assemble(special, first.flat_values, first.row_starts(), len_a)[0]
    len_a, len_b = truncate_pair(len_a, second.row_lengths(), max_seq_length - 3)
    return assemble(special, first.flat_values, first.row_starts(), len_a,
                    second.flat_values, second.row_starts(), len_b)[0]


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
