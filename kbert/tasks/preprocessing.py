"""Preprocessing layers: raw text in, BERT features out, inside `tf.data` on every backend.

    BertPreprocessor                   texts, or pairs `(texts_a, texts_b)` → [CLS] A [SEP] B [SEP]
    BertMultipleChoicePreprocessor     `(contexts, endings [B, C])` → features [B, C, T]
    BertTokenClassifierPreprocessor    word lists (+ tag lists) → each word's tag on its first piece
    BertQuestionAnswererPreprocessor   `(questions, contexts)` (+ `(answer_starts, answer_texts)`)

Each is a Keras layer: `preprocessor(x, y=None, sample_weight=None)` returns what
`keras.utils.pack_x_y_sample_weight` returns — `(features, y, sample_weight)`, or the
features alone without labels — so
`dataset.map(preprocessor)` runs it in the `tf.data` pipeline whichever backend trains, as
keras-hub's preprocessors do. Text pairs travel as a tuple. Sentence(-pair) and multiple-choice
packing are TensorFlow ops (`kbert.tokenizer.packing.pack`, the graph twin of `Tokenizer.pack`:
the longer side is cut first, as in the paper's code); tagging and QA run `kbert.tasks.ner` /
`kbert.tasks.squad`'s encoders in a `tf.py_function`. Every batch is padded to its own longest
row (rounded up to `pad_to_multiple_of`, so a compiled step sees few shapes). Raw inputs become
tensors, are checked and padded by `kbert.tasks.inputs`' helpers (`pad_to_multiple`, importable
from here too).

A task model built by `from_checkpoint` carries its preprocessor (`model.preprocessor`), and its
`fit`, `evaluate` and `predict` then take raw inputs; `dataset(x, y)` is the pipeline they use.

Example:
>>> from kbert.tokenizer import Tokenizer
>>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "film", "bad"]
>>> p = BertPreprocessor(vocab, labels=["neg", "pos"], pad_to_multiple_of=1)
>>> x, y = p(["good film", "bad"], ["pos", "neg"])
>>> x["input_ids"].numpy().tolist(), y.numpy().tolist()
([[2, 5, 6, 3], [2, 7, 3, 0]], [1, 0])
>>> p((["good"], ["bad film"]))["segment_ids"].numpy().tolist()
[[0, 0, 0, 1, 1, 1]]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.checkpoint.files import head_options_for  # noqa: F401  (kept importable here)
from kbert.hints import Tensor
from kbert.tasks import batching, ner, squad
from kbert.tasks.inputs import (
    Raw,
    _all_strings,
    _check_lengths,
    _is_features,
    _ragged,
    _to_tf,
    pad_to_multiple,
)
from kbert.tokenizer import Tokenizer
from kbert.tokenizer.packing import pack

PAD_TO_MULTIPLE = 16


class BertPreprocessor(keras.layers.Layer):
    """Texts or text pairs → `input_ids`, `segment_ids`, `input_mask`; labels passed through.

    Args:
        vocab: a `vocab.txt` path or a list of tokens.
        lower_case: the vocabulary is uncased.
        max_seq_length: tokens per example, `[CLS]` and `[SEP]`s included.
        labels: label names in id order; string labels given to `fit` become their ids.
        pad_to_multiple_of: round each batch's width up to a multiple of this.
    """

    def __init__(self, vocab: list | str, lower_case: bool = True, max_seq_length: int = 128,
                 labels: list | None = None, pad_to_multiple_of: int = PAD_TO_MULTIPLE,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokenizer = Tokenizer(vocab, lower_case=lower_case)
        self.max_seq_length = int(max_seq_length)
        self.labels = list(labels) if labels else None
        self.pad_to_multiple_of = max(1, int(pad_to_multiple_of))
        self._label_table = None
        if self.labels:
            self._label_table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.labels), tf.range(len(self.labels), dtype=tf.int32)), -1)
        self.built = True

    def __call__(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> Any:
        # TensorFlow in, TensorFlow out on every backend: Keras' conversion of the inputs to
        # backend tensors (no strings on JAX or PyTorch) is skipped.
        return self.call(x, y, sample_weight)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab": self.tokenizer.vocab,
                "lower_case": self.tokenizer.lower_case, "max_seq_length": self.max_seq_length,
                "labels": self.labels, "pad_to_multiple_of": self.pad_to_multiple_of}

    @property
    def special(self) -> tuple[int, int, int]:
        t = self.tokenizer
        return t.cls_id, t.sep_id, t.pad_id

    # --- the layer -------------------------------------------------------------------------
    def _tokenize(self, texts: Raw) -> Tensor:
        return self.tokenizer.tokenize(tf.reshape(tf.convert_to_tensor(texts, tf.string), [-1]))

    def _pack(self, first: Raw, second: Raw = None) -> dict[str, Tensor]:
        features = pack(self.special, self._tokenize(first),
                        None if second is None else self._tokenize(second), self.max_seq_length)
        return pad_to_multiple(features, self.pad_to_multiple_of, self.max_seq_length,
                               self.tokenizer.pad_id)

    def _label_ids(self, y: Raw) -> Any:
        if y is None or not isinstance(y, (tf.Tensor, np.ndarray, list)):
            return y
        y = tf.convert_to_tensor(y)
        if y.dtype != tf.string:
            return y
        if self._label_table is None:
            raise ValueError("string labels need the preprocessor's `labels`")
        ids = self._label_table.lookup(y)
        tf.debugging.assert_non_negative(ids, message=f"a label is not one of {self.labels}")
        return ids

    def call(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> Any:
        first, second = x if isinstance(x, tuple) else (x, None)
        return keras.utils.pack_x_y_sample_weight(self._pack(first, second),
                                                  self._label_ids(y), sample_weight)

    # --- the input pipeline ----------------------------------------------------------------
    def check(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> None:
        """Raises ValueError naming the example when raw inputs cannot be encoded."""
        first, second = x if isinstance(x, tuple) else (x, None)
        _check_lengths(first, second, y, sample_weight)
        if y is not None and self.labels and _all_strings(y):
            for i, label in enumerate(y):
                if label not in self.labels:
                    raise ValueError(f"example {i}: label {label!r} is not one of "
                                     f"{', '.join(self.labels)}")

    def dataset(self, x: Raw, y: Raw = None, sample_weight: Raw = None, batch_size: int = 32,
                shuffle: bool = False, seed: int | None = None) -> tf.data.Dataset:
        """Raw inputs (lists or arrays) → a `tf.data.Dataset` of model batches."""
        self.check(x, y, sample_weight)
        data = keras.utils.pack_x_y_sample_weight(_to_tf(x), _to_tf(y), _to_tf(sample_weight))
        ds = tf.data.Dataset.from_tensor_slices(data)
        if shuffle:
            ds = ds.shuffle(int(ds.cardinality()), seed=seed, reshuffle_each_iteration=True)
        return ds.batch(batch_size).map(lambda *e: self(*e)).prefetch(tf.data.AUTOTUNE)

    def adapt_inputs(self, x: Raw, y: Raw = None, sample_weight: Raw = None,
                     batch_size: int | None = None,
                     shuffle: bool = False) -> tuple[Any, Any, Any, int | None]:
        """What `fit`/`evaluate`/`predict` get: raw inputs become `dataset(...)`, a dataset of
        raw inputs gets this layer mapped over it, features pass unchanged.

        Returns (x, y, sample_weight, batch_size)."""
        if isinstance(x, tf.data.Dataset):
            if any(s.dtype == tf.string for s in tf.nest.flatten(x.element_spec)):
                x = x.map(lambda *e: self(*e))   # elements (x,), (x, y) or (x, y, w)
            return x, y, sample_weight, batch_size
        if x is None or _is_features(x):
            return x, y, sample_weight, batch_size
        ds = self.dataset(x, y, sample_weight, batch_size or 32, shuffle=shuffle)
        return ds, None, None, None


class BertMultipleChoicePreprocessor(BertPreprocessor):
    """`(contexts [B], endings [B, C])` → features [B, C, T]: each choice is the pair
    `[CLS] context [SEP] ending [SEP]` (SWAG's `sent2 + ending` is one ending here)."""

    def call(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> Any:
        contexts, endings = x
        endings = tf.convert_to_tensor(endings, tf.string)
        batch, choices = tf.shape(endings)[0], tf.shape(endings)[1]
        flat = self._pack(tf.repeat(tf.reshape(contexts, [-1]), choices),
                          tf.reshape(endings, [-1]))
        features = {k: tf.reshape(v, [batch, choices, -1]) for k, v in flat.items()}
        return keras.utils.pack_x_y_sample_weight(features, self._label_ids(y), sample_weight)

    def check(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> None:
        if not isinstance(x, tuple) or len(x) != 2:
            raise ValueError("multiple choice takes x=(contexts, endings)")
        widths = {len(e) for e in x[1]}
        if len(widths) > 1:
            raise ValueError(f"every example needs the same number of endings; found {widths}")
        _check_lengths(x[0], x[1], y, sample_weight)


class BertTokenClassifierPreprocessor(BertPreprocessor):
    """Word lists (+ tag lists) → features with each word's tag id on its first WordPiece.

    As in `kbert.tasks.ner` (whose `encode_ner` this runs): the other pieces, `[CLS]`,
    `[SEP]` and padding get label 0 and sample weight 0, so the loss and the accuracy count
    each word once. Tags are label names (or their ids); `labels` is required.
    """

    labels: list[str]      # required here (the base class allows None)

    def __init__(self, vocab: list | str, lower_case: bool = True, max_seq_length: int = 128,
                 labels: list | None = None, **kwargs: Any) -> None:
        if not labels:
            raise ValueError("token classification needs `labels` (the tag names, 'O' first)")
        super().__init__(vocab, lower_case, max_seq_length, labels, **kwargs)

    def _encode(self, words: Tensor, splits: Tensor, tags: Tensor,
                has_tags: Tensor) -> tuple[np.ndarray, ...]:
        words = [w.decode("utf-8") for w in words.numpy()]
        tags = tags.numpy()
        if bool(has_tags.numpy()):
            tags = [t.decode("utf-8") if isinstance(t, bytes) else self.labels[int(t)]
                    for t in tags]
        else:
            tags = [self.labels[0]] * len(words)
        bounds = splits.numpy()
        sentences = [ner.Sentence(words[a:b], tags[a:b], line=i + 1)
                     for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        f = ner.encode_ner(self.tokenizer, sentences, self.labels, self.max_seq_length).features
        f = pad_to_multiple(f, self.pad_to_multiple_of, self.max_seq_length,
                            self.tokenizer.pad_id)
        return (f["input_ids"], f["segment_ids"], f["input_mask"],
                np.maximum(f["label_ids"], 0), f["label_weights"])

    def call(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> Any:
        words = _ragged(x, tf.string)
        tags = _ragged(y) if y is not None else tf.RaggedTensor.from_row_splits(
            tf.zeros_like(words.flat_values, tf.int32), words.row_splits)
        out = tf.py_function(
            self._encode, [words.flat_values, words.row_splits, tags.flat_values,
                           tf.constant(y is not None)],
            [tf.int32, tf.int32, tf.int32, tf.int32, tf.float32])
        for t in out:
            t.set_shape([None, None])
        features = dict(zip(("input_ids", "segment_ids", "input_mask"), out[:3]))
        if y is None:
            return features
        weights = out[4]
        if sample_weight is not None:
            weights *= tf.cast(tf.reshape(sample_weight, [-1, 1]), tf.float32)
        return features, out[3], weights

    def check(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> None:
        _check_lengths(x, y, sample_weight)
        for i, words in enumerate(x):
            if isinstance(words, str):
                raise ValueError(f"example {i}: token classification takes lists of words, "
                                 "not strings")
            if y is not None and len(y[i]) != len(words):
                raise ValueError(f"example {i}: {len(words)} words but {len(y[i])} tags")
            for tag in (y[i] if y is not None else []):
                if isinstance(tag, str) and tag not in self.labels:
                    raise ValueError(f"example {i}: tag {tag!r} is not one of "
                                     f"{', '.join(self.labels)}")


class BertQuestionAnswererPreprocessor(BertPreprocessor):
    """`(questions, contexts)` (+ `(answer_starts, answer_texts)`) → SQuAD windows.

    `kbert.tasks.squad.encode_squad` makes the features: `[CLS] question [SEP] window
    [SEP]`, windows `doc_stride` tokens apart, so one long context gives several rows (a
    window without the answer, and an answer text "" — no answer, SQuAD 2.0 — point at
    `[CLS]`). Targets are `{"start_logits", "end_logits"}` token positions.
    """

    def __init__(self, vocab: list | str, lower_case: bool = True, max_seq_length: int = 384,
                 labels: list | None = None, doc_stride: int = squad.DOC_STRIDE,
                 max_query_length: int = squad.MAX_QUERY_LENGTH, **kwargs: Any) -> None:
        super().__init__(vocab, lower_case, max_seq_length, None, **kwargs)
        self.doc_stride, self.max_query_length = int(doc_stride), int(max_query_length)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "doc_stride": self.doc_stride,
                "max_query_length": self.max_query_length}

    def _encode(self, questions: Tensor, contexts: Tensor, starts: Tensor, texts: Tensor,
                has_answers: Tensor) -> tuple[np.ndarray, ...]:
        training = bool(has_answers.numpy())
        examples = []
        for i, (q, c) in enumerate(zip(questions.numpy(), contexts.numpy())):
            example = squad.SquadExample(str(i), q.decode("utf-8"), c.decode("utf-8"), [])
            if training:
                text = texts.numpy()[i].decode("utf-8")
                example.is_impossible = not text
                if text:
                    example.answer_text, example.answer_start = text, int(starts.numpy()[i])
            examples.append(example)
        f = squad.encode_squad(self.tokenizer, examples, training, self.max_seq_length,
                               self.doc_stride, self.max_query_length).features
        f = pad_to_multiple(f, self.pad_to_multiple_of, self.max_seq_length,
                            self.tokenizer.pad_id)
        zeros = np.zeros(len(f["input_ids"]), "int32")
        return (f["input_ids"], f["segment_ids"], f["input_mask"],
                f.get("start_positions", zeros), f.get("end_positions", zeros))

    def call(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> Any:
        if sample_weight is not None:
            raise ValueError("question answering takes no sample_weight (a context may give "
                             "several windows)")
        questions, contexts = (tf.reshape(tf.convert_to_tensor(t, tf.string), [-1]) for t in x)
        starts, texts = y if y is not None else (tf.zeros_like(questions, tf.int32),
                                                 tf.zeros_like(questions))
        out = tf.py_function(
            self._encode, [questions, contexts, tf.cast(starts, tf.int32),
                           tf.convert_to_tensor(texts, tf.string), tf.constant(y is not None)],
            [tf.int32] * 5)
        for t in out[:3]:
            t.set_shape([None, None])
        for t in out[3:]:
            t.set_shape([None])
        features = dict(zip(("input_ids", "segment_ids", "input_mask"), out[:3]))
        if y is None:
            return features
        return features, {"start_logits": out[3], "end_logits": out[4]}

    def check(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> None:
        if not isinstance(x, tuple) or len(x) != 2:
            raise ValueError("question answering takes x=(questions, contexts)")
        _check_lengths(x[0], x[1], *(y or ()))
        for i, (start, text) in enumerate(zip(*y) if y is not None else ()):
            if text and x[1][i][int(start):int(start) + len(text)] != text:
                raise ValueError(f"example {i}: the context at {start} is not the answer "
                                 f"{text!r}")


class BertBiEncoderPreprocessor(BertPreprocessor):
    """Texts → features to embed; `(queries, positives[, negatives])` → one set of features per
    column (each padded to its own longest row) for `kbert.models.BertBiEncoder`.

    `negatives` is one text per query or `[B, k]` texts. The target of query i is its own
    positive, column i of the scores (`y` is `range(B)`); `document_keys` (a hash of every
    positive and negative text) lets the model drop a copy of query i's positive elsewhere in
    the batch from its negatives — two questions on one paragraph are common.
    """

    COLUMNS = ("query", "positive", "negative")

    def call(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> Any:
        if not isinstance(x, tuple):
            return keras.utils.pack_x_y_sample_weight(self._pack(x), None, sample_weight)
        columns = [tf.reshape(tf.convert_to_tensor(t, tf.string), [-1]) for t in x]
        features: dict[str, Any] = {name: self._pack(texts)
                                    for name, texts in zip(self.COLUMNS, columns)}
        documents = tf.concat(columns[1:], axis=0)                       # positives, negatives
        features["document_keys"] = tf.cast(
            tf.strings.to_hash_bucket_fast(documents, 2 ** 31 - 1), tf.int32)
        return keras.utils.pack_x_y_sample_weight(
            features, tf.range(tf.shape(columns[0])[0]), sample_weight)

    def dataset(self, x: Raw, y: Raw = None, sample_weight: Raw = None, batch_size: int = 32,
                shuffle: bool = False, seed: int | None = None) -> tf.data.Dataset:
        """As `BertPreprocessor.dataset`; shuffled training pairs come in
        `batching.distinct_batches` (similar passage lengths, no passage twice in a batch,
        a new order each epoch)."""
        if not (shuffle and isinstance(x, tuple)) or sample_weight is not None:
            return super().dataset(x, y, sample_weight, batch_size, shuffle, seed)
        self.check(x, y, sample_weight)
        columns = [np.asarray([list(v) if not isinstance(v, str) else v for v in c], object)
                   if i == 2 else np.asarray(c, object) for i, c in enumerate(x)]
        lengths = [len(ids) for ids in self.tokenizer.encode_batch([str(t) for t in columns[1]])]
        epoch = [int(np.random.randint(2 ** 31)) if seed is None else seed]
        join_single = len(columns) == 2     # without negatives, one pair alone learns nothing

        def generate() -> Iterator[tuple[tuple[np.ndarray, ...]]]:
            epoch[0] += 1
            for rows in batching.distinct_batches(lengths, columns[1], batch_size, epoch[0],
                                                  join_single=join_single):
                yield (tuple(c[rows].astype(str) for c in columns),)

        signature = tuple(tf.TensorSpec((None,) * c.ndim, tf.string) for c in columns)
        count = batching.distinct_batch_count(len(lengths), batch_size, join_single)
        ds = tf.data.Dataset.from_generator(generate, output_signature=(signature,))
        return ds.apply(tf.data.experimental.assert_cardinality(count)).map(
            lambda *e: self(*e)).prefetch(tf.data.AUTOTUNE)

    def check(self, x: Raw, y: Raw = None, sample_weight: Raw = None) -> None:
        if y is not None:
            raise ValueError("a bi-encoder takes no labels: each query's positive is its target")
        if not isinstance(x, tuple):
            return _check_lengths(x, sample_weight)
        if len(x) not in (2, 3):
            raise ValueError("a bi-encoder trains on x=(queries, positives) or "
                             "(queries, positives, negatives)")
        _check_lengths(*x, sample_weight)
        if len(x) == 3 and len({1 if isinstance(n, str) else len(n) for n in x[2]}) > 1:
            raise ValueError("every query needs the same number of negatives")


PREPROCESSORS = {"classifier": BertPreprocessor, "tagger": BertTokenClassifierPreprocessor,
                 "span": BertQuestionAnswererPreprocessor,
                 "choice": BertMultipleChoicePreprocessor}
