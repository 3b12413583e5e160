"""Pretraining data: documents → sentence pairs → masked LM → TFRecord shards.

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
- Each block is one shard, `shard-NNNNN.tfrecord`, seeded by (seed, block): the output is byte
  for byte the same for a given seed whatever the number of workers.
"""

import collections
import os
import random

import numpy as np

from kbert.config import read_vocab
from kbert.data.sentences import InputReport, check_inputs, read_documents

# The tf.train.Example features of a pretraining shard (all int64 but masked_lm_weights).
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")
Instance = collections.namedtuple(
    "Instance", "input_ids segment_ids masked_lm_positions masked_lm_ids is_random_next")


class Options(collections.namedtuple("Options", [
        "max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob",
        "dupe_factor", "whole_word_mask", "seed"])):
    """The knobs of `create_pretraining_data`, with the original defaults."""
    __slots__ = ()


Options.__new__.__defaults__ = (128, 20, 0.15, 0.1, 10, False, 12345)


def check_options(options):
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

    def __init__(self, tokenizer):
        vocab = tokenizer.vocab
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
        self.mask_id = tokenizer.mask_id
        self.is_continuation = np.array([t.startswith("##") for t in vocab])
        self.words = [i for i, t in enumerate(vocab)
                      if not (t.startswith("[") and t.endswith("]"))]
        if not self.words:
            raise ValueError("vocabulary has no tokens besides the special ones")


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Cut the longer list, from the front or back at random, until the pair fits."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def create_masked_lm_predictions(tokens, options, vocab, rng):
    """Mask `tokens` (ids, with [CLS]/[SEP]) in place of a copy → (tokens, positions, labels).

    >>> class V: cls_id, sep_id, mask_id, words = 2, 3, 4, [5, 6]
    >>> V.is_continuation = np.zeros(7, bool)
    >>> rng = random.Random(0)
    >>> out, pos, ids = create_masked_lm_predictions([2, 5, 6, 5, 3], Options(), V, rng)
    >>> len(pos), all(out[p] in (4, 5, 6) for p in pos), [[2, 5, 6, 5, 3][p] for p in pos] == ids
    (1, True, True)
    """
    candidates = []                      # lists of positions, one per maskable (whole) word
    for i, token in enumerate(tokens):
        if token in (vocab.cls_id, vocab.sep_id):
            continue
        if options.whole_word_mask and candidates and vocab.is_continuation[token] \
                and candidates[-1][-1] == i - 1:
            candidates[-1].append(i)
        else:
            candidates.append([i])
    n = sum(len(c) for c in candidates)
    num_to_predict = min(options.max_predictions_per_seq,
                         max(1, int(round(n * options.masked_lm_prob))))
    rng.shuffle(candidates)
    output, masked = list(tokens), []
    for word in candidates:
        if len(masked) >= num_to_predict:
            break
        if len(masked) + len(word) > num_to_predict:
            continue
        for i in word:
            if rng.random() < 0.8:
                output[i] = vocab.mask_id
            elif rng.random() < 0.5:
                output[i] = tokens[i]
            else:
                output[i] = vocab.words[rng.randint(0, len(vocab.words) - 1)]
            masked.append(i)
    masked.sort()
    return output, masked, [tokens[i] for i in masked]


def create_instances_from_document(documents, index, options, vocab, rng):
    """One document (a list of sentences, each a list of ids) → its training instances."""
    document = documents[index]
    max_num_tokens = options.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances, current_chunk, current_length, i = [], [], 0, 0
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
                tokens_b = []
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
                    tokens = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [vocab.sep_id]
                    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                    tokens, positions, labels = create_masked_lm_predictions(
                        tokens, options, vocab, rng)
                    instances.append(Instance(tokens, segment_ids, positions, labels,
                                              is_random_next))
            current_chunk, current_length = [], 0
        i += 1
    return instances


def serialize_instance(instance, options):
    """An `Instance` → a serialized `tf.train.Example` with the original BERT features."""
    import tensorflow as tf
    pad = options.max_seq_length - len(instance.input_ids)
    pad_lm = options.max_predictions_per_seq - len(instance.masked_lm_positions)

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    features = {
        "input_ids": ints(list(instance.input_ids) + [0] * pad),
        "input_mask": ints([1] * len(instance.input_ids) + [0] * pad),
        "segment_ids": ints(list(instance.segment_ids) + [0] * pad),
        "masked_lm_positions": ints(list(instance.masked_lm_positions) + [0] * pad_lm),
        "masked_lm_ids": ints(list(instance.masked_lm_ids) + [0] * pad_lm),
        "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
            value=[1.0] * len(instance.masked_lm_ids) + [0.0] * pad_lm)),
        "next_sentence_labels": ints([1 if instance.is_random_next else 0]),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)   # map order fixed across processes


def iter_blocks(paths, input_format="auto", block_size=20000, report=None):
    """Group the documents of `paths` into blocks of about `block_size` sentences."""
    block, size = [], 0
    for document in read_documents(paths, input_format, report):
        block.append(document)
        size += len(document)
        if size >= block_size:
            yield block
            block, size = [], 0
    if block:
        yield block


# --- blocks → shards ---------------------------------------------------------------------------
_TOKENIZERS = {}


def _tokenizer(vocab, lower_case):
    from kbert.tokenizer import Tokenizer  # on use: instance making needs no TensorFlow
    key = (tuple(vocab), lower_case)
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = Tokenizer(list(vocab), lower_case)
    return _TOKENIZERS[key]


def tokenize_documents(block, tokenizer, batch_size=4096):
    """Documents of sentence strings → documents of id lists (empty ones dropped)."""
    sentences = [s for document in block for s in document]
    ids = []
    for i in range(0, len(sentences), batch_size):
        ids.extend(tokenizer.tokenize(sentences[i:i + batch_size]).to_list())
    documents, k = [], 0
    for document in block:
        tokenized = [s for s in ids[k:k + len(document)] if s]
        k += len(document)
        if tokenized:
            documents.append(tokenized)
    return documents


def write_block(index, block, vocab, lower_case, options, output_dir):
    """One block of documents → one shard (written atomically); returns its statistics."""
    import tensorflow as tf
    tokenizer = _tokenizer(vocab, lower_case)
    masking = Vocabulary(tokenizer)
    documents = tokenize_documents(block, tokenizer)
    instances = []
    for dupe in range(options.dupe_factor):
        rng = random.Random(f"{options.seed}/{index}/{dupe}")
        for d in range(len(documents)):
            instances.extend(create_instances_from_document(documents, d, options, masking, rng))
    random.Random(f"{options.seed}/{index}/shuffle").shuffle(instances)
    stats = collections.Counter(documents=len(block), instances=len(instances))
    path = os.path.join(output_dir, SHARD_NAME.format(index))
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for instance in instances:
                writer.write(serialize_instance(instance, options))
                _count(stats, instance, masking)
        os.replace(tmp, path)
    except BaseException:                       # SIGINT included: no half-written file stays
        _remove(tmp)
        raise
    return index, stats


def _count(stats, instance, masking):
    n = len(instance.input_ids)
    stats["tokens"] += n
    stats["eligible"] += n - 3
    stats["masked"] += len(instance.masked_lm_positions)
    stats["not_next"] += instance.is_random_next
    for p, label in zip(instance.masked_lm_positions, instance.masked_lm_ids):
        token = instance.input_ids[p]
        stats["as_mask" if token == masking.mask_id else
              "as_same" if token == label else "as_random"] += 1


def _remove(path):
    if os.path.exists(path):
        os.remove(path)


SHARD_NAME = "shard-{:05d}.tfrecord"


def _is_shard(name):
    """A shard this module writes, or a temporary one an interrupted run left behind."""
    return name.startswith("shard-") and (name.endswith(".tfrecord") or ".tfrecord.tmp" in name)


def prepare_output(output_dir, overwrite=False):
    """Creates `output_dir`, or checks it is empty; `overwrite` removes the shards an earlier
    run left there (and nothing else). Returns the names removed.

    The reader takes every `*.tfrecord` of a directory, so old shards would silently join the
    new data: a non-empty directory is refused unless `overwrite` is asked for.
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"{output_dir} exists and is not a directory")
    existing = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    if existing and not overwrite:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more"
                                           if len(existing) > 3 else "")
        raise FileExistsError(f"{output_dir} is not empty ({shown}); pass --overwrite "
                              "(overwrite=True) to replace its shards, or choose a new directory")
    old = [name for name in existing if _is_shard(name)]
    foreign = [name for name in existing if name not in old and name.endswith(".tfrecord")]
    if foreign:
        raise FileExistsError(f"{output_dir} holds other TFRecord files ({foreign[0]}) that "
                              "the reader would mix with the new shards; remove them first")
    for name in old:
        os.remove(os.path.join(output_dir, name))
    os.makedirs(output_dir, exist_ok=True)
    return old


def create_pretraining_data(paths, vocab, output_dir, options=Options(), lower_case=True,
                            workers=1, input_format="auto", block_size=20000, progress=True,
                            overwrite=False):
    """Text files → TFRecord shards in `output_dir`; returns the totals (a Counter).

    Args:
        paths: input text files (see `kbert.data.sentences.read_documents` for the layouts).
        vocab: a `vocab.txt` path or a token list.
        output_dir: where `shard-NNNNN.tfrecord` files go (created if needed).
        options: `Options` (sequence length, masking, dupe factor, seed).
        workers: processes that tokenize and write blocks in parallel.
        input_format: `auto`, `documents` or `sentences`.
        block_size: sentences per block (the memory bound, and the reach of "random next").
        overwrite: replace the shards already in `output_dir` (a non-empty one is refused
            otherwise); the names removed are in `totals.removed`.

    A run that fails or is interrupted removes the shards it wrote (none is left half-made).

    Example:
    >>> create_pretraining_data(["a.txt"], "vocab.txt", "out/", Options(seed=1))  # doctest: +SKIP
    """
    check_options(options)
    if workers < 1 or block_size < 1:
        raise ValueError(f"workers ({workers}) and block_size ({block_size}) must be at least 1")
    vocab = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
    _tokenizer(vocab, lower_case)      # fails now, in one line, on a vocabulary without specials
    report = InputReport()
    check_inputs(paths)
    blocks = iter_blocks(paths, input_format, block_size, report)
    removed = prepare_output(output_dir, overwrite)
    try:
        totals = _write_blocks(blocks, (vocab, lower_case, options, output_dir), workers,
                               progress)
    except BaseException:                       # errors and SIGINT: leave no partial data set
        for name in os.listdir(output_dir):
            if _is_shard(name):
                os.remove(os.path.join(output_dir, name))
        raise
    totals["replaced_bytes"] = sum(report.replaced.values())
    totals.report, totals.removed = report, removed
    return totals


def _write_blocks(blocks, arguments, workers, progress):
    """Writes each block as a shard (in `workers` processes); returns the totals."""
    from tqdm import tqdm

    totals = collections.Counter()
    bar = tqdm(desc="documents", unit="doc", disable=None if progress else True)

    def add(stats):
        totals.update(stats)
        bar.update(stats["documents"])
        totals["shards"] += 1
    try:
        if workers <= 1:
            for index, block in enumerate(blocks):
                add(write_block(index, block, *arguments)[1])
        else:
            import multiprocessing
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                pending = collections.deque()
                for index, block in enumerate(blocks):
                    pending.append(pool.apply_async(write_block, (index, block) + arguments))
                    while len(pending) >= 2 * workers:      # bounded: memory stays flat
                        add(pending.popleft().get()[1])
                while pending:
                    add(pending.popleft().get()[1])
    finally:
        bar.close()
    if not totals["instances"]:
        raise ValueError("no training instances: the input files hold no usable text "
                         f"({totals['documents']} documents read)")
    return totals


def summary(totals):
    """The totals of `create_pretraining_data` as readable lines."""
    eligible, masked = max(totals["eligible"], 1), max(totals["masked"], 1)
    lines = [
        f"documents: {totals['documents']}  instances: {totals['instances']}  "
        f"tokens: {totals['tokens']}  shards: {totals['shards']}",
        f"masked: {totals['masked'] / eligible:.2%} of maskable tokens "
        f"([MASK] {totals['as_mask'] / masked:.1%}, random {totals['as_random'] / masked:.1%}, "
        f"unchanged {totals['as_same'] / masked:.1%})  "
        f"NotNext: {totals['not_next'] / max(totals['instances'], 1):.1%}"]
    report = getattr(totals, "report", None)
    if report is not None and report.replaced:
        lines.append("not UTF-8: " + report.summary())
    removed = getattr(totals, "removed", None)
    if removed:
        lines.append(f"removed {len(removed)} old shard(s) first (--overwrite)")
    return lines
