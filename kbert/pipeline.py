"""What `kbert.load` returns: a checkpoint with its tokenizer, ready for inference.

Example:
>>> import kbert                                                        # doctest: +SKIP
>>> m = kbert.load("saved_models/minilm-l6-mlm-nsp")                    # doctest: +SKIP
>>> m.fill_mask("The capital of France is [MASK].", top_k=3)           # doctest: +SKIP
"""

import numpy as np
from keras import ops

from kbert import checkpoint as checkpoint_lib
from kbert.tokenizer import Tokenizer


class MissingHeadError(ValueError):
    """The checkpoint lacks the head a method needs."""


def _softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def _batches(items, batch_size):
    for start in range(0, len(items), batch_size):
        yield start, items[start:start + batch_size]


class Bert:
    """A BERT checkpoint for inference: `fill_mask`, `next_sentence`, `embed`, `classify`, `tag`.

    `backbone`, `heads` and `model` (a Keras task model for `fit`, `summary()`, export) share
    the same weights.
    """

    def __init__(self, ckpt):
        self.checkpoint = ckpt
        self.config = ckpt.config
        self.backbone = ckpt.backbone
        self.heads = ckpt.heads
        self.tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
        self.max_seq_length = self.config.max_position_embeddings
        self._model = None

    @property
    def model(self):
        if self._model is None:
            self._model = self.checkpoint.task_model()
        return self._model

    def task_model(self, task=None):
        return self.checkpoint.task_model(task)

    def _require(self, head, method):
        if head not in self.heads:
            raise MissingHeadError(
                f"{method} needs a '{head}' head, but checkpoint {self.checkpoint.path} has "
                f"{', '.join(self.heads) or 'no heads'}")
        return self.heads[head]

    def _encode(self, features):
        return self.backbone(features, training=False)

    # --- masked LM --------------------------------------------------------------------------
    def fill_mask(self, text, top_k=5):
        """Top-k fillers for each `[MASK]` in `text`: one list per mask, best first.

        Each entry is {"token": str, "score": float} (softmax probability).
        """
        if not isinstance(text, str):
            return [self.fill_mask(t, top_k) for t in text]
        head = self._require("mlm", "fill_mask")
        ids = self.tokenizer.encode(text)
        if self.tokenizer.mask_id not in ids:
            raise ValueError("fill_mask: the text has no [MASK] token to fill")
        features, _ = self.tokenizer.pack([ids], max_seq_length=self.max_seq_length)
        input_ids = features["input_ids"][0]
        positions = np.flatnonzero(input_ids == self.tokenizer.mask_id)
        if len(positions) < ids.count(self.tokenizer.mask_id):
            raise ValueError(f"fill_mask: a [MASK] lies beyond the first {self.max_seq_length} "
                             "tokens, which the model cannot see")
        sequence = self._encode(features)["sequence_output"]
        logits = ops.convert_to_numpy(head(sequence, positions[None].astype("int32")))[0]
        probs = _softmax(logits.astype(np.float64))
        top_k = max(1, min(int(top_k), probs.shape[-1]))
        results = []
        for row in probs:
            best = np.argsort(-row)[:top_k]
            results.append([{"token": self.tokenizer.vocab[i], "score": float(row[i])}
                            for i in best])
        return results

    # --- next sentence ----------------------------------------------------------------------
    def next_sentence(self, sentence_a, sentence_b):
        """{"is_next": P(B follows A)} from the NSP head."""
        head = self._require("nsp", "next_sentence")
        features, _ = self.tokenizer.pack([self.tokenizer.encode(sentence_a)],
                                          [self.tokenizer.encode(sentence_b)],
                                          max_seq_length=self.max_seq_length)
        pooled = self._encode(features)["pooled_output"]
        logits = ops.convert_to_numpy(head(pooled))[0].astype(np.float64)
        return {"is_next": float(_softmax(logits)[0])}

    # --- sentence embeddings ----------------------------------------------------------------
    def embed(self, texts, pooling="cls", batch_size=32):
        """Sentence vectors [n, hidden_size]: the `[CLS]` hidden state or the masked mean."""
        if pooling not in ("cls", "mean"):
            raise ValueError(f"embed: pooling must be 'cls' or 'mean', got {pooling!r}")
        if isinstance(texts, str):
            texts = [texts]
        encoded = [self.tokenizer.encode(t) for t in texts]
        order = np.argsort([len(e) for e in encoded], kind="stable")  # similar lengths together
        out = np.zeros((len(texts), self.config.hidden_size), np.float32)
        for _, idx in _batches(order, batch_size):
            features, _ = self.tokenizer.pack([encoded[i] for i in idx],
                                              max_seq_length=self.max_seq_length)
            seq = ops.convert_to_numpy(self._encode(features)["sequence_output"]).astype(np.float32)
            if pooling == "cls":
                vectors = seq[:, 0]
            else:
                mask = features["input_mask"][..., None].astype(np.float32)
                vectors = (seq * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            out[idx] = vectors
        return out

    # --- fine-tuned heads -------------------------------------------------------------------
    def classify(self, text, text_pair=None):
        """{label: probability} (or {"score": value} for a regression head)."""
        head = self._require("classifier", "classify")
        options = self.checkpoint.head_options.get("classifier", {})
        features, _ = self.tokenizer.pack(
            [self.tokenizer.encode(text)],
            None if text_pair is None else [self.tokenizer.encode(text_pair)],
            max_seq_length=self.max_seq_length)
        logits = ops.convert_to_numpy(head(self._encode(features)["pooled_output"]))[0]
        logits = logits.astype(np.float64)
        if options.get("problem") == "regression":
            return {"score": float(logits[0])}
        labels = options.get("labels") or [f"LABEL_{i}" for i in range(len(logits))]
        return {label: float(p) for label, p in zip(labels, _softmax(logits))}


def load(path):
    """Loads a checkpoint directory for inference (see `Bert`)."""
    return Bert(checkpoint_lib.load(path))
