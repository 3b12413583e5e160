"""Pretraining data: documents → sentence pairs → masked LM → TFRecord shards, the
`create-pretraining-data` command: blocks of documents read, tokenized and written as shards in
parallel (`create_pretraining_data`).

    instances.py  sentence pairs and masking (NumPy), seeded per block
    tfrecords.py  `tf.train.Example` bytes in bulk, the shard names, the output directory

The algorithm — google-research/bert's `create_pretraining_data.py`, and where it differs on
purpose — is `kbert.data.instances`'s. What this module adds:
- STREAMING: documents are read in blocks of about `block_size` sentences (memory is bounded by
  the block, not the corpus); the random "other document" of NotNext comes from the same block.
- Each block is one shard, `shard-NNNNN.tfrecord`, seeded by (seed, block): the output is byte
  for byte the same for a given seed whatever the number of workers.
- Speed: a block's instances are masked together in NumPy (`mask_tokens`) and encoded as
  `tf.train.Example` bytes in bulk (`serialize_examples`); blocks go to `workers` processes
  (default: every usable CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # type-only: the tokenizer needs TensorFlow
    from tqdm import tqdm

    from kbert.tokenizer import Tokenizer

import collections
import functools
import itertools
import os

import numpy as np

from kbert import outputs
from kbert import progress as progress_lib
from kbert.data.instances import (  # noqa: F401  (re-exported: the names of one module before)
    FEATURES,
    Instance,
    Options,
    Vocabulary,
    _cuts,
    check_options,
    create_instances_from_document,
    create_pairs_from_document,
    make_features,
    mask_tokens,
    pad_pairs,
    truncate_seq_pair,
)
from kbert.data.sentences import InputReport, check_inputs, read_documents
from kbert.data.tfrecords import (  # noqa: F401  (re-exported)
    SHARD_NAME,
    check_output,
    is_shard,
    remove_file,
    serialize_examples,
)
from kbert.network.config import read_vocab
from kbert.wording import plural


def iter_blocks(paths: Sequence[str], input_format: str = "auto", block_size: int = 20000,
                report: InputReport | None = None) -> Iterator[list[list[str]]]:
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


# A block: documents, each a list of sentence strings.
Block = list[list[str]]


# --- blocks → shards ---------------------------------------------------------------------------
_TOKENIZERS: dict = {}


def _tokenizer(vocab: Sequence[str], lower_case: bool) -> Tokenizer:
    from kbert.tokenizer import Tokenizer  # on use: instance making needs no TensorFlow
    key = (tuple(vocab), lower_case)
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = Tokenizer(list(vocab), lower_case)
    return _TOKENIZERS[key]


def tokenize_documents(block: Sequence[Sequence[str]], tokenizer: Tokenizer,
                       batch_size: int = 4096) -> list[list[list[int]]]:
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


def write_block(index: int, block: Sequence[Sequence[str]], vocab: Sequence[str],
                lower_case: bool, options: Options,
                output_dir: str) -> tuple[int, collections.Counter]:
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
        remove_file(tmp)
        raise
    return index, stats


def _count(stats: collections.Counter, features: dict[str, np.ndarray],
           masking: Vocabulary) -> None:
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


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), the default number of workers."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def create_pretraining_data(paths: Sequence[str], vocab: str | list[str], output_dir: str,
                            options: Options = Options(),
                            lower_case: bool = True,
                            workers: int | None = None, input_format: str = "auto",
                            block_size: int = 20000, progress: bool = True,
                            overwrite: bool = False) -> collections.Counter:
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
        progress: a progress bar over the input's bytes, the documents beside it
            (`kbert.progress`: on a terminal, unless the process decided otherwise).
        overwrite: replace the data set already in `output_dir` (refused otherwise; a
            directory holding anything else always is); the shards replaced are named in
            `totals.removed`. Your other files in `output_dir` are kept.

    The shards are written into a hidden sibling directory, then swapped in: a run that fails
    or is interrupted leaves `output_dir` as it was.

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
    check_output(output_dir, overwrite)
    # Written beside, then swapped in whole (`kbert.outputs`): a failed or interrupted run
    # leaves the old data set as it was, and never half a new one.
    with outputs.Output(output_dir, "pretraining_data", overwrite=overwrite) as out:
        check_output(output_dir, overwrite)                   # as it is, now that it is ours
        tmp = out.staging()
        totals = _write_blocks(_with_bytes_read(blocks, report),
                               (vocab, lower_case, options, tmp), workers,
                               functools.partial(_input_bar, paths) if progress else None)
        removed = sorted(n for n in outputs.own_files(output_dir) if is_shard(n)) \
            if os.path.isdir(output_dir) else []
        out.commit(tmp)
    totals["replaced_bytes"] = sum(report.replaced.values())
    # Two attributes on the Counter (read by `summary`), beside its counts:
    totals.report, totals.removed = report, removed  # type: ignore[attr-defined]
    return totals


def _input_bar(paths: Sequence[str]) -> tqdm:
    """A progress bar over the input files' bytes (`kbert.progress`)."""
    return progress_lib.bar(total=sum(os.path.getsize(p) for p in paths), desc="input",
                            unit="B", unit_scale=True, unit_divisor=1024)


def _with_bytes_read(blocks: Iterable[Block],
                     report: InputReport) -> Iterator[tuple[Block, int]]:
    """(block, input bytes read through its last document) for each block."""
    for block in blocks:
        yield block, report.bytes_read


def _write_blocks(blocks: Iterable[tuple[Block, int]], arguments: tuple, workers: int,
                  bar: Callable[[], tqdm] | None) -> collections.Counter:
    """Writes each (block, bytes read) as a shard (in `workers` processes); returns the totals.
    `bar()` makes a progress bar once the first blocks are read (an input that fails there
    shows none), moved to the bytes read as each shard is written; None: no bar."""
    from tqdm import tqdm

    totals: collections.Counter = collections.Counter()

    def add(stats: collections.Counter, read: int) -> None:
        totals.update(stats)
        totals["shards"] += 1
        shown.set_postfix_str(f"{totals['documents']} documents", refresh=False)
        shown.update(read - shown.n)
    blocks = iter(blocks)
    first = [block for block in (next(blocks, None), next(blocks, None)) if block is not None]
    if len(first) < 2:
        workers = 1                             # one block: no worker start-up to pay for
    blocks = itertools.chain(first, blocks)
    shown = bar() if bar is not None and first else tqdm(disable=True)
    with shown:                 # an error clears the bar: its line is the output's last
        _write_each(blocks, arguments, workers, add)
    if not totals["instances"]:
        raise ValueError("no training instances: the input files hold no usable text "
                         f"({totals['documents']} documents read)")
    return totals


def _write_each(blocks: Iterable[tuple[Block, int]], arguments: tuple, workers: int,
                add: Callable[[collections.Counter, int], None]) -> None:
    """`add(statistics, bytes read)` of each (block, bytes read) written as a shard."""
    if workers <= 1:
        for index, (block, read) in enumerate(blocks):
            add(write_block(index, block, *arguments)[1], read)
    else:
        import multiprocessing
        # Spawned (a forked TensorFlow is unsafe); each worker imports TensorFlow and builds
        # the tokenizer while this process reads the first blocks.
        vocab, lower_case = arguments[:2]
        with multiprocessing.get_context("spawn").Pool(
                workers, initializer=_tokenizer, initargs=(vocab, lower_case)) as pool:
            pending: collections.deque[tuple[Any, int]] = collections.deque()
            for index, (block, read) in enumerate(blocks):
                pending.append((pool.apply_async(write_block, (index, block) + arguments), read))
                while len(pending) >= 2 * workers:      # bounded: memory stays flat
                    result, read = pending.popleft()
                    add(result.get()[1], read)
            while pending:
                result, read = pending.popleft()
                add(result.get()[1], read)


def summary(totals: collections.Counter) -> list[str]:
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
        lines.append(f"replaced {plural(len(removed), 'old shard')} (--overwrite)")
    return lines
