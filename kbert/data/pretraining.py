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
- Speed: a block's instances are masked together in NumPy (`mask_tokens`) and encoded as
  `tf.train.Example` bytes in bulk (`serialize_examples`); blocks go to `workers` processes
  (default: every usable CPU).
"""

import collections
import hashlib
import itertools
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
        self.words = np.array([i for i, t in enumerate(vocab)
                               if not (t.startswith("[") and t.endswith("]"))], np.int64)
        if not len(self.words):
            raise ValueError("vocabulary has no tokens besides the special ones")


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
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


def _cuts(len_a, len_b, max_num_tokens):
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


def create_pairs_from_document(documents, index, options, vocab, rng):
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
                    pairs.append(Pair([vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b,
                                       vocab.sep_id], len(tokens_a), is_random_next))
            current_chunk, current_length = [], 0
        i += 1
    return pairs


def pad_pairs(pairs, max_seq_length):
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


def mask_tokens(input_ids, input_mask, options, vocab, rng):
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


def _whole_words(input_ids, eligible, keys, k, vocab):
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


def create_instances_from_document(documents, index, options, vocab, rng):
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


# --- tf.train.Example records, encoded in bulk ---------------------------------------------------
def _varints(values):
    """Non-negative ints [N, L] → the protobuf varint bytes of each row, concatenated, and the
    end offset of each row in them."""
    values = np.asarray(values, np.int64)
    width = max(1, (int(values.max(initial=0)).bit_length() + 6) // 7)
    # Byte i of a value is there when the value has more than 7 * i bits (byte 0 always).
    used = [np.ones(values.shape, bool)] + [values >= 1 << 7 * i for i in range(1, width + 1)]
    data = np.stack([(values >> 7 * i) & 0x7F | used[i + 1] * 0x80 for i in range(width)], -1)
    keep = np.stack(used[:width], -1)
    return data[keep].astype(np.uint8).tobytes(), np.cumsum(keep.sum(axis=(1, 2)))


def _varint(n):
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field, length):
    """The tag and length of a length-delimited protobuf field."""
    return bytes([field << 3 | 2]) + _varint(length)


class _Column:
    """One feature of every row: its packed values and, per payload length, the bytes that come
    before them in the `Features` map entry (key, `Feature`, `Int64List`/`FloatList` headers)."""

    def __init__(self, name, values):
        if name == "masked_lm_weights":                      # FloatList: little-endian float32
            self.kind, self.data = 2, np.ascontiguousarray(values, "<f4").tobytes()
            self.ends = (np.arange(1, len(values) + 1) * values.shape[1] * 4).tolist()
        else:                                                # Int64List: packed varints
            self.kind, (self.data, ends) = 3, _varints(values)
            self.ends = ends.tolist()
        self.key = _tag(1, len(name)) + name.encode()
        self.headers = {}

    def entry(self, r):
        start, end = (self.ends[r - 1] if r else 0), self.ends[r]
        header = self.headers.get(end - start)
        if header is None:
            values = _tag(1, end - start)                    # the packed list
            feature = _tag(self.kind, len(values) + end - start) + values
            entry = self.key + _tag(2, len(feature) + end - start) + feature
            header = self.headers[end - start] = _tag(1, len(entry) + end - start) + entry
        return header + self.data[start:end]


def serialize_examples(features):
    """Feature arrays (rows of `FEATURES`) → serialized `tf.train.Example`s, one a row, the
    bytes `SerializeToString(deterministic=True)` gives (map entries in key order).

    >>> f = {k: np.zeros((1, 2), np.int64) for k in FEATURES}
    >>> f["input_ids"][0] = [101, 30000]
    >>> len(serialize_examples(f)[0])
    194
    """
    columns = [_Column(name, features[name]) for name in sorted(FEATURES)]
    records = []
    for r in range(len(features["input_ids"])):
        entries = b"".join([column.entry(r) for column in columns])
        records.append(_tag(1, len(entries)) + entries)
    return records


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


def _generator(*parts):
    """A NumPy generator seeded by a string of `parts` (any ints, negative ones too)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def make_features(documents, index, options, masking):
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


def write_block(index, block, vocab, lower_case, options, output_dir):
    """One block of documents → one shard (written atomically); returns its statistics."""
    import tensorflow as tf
    tokenizer = _tokenizer(vocab, lower_case)
    masking = Vocabulary(tokenizer)
    features = make_features(tokenize_documents(block, tokenizer), index, options, masking)
    stats = collections.Counter(documents=len(block))
    path = os.path.join(output_dir, SHARD_NAME.format(index))
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            if features is not None:
                _count(stats, features, masking)
                for record in serialize_examples(features):
                    writer.write(record)
        os.replace(tmp, path)
    except BaseException:                       # SIGINT included: no half-written file stays
        _remove(tmp)
        raise
    return index, stats


def _count(stats, features, masking):
    lengths = features["input_mask"].sum(axis=1)
    real = features["masked_lm_weights"] > 0
    token = np.take_along_axis(features["input_ids"], features["masked_lm_positions"], 1)[real]
    label = features["masked_lm_ids"][real]
    as_mask = int((token == masking.mask_id).sum())
    as_same = int(((token == label) & (token != masking.mask_id)).sum())
    stats.update(instances=len(lengths), tokens=int(lengths.sum()),
                 eligible=int((lengths - 3).sum()), masked=int(real.sum()),
                 not_next=int(features["next_sentence_labels"].sum()), as_mask=as_mask,
                 as_same=as_same, as_random=int(real.sum()) - as_mask - as_same)


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


def usable_cpus():
    """The CPUs this process may run on (its affinity mask), the default number of workers."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def create_pretraining_data(paths, vocab, output_dir, options=Options(), lower_case=True,
                            workers=None, input_format="auto", block_size=20000, progress=True,
                            overwrite=False):
    """Text files → TFRecord shards in `output_dir`; returns the totals (a Counter).

    Args:
        paths: input text files (see `kbert.data.sentences.read_documents` for the layouts).
        vocab: a `vocab.txt` path or a token list.
        output_dir: where `shard-NNNNN.tfrecord` files go (created if needed).
        options: `Options` (sequence length, masking, dupe factor, seed).
        workers: processes that tokenize and write blocks in parallel (default: every usable
            CPU, `usable_cpus()`); the output is the same whatever the number.
        input_format: `auto`, `documents` or `sentences`.
        block_size: sentences per block (the memory bound, and the reach of "random next").
        overwrite: replace the shards already in `output_dir` (a non-empty one is refused
            otherwise); the names removed are in `totals.removed`.

    A run that fails or is interrupted removes the shards it wrote (none is left half-made).

    Example:
    >>> create_pretraining_data(["a.txt"], "vocab.txt", "out/", Options(seed=1))  # doctest: +SKIP
    """
    check_options(options)
    workers = usable_cpus() if workers is None else workers
    if workers < 1 or block_size < 1:
        raise ValueError(f"workers ({workers}) and block_size ({block_size}) must be at least 1")
    vocab = read_vocab(vocab)          # fails now, in one line, on a vocabulary without specials
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
    blocks = iter(blocks)
    first = [block for block in (next(blocks, None), next(blocks, None)) if block is not None]
    if len(first) < 2:
        workers = 1                             # one block: no worker start-up to pay for
    blocks = itertools.chain(first, blocks)
    try:
        if workers <= 1:
            for index, block in enumerate(blocks):
                add(write_block(index, block, *arguments)[1])
        else:
            import multiprocessing
            # Spawned (a forked TensorFlow is unsafe); each worker imports TensorFlow and builds
            # the tokenizer while this process reads the first blocks.
            vocab, lower_case = arguments[:2]
            with multiprocessing.get_context("spawn").Pool(
                    workers, initializer=_tokenizer, initargs=(vocab, lower_case)) as pool:
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
