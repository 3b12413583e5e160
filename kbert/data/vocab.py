"""Learning a WordPiece vocabulary from text (tensorflow-text's learner) in BERT's layout;
`kbert build-vocab` runs it over a corpus."""

from __future__ import annotations

import collections
from collections.abc import Iterable

from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from kbert.tokenizer.basic import basic_tokenize
from kbert.wording import plural


def build_vocab(texts: Iterable[str], vocab_size: int, lower_case: bool = True,
                num_unused: int = 99) -> list[str]:
    """Learn a WordPiece vocabulary (tensorflow-text's learner) from an iterable of texts.

    The layout is BERT's: `[PAD]` = 0, then `num_unused` `[unusedN]` slots (free ids for tokens
    added later), then `[UNK] [CLS] [SEP] [MASK]`, then the learned tokens. With 99 unused slots
    the special ids are those of the original vocabularies (0, 100, 101, 102, 103). Texts are
    read in batches, so a generator over a large corpus is fine (`kbert build-vocab` passes the
    sentences of `kbert.data.sentences.read_documents`).

    >>> vocab = build_vocab(["the cat sat on the mat"] * 5, 30, num_unused=0)
    >>> vocab[:5], "cat" in vocab
    (['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'], True)
    """
    reserved = (["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)]
                + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    if vocab_size <= len(reserved):
        raise ValueError(f"vocab size {vocab_size} leaves no room after {len(reserved)} "
                         "reserved tokens")
    counts: collections.Counter[str] = collections.Counter()
    batch = []

    def count(batch: list[str]) -> None:
        counts.update(w.decode("utf-8") for w in
                      basic_tokenize(batch, lower_case).flat_values.numpy())
    for text in texts:
        batch.append(text)
        if len(batch) >= 4096:
            count(batch)
            batch = []
    if batch:
        count(batch)
    if not counts:
        raise ValueError("no text to learn a vocabulary from")
    # `vocab_size` is a maximum. The learner always keeps every character it allows (as "c" and
    # "##c", listed before the learned pieces, which come by count): allow no more characters
    # than fit, then cut the rarest learned pieces the learner's search let through.
    budget = vocab_size - len(reserved)
    vocab = learner.learn(sorted(counts.items()), vocab_size, reserved, lower_thresh=1,
                          max_input_tokens=-1, max_unique_chars=min(1000, max(1, budget // 2)))
    if len(vocab) <= len(reserved):
        raise ValueError(f"vocab size {vocab_size} leaves room for {plural(budget, 'token')} "
                         f"after the {len(reserved)} reserved ones: too few for the text's "
                         f"characters")
    return vocab[:vocab_size]
