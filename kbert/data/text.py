"""Pretraining straight from text inside tf.data, locally or served by tf.data service.

One pipeline turns text files into batches of the original BERT features (the ones
`kbert.data.inputs.pretraining_dataset` reads from shards), masked anew every epoch:

    files ─ split_source ─► (epoch, group of files) ─ read_group ─► documents of sentences
          ─ nsp_instances | full_sentence_instances ─► sequences ─ DynamicMasking ─► features
          ─ [tf.data service] ─► unbatch, shuffle, batch

- `text_pretraining_dataset`: the whole pipeline (`kbert pretrain --text`).
- `split_source`, `group_files`: the splittable source, one element per (epoch, group of files);
  everything random after it is seeded by that element, so a group gives the same sequences and
  masks on whichever worker processes it.
- `read_group` (`kbert.data.sentences_graph`): files into documents of sentences, in graph ops
  (tf.data service runs the dataset graph on other hosts, where Python functions cannot go).
- `nsp_instances`: BERT's segment pairs, 50% IsNext / 50% NotNext (B from another document).
- `full_sentence_instances`: RoBERTa's FULL-SENTENCES, contiguous sentences packed up to the
  length across documents (an extra `[SEP]` between documents), no next sentence prediction.
- `serve_dispatcher`, `serve_worker`: the tf.data service processes (`kbert data-service`).

Example:
>>> ds = text_pretraining_dataset(["a.txt"], "vocab.txt", batch_size=32)    # doctest: +SKIP
>>> ds = ds.map(pretraining_targets)                                        # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from typing import Any

import tensorflow as tf

from kbert.data.inputs import DynamicMasking
from kbert.data.sentences import check_inputs
from kbert.data.sentences_graph import read_group
from kbert.hints import Tensor
from kbert.tokenizer import Tokenizer

MODES = ("nsp", "full_sentences")
FILES_PER_GROUP = 16


# --- documents of sentences → token ids ----------------------------------------------------------
def tokenize_group(tokenizer: Tokenizer, sentences: Tensor,
                   document: Tensor) -> tuple[Tensor, Tensor]:
    """Sentences → (token ids [S, (T)], first-of-its-document flags [S]) without empty
    sentences (documents left empty disappear)."""
    ids = tokenizer.tokenize(sentences)
    keep = ids.row_lengths() > 0
    ids, document = tf.ragged.boolean_mask(ids, keep), tf.boolean_mask(document, keep)
    new_document = tf.concat([tf.ones([tf.minimum(tf.size(document), 1)], bool),
                              document[1:] != document[:-1]], 0)
    return ids, new_document


# --- sentences → sequences -----------------------------------------------------------------------
def full_sentence_instances(ids: Tensor, new_document: Tensor, max_seq_length: int,
                            sep_id: int, cls_id: int) -> tuple[Tensor, Tensor]:
    """RoBERTa's FULL-SENTENCES: sentences packed in order into `[CLS] ... [SEP]` sequences of
    at most `max_seq_length` tokens, across documents with a `[SEP]` between two; a sentence
    longer than a sequence is cut into pieces. Returns (ids, segment ids) [N, (T)]."""
    budget = max_seq_length - 2
    lengths = ids.row_lengths()
    pieces = (lengths + budget - 1) // budget
    position = tf.ragged.range(lengths).flat_values
    piece_start = tf.cumsum(pieces, exclusive=True)
    piece_row = tf.gather(piece_start, ids.value_rowids()) + position // budget
    ids = tf.RaggedTensor.from_value_rowids(ids.flat_values, piece_row,
                                            nrows=tf.reduce_sum(pieces))
    new_document = tf.scatter_nd(piece_start[:, None], tf.cast(new_document, tf.int32),
                                 [tf.reduce_sum(pieces)]) > 0

    def step(state: tuple[Tensor, ...], x: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        sequence, used = state[0], state[1]
        length, new_doc = x
        extra = tf.cast(new_doc, tf.int64)
        fits = used + extra + length <= budget
        return (tf.where(fits, sequence, sequence + 1), tf.where(fits, used + extra + length,
                                                                 length), fits & new_doc)
    sequence, _, separated = tf.scan(step, (ids.row_lengths(), new_document),
                                     (tf.constant(-1, tf.int64), tf.constant(budget + 1, tf.int64),
                                      tf.constant(False)))
    sep = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(separated, tf.int64))], tf.constant(sep_id, tf.int64)),
        tf.cast(separated, tf.int64))
    joined = tf.concat([sep, ids], axis=1)
    rows = tf.gather(sequence, joined.value_rowids())
    packed = tf.RaggedTensor.from_value_rowids(joined.flat_values, rows,
                                               nrows=_count(sequence))
    tokens = _wrap(packed, cls_id, sep_id)
    return tokens, tf.zeros_like(tokens)


def _count(index: Tensor) -> Tensor:
    """1 + the largest of 0-based indices [N] (0 when there are none)."""
    return tf.reduce_max(tf.concat([[tf.constant(-1, tf.int64)], index], 0)) + 1


def _wrap(rows: Tensor, first: int, last: int) -> Tensor:
    n = rows.nrows()
    return tf.concat([tf.fill([n, 1], tf.constant(first, tf.int64)), rows,
                      tf.fill([n, 1], tf.constant(last, tf.int64))], axis=1)


def nsp_instances(ids: Tensor, new_document: Tensor, max_seq_length: int, sep_id: int,
                  cls_id: int, seeds: Tensor,
                  short_seq_prob: float = 0.1) -> tuple[Tensor, Tensor, Tensor]:
    """BERT's segment pairs `[CLS] A [SEP] B [SEP]` with next sentence labels (1 = NotNext).

    As google-research's `create_instances_from_document` (`kbert.data.pretraining`): whole
    sentences of one document fill chunks of `max_seq_length - 3` tokens (a random shorter
    length with `short_seq_prob`); A is the chunk's first 1..n-1 sentences; half the time B is
    the rest of the chunk (IsNext), else sentences of another document of the group from a
    random one on (NotNext); the longer side is cut from a random end until the pair fits.
    Vectorized, it differs in two ways: a NotNext chunk's unused sentences are dropped this
    epoch (not put back), and a one-sentence document makes no pair.

    `seeds` is [4, 2] stateless seeds. Returns (ids, segment ids) [N, (T)] and labels [N].
    """
    limit = max_seq_length - 3
    n_sentences = ids.nrows()
    lengths = ids.row_lengths()
    document = tf.cumsum(tf.cast(new_document, tf.int64)) - 1
    n_documents = _count(document)
    doc_start = tf.boolean_mask(tf.range(n_sentences), new_document)
    doc_end = tf.concat([doc_start[1:], [n_sentences]], 0)
    short = tf.random.stateless_uniform([n_documents], seeds[0]) < short_seq_prob
    random_target = tf.random.stateless_uniform([n_documents], seeds[1], 2, limit + 1, tf.int64)
    target = tf.gather(tf.where(short, random_target, limit), document)        # [S]
    last = tf.concat([new_document[1:], [True]], 0)
    next_last = tf.concat([last[1:], [False]], 0)

    def step(state: tuple[Tensor, ...], x: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        chunk, used, count, closed = state
        length, new_doc, is_last, before_last, goal = x
        start = new_doc | closed
        used = tf.where(start, length, used + length)
        count = tf.where(start, 1, count + 1)
        closed = is_last | ((used >= goal) & (count >= 2) & ~before_last)
        return chunk + tf.cast(start, tf.int64), used, count, closed
    chunk = tf.scan(step, (lengths, new_document, last, next_last, target),
                    (tf.constant(-1, tf.int64), tf.constant(0, tf.int64),
                     tf.constant(0, tf.int32), tf.constant(True)))[0]
    n_chunks = _count(chunk)
    first = tf.math.unsorted_segment_min(tf.range(n_sentences), chunk, n_chunks)
    count = tf.math.unsorted_segment_sum(tf.ones_like(chunk), chunk, n_chunks)
    first, count = tf.boolean_mask(first, count >= 2), tf.boolean_mask(count, count >= 2)
    n = tf.size(first, tf.int64)
    u = tf.random.stateless_uniform([4, n], seeds[2])
    a_end = first + 1 + tf.cast(u[0] * tf.cast(count - 1, tf.float32), tf.int64)
    not_next = (u[1] < 0.5) & (n_documents > 1)
    cum = tf.concat([[0], tf.cumsum(lengths)], 0)
    # NotNext: a random other document, from a random sentence on, until B fills the chunk.
    own = tf.gather(document, first)
    other = tf.cast(u[2] * tf.cast(tf.maximum(n_documents - 1, 1), tf.float32), tf.int64)
    other = tf.where(other >= own, other + 1, other) % tf.maximum(n_documents, 1)
    o_start, o_end = tf.gather(doc_start, other), tf.gather(doc_end, other)
    b_start = o_start + tf.cast(u[3] * tf.cast(o_end - o_start, tf.float32), tf.int64)
    want = tf.gather(target, first) - (tf.gather(cum, a_end) - tf.gather(cum, first))
    b_end = tf.searchsorted(cum, tf.gather(cum, b_start) + want, side="left", out_type=tf.int64)
    b_end = tf.clip_by_value(b_end, b_start + 1, o_end)
    b_start = tf.where(not_next, b_start, a_end)
    b_end = tf.where(not_next, b_end, first + count)
    a = _truncated_spans(tf.gather(cum, first), tf.gather(cum, a_end),
                         tf.gather(cum, b_start), tf.gather(cum, b_end), limit, seeds[3])
    tokens_a = tf.gather(ids.flat_values, tf.ragged.range(a[0], a[1]))
    tokens_b = tf.gather(ids.flat_values, tf.ragged.range(a[2], a[3]))
    sep = tf.fill([n, 1], tf.constant(sep_id, tf.int64))
    tokens = tf.concat([_wrap(tokens_a, cls_id, sep_id), tokens_b, sep], axis=1)
    segments = tf.concat([tf.zeros([n, 2], tf.int64), tf.zeros_like(tokens_a),
                          tf.ones_like(tokens_b), tf.ones([n, 1], tf.int64)], axis=1)
    return tokens, segments, tf.cast(not_next, tf.int64)


def _truncated_spans(a_start: Tensor, a_end: Tensor, b_start: Tensor, b_end: Tensor,
                     limit: Tensor, seed: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`truncate_seq_pair` in closed form: the longer side loses a token until the pair fits
    (B on a tie), each token from the front or the back with probability 1/2."""
    la, lb = a_end - a_start, b_end - b_start
    excess = tf.maximum(la + lb - limit, 0)
    first_cut = tf.minimum(excess, tf.abs(la - lb))
    rest = excess - first_cut
    none = tf.zeros_like(first_cut)
    cut_a = tf.where(la > lb, first_cut, none) + rest // 2
    cut_b = tf.where(la > lb, none, first_cut) + (rest + 1) // 2
    seeds = tf.random.experimental.stateless_split(seed, 2)
    front_a, front_b = (tf.random.stateless_binomial(tf.shape(cut), s, tf.cast(cut, tf.float32),
                                                     0.5, tf.int64)
                        for cut, s in ((cut_a, seeds[0]), (cut_b, seeds[1])))
    return (a_start + front_a, a_end - (cut_a - front_a),
            b_start + front_b, b_end - (cut_b - front_b))


# --- the pipeline --------------------------------------------------------------------------------
def split_source(num_groups: int, epochs: int | None = None) -> tf.data.Dataset:
    """The splittable source: element `i` is group `i % num_groups` of epoch `i // num_groups`
    (endless when `epochs` is None). tf.data service hands these out one by one."""
    return tf.data.Dataset.range(num_groups * epochs if epochs else 2 ** 62)


def group_files(files: list[str], index: Tensor, files_per_group: int, seed: int) -> Tensor:
    """The files of source element `index`: the files shuffled anew each epoch (seeded by
    (seed, epoch)), then cut into groups of `files_per_group`."""
    n = len(files)
    groups = math.ceil(n / files_per_group)
    epoch, group = index // groups, index % groups
    order = tf.argsort(tf.random.stateless_uniform([n], tf.stack([tf.constant(seed, tf.int64),
                                                                  epoch])))
    take = order[group * files_per_group:(group + 1) * files_per_group]
    return tf.gather(tf.constant(files), take)


def text_pretraining_dataset(files: list[str], vocab: str | list[str], batch_size: int,
                             max_seq_length: int = 128, max_predictions_per_seq: int = 20,
                             mode: str = "nsp", masked_lm_prob: float = 0.15,
                             short_seq_prob: float = 0.1, lower_case: bool = True,
                             input_format: str = "auto", seed: int = 0,
                             epochs: int | None = None, files_per_group: int = FILES_PER_GROUP,
                             shuffle_buffer: int = 10000, drop_remainder: bool = True,
                             data_service: str | None = None,
                             job_name: str | None = None) -> tf.data.Dataset:
    """Text files → batches of the original BERT pretraining features, masked dynamically.

    Args:
        files: UTF-8 text files (the layouts of `kbert.data.sentences.read_documents`).
        vocab: a `vocab.txt` path or token list (`lower_case` for uncased ones).
        batch_size: rows a batch; the last, partial batch of a finite stream is dropped
            unless `drop_remainder` is False.
        mode: `nsp` (BERT's segment pairs, 50% NotNext) or `full_sentences` (RoBERTa's packing;
            `next_sentence_weights` is 0, so the NSP loss is off).
        masked_lm_prob: the share of maskable tokens predicted (80% `[MASK]`, 10% a random
            word, 10% unchanged), drawn anew for each epoch.
        epochs: passes over the files (None: endless). Each pass shuffles the files.
        files_per_group: files read together; a NotNext B comes from the same group, and a
            group is what a tf.data service worker gets at a time.
        data_service: a dispatcher address (`grpc://host:port`): the reading, tokenizing,
            packing and masking run on the tf.data service workers; batching stays here.
        job_name: share one job between several trainers (each gets different groups).

    With a data service the groups are handed out once each (`distributed_epoch`), so the
    sequences, their masks and the number of batches are those of the local pipeline; only
    their order differs (workers finish groups in their own order), and so which rows the
    dropped remainder holds.

    >>> ds = text_pretraining_dataset(["a.txt"], "vocab.txt", 32, mode="full_sentences",
    ...                               data_service="grpc://dispatcher:5050")  # doctest: +SKIP
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use nsp or full_sentences")
    if max_seq_length < 5:
        raise ValueError(f"max_seq_length must be at least 5, got {max_seq_length}")
    for name, value in (("batch_size", batch_size), ("files_per_group", files_per_group),
                        ("max_predictions_per_seq", max_predictions_per_seq)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    files = [os.fspath(f) for f in ([files] if isinstance(files, (str, os.PathLike))
                                    else files)]
    check_inputs(files)
    tokenizer = Tokenizer(vocab, lower_case)
    masking = DynamicMasking(tokenizer.vocab, max_predictions_per_seq, masked_lm_prob)
    make = _GroupFeatures(files, tokenizer, masking, mode, max_seq_length, short_seq_prob,
                          input_format, seed, files_per_group)
    ds = split_source(math.ceil(len(files) / files_per_group), epochs)
    ds = ds.map(make, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.filter(lambda features: tf.shape(features["input_ids"])[0] > 0)
    if data_service:
        ds = ds.apply(tf.data.experimental.service.distribute(
            tf.data.experimental.service.ShardingPolicy.DYNAMIC, data_service,
            job_name=job_name))
    ds = ds.unbatch().shuffle(shuffle_buffer, seed=seed)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


class _GroupFeatures:
    """Source element → the masked feature rows of its group of files (a dict of [N, ...])."""

    def __init__(self, files: list[str], tokenizer: Tokenizer, masking: DynamicMasking,
                 mode: str, max_seq_length: int, short_seq_prob: float, input_format: str,
                 seed: int, files_per_group: int) -> None:
        self.files, self.tokenizer, self.masking, self.mode = files, tokenizer, masking, mode
        self.max_seq_length, self.short_seq_prob = max_seq_length, short_seq_prob
        self.input_format, self.seed, self.files_per_group = input_format, seed, files_per_group

    @tf.autograph.experimental.do_not_convert      # plain TensorFlow ops: nothing to convert
    def __call__(self, index: Tensor) -> dict[str, Tensor]:
        seeds = tf.random.experimental.stateless_split(
            tf.stack([tf.constant(self.seed, tf.int64), index]), 3)
        files = group_files(self.files, index, self.files_per_group, self.seed)
        sentences, document = read_group(files, self.input_format)
        ids, new_document = tokenize_group(self.tokenizer, sentences, document)
        t = self.tokenizer
        if self.mode == "nsp":
            tokens, segments, labels = nsp_instances(
                ids, new_document, self.max_seq_length, t.sep_id, t.cls_id,
                tf.random.experimental.stateless_split(seeds[0], 4), self.short_seq_prob)
            weights = tf.ones_like(labels, tf.float32)
        else:
            tokens, segments = full_sentence_instances(ids, new_document, self.max_seq_length,
                                                       t.sep_id, t.cls_id)
            labels = tf.zeros([tokens.nrows()], tf.int64)
            weights = tf.zeros([tokens.nrows()], tf.float32)
        T, P = self.max_seq_length, self.masking.max_predictions_per_seq
        n = tokens.nrows()
        features = {
            "input_ids": tf.cast(tokens.to_tensor(shape=[None, T]), tf.int32),
            "input_mask": tf.cast(tf.ones_like(tokens).to_tensor(shape=[None, T]), tf.int32),
            "segment_ids": tf.cast(segments.to_tensor(shape=[None, T]), tf.int32),
            "masked_lm_positions": tf.zeros([n, P], tf.int32),
            "masked_lm_ids": tf.zeros([n, P], tf.int32),
            "masked_lm_weights": tf.zeros([n, P], tf.float32),
            "next_sentence_labels": tf.cast(labels[:, None], tf.int32),
            "next_sentence_weights": weights[:, None]}
        return self.masking(features, seeds[1])


# --- tf.data service -----------------------------------------------------------------------------
def serve_dispatcher(port: int = 5050, work_dir: str | None = None) -> Any:
    """Starts a tf.data service dispatcher on `port` (0: any free one); returns the server,
    whose `target` (`grpc://localhost:PORT`) the trainer and workers connect to.

    `work_dir` (a shared path) makes it fault tolerant: a restarted dispatcher resumes its jobs.
    """
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir))
    return tf.data.experimental.service.DispatchServer(config)


def serve_worker(dispatcher: str, port: int = 0, worker_address: str | None = None,
                 heartbeat_ms: int | None = None, dispatcher_timeout_ms: int | None = None) -> Any:
    """Starts a tf.data service worker of `dispatcher` (host:port); returns the server.

    `worker_address` is how the trainer reaches this worker (`host:%port%`, the default
    `localhost:%port%` only serves a trainer on the same host). The process has kbert (and so
    tensorflow_text, whose ops the pipeline uses) imported. `dispatcher_timeout_ms` bounds how
    long a call to the dispatcher is retried (TensorFlow's default: an hour), and so how long
    stopping a worker can wait for one.
    """
    dispatcher = dispatcher.split("://")[-1]
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher, port=port,
        worker_address=worker_address or "localhost:%port%", heartbeat_interval_ms=heartbeat_ms,
        dispatcher_timeout_ms=dispatcher_timeout_ms)
    return tf.data.experimental.service.WorkerServer(config)
