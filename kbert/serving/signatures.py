"""The bodies of the exported signatures (see `kbert.export` for their inputs and outputs).

Each mirrors the `kbert.pipeline.Bert` method of the same name: the same tokenization (with
`[MASK]` read as the mask token where `Bert` uses `Tokenizer.encode`), the same truncation to
the encoder's `max_position_embeddings`, the same post-processing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from kbert.hints import Tensor
from kbert.serving import squad_graph
from kbert.serving.graph_ops import (
    char_offset,
    chunk_tables,
    cut,
    group_entities,
    mask_positions,
)
from kbert.tokenizer import Tokenizer
from kbert.tokenizer.packing import pack

if TYPE_CHECKING:
    from kbert.checkpoint import Checkpoint
    from kbert.serving.options import ExportOptions

INPUTS = {
    "fill_mask": ("text",), "next_sentence": ("sentence_a", "sentence_b"),
    "answer": ("question", "context"), "classify": ("text",),
    "classify_pair": ("text", "text_pair"), "tag": ("text",), "embed": ("text",),
}


class Signatures:
    """Builds the signature functions of a loaded `kbert.checkpoint.Checkpoint`."""

    def __init__(self, ckpt: Checkpoint, options: ExportOptions) -> None:
        self.ckpt, self.options = ckpt, options
        self.backbone, self.heads = ckpt.backbone, ckpt.heads
        self.tokenizer = tok = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
        self.special = (tok.cls_id, tok.sep_id, tok.pad_id)
        self.max_seq_length = ckpt.config.max_position_embeddings
        seen, self.variables = set(), []
        for layer in [self.backbone, *self.heads.values()]:
            for v in layer.weights:
                if id(v) not in seen:
                    seen.add(id(v))
                    self.variables.append(v)

    def concrete(self, name: str) -> Any:
        """The concrete function of signature `name` (a string one or `<task>_ids`)."""
        fn = getattr(self, name)
        if name.endswith("_ids"):
            specs = [tf.TensorSpec([None, None], tf.int32, name=n)
                     for n in ("input_ids", "segment_ids", "input_mask")]
        else:
            specs = [tf.TensorSpec([None], tf.string, name=n) for n in INPUTS[name]]
        return tf.function(fn, autograph=False).get_concrete_function(*specs)

    # --- shared steps -------------------------------------------------------------------------
    def _encode(self, features: dict[str, Tensor]) -> dict[str, Tensor]:
        return self.backbone(features, training=False)

    def _tokenize(self, texts: Tensor) -> Tensor:
        return self.tokenizer.tokenize(texts, mask_literal=True)

    def _pack(self, first: Tensor, second: Tensor | None = None) -> dict[str, Tensor]:
        return pack(self.special, first, second, self.max_seq_length)

    @staticmethod
    def _features(input_ids: Tensor, segment_ids: Tensor,
                  input_mask: Tensor) -> dict[str, Tensor]:
        return {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask}

    def _checked_features(self, input_ids: Tensor, segment_ids: Tensor,
                          input_mask: Tensor) -> dict[str, Tensor]:
        """The `*_ids` signatures' inputs, checked in the graph first: a request with an id
        outside the vocabulary, a segment id outside the segment vocabulary, more tokens than
        the position embeddings hold, or inputs of different shapes fails with an
        InvalidArgumentError naming the input (TensorFlow's `Assert` op, which TF Serving
        runs), where an embedding lookup would read the last row for a negative id, fail
        deep inside on a CPU for an id past the end, and read zeros on a GPU."""
        c = self.ckpt.config
        debug = tf.debugging
        checks = [
            debug.assert_equal(tf.shape(segment_ids), tf.shape(input_ids),
                               message="segment_ids must have the shape of input_ids"),
            debug.assert_equal(tf.shape(input_mask), tf.shape(input_ids),
                               message="input_mask must have the shape of input_ids"),
            debug.assert_less_equal(tf.shape(input_ids)[1], c.max_position_embeddings,
                                    message=f"input_ids: at most {c.max_position_embeddings} "
                                            "tokens a row (max_position_embeddings)"),
            debug.assert_non_negative(input_ids, message="input_ids must be >= 0"),
            debug.assert_less(input_ids, c.vocab_size,
                              message=f"input_ids must be < {c.vocab_size} (the vocabulary "
                                      "size)"),
            debug.assert_non_negative(segment_ids, message="segment_ids must be >= 0"),
            debug.assert_less(segment_ids, c.type_vocab_size,
                              message=f"segment_ids must be < {c.type_vocab_size} "
                                      "(type_vocab_size)"),
        ]
        with tf.control_dependencies(checks):
            return self._features(tf.identity(input_ids), tf.identity(segment_ids),
                                  tf.identity(input_mask))

    # --- string signatures --------------------------------------------------------------------
    def fill_mask(self, text: Tensor) -> dict[str, Tensor]:
        tok, options = self.tokenizer, self.options
        ids = self._tokenize(text)
        features = self._pack(ids)
        positions, valid = mask_positions(features["input_ids"], tok.mask_id, options.max_masks)
        logits = self.heads["mlm"](self._encode(features)["sequence_output"], positions)
        probs = tf.nn.softmax(logits, -1)                                        # [B, M, V]
        scores, best = tf.math.top_k(probs, min(options.top_k, tok.vocab_size))  # [B, M, K]
        valid = tf.broadcast_to(valid[:, :, None], tf.shape(best))
        return {
            "tokens": tf.where(valid, tf.gather(tf.constant(tok.vocab), best), ""),
            "token_ids": tf.where(valid, best, -1),
            "scores": tf.where(valid, scores, 0.0),
            "num_masks": tf.reduce_sum(tf.cast(tf.equal(ids, tok.mask_id), tf.int32), 1),
        }

    def next_sentence(self, sentence_a: Tensor, sentence_b: Tensor) -> dict[str, Tensor]:
        features = self._pack(self._tokenize(sentence_a), self._tokenize(sentence_b))
        logits = self.heads["nsp"](self._encode(features)["pooled_output"])
        return {"is_next": tf.nn.softmax(logits, -1)[:, 0], "logits": logits}

    def _classify(self, features: dict[str, Tensor]) -> dict[str, Tensor]:
        logits = self.heads["classifier"](self._encode(features)["pooled_output"])
        options = self.ckpt.head_options.get("classifier", {})
        if options.get("problem") == "regression":       # twin: kbert.inference.classification
            score = logits[:, 0]
            return {"score": tf.sigmoid(score) if options.get("activation") == "sigmoid"
                    else score}
        labels = options.get("labels") or [f"LABEL_{i}" for i in range(logits.shape[-1])]
        labels = tf.constant(labels)
        probs = tf.nn.softmax(logits, -1)
        return {"probabilities": probs, "label": tf.gather(labels, tf.argmax(probs, -1)),
                "labels": tf.broadcast_to(labels[None, :], tf.shape(probs))}

    def classify(self, text: Tensor) -> dict[str, Tensor]:
        return self._classify(self._pack(self._tokenize(text)))

    def classify_pair(self, text: Tensor, text_pair: Tensor) -> dict[str, Tensor]:
        return self._classify(self._pack(self._tokenize(text), self._tokenize(text_pair)))

    def embed(self, text: Tensor) -> dict[str, Tensor]:
        """`Bert.embed(text)` with its defaults, in the graph: texts cut at the length the
        encoder records (`Checkpoint.embedding_defaults`: 256 for all-MiniLM-L6-v2), and its
        pooling as `embedding`, unit length; both poolings unnormalized as `cls` and `mean`."""
        defaults = self.ckpt.embedding_defaults
        features = pack(self.special, self._tokenize(text), None, defaults["max_seq_length"])
        sequence = tf.cast(self._encode(features)["sequence_output"], tf.float32)  # [B, T, H]
        mask = tf.cast(features["input_mask"], tf.float32)[:, :, None]             # [B, T, 1]
        mean = tf.reduce_sum(sequence * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1e-9)
        pooled = {"cls": sequence[:, 0], "mean": mean}
        vector = pooled[defaults["pooling"]]
        # unit rows: twin of kbert.inference.embeddings.l2_normalize (a zero row stays zero)
        norm = tf.maximum(tf.norm(vector, axis=-1, keepdims=True), 1e-12)
        return {"embedding": vector / norm, **pooled}

    def tag(self, text: Tensor) -> dict[str, Tensor]:
        tok = self.tokenizer
        labels = self.ckpt.head_options["tagger"]["labels"]
        ids, starts, ends = (x[:, :self.max_seq_length - 2]
                             for x in tok.tokenize_with_offsets(text))
        features = self._pack(ids)
        logits = self.heads["tagger"](self._encode(features)["sequence_output"])  # [B, T, C]
        probs = tf.nn.softmax(logits, -1)
        row = ids.value_rowids()                                                 # flat tokens
        position = tf.ragged.range(ids.row_lengths()).flat_values
        token_probs = tf.gather_nd(probs, tf.stack([row, position + 1], 1))     # after [CLS]
        continuation = tf.constant(np.array([t.startswith("##") for t in tok.vocab]))
        first = (position == 0) | ~tf.gather(continuation, ids.flat_values)
        word = tf.cumsum(tf.cast(first, tf.int64)) - 1
        n_words = tf.reduce_sum(tf.cast(first, tf.int64))
        last_token = tf.math.unsorted_segment_max(tf.range(tf.size(word, out_type=tf.int64)),
                                                  word, n_words)
        word_probs = tf.boolean_mask(token_probs, first)                         # [words, C]
        word_label = tf.argmax(word_probs, -1)
        word_row = tf.boolean_mask(row, first)
        begin, last, kind = group_entities(chunk_tables(labels), word_label, word_row)
        entity_row = tf.gather(word_row, last)
        byte_start = tf.gather(tf.boolean_mask(starts.flat_values, first), begin)
        byte_end = tf.gather(ends.flat_values, tf.gather(last_token, last))
        running = tf.concat([[0.0], tf.cumsum(tf.cast(tf.reduce_max(word_probs, -1),
                                                      tf.float64))], 0)
        score = ((tf.gather(running, last + 1) - tf.gather(running, begin))
                 / tf.cast(last - begin + 1, tf.float64))
        texts = tf.gather(text, entity_row)
        nrows = tf.size(text, out_type=tf.int64)

        def padded(values: Tensor, fill: float | str) -> Tensor:
            ragged = tf.RaggedTensor.from_value_rowids(values, entity_row, nrows=nrows)
            return ragged.to_tensor(tf.cast(fill, values.dtype))
        return {
            "entity_text": padded(cut(texts, byte_start, byte_end), ""),
            "entity_label": padded(kind, ""),
            "entity_start": padded(tf.cast(char_offset(texts, byte_start), tf.int32), -1),
            "entity_end": padded(tf.cast(char_offset(texts, byte_end), tf.int32), -1),
            "entity_score": padded(tf.cast(score, tf.float32), 0.0),
            "num_entities": tf.cast(tf.math.bincount(tf.cast(entity_row, tf.int32),
                                                     minlength=tf.cast(nrows, tf.int32),
                                                     maxlength=tf.cast(nrows, tf.int32)),
                                    tf.int32),
        }

    def answer(self, question: Tensor, context: Tensor) -> dict[str, Tensor]:
        tok = self.tokenizer
        options = self.ckpt.head_options.get("span", {})
        span_head = self.heads["span"]

        def run(features: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
            return span_head(self._encode(features)["sequence_output"])

        context_ids, starts, ends = tok.tokenize_with_offsets(context)
        seq_length = min(self.options.answer_seq_length, self.max_seq_length)
        return squad_graph.answer(
            run, self.special, tok.tokenize(question), context_ids, context, (starts, ends),
            self.options, seq_length, version_2=str(options.get("version", "1.1")) == "2.0",
            threshold=float(options.get("null_score_diff_threshold", 0.0)))

    # --- token-id signatures ------------------------------------------------------------------
    def fill_mask_ids(self, input_ids: Tensor, segment_ids: Tensor,
            input_mask: Tensor) -> dict[str, Tensor]:
        out = self._encode(self._checked_features(input_ids, segment_ids, input_mask))
        return {"logits": self.heads["mlm"](out["sequence_output"])}            # [B, T, V]

    def next_sentence_ids(self, input_ids: Tensor, segment_ids: Tensor,
            input_mask: Tensor) -> dict[str, Tensor]:
        out = self._encode(self._checked_features(input_ids, segment_ids, input_mask))
        return {"logits": self.heads["nsp"](out["pooled_output"])}

    def answer_ids(self, input_ids: Tensor, segment_ids: Tensor,
            input_mask: Tensor) -> dict[str, Tensor]:
        out = self._encode(self._checked_features(input_ids, segment_ids, input_mask))
        start, end = self.heads["span"](out["sequence_output"])
        return {"start_logits": start, "end_logits": end}

    def classify_ids(self, input_ids: Tensor, segment_ids: Tensor,
            input_mask: Tensor) -> dict[str, Tensor]:
        out = self._encode(self._checked_features(input_ids, segment_ids, input_mask))
        return {"logits": self.heads["classifier"](out["pooled_output"])}

    def tag_ids(self, input_ids: Tensor, segment_ids: Tensor,
            input_mask: Tensor) -> dict[str, Tensor]:
        out = self._encode(self._checked_features(input_ids, segment_ids, input_mask))
        return {"logits": self.heads["tagger"](out["sequence_output"])}

    def embed_ids(self, input_ids: Tensor, segment_ids: Tensor,
            input_mask: Tensor) -> dict[str, Tensor]:
        out = self._encode(self._checked_features(input_ids, segment_ids, input_mask))
        return {"sequence_output": out["sequence_output"], "pooled_output": out["pooled_output"]}
