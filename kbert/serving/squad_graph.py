"""Extractive QA in the graph: SQuAD sliding windows, n-best spans and the v2.0 null answer.

The same steps as `kbert.pipeline.Bert.answer` (`kbert.tasks.squad.encode_squad` then
`kbert.tasks.squad_postprocess.postprocess`), batched over questions:

1. the question keeps its first `max_query_length` tokens; windows of the context start every
   min(room, doc_stride) tokens, room = max_seq_length - question - 3, until one reaches the end;
2. every window of every question runs through the model (`window_batch` windows at a time);
3. per window, the n-best start and end positions (padding up to the question's widest window
   counts, as in the reference, which pads each question's windows to their longest); a start
   must be in the window that gives it the most context (`_check_is_max_context`, in float64
   like the reference so ties break the same way);
4. the candidates of a question are sorted by score (stable), de-duplicated by their text, cut
   to the n-best, and turned into probabilities (with the null answer for v2.0).

Character offsets come from the tokenizer's byte offsets.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from kbert.hints import Tensor
from kbert.serving.graph_ops import char_offset, cut
from kbert.serving.options import ExportOptions
from kbert.tokenizer.packing import assemble


def windows(special: tuple[int, int, int], question: Tensor, context: Tensor,
            max_seq_length: int, doc_stride: int, max_query_length: int,
            ) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Ragged question / context ids [B, (n)] → window features [W, T] and, per window, its
    question, its first context token and its length; `b_index` [W, T] indexes the flat
    context tokens (-1 outside the context). Twin of `kbert.tasks.squad.encode_squad`'s
    windows (`_windows`)."""
    q_len = tf.minimum(question.row_lengths(), max_query_length)
    c_len = context.row_lengths()
    room = tf.maximum(max_seq_length - q_len - 3, 1)
    step = tf.minimum(room, doc_stride)
    count = tf.where(c_len <= room, tf.ones_like(c_len), 1 + (c_len - room + step - 1) // step)
    example = tf.repeat(tf.range(tf.size(c_len, out_type=tf.int64)), count)      # [W]
    index = tf.ragged.range(count).flat_values                                   # in example
    start = index * tf.gather(step, example)
    length = tf.minimum(tf.gather(c_len, example) - start, tf.gather(room, example))
    features, b_index = assemble(
        special, question.flat_values, tf.gather(question.row_starts(), example),
        tf.gather(q_len, example), context.flat_values,
        tf.gather(context.row_starts(), example) + start, length)
    return features, example, index, start, length, count, b_index


def run_in_chunks(fn: Callable[[dict[str, Tensor]], tuple[Tensor, Tensor]],
                  features: dict[str, Tensor], max_chunk: int) -> tuple[Tensor, Tensor]:
    """fn(features) → (start, end) logits [N, T], in equal chunks of at most `max_chunk` rows
    (bounded memory; no padding rows beyond the last chunk's remainder)."""
    n = tf.shape(features["input_ids"])[0]
    width = tf.shape(features["input_ids"])[1]
    chunks = tf.maximum((n + max_chunk - 1) // max_chunk, 1)
    chunk = tf.maximum((n + chunks - 1) // chunks, 1)
    pad = chunks * chunk - n
    split = {k: tf.reshape(tf.pad(v, [[0, pad], [0, 0]]), [chunks, chunk, width])
             for k, v in features.items()}                                      # [C, chunk, T]
    spec = tf.TensorSpec([None, None], tf.float32)
    start, end = tf.map_fn(fn, split, fn_output_signature=(spec, spec))
    return tf.reshape(start, [-1, width])[:n], tf.reshape(end, [-1, width])[:n]


def _max_context(position: Tensor, example: Tensor, index: Tensor, start: Tensor, length: Tensor,
                 count: Tensor) -> Tensor:
    """True where the window is the one that gives `position` [W, K] the most context.
    Twin of `kbert.tasks.squad._max_context` (float64, so ties break the same way)."""
    siblings_start = tf.gather(tf.RaggedTensor.from_row_lengths(start, count).to_tensor(-1),
                               example)[:, None, :]                            # [W, 1, N]
    siblings_length = tf.gather(tf.RaggedTensor.from_row_lengths(length, count).to_tensor(0),
                                example)[:, None, :]
    siblings_end = siblings_start + siblings_length - 1
    p = position[:, :, None]                                                    # [W, K, 1]
    inside = (p >= siblings_start) & (p <= siblings_end)
    score = (tf.cast(tf.minimum(p - siblings_start, siblings_end - p), tf.float64)
             + 0.01 * tf.cast(siblings_length, tf.float64))                     # [W, K, N]
    score = tf.where(inside, score, tf.constant(-float("inf"), tf.float64))
    n = tf.shape(score, out_type=tf.int64)[2]
    best = tf.reduce_max(score, -1, keepdims=True)
    first_best = tf.reduce_min(tf.where(score == best, tf.range(n), n), -1)      # [W, K]
    return tf.equal(first_best, index[:, None])


def answer(run: Callable[[dict[str, Tensor]], tuple[Tensor, Tensor]],
           special: tuple[int, int, int], question: Tensor, context: Tensor, texts: Tensor,
           offsets: tuple[Tensor, Tensor], options: ExportOptions, seq_length: int,
           version_2: bool, threshold: float) -> dict[str, Tensor]:
    """The signature body. question / context: ragged ids; `offsets`: the context tokens'
    (starts, ends) byte offsets, ragged like `context`. Returns the output dict.
    Twin of `kbert.tasks.squad_postprocess.postprocess` (Python); tests/serving/test_export.py
    holds the exported answers equal to the pipeline's."""
    features, example, index, start, length, count, b_index = windows(
        special, question, context, seq_length, options.doc_stride,
        options.max_query_length)
    nrows = tf.size(count, out_type=tf.int64)
    start_logits, end_logits = run_in_chunks(run, features, options.window_batch)
    row_length = tf.reduce_sum(tf.cast(features["input_mask"], tf.int64), 1)
    width = tf.gather(tf.math.unsorted_segment_max(row_length, example, nrows), example)

    # n-best starts and ends of each window, as the reference's `_top` over its padded width
    t = tf.range(tf.shape(start_logits, out_type=tf.int64)[1])
    inside = t[None, :] < width[:, None]                                        # [W, T]
    low = tf.constant(-float("inf"), tf.float32)
    k = tf.minimum(options.n_best, tf.shape(start_logits)[1])
    s_score, s_pos = tf.math.top_k(tf.where(inside, start_logits, low), k)      # [W, K]
    e_score, e_pos = tf.math.top_k(tf.where(inside, end_logits, low), k)
    s_token = tf.gather(b_index, s_pos, batch_dims=1)                           # -1: not context
    e_token = tf.gather(b_index, e_pos, batch_dims=1)
    context_begin = tf.gather(context.row_starts(), example)[:, None]
    best = _max_context(s_token - context_begin, example, index, start, length, count)
    s_ok = (s_token >= 0) & best
    e_ok = e_token >= 0
    i, j = tf.cast(s_pos, tf.int64)[:, :, None], tf.cast(e_pos, tf.int64)[:, None, :]
    ok = s_ok[:, :, None] & e_ok[:, None, :] & (j >= i) & (j - i + 1 <= options.max_answer_length)

    # flat candidates in the reference's order, then sorted by score within each question
    shape = tf.shape(ok)
    score = tf.boolean_mask(s_score[:, :, None] + e_score[:, None, :], ok)
    cand_example = tf.boolean_mask(tf.broadcast_to(example[:, None, None], shape), ok)
    starts, ends = offsets
    a = tf.gather(starts.flat_values, tf.boolean_mask(tf.broadcast_to(s_token[:, :, None],
                                                                      shape), ok))
    b = tf.gather(ends.flat_values, tf.boolean_mask(tf.broadcast_to(e_token[:, None, :],
                                                                    shape), ok))
    order = tf.argsort(score, direction="DESCENDING", stable=True)
    order = tf.gather(order, tf.argsort(tf.gather(cand_example, order), stable=True))
    score, cand_example, a, b = (tf.gather(x, order) for x in (score, cand_example, a, b))
    text = cut(tf.gather(texts, cand_example), a, b)

    # the first candidate of each distinct text, the n-best of each question
    key = tf.strings.join([tf.strings.as_string(cand_example), text], ":")
    unique, idx = tf.unique(key, out_idx=tf.int64)
    first = tf.math.unsorted_segment_min(tf.range(tf.size(key, out_type=tf.int64)), idx,
                                         tf.size(unique, out_type=tf.int64))
    spans = tf.RaggedTensor.from_value_rowids(first, tf.gather(cand_example, first),
                                              nrows=nrows)[:, :options.n_best]
    n_spans = spans.row_lengths()
    pick = spans.to_tensor(-1, shape=[None, options.n_best])                    # [B, S]
    has = pick >= 0
    pick = tf.maximum(pick, 0)

    def take(x: Tensor, fill: float | str) -> Tensor:
        x = tf.concat([x, tf.zeros([1], x.dtype)], 0)
        return tf.where(has, tf.gather(x, pick), tf.cast(fill, x.dtype))
    span_score = take(tf.cast(score, tf.float64), -float("inf"))
    span_text, span_a, span_b = take(text, ""), take(a, -1), take(b, -1)

    # column 0: the empty answer (v2.0's null; v1.1's placeholder when no span is valid)
    if version_2:
        null = tf.math.unsorted_segment_min(start_logits[:, 0] + end_logits[:, 0], example,
                                            nrows)
        empty_score, empty_ok = tf.cast(null, tf.float64), tf.ones_like(has[:, 0])
        empty_first = (n_spans == 0) | (empty_score - span_score[:, 0] > threshold)
    else:
        empty_ok = n_spans == 0
        empty_score, empty_first = tf.zeros_like(span_score[:, 0]), empty_ok
    valid = tf.concat([empty_ok[:, None], has], 1)                              # [B, S + 1]
    scores = tf.concat([empty_score[:, None], span_score], 1)
    scores = tf.where(valid, scores, -float("inf"))
    exp = tf.where(valid, tf.exp(scores - tf.reduce_max(scores, 1, keepdims=True)), 0.0)
    prob = exp / tf.reduce_sum(exp, 1, keepdims=True)

    # order: the empty answer first when it is the prediction, else after the spans
    col = tf.range(options.n_best + 1, dtype=tf.int64)[None, :]
    n = n_spans[:, None]
    after = tf.where(col < n, col + 1, tf.where(col == n, tf.zeros_like(col), col))
    perm = tf.where(empty_first[:, None], col, after)
    valid = tf.gather(valid, perm, batch_dims=1)

    def ordered(x: Tensor, fill: float | str) -> Tensor:
        x = tf.concat([tf.fill(tf.shape(x[:, :1]), tf.cast(fill, x.dtype)), x], 1)
        return tf.where(valid, tf.gather(x, perm, batch_dims=1), tf.cast(fill, x.dtype))
    prob = tf.where(valid, tf.gather(prob, perm, batch_dims=1), 0.0)
    out_text, a, b = ordered(span_text, ""), ordered(span_a, -1), ordered(span_b, -1)

    # no question or no context tokens: the reference raises; here "" with score 0
    usable = (question.row_lengths() > 0) & (context.row_lengths() > 0)
    context_texts = tf.broadcast_to(texts[:, None], tf.shape(a))
    top = options.top_k
    outputs = {
        "text": tf.where(usable[:, None], out_text, ""),
        "score": tf.cast(tf.where(usable[:, None], prob, 0.0), tf.float32),
        "start": tf.cast(char_offset(context_texts, tf.where(usable[:, None], a, -1)), tf.int32),
        "end": tf.cast(char_offset(context_texts, tf.where(usable[:, None], b, -1)), tf.int32),
    }
    outputs = {k: v[:, :top] for k, v in outputs.items()}
    best_answer = {k: v[:, 0] for k, v in outputs.items()}
    return {**best_answer, **{"top_" + k: v for k, v in outputs.items()}}
