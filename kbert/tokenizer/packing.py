"""Packing token ids into BERT's rows in the TensorFlow graph: `[CLS] A [SEP] (B [SEP])`,
truncated as google-research/bert truncates a pair. The twin of `Tokenizer.pack` (Python),
for the preprocessors (`kbert.tasks.preprocessing`, in `tf.data`) and the SavedModel's
signatures (`kbert.serving`).

Plain TensorFlow core ops only — no newer tf-text trimmer/combiner ops — so a graph built from
them loads in TF Serving 2.20.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.hints import Tensor

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
