"""Pretraining instances: tokenized documents → sentence pairs → masked LM features (NumPy;
no TensorFlow). `kbert.data.pretraining` writes them as TFRecord shards, `kbert.data.arrays`
keeps them as arrays.

The algorithm is google-research/bert's `create_pretraining_data.py`:
- segments (runs of whole sentences) fill `max_seq_length - 3` tokens, or with probability
  `short_seq_prob` a random shorter target length (2 …);
- 50% of the time B is the actual continuation of A (IsNext, label 0), otherwise B starts at a
  random sentence of another document (NotNext, label 1) and the unused segments of this one
  are put back for the next instance;
- `[CLS] A [SEP] B [SEP]`, segment ids 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`, the pair
  truncated from a random end of the longer side;
- `min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))` of the n non-special tokens
  are predicted (whole words with `whole_word_mask`): 80% become `[MASK]`, 10% a random word,
  10% stay as they are.

Where it differs, on purpose:
- STREAMING: the original holds every document in memory. Here documents are read in blocks of
  about `block_size` sentences; the random "other document" comes from the same block, and
  instances are shuffled within the block. Memory is bounded by the block, not the corpus.
- 50/50 exactly: a one-segment chunk is not forced to NotNext (see below).
- `n` above counts the maskable tokens (the original counts `[CLS]`/`[SEP]` too), so exactly
  15% of what can be masked is; random replacements are drawn from real words only (no
  `[PAD]`, `[unused*]`, …).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import random
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

# The tf.train.Example features of a pretraining shard (all int64 but masked_lm_weights).
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")
Instance = collections.namedtuple(
    "Instance", "input_ids segment_ids masked_lm_positions masked_lm_ids is_random_next")


class Options(NamedTuple):
    """The knobs of `create_pretraining_data`, with the original defaults."""
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    whole_word_mask: bool = False
    seed: int = 12345

# A tokenized corpus: documents, each a list of sentences, each a list of token ids.
Documents = Sequence[Sequence[Sequence[int]]]


def check_options(options: Options) -> None:
    """Refuses, in one line, options that would fail deep inside or make wrong data.

    >>> check_options(Options(masked_lm_prob=2))
    Traceback (most recent call last):
    ValueError: masked_lm_prob must be in (0, 1], got 2
    """
    o = options
    if not isinstance(o.max_seq_length, int) or o.max_seq_length < 5:
        raise ValueError(f"max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP] with A and "
                         f"B of 1+ tokens), got {o.max_seq_length}")
    if not isinstance(o.max_predictions_per_seq, int) or o.max_predictions_per_seq < 1:
        raise ValueError(f"max_predictions_per_seq must be at least 1, got "
                         f"{o.max_predictions_per_seq}")
    if not 0.0 < o.masked_lm_prob <= 1.0:
        raise ValueError(f"masked_lm_prob must be in (0, 1], got {o.masked_lm_prob}")
    if not 0.0 <= o.short_seq_prob <= 1.0:
        raise ValueError(f"short_seq_prob must be in [0, 1], got {o.short_seq_prob}")
    if not isinstance(o.dupe_factor, int) or o.dupe_factor < 1:
        raise ValueError(f"dupe_factor must be at least 1, got {o.dupe_factor}")


class Vocabulary:
    """What masking needs to know about the ids: specials, word pieces, real words."""

    def __init__(self, tokenizer: Any) -> None:   # a Tokenizer, or its vocab and special ids
        vocab = tokenizer.vocab
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
        self.mask_id = tokenizer.mask_id
        self.is_continuation = np.array([t.startswith("##") for t in vocab])
        self.words = np.array([i for i, t in enumerate(vocab)
                               if not (t.startswith("[") and t.endswith("]"))], np.int64)
        if not len(self.words):
            raise ValueError("vocabulary has no tokens besides the special ones")


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                      rng: random.Random) -> None:
    """Cut the longer list, one token at a time from its front or back at random, until the pair
    fits (in place). How many tokens each list loses depends on the lengths alone; each cut is
    from the front with probability 1/2, so one draw of random bits decides them all.

    >>> a, b = list(range(5)), list(range(10, 13))
    >>> truncate_seq_pair(a, b, 4, random.Random(0)); len(a), len(b)
    (2, 2)
    """
    cut_a, cut_b = _cuts(len(tokens_a), len(tokens_b), max_num_tokens)
    for tokens, cut in ((tokens_a, cut_a), (tokens_b, cut_b)):
        if cut:
            front = bin(rng.getrandbits(cut)).count("1")
            del tokens[:front]
            del tokens[len(tokens) - (cut - front):]


def _cuts(len_a: int, len_b: int, max_num_tokens: int) -> tuple[int, int]:
    """Tokens cut from A and from B: the longer loses one until they are even, then B, A, B ...
    (the original's loop, which cuts B when the two are as long)."""
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0, 0
    first = min(excess, abs(len_a - len_b))
    rest = excess - first
    return (rest // 2 + (first if len_a > len_b else 0),
            rest - rest // 2 + (first if len_a <= len_b else 0))


# A sentence pair before masking: `[CLS] A [SEP] B [SEP]` ids and the length of A.
Pair = collections.namedtuple("Pair", "tokens len_a is_random_next")


def create_pairs_from_document(documents: Documents, index: int, options: Options,
                               vocab: Vocabulary, rng: random.Random) -> list[Pair]:
    """One document (a list of sentences, each a list of ids) → its sentence pairs (`Pair`s)."""
    document = documents[index]
    max_num_tokens = options.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    pairs, current_chunk, current_length, i = [], [], 0, 0
    while i < len(document):
        current_chunk.append(document[i])
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:
            is_random_next = len(documents) > 1 and rng.random() < 0.5
            if not is_random_next and len(current_chunk) == 1:
                # The original makes every one-segment chunk NotNext, which skews the labels
                # (53% NotNext on our corpus); here B is the next sentence, or none is made.
                if i + 1 < len(document):
                    i += 1
                    current_chunk.append(document[i])
                else:
                    current_chunk = []
            if current_chunk:
                a_end = rng.randint(1, len(current_chunk) - 1) if len(current_chunk) >= 2 else 1
                tokens_a = [t for s in current_chunk[:a_end] for t in s]
                tokens_b: list[int] = []
                if is_random_next:
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        other = rng.randint(0, len(documents) - 1)
                        if other != index:
                            break
                    other_document = documents[other]
                    for sentence in other_document[rng.randint(0, len(other_document) - 1):]:
                        tokens_b.extend(sentence)
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(current_chunk) - a_end      # put the unused segments back
                else:
                    tokens_b = [t for s in current_chunk[a_end:] for t in s]
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if tokens_a and tokens_b:
                    pairs.append(Pair([vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b,
                                       vocab.sep_id], len(tokens_a), is_random_next))
            current_chunk, current_length = [], 0
        i += 1
    return pairs


def pad_pairs(pairs: Sequence[Pair], max_seq_length: int) -> dict[str, np.ndarray]:
    """`Pair`s → `input_ids`, `segment_ids`, `input_mask` [N, T] and `next_sentence_labels`
    [N, 1], int64 numpy arrays, zero-padded."""
    n = len(pairs)
    lengths = np.fromiter((len(p.tokens) for p in pairs), np.int64, n)
    len_a = np.fromiter((p.len_a for p in pairs), np.int64, n)
    columns = np.arange(max_seq_length)
    input_mask = (columns < lengths[:, None]).astype(np.int64)
    input_ids = np.zeros((n, max_seq_length), np.int64)
    input_ids[input_mask.astype(bool)] = np.fromiter(
        itertools.chain.from_iterable(p.tokens for p in pairs), np.int64, int(lengths.sum()))
    segment_ids = input_mask * (columns >= (len_a + 2)[:, None])
    labels = np.fromiter((p.is_random_next for p in pairs), np.int64, n)[:, None]
    return {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask,
            "next_sentence_labels": labels}


def mask_tokens(input_ids: np.ndarray, input_mask: np.ndarray, options: Options,
                vocab: Vocabulary, rng: np.random.Generator,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Masked LM on padded rows of `[CLS] A [SEP] B [SEP]`, all rows at once (NumPy).

    Each row predicts `min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))` of its
    n maskable tokens (whole words with `whole_word_mask`), chosen at random; 80% become
    `[MASK]`, 10% a random word, 10% stay. `rng` is a `numpy.random.Generator`.
    Returns the masked ids [N, T] and `masked_lm_positions`, `masked_lm_ids`,
    `masked_lm_weights` [N, P] (positions ascending, zero-padded).

    >>> class V: cls_id, sep_id, mask_id, words = 2, 3, 4, np.array([5, 6])
    >>> V.is_continuation = np.zeros(7, bool)
    >>> ids, mask = np.array([[2, 5, 6, 5, 3, 0]]), np.array([[1, 1, 1, 1, 1, 0]])
    >>> out, pos, labels, w = mask_tokens(ids, mask, Options(), V, np.random.default_rng(0))
    >>> int(w.sum()), bool(out[0, pos[0, 0]] in (4, 5, 6)), bool(labels[0, 0] == ids[0, pos[0, 0]])
    (1, True, True)
    """
    n_rows, length = input_ids.shape
    eligible = input_mask.astype(bool) & (input_ids != vocab.cls_id) & (input_ids != vocab.sep_id)
    n = eligible.sum(axis=1)
    k = np.minimum(options.max_predictions_per_seq,
                   np.maximum(1, np.rint(n * options.masked_lm_prob).astype(np.int64)))
    keys = np.where(eligible, rng.random((n_rows, length)), 2.0)
    if options.whole_word_mask:
        selected = _whole_words(input_ids, eligible, keys, k, vocab)
    else:                                       # the k eligible tokens of smallest key
        rank = np.empty_like(input_ids)
        np.put_along_axis(rank, np.argsort(keys, axis=1, kind="stable"),
                          np.arange(length)[None, :], axis=1)
        selected = eligible & (rank < k[:, None])
    draw = rng.random((n_rows, length))
    random_words = vocab.words[rng.integers(0, len(vocab.words), (n_rows, length))]
    output = np.where(selected & (draw < 0.8), vocab.mask_id, input_ids)
    output = np.where(selected & (draw >= 0.9), random_words, output)
    count = selected.sum(axis=1)
    p = options.max_predictions_per_seq
    positions = np.argsort(~selected, axis=1, kind="stable")[:, :p]   # selected ones first
    positions = np.pad(positions, ((0, 0), (0, p - positions.shape[1])))  # when p > T
    real = np.arange(p)[None, :] < count[:, None]
    positions = np.where(real, positions, 0)
    labels = np.where(real, np.take_along_axis(input_ids, positions, axis=1), 0)
    return output, positions, labels, real.astype(np.float32)


def _whole_words(input_ids: np.ndarray, eligible: np.ndarray, keys: np.ndarray, k: np.ndarray,
                 vocab: Vocabulary) -> np.ndarray:
    """Whole-word selection: a `##` piece right after an eligible token joins its word; words
    are taken in key order, skipping one that would overshoot k (as the original does)."""
    previous = np.zeros_like(eligible)
    previous[:, 1:] = eligible[:, :-1]
    starts = eligible & ~(vocab.is_continuation[input_ids] & previous)
    word = np.cumsum(starts, axis=1) - 1                     # word index of each token
    selected = np.zeros_like(eligible)
    for r in range(len(input_ids)):
        first = np.flatnonzero(starts[r])
        sizes = np.bincount(word[r][eligible[r]], minlength=len(first))
        chosen, total = [], 0
        for w in np.argsort(keys[r, first], kind="stable").tolist():
            if total >= k[r]:
                break
            if total + sizes[w] <= k[r]:
                chosen.append(w)
                total += sizes[w]
        selected[r] = eligible[r] & np.isin(word[r], chosen)
    return selected


def create_instances_from_document(documents: Documents, index: int, options: Options,
                                   vocab: Vocabulary, rng: random.Random) -> list[Instance]:
    """One document → its masked training instances (`Instance`s of lists), `rng` a
    `random.Random`; `write_block` does the same for a whole block at once."""
    pairs = create_pairs_from_document(documents, index, options, vocab, rng)
    if not pairs:
        return []
    f = pad_pairs(pairs, options.max_seq_length)
    ids, positions, labels, weights = mask_tokens(
        f["input_ids"], f["input_mask"], options, vocab,
        np.random.default_rng(rng.getrandbits(64)))
    instances = []
    for r, pair in enumerate(pairs):
        m = int(weights[r].sum())
        instances.append(Instance(
            ids[r, :len(pair.tokens)].tolist(), f["segment_ids"][r, :len(pair.tokens)].tolist(),
            positions[r, :m].tolist(), labels[r, :m].tolist(), pair.is_random_next))
    return instances


def _generator(*parts: int | str) -> np.random.Generator:
    """A NumPy generator seeded by a string of `parts` (any ints, negative ones too)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def make_features(documents: Documents, index: int, options: Options,
                  masking: Vocabulary) -> dict[str, np.ndarray] | None:
    """A block's tokenized documents → its feature arrays (rows of `FEATURES`), shuffled; every
    random choice is seeded by (seed, block index), so a block gives the same rows anywhere."""
    pairs = []
    for dupe in range(options.dupe_factor):
        rng = random.Random(f"{options.seed}/{index}/{dupe}")
        for d in range(len(documents)):
            pairs.extend(create_pairs_from_document(documents, d, options, masking, rng))
    if not pairs:
        return None
    features = pad_pairs(pairs, options.max_seq_length)
    generator = _generator(options.seed, index, "mask")
    (features["input_ids"], features["masked_lm_positions"], features["masked_lm_ids"],
     features["masked_lm_weights"]) = mask_tokens(features["input_ids"], features["input_mask"],
                                                  options, masking, generator)
    order = generator.permutation(len(pairs))
    features = {name: values[order] for name, values in features.items()}
    return features
