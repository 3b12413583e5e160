"""Dynamic padding: batches of examples of similar length, each padded to its own longest row.

Feature builders pad every example to the longest in the whole set; here each batch is cut back
to the longest row it holds, and with `bucket=True` examples are grouped by length first
(sort within shuffled pools of `pool` batches, then shuffle the batches), so a batch of short
sentences is not padded to 128.

Example:
>>> import numpy as np
>>> f = {"input_ids": np.array([[2, 5, 3, 0], [2, 5, 6, 3], [2, 3, 0, 0]]),
...      "input_mask": np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]),
...      "label_ids": np.array([0, 1, 0])}
>>> [(i.tolist(), b["input_ids"].shape) for i, b in batches(f, 2, bucket=True)]
[([2, 0], (2, 3)), ([1], (1, 4))]
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import keras
import numpy as np

SEQUENCE_KEYS_OF = "input_ids"  # arrays shaped like it (.., T) are cut with it
LADDER_WIDTHS = 7     # `width_ladder`: with the last, smaller batch, at most 8 step programs
# A feature builder's dict of arrays: input_ids, segment_ids, input_mask (+ labels) [N, ...].
Features = dict[str, np.ndarray]
LabelKeys = Union[str, Sequence[str]]


def sequence_lengths(features: Features) -> np.ndarray:
    """Real tokens per example (the longest choice for multiple choice)."""
    mask = np.asarray(features["input_mask"])
    return mask.reshape(len(mask), -1, mask.shape[-1]).sum(-1).max(-1)


def _is_sequence(features: Mapping[str, Any], key: str) -> bool:
    ref = np.shape(features[SEQUENCE_KEYS_OF])
    shape = np.shape(features[key])
    return len(shape) == len(ref) and shape[-1] == ref[-1]


def length_batches(lengths: np.ndarray | Sequence[int], batch_size: int, bucket: bool = True,
                   shuffle: bool = False, seed: int = 0, pool: int = 50) -> list[np.ndarray]:
    """Index arrays, one per batch. `bucket` groups similar lengths; `shuffle` randomizes."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    if bucket:
        step = len(order) if not shuffle else pool * batch_size
        order = np.concatenate([chunk[np.argsort(np.asarray(lengths)[chunk], kind="stable")]
                                for chunk in np.split(order, range(step, len(order), step))]
                               ) if len(order) else order
    out = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        out = [out[i] for i in rng.permutation(len(out))]
    return out


def distinct_batches(lengths: Sequence[int], keys: Sequence[Any] | np.ndarray, batch_size: int,
                     seed: int = 0, pool: int = 50,
                     join_single: bool = False) -> list[np.ndarray]:
    """Index arrays, one per batch, for training with in-batch negatives: a shuffled order,
    sorted by length within pools of `pool` batches (less padding), dealt so that no batch
    holds two rows with the same key (a passage asked about twice is no negative of
    itself) — a row that would repeat one waits for the next batch. Every batch is full but
    the last; the batches come in random order, the short one last. With `join_single`, a
    last batch of one row joins the batch before it: alone it has no in-batch negative (a
    loss of 0, nothing learnt). `distinct_batch_count` says how many batches there are.

    >>> [sorted(b.tolist()) for b in distinct_batches([5, 5, 9, 9], "aabb", 2)]
    [[0, 2], [1, 3]]
    >>> [len(b) for b in distinct_batches([5] * 5, "abcde", 2, join_single=True)]
    [2, 3]
    """
    rng = np.random.default_rng(seed)
    shuffled = length_batches(lengths, len(lengths) or 1, bucket=False, shuffle=True,
                              seed=seed)
    order = shuffled[0] if shuffled else np.arange(0)
    step = pool * batch_size
    chunks = [c[np.argsort(np.asarray(lengths)[c], kind="stable")]
              for c in np.split(order, range(step, len(order), step))] if len(order) else []
    pending = collections.deque(int(i) for c in chunks for i in c)
    waiting: collections.deque = collections.deque()
    out = []
    while pending or waiting:
        batch: list[int] = []
        seen: set = set()
        deferred: list[int] = []
        for source in (waiting, pending):
            while source and len(batch) < batch_size:
                i = source.popleft()
                if keys[i] in seen:
                    deferred.append(i)
                else:
                    batch.append(i)
                    seen.add(keys[i])
        if not pending:               # only repeats are left: they share a batch after all
            while deferred and len(batch) < batch_size:
                batch.append(deferred.pop(0))
        waiting.extendleft(reversed(deferred))
        out.append(np.asarray(batch))
    full = [b for b in out if len(b) == batch_size]
    dealt = [full[i] for i in rng.permutation(len(full))] + [b for b in out
                                                             if len(b) < batch_size]
    if join_single and len(dealt) > 1 and len(dealt[-1]) == 1:
        dealt[-2:] = [np.concatenate(dealt[-2:])]
    return dealt


def distinct_batch_count(rows: int, batch_size: int, join_single: bool = False) -> int:
    """How many batches `distinct_batches` deals `rows` rows into.

    >>> distinct_batch_count(5, 2), distinct_batch_count(5, 2, join_single=True)
    (3, 2)
    """
    count = -(-rows // batch_size)
    return count - 1 if join_single and count > 1 and rows % batch_size == 1 else count


def batches(features: Features, batch_size: int, bucket: bool = True, shuffle: bool = False,
            seed: int = 0, pool: int = 50, multiple: int = 1,
            ladder: bool = False) -> Iterator[tuple[np.ndarray, Features]]:
    """Yields (indices, batch) with every sequence array cut to the batch's longest row.

    `multiple` rounds each batch's width up (to at most the arrays' width), so a compiled
    step (XLA, JAX) sees a few shapes instead of one per length; `ladder` rounds it up to
    `width_ladder`'s widths, fewer still.
    """
    lengths = sequence_lengths(features)
    for index in length_batches(lengths, batch_size, bucket, shuffle, seed, pool):
        yield index, take(features, index, multiple, lengths, ladder)


def take(features: Features, index: np.ndarray, multiple: int = 1,
         lengths: np.ndarray | None = None, ladder: bool = False) -> Features:
    """The rows `index` of every array, sequences cut to the longest of them (rounded up to
    `multiple`, or with `ladder` to the next of `width_ladder`'s widths; at most the arrays'
    width)."""
    lengths = sequence_lengths(features) if lengths is None else lengths
    full = np.shape(features[SEQUENCE_KEYS_OF])[-1]
    width = batch_width(int(lengths[index].max()), full, multiple, ladder)
    return {k: (np.asarray(v)[index][..., :width] if _is_sequence(features, k)
                else np.asarray(v)[index]) for k, v in features.items()}


def batch_width(longest: int, full: int, multiple: int = 1, ladder: bool = False) -> int:
    """The width a batch whose longest row is `longest` tokens is cut to: rounded up to
    `multiple`, or with `ladder` to the next of `width_ladder`'s widths; at most `full`."""
    width = min(-(-longest // multiple) * multiple, full)
    return next(w for w in width_ladder(full, multiple) if w >= width) if ladder else width


def width_ladder(full: int, multiple: int = 16, count: int = LADDER_WIDTHS) -> list[int]:
    """At most `count` batch widths up to `full`, multiples of `multiple`, each about 1/√2 of
    the next: the widths a compiled step (XLA on JAX, TensorFlow with `jit_compile`) sees.
    Each width is a program to compile; a batch pads to the next width, so at most ~41% more
    tokens than its longest row (~17% on average), where widths on every multiple of 16 are
    24 programs for SQuAD's 384 tokens, each ~10-30 s to compile on an accelerator.

    >>> width_ladder(384), width_ladder(128)
    ([64, 80, 112, 144, 192, 272, 384], [48, 64, 80, 96, 128])
    """
    widths = [full]
    while len(widths) < count:
        smaller = -(-int(widths[-1] / 2 ** 0.5) // multiple) * multiple
        if smaller >= widths[-1] or smaller < multiple:
            break
        widths.append(smaller)
    return sorted(set(widths))


def batch_shapes(features: Features, batch_size: int, multiple: int = 16,
                 ladder: bool = True) -> set[tuple[int, int]]:
    """The (rows, width) shapes of an epoch's batches (`batches`' bucketed order): each is
    a program that a compiled step (XLA) compiles.

    >>> lengths = np.arange(1, 385)                                   # 384 rows, 1-384 tokens
    >>> mask = (np.arange(384)[None] < lengths[:, None]).astype("int32")
    >>> features = {"input_ids": mask, "input_mask": mask}
    >>> len(batch_shapes(features, 32)), len(batch_shapes(features, 32, ladder=False))
    (6, 12)
    """
    lengths = sequence_lengths(features)
    full = np.shape(features[SEQUENCE_KEYS_OF])[-1]
    shapes = set()
    for index in length_batches(lengths, batch_size):
        shapes.add((len(index), batch_width(int(lengths[index].max()), full, multiple, ladder)))
    return shapes


def _pack(batch: Mapping[str, Any], input_keys: Sequence[str], label_keys: Sequence[str],
          weight_key: str | None) -> tuple[Any, ...]:
    x = {k: batch[k] for k in input_keys}
    y = batch[label_keys[0]] if len(label_keys) == 1 else {k: batch[k] for k in label_keys}
    out = (x, y) if label_keys else (x,)
    return out + ((batch[weight_key],) if weight_key else ())


def _keys(features: Features, label_keys: LabelKeys,
          weight_key: str | None) -> tuple[list[str], list[str]]:
    label_keys = [label_keys] if isinstance(label_keys, str) else list(label_keys)
    extra = set(label_keys) | ({weight_key} if weight_key else set())
    return [k for k in features if k not in extra], label_keys


def feed(features: Features, batch_size: int, label_keys: LabelKeys = (),
         weight_key: str | None = None, bucket: bool = True, shuffle: bool = False,
         seed: int = 0, pool: int = 50, multiple: int = 1,
         ladder: bool = False) -> tuple[Any, int]:
    """The batches `fit` reads, as `to_dataset` makes them: a `tf.data.Dataset` on the
    TensorFlow backend, a `keras.utils.PyDataset` (`Batches`) on JAX and PyTorch, which
    needs no TensorFlow. Returns (the feed, batches per epoch)."""
    if keras.backend.backend() == "tensorflow":
        data = to_dataset(features, batch_size, label_keys, weight_key, bucket, shuffle, seed,
                          pool, multiple, ladder)
        return data, int(data.cardinality())
    data = Batches(features, batch_size, label_keys, weight_key, bucket, shuffle, seed, pool,
                   multiple, ladder)
    return data, len(data)


def to_dataset(features: Features, batch_size: int, label_keys: LabelKeys = (),
               weight_key: str | None = None, bucket: bool = True, shuffle: bool = False,
               seed: int = 0, pool: int = 50, multiple: int = 1, ladder: bool = False) -> Any:
    """A `tf.data.Dataset` of `(inputs, labels[, weights])` batches with per-batch padding.

    Args:
        features: a feature builder's dict of numpy arrays.
        label_keys: the label arrays' keys; one key gives a bare array, several a dict.
        weight_key: a per-example or per-token sample-weight array (e.g. NER's).
        shuffle: a new order each epoch (seeded by `seed` + epoch).
        multiple: round each batch's width up to a multiple of this (see `batches`).
        ladder: round it up to the next of `width_ladder(width, multiple)` instead.
    """
    import tensorflow as tf

    input_keys, label_keys = _keys(features, label_keys, weight_key)

    def spec(key: str) -> Any:
        a = np.asarray(features[key])
        shape = (None,) + a.shape[1:-1] + (None,) if _is_sequence(features, key) else \
            (None,) + a.shape[1:]
        return tf.TensorSpec(shape, tf.as_dtype(a.dtype))

    def pack(batch: Mapping[str, Any]) -> tuple[Any, ...]:
        return _pack(batch, input_keys, label_keys, weight_key)

    epoch = [0]

    def generate() -> Iterator[tuple[Any, ...]]:
        epoch[0] += 1
        for _, batch in batches(features, batch_size, bucket, shuffle, seed + epoch[0], pool,
                                multiple, ladder):
            yield pack(batch)

    signature = {k: spec(k) for k in features}
    count = len(length_batches(sequence_lengths(features), batch_size))
    return tf.data.Dataset.from_generator(generate, output_signature=pack(signature)).apply(
        tf.data.experimental.assert_cardinality(count)).prefetch(tf.data.AUTOTUNE)


class Batches(keras.utils.PyDataset):
    """`to_dataset`'s batches as a `keras.utils.PyDataset` (no TensorFlow): the same
    per-batch padding and bucketing, a new seeded order each epoch (seed + epoch)."""

    def __init__(self, features: Features, batch_size: int, label_keys: LabelKeys = (),
                 weight_key: str | None = None, bucket: bool = True, shuffle: bool = False,
                 seed: int = 0, pool: int = 50, multiple: int = 1, ladder: bool = False) -> None:
        super().__init__()
        self.features, self.batch_size, self.bucket, self.ladder = features, batch_size, bucket, \
            ladder
        self.shuffle, self.seed, self.pool, self.multiple = shuffle, seed, pool, multiple
        self.input_keys, self.label_keys = _keys(features, label_keys, weight_key)
        self.weight_key = weight_key
        self.lengths, self.epoch = sequence_lengths(features), 0
        self.on_epoch_end()

    def on_epoch_end(self) -> None:
        self.epoch += 1
        self.index = length_batches(self.lengths, self.batch_size, self.bucket,
                                    self.shuffle, self.seed + self.epoch, self.pool)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        batch = take(self.features, self.index[i], self.multiple, self.lengths, self.ladder)
        return _pack(batch, self.input_keys, self.label_keys, self.weight_key)
