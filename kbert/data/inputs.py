"""tf.data readers for the pretraining shards, and dynamic (per-epoch) masking.

The shards hold google-research/bert's features (see `kbert.data.pretraining`), so shards from
the original `create_pretraining_data.py` or Model Garden read the same way.

Example:
>>> ds = pretraining_dataset("out/", batch_size=32)           # doctest: +SKIP
>>> ds = ds.map(pretraining_targets)                           # doctest: +SKIP
>>> model.fit(ds, steps_per_epoch=1000)                        # doctest: +SKIP
"""

import os
from collections.abc import Callable, Sequence

import tensorflow as tf

from kbert.network.config import check_special_tokens


def feature_spec(max_seq_length: int = 128, max_predictions_per_seq: int = 20) -> dict:
    """The parsing spec of the original BERT pretraining features."""
    def ints(n: int) -> tf.io.FixedLenFeature:
        return tf.io.FixedLenFeature([n], tf.int64)
    return {
        "input_ids": ints(max_seq_length),
        "input_mask": ints(max_seq_length),
        "segment_ids": ints(max_seq_length),
        "masked_lm_positions": ints(max_predictions_per_seq),
        "masked_lm_ids": ints(max_predictions_per_seq),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": ints(1),
    }


def shard_files(data: str | os.PathLike) -> list[str]:
    """A directory (its `*.tfrecord`), a glob pattern or a list → the sorted shard files."""
    if isinstance(data, (list, tuple)):
        files = sorted(data)
    elif os.path.isdir(data):
        files = sorted(tf.io.gfile.glob(os.path.join(data, "*.tfrecord")))
    else:
        files = sorted(tf.io.gfile.glob(data))
    if not files:
        raise FileNotFoundError(f"no TFRecord shards found in {data}")
    return files


def shard_shapes(files: Sequence[str]) -> tuple[int, int]:
    """(max_seq_length, max_predictions_per_seq) read from the first record."""
    for record in tf.data.TFRecordDataset(files[:1]).take(1):
        example = tf.train.Example.FromString(record.numpy())
        features = example.features.feature
        if "input_ids" not in features or "masked_lm_ids" not in features:
            raise ValueError(f"{files[0]}: not a BERT pretraining shard (no input_ids)")
        return (len(features["input_ids"].int64_list.value),
                len(features["masked_lm_ids"].int64_list.value))
    raise ValueError(f"{files[0]}: empty shard")


def pretraining_dataset(data: str | os.PathLike, batch_size: int, is_training: bool = True,
                        input_context: tf.distribute.InputContext | None = None,
                        seed: int | None = None, shuffle_buffer: int = 10000,
                        cycle_length: int = 8,
                        dynamic_masking: "DynamicMasking | None" = None) -> tf.data.Dataset:
    """Shards → batches of feature dicts (int32 ids, float32 weights).

    Args:
        data: a shard directory, glob pattern or list of files.
        batch_size: the global batch size (divided per replica with `input_context`).
        is_training: repeat, shuffle files and records.
        input_context: a `tf.distribute.InputContext`; each input pipeline reads its own files.
        seed: seeds the shuffles (and dynamic masking) for a reproducible order.
        dynamic_masking: None, or a `DynamicMasking` that re-draws the masks of every batch.
    """
    files = shard_files(data)
    spec = feature_spec(*shard_shapes(files))
    ds = tf.data.Dataset.from_tensor_slices(files)
    if input_context is not None:
        if input_context.num_input_pipelines > len(files):
            raise ValueError(f"{len(files)} shards cannot feed "
                             f"{input_context.num_input_pipelines} input pipelines")
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    if is_training and seed is None:
        ds = ds.shuffle(len(files), reshuffle_each_iteration=True).repeat()
    elif is_training:
        # Seeded: every iterator yields the same stream (pass e shuffles the files with seed
        # (seed, e)), so a resumed run or a distributed one can skip to a position.
        names = tf.constant(list(ds.as_numpy_iterator()))

        def shuffled_files(e: tf.Tensor) -> tf.data.Dataset:
            order = tf.argsort(tf.random.stateless_uniform(
                [len(files)], tf.stack([tf.constant(seed, tf.int64), e])))
            return tf.data.Dataset.from_tensor_slices(tf.gather(names, order))
        ds = tf.data.Dataset.range(2 ** 62).flat_map(shuffled_files)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None
                       or not is_training)
    if is_training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=seed is None)
    ds = ds.batch(batch_size, drop_remainder=is_training)

    def parse(records: tf.Tensor) -> dict:
        features = tf.io.parse_example(records, spec)
        return {k: v if v.dtype == tf.float32 else tf.cast(v, tf.int32)
                for k, v in features.items()}
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if dynamic_masking is not None:
        seeds = tf.data.Dataset.random(seed=seed).batch(2)
        ds = tf.data.Dataset.zip((ds, seeds)).map(
            lambda features, s: dynamic_masking(unmask(features), s),
            num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def pretraining_targets(features: dict, next_sentence: bool = True) -> tuple[dict, dict, dict]:
    """Splits an original-BERT feature dict into the (x, y, sample_weight) `fit` expects;
    `next_sentence=False` leaves out the NSP label (the "No NSP" ablation)."""
    x = {k: features[k] for k in ("input_ids", "segment_ids", "input_mask", "masked_lm_positions")}
    y = {"mlm_logits": features["masked_lm_ids"], "nsp_logits": features["next_sentence_labels"]}
    nsp_weights = features.get("next_sentence_weights")     # 0 where there is no NSP pair
    if nsp_weights is None:
        nsp_weights = tf.ones_like(tf.cast(features["next_sentence_labels"], tf.float32))
    weights = {"mlm_logits": features["masked_lm_weights"], "nsp_logits": nsp_weights}
    if not next_sentence:
        del y["nsp_logits"], weights["nsp_logits"]
    return x, y, weights


def next_token_batch(features: dict) -> tuple[dict, dict, dict]:
    """(x, y, sample_weight) of a left-to-right LM (`kbert.models.BertLeftToRightLM`) from a
    batch of pretraining features: the original tokens (masks put back), label t = token t + 1,
    weight 1 where that token is real. Twin of `kbert.network.heads.next_token_targets`."""
    features = unmask(features)
    ids, mask = features["input_ids"], features["input_mask"]                # [B, T]
    x = {"input_ids": ids, "segment_ids": features["segment_ids"], "input_mask": mask}
    labels = tf.concat([ids[:, 1:], tf.zeros_like(ids[:, :1])], axis=1)       # [B, T]
    weights = tf.concat([mask[:, 1:], tf.zeros_like(mask[:, :1])], axis=1)
    return x, {"lm_logits": labels}, {"lm_logits": tf.cast(weights, tf.float32)}


def targets_for(objective: str = "mlm_nsp") -> Callable[[dict], tuple[dict, dict, dict]]:
    """The features → (x, y, sample_weight) map of a pretraining objective: "mlm_nsp" (the
    paper's), "mlm" (no NSP) or "ltr" (left-to-right LM). Twin: `kbert.data.arrays.targets`
    (NumPy; tests/data/test_arrays.py holds the two equal)."""
    if objective == "mlm_nsp":
        return pretraining_targets
    if objective == "mlm":
        return lambda features: pretraining_targets(features, next_sentence=False)
    if objective == "ltr":
        return next_token_batch
    raise ValueError(f"unknown pretraining objective {objective!r}; choose mlm_nsp, mlm or ltr")


def unmask(features: dict) -> dict:
    """Put the original tokens back at the masked positions (a batch of feature dicts).
    Twin: `kbert.data.arrays.unmask` (NumPy)."""
    ids = features["input_ids"]                                            # [B, T]
    positions = features["masked_lm_positions"]                            # [B, P]
    real = features["masked_lm_weights"] > 0
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    index = tf.stack([tf.boolean_mask(rows, real), tf.boolean_mask(positions, real)], -1)
    restored = tf.tensor_scatter_nd_update(
        ids, index, tf.cast(tf.boolean_mask(features["masked_lm_ids"], real), ids.dtype))
    return dict(features, input_ids=restored)


class DynamicMasking:
    """RoBERTa's dynamic masking: new masked positions for every batch, every epoch.

    The rule is the static one: `min(max_predictions_per_seq, max(1, round(n * prob)))` of the
    n non-special tokens of each sequence (whole words are not kept together here), 80% become
    `[MASK]`, 10% a random real word, 10% stay. Twin: `kbert.data.arrays.DynamicMasking` (NumPy,
    the same rule; tests/data/test_arrays.py checks both against it).

    Args:
        vocab: the token list (from `kbert.tokenizer.read_vocab`).
        max_predictions_per_seq: P, the length of `masked_lm_*`.

    Example:
    >>> masking = DynamicMasking(vocab, 20)                                 # doctest: +SKIP
    >>> ds = pretraining_dataset("out/", 32, dynamic_masking=masking)        # doctest: +SKIP
    """

    def __init__(self, vocab: Sequence[str] | str, max_predictions_per_seq: int = 20,
                 masked_lm_prob: float = 0.15) -> None:
        vocab = list(vocab)
        self.mask_id = vocab.index("[MASK]")
        special = [t.startswith("[") and t.endswith("]") for t in vocab]
        # One lookup per token: a BERT vocabulary has ~1,000 special ids ([unused*]), and
        # comparing every token with each of them was 90% of the masking's CPU time.
        self.is_special = tf.constant(special, tf.bool)                       # [V]
        self.word_ids = tf.constant([i for i, s in enumerate(special) if not s], tf.int32)
        check_special_tokens(vocab)
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob

    def __call__(self, features: dict, seed: tf.Tensor) -> dict:
        """Re-mask a batch of (unmasked) feature dicts; `seed` is a shape [2] int64 tensor."""
        ids = features["input_ids"]                                        # [B, T]
        P = self.max_predictions_per_seq
        special = tf.gather(self.is_special, ids)                          # [B, T]
        eligible = (features["input_mask"] > 0) & ~special
        n = tf.reduce_sum(tf.cast(eligible, tf.float32), -1)               # [B]
        k = tf.minimum(float(P), tf.maximum(1.0, tf.round(n * self.masked_lm_prob)))
        k = tf.minimum(k, n)
        seeds = tf.random.experimental.stateless_split(seed, 4)
        scores = tf.where(eligible, tf.random.stateless_uniform(tf.shape(ids), seeds[0]), -1.0)
        T = tf.shape(ids)[1]
        top = tf.math.top_k(scores, k=tf.minimum(P, T)).indices               # [B, P]
        chosen = tf.range(tf.shape(top)[1])[None, :] < tf.cast(k, tf.int32)[:, None]
        # Sorted positions first, padding (T) last; then padding → 0.
        positions = tf.sort(tf.where(chosen, top, T), axis=-1)
        chosen = positions < T
        positions = tf.where(chosen, positions, 0)
        labels = tf.where(chosen, tf.gather(ids, positions, batch_dims=1), 0)
        u = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
        random_words = tf.gather(self.word_ids, tf.random.stateless_uniform(
            tf.shape(positions), seeds[2], 0, tf.size(self.word_ids), tf.int32))
        new = tf.where(u < 0.8, self.mask_id, tf.where(u < 0.9, random_words, labels))
        rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
        index = tf.stack([tf.boolean_mask(rows, chosen), tf.boolean_mask(positions, chosen)], -1)
        masked = tf.tensor_scatter_nd_update(ids, index, tf.boolean_mask(new, chosen))
        pad = [[0, 0], [0, P - tf.shape(positions)[1]]]
        return dict(features, input_ids=masked,
                    masked_lm_positions=tf.pad(positions, pad),
                    masked_lm_ids=tf.pad(labels, pad),
                    masked_lm_weights=tf.pad(tf.cast(chosen, tf.float32), pad))
