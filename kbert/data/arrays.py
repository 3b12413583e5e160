"""Pretraining data as NumPy arrays: `model.fit` where TensorFlow is not installed.

`kbert pretrain` reads TFRecord shards (or text) through tf.data. A machine with JAX or PyTorch
but no TensorFlow gets the same features from arrays:

- where TensorFlow is, tokenize once: `token_documents` (documents as token ids, a few bytes a
  token) or `from_dataset` (a tf.data stream of feature batches — held-out shards, packed
  full sentences — as arrays); `save` them (`.npz`);
- there, `segment_pairs` makes BERT's instances (50% NotNext, 15% masking 80/10/10) with the
  code of `kbert create-pretraining-data`, `DynamicMasking` re-masks rows anew for every batch
  (the NumPy twin of `kbert.data.inputs.DynamicMasking`: the same rule), `targets` gives the
  (x, y, sample_weight) of each objective (the twins of `kbert.data.inputs.targets_for`) and
  `PretrainingBatches` feeds `fit` and `evaluate`.

Example:
>>> data = load("corpus.npz")                                       # doctest: +SKIP
>>> arrays = segment_pairs(data, Options(dupe_factor=5))            # doctest: +SKIP
>>> model.fit(PretrainingBatches(arrays, 256, steps_per_epoch=500))  # doctest: +SKIP
"""

from __future__ import annotations

import multiprocessing
import os
import random
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from kbert.data.instances import FEATURES, Instance, Options
from kbert.network.config import check_special_tokens
from kbert.wording import plural

# Named arrays: features [N, ...] (FEATURES), or `token_documents`' tokens and lengths.
Arrays = dict[str, np.ndarray]

INPUTS = ("input_ids", "segment_ids", "input_mask", "masked_lm_positions")  # the model's inputs
OBJECTIVES = ("mlm_nsp", "mlm", "ltr")


# --- to arrays (TensorFlow) and back ------------------------------------------------------------
def token_documents(files: Sequence[str], vocab: str | list[str],
                    lower_case: bool = True) -> dict[str, Any]:
    """Text files → {"tokens", "sentence_lengths", "document_lengths", "vocab"}: every
    document's sentences as WordPiece ids (uint16 for vocabularies under 65,536 tokens), the
    sentence splitting and tokenizing of `kbert create-pretraining-data` (TensorFlow Text)."""
    from kbert.data.pretraining import iter_blocks, tokenize_documents
    from kbert.network.config import read_vocab
    from kbert.tokenizer import Tokenizer
    vocab = read_vocab(vocab) if isinstance(vocab, (str, os.PathLike)) else list(vocab)
    tokenizer = Tokenizer(vocab, lower_case)
    tokens, sentence_lengths, document_lengths = [], [], []
    for block in iter_blocks(files):
        for document in tokenize_documents(block, tokenizer):
            document_lengths.append(len(document))
            for sentence in document:
                sentence_lengths.append(len(sentence))
                tokens.extend(sentence)
    dtype = np.uint16 if len(vocab) <= 1 << 16 else np.int32
    return {"tokens": np.asarray(tokens, dtype),
            "sentence_lengths": np.asarray(sentence_lengths, np.int32),
            "document_lengths": np.asarray(document_lengths, np.int32),
            "vocab": np.asarray(vocab)}


def from_dataset(ds: Any, keys: Sequence[str] = FEATURES) -> Arrays:
    """A tf.data stream of feature-dict batches → one dict of arrays (`keys` of them)."""
    parts = [{k: v.numpy() for k, v in batch.items() if k in keys} for batch in ds]
    if not parts:
        raise ValueError("the stream holds no batches")
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def save(path: str | os.PathLike, arrays: dict[str, Any]) -> None:
    """Writes `arrays` to a compressed `.npz`, atomically."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def load(path: str | os.PathLike) -> dict[str, Any]:
    """The dict of arrays in a `.npz`, loaded into memory, integers as int32 (whatever type
    they were stored in)."""
    with np.load(path) as data:
        return {k: data[k].astype(np.int32) if data[k].dtype.kind in "iu" else data[k]
                for k in data.files}


def documents(data: dict[str, Any]) -> list[list[list[int]]]:
    """The {"tokens", "sentence_lengths", "document_lengths"} arrays → documents, each a list
    of sentences, each a list of ids."""
    tokens = data["tokens"].astype(np.int64).tolist()
    ends = np.cumsum(data["sentence_lengths"])
    sentences = [tokens[e - n:e] for e, n in zip(ends.tolist(),
                                                 data["sentence_lengths"].tolist())]
    doc_ends = np.cumsum(data["document_lengths"])
    return [sentences[e - n:e] for e, n in zip(doc_ends.tolist(),
                                               data["document_lengths"].tolist())]


# --- BERT's instances, in pure Python ------------------------------------------------------------
# the documents the worker processes read (inherited through fork)
_DOCUMENTS: list[list[list[int]]] | None = None


class _Vocabulary:
    def __init__(self, vocab: Sequence[str]) -> None:
        from kbert.data.instances import Vocabulary
        self.vocab = list(vocab)
        check_special_tokens(self.vocab)
        self.cls_id, self.sep_id, self.mask_id = (self.vocab.index(t) for t in
                                                  ("[CLS]", "[SEP]", "[MASK]"))
        self.masking = Vocabulary(self)


def _instances(job: tuple[int, int, int, int, Options, _Vocabulary]) -> list[Instance]:
    from kbert.data.instances import create_instances_from_document
    seed, dupe, start, stop, options, vocab = job
    rng = random.Random(f"{seed}/{dupe}/{start}")
    out = []
    for d in range(start, stop):
        out.extend(create_instances_from_document(
            _DOCUMENTS, d, options, vocab.masking, rng))  # type: ignore[arg-type]  # segment_pairs set it
    return out


def segment_pairs(data: dict[str, Any],
                  options: Options = Options(),
                  workers: int | None = None) -> Arrays:
    """`token_documents`' arrays → BERT's pretraining features as arrays (`FEATURES`, padded),
    `options.dupe_factor` passes over the documents with different masks and pairs, shuffled.

    The instances come from `kbert.data.pretraining.create_instances_from_document`, the code
    `kbert create-pretraining-data` writes shards with (the random draws differ: they are
    seeded per group of 16 documents here)."""
    global _DOCUMENTS
    _DOCUMENTS = documents(data)
    vocab = _Vocabulary(data["vocab"].tolist())
    step, seed = 16, options.seed
    jobs = [(seed, dupe, s, min(s + step, len(_DOCUMENTS)), options, vocab)
            for dupe in range(options.dupe_factor) for s in range(0, len(_DOCUMENTS), step)]
    workers = workers or len(os.sched_getaffinity(0))
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            instances = [i for part in pool.imap(_instances, jobs, chunksize=4) for i in part]
    else:
        instances = [i for job in jobs for i in _instances(job)]
    _DOCUMENTS = None
    if not instances:
        raise ValueError("no instances: the documents are empty")
    random.Random(f"{seed}/shuffle").shuffle(instances)
    n, T, P = len(instances), options.max_seq_length, options.max_predictions_per_seq
    arrays = {k: np.zeros((n, P if k.startswith("masked") else T), np.int32) for k in FEATURES}
    arrays["masked_lm_weights"] = np.zeros((n, P), np.float32)
    arrays["next_sentence_labels"] = np.zeros((n, 1), np.int32)
    for i, inst in enumerate(instances):
        k, m = len(inst.input_ids), len(inst.masked_lm_positions)
        arrays["input_ids"][i, :k] = inst.input_ids
        arrays["segment_ids"][i, :k] = inst.segment_ids
        arrays["input_mask"][i, :k] = 1
        arrays["masked_lm_positions"][i, :m] = inst.masked_lm_positions
        arrays["masked_lm_ids"][i, :m] = inst.masked_lm_ids
        arrays["masked_lm_weights"][i, :m] = 1.0
        arrays["next_sentence_labels"][i, 0] = int(inst.is_random_next)
    return arrays


# --- masking and targets (NumPy twins of kbert.data.inputs) --------------------------------------
def unmask(arrays: Arrays) -> Arrays:
    """The original tokens put back at the masked positions."""
    ids = np.array(arrays["input_ids"], copy=True)
    rows, cols = np.nonzero(arrays["masked_lm_weights"] > 0)
    ids[rows, arrays["masked_lm_positions"][rows, cols]] = arrays["masked_lm_ids"][rows, cols]
    return dict(arrays, input_ids=ids)


class DynamicMasking:
    """RoBERTa's dynamic masking of (unmasked) rows, the rule of
    `kbert.data.inputs.DynamicMasking`: `min(P, max(1, round(n * prob)))` of the n non-special
    real tokens of a row are predicted; 80% become `[MASK]`, 10% a random real word, 10% stay.

    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
    >>> rows = {"input_ids": np.array([[2, 5, 6, 7, 5, 3, 0, 0]]),
    ...         "input_mask": np.array([[1, 1, 1, 1, 1, 1, 0, 0]])}
    >>> out = DynamicMasking(vocab, 4, 0.5)(rows, np.random.default_rng(0))
    >>> int(out["masked_lm_weights"].sum()), out["masked_lm_positions"].shape
    (2, (1, 4))
    """

    def __init__(self, vocab: Sequence[str], max_predictions_per_seq: int = 20,
                 masked_lm_prob: float = 0.15) -> None:
        vocab = list(vocab)
        check_special_tokens(vocab)
        self.mask_id = vocab.index("[MASK]")
        self.is_special = np.array([t.startswith("[") and t.endswith("]") for t in vocab])
        self.word_ids = np.flatnonzero(~self.is_special).astype(np.int32)
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob

    def __call__(self, arrays: Arrays, rng: np.random.Generator) -> Arrays:
        ids = np.asarray(arrays["input_ids"])
        B, T = ids.shape
        P = self.max_predictions_per_seq
        eligible = (np.asarray(arrays["input_mask"]) > 0) & ~self.is_special[ids]
        n = eligible.sum(-1)
        k = np.minimum(np.minimum(P, np.maximum(1, np.round(n * self.masked_lm_prob))), n)
        scores = np.where(eligible, rng.random((B, T)), -1.0)
        top = np.argsort(-scores, axis=-1, kind="stable")[:, :min(P, T)]          # [B, P']
        chosen = np.arange(top.shape[1])[None, :] < k[:, None]
        positions = np.sort(np.where(chosen, top, T), axis=-1)
        chosen = positions < T
        positions = np.where(chosen, positions, 0)
        labels = np.where(chosen, np.take_along_axis(ids, positions, 1), 0)
        u = rng.random(positions.shape)
        random_words = self.word_ids[rng.integers(0, len(self.word_ids), positions.shape)]
        new = np.where(u < 0.8, self.mask_id, np.where(u < 0.9, random_words, labels))
        masked = ids.copy()
        r, c = np.nonzero(chosen)
        masked[r, positions[r, c]] = new[r, c]
        pad = ((0, 0), (0, P - positions.shape[1]))
        return dict(arrays, input_ids=masked.astype(np.int32),
                    masked_lm_positions=np.pad(positions, pad).astype(np.int32),
                    masked_lm_ids=np.pad(labels, pad).astype(np.int32),
                    masked_lm_weights=np.pad(chosen, pad).astype(np.float32))


def targets(arrays: Arrays, objective: str = "mlm_nsp") -> tuple[Any, Any, Any]:
    """Feature arrays → the (x, y, sample_weight) of a pretraining objective: "mlm_nsp" (the
    paper's), "mlm" (no NSP), "ltr" (left-to-right LM: masks put back, label t = token t + 1,
    weight 1 where that token is real); twins of `kbert.data.inputs.targets_for`."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown pretraining objective {objective!r}; choose mlm_nsp, mlm "
                         "or ltr")
    if objective == "ltr":
        arrays = unmask(arrays)
        ids, mask = arrays["input_ids"], arrays["input_mask"]
        x = {"input_ids": ids, "segment_ids": arrays["segment_ids"], "input_mask": mask}
        labels = np.concatenate([ids[:, 1:], np.zeros_like(ids[:, :1])], 1)
        weights = np.concatenate([mask[:, 1:], np.zeros_like(mask[:, :1])], 1)
        return x, {"lm_logits": labels}, {"lm_logits": weights.astype(np.float32)}
    x = {k: arrays[k] for k in INPUTS}
    y = {"mlm_logits": arrays["masked_lm_ids"]}
    w = {"mlm_logits": arrays["masked_lm_weights"]}
    if objective == "mlm_nsp":
        y["nsp_logits"] = arrays["next_sentence_labels"]
        w["nsp_logits"] = arrays.get("next_sentence_weights",
                                     np.ones(len(arrays["input_ids"]), np.float32))
    return x, y, w


class PretrainingBatches(keras.utils.PyDataset):
    """(x, y, sample_weight) batches of feature arrays for `fit` / `evaluate`.

    Training (`shuffle=True`): `steps_per_epoch` batches a Keras epoch, drawn in order from
    passes over the rows, each pass in a new seeded order (rows left over at the end of a
    pass are skipped); with `masking` every batch is masked anew, seeded by its number, so
    a run repeats. Evaluation (`shuffle=False`): every row once, in order.
    """

    def __init__(self, arrays: Arrays, batch_size: int, objective: str = "mlm_nsp",
                 steps_per_epoch: int | None = None, shuffle: bool = True,
                 masking: DynamicMasking | None = None, seed: int = 0) -> None:
        super().__init__()
        self.arrays, self.batch_size, self.objective = arrays, batch_size, objective
        self.masking, self.shuffle, self.seed = masking, shuffle, seed
        self.rows = len(arrays["input_ids"])
        self.per_pass = (self.rows // batch_size if shuffle
                         else -(-self.rows // batch_size))
        if self.per_pass < 1:
            raise ValueError(f"{plural(self.rows, 'row')}: too few for a batch of {batch_size}")
        self.steps_per_epoch = steps_per_epoch or self.per_pass
        self._orders: dict[int, np.ndarray]
        self.epoch, self._orders = 0, {}

    def __len__(self) -> int:
        return self.steps_per_epoch

    def on_epoch_end(self) -> None:
        self.epoch += 1

    def _order(self, p: int) -> np.ndarray:
        if p not in self._orders:
            self._orders = {p: np.random.default_rng([self.seed, p]).permutation(self.rows)}
        return self._orders[p]

    def __getitem__(self, i: int) -> tuple[Any, Any, Any]:
        if not self.shuffle:
            index = np.arange(i * self.batch_size, min((i + 1) * self.batch_size, self.rows))
            number = i
        else:
            number = self.epoch * self.steps_per_epoch + i
            p, b = divmod(number, self.per_pass)
            index = self._order(p)[b * self.batch_size:(b + 1) * self.batch_size]
        rows = {k: v[index] for k, v in self.arrays.items()}
        if self.masking is not None:
            rows = self.masking(rows, np.random.default_rng([self.seed, 1, number]))
        return targets(rows, self.objective)
