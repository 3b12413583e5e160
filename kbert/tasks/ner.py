"""CoNLL-2003 named entities (Tjong Kim Sang & De Meulder, 2003): reader, features, tags.

The file has one token a line, `word POS chunk NER` separated by spaces, a blank line between
sentences and `-DOCSTART-` lines between documents (the last line may lack its newline).
As in the BERT paper (section 5.3), each word's label goes on its first WordPiece; the other
pieces, [CLS], [SEP] and padding get the ignore label -100 and weight 0 (use
`label_weights` as sample weights, or a loss with `ignore_class=-100`).

Tags may be IOB1 (the original CoNLL-2003: `B-` only between two adjacent entities of one type)
or IOB2 (every entity starts with `B-`); `to_iob2` / `to_iob1` convert, and the entity
scores (`kbert.tasks.metrics.entity_scores`) read both.

Example:
>>> to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC"])
['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC']
>>> to_iob1(['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC'])
['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC']
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert.hints import PathLike
from kbert.network.config import read_text

if TYPE_CHECKING:   # type-only: the tokenizer needs TensorFlow
    from kbert.tokenizer import Tokenizer

IGNORE_LABEL = -100
# CoNLL-2003's entity types in IOB2, "O" first.
CONLL2003_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                    "I-MISC")


@dataclasses.dataclass
class Sentence:
    words: list
    tags: list
    line: int = 0          # line number of the first word in its file
    columns: list | None = None   # the middle columns (POS, chunk) of each word
    path: str | None = None       # the file it was read from


def _check_tag(tag: str, where: str) -> None:
    if tag != "O" and (tag[:2] not in ("B-", "I-", "E-", "S-") or len(tag) < 3):
        raise ValueError(f"{where}: tag {tag!r} is neither O nor B-/I-TYPE")


def read_conll(path: PathLike, scheme: str | None = None, columns: int = 4) -> list[Sentence]:
    """Sentences of a CoNLL file; `scheme` "iob1"/"iob2" converts the tags, None keeps them.

    A line with another number of space-separated `columns`, or a bad tag, raises
    `ValueError("FILE:LINE: ...")`.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"CoNLL file not found: {path}")
    if scheme not in (None, "iob1", "iob2"):
        raise ValueError(f"scheme should be 'iob1', 'iob2' or None, not {scheme!r}")
    sentences, current = [], None
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            if current:
                sentences.append(current)
            current = None
            continue
        if len(parts) != columns:
            raise ValueError(f"{path}:{number}: expected {columns} space-separated columns "
                             f"(word ... tag), found {len(parts)}")
        _check_tag(parts[-1], f"{path}:{number}")
        if current is None:
            current = Sentence([], [], number, [], str(path))
        current.words.append(parts[0])
        current.tags.append(parts[-1])
        current.columns.append(parts[1:-1])  # type: ignore[union-attr]  # made with a list
    if current:
        sentences.append(current)
    if not sentences:
        raise ValueError(f"{path}: no sentences (the file holds only blank or -DOCSTART- lines)")
    if scheme:
        convert = to_iob2 if scheme == "iob2" else to_iob1
        for s in sentences:
            s.tags = convert(s.tags)
    return sentences


def _kind(tag: str) -> str | None:
    return tag[2:] if tag != "O" else None


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 (or mixed) → IOB2: an entity's first word gets `B-`."""
    out, prev = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (prev == "O" or _kind(prev) != _kind(tag)):
            tag = "B-" + tag[2:]
        out.append(tag)
        prev = tag
    return out


def to_iob1(tags: Sequence[str]) -> list[str]:
    """IOB2 → IOB1: `B-` stays only where the previous word is in an entity of the same type."""
    tags = to_iob2(tags)
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-") and not (i and _kind(tags[i - 1]) == _kind(tag)):
            tag = "I-" + tag[2:]
        out.append(tag)
    return out


def detect_scheme(sentences: Sequence[Sentence | Sequence[str]]) -> str:
    """"iob1" if some entity starts with `I-`, else "iob2"."""
    for s in sentences:
        tags = s.tags if isinstance(s, Sentence) else s
        if to_iob2(tags) != list(tags):
            return "iob1"
    return "iob2"


def label_list(sentences: Sequence[Sentence]) -> list[str]:
    """The tags found, "O" first, then by type (B before I)."""
    found = {t for s in sentences for t in s.tags} - {"O"}
    return ["O"] + sorted(found, key=lambda t: (t[2:], t[:2]))


@dataclasses.dataclass
class NerFeatures:
    features: dict        # input_ids, segment_ids, input_mask, label_ids, label_weights [N, T]
    word_positions: list  # per sentence: the position of each kept word's first piece
    num_words: list       # per sentence: its number of words
    truncated: int        # sentences that lost words to max_seq_length


def encode_ner(tokenizer: Tokenizer, sentences: Sequence[Sentence], labels: Sequence[str],
               max_seq_length: int = 128) -> NerFeatures:
    """`[CLS] pieces [SEP]` features with each word's label on its first piece.

    A word the tokenizer turns into no piece (e.g. a lone control character) becomes
    `[UNK]`, so every word keeps a position. Words past `max_seq_length` - 2 pieces are cut
    (counted in `truncated`); `predictions_to_tags` tags them "O".
    """
    if not sentences:
        raise ValueError("no sentences to encode")
    index = {t: i for i, t in enumerate(labels)}
    words = [w for s in sentences for w in s.words]
    pieces = []
    for i in range(0, len(words), 8192):
        pieces += tokenizer.tokenize(words[i:i + 8192]).to_list()
    rows, positions, truncated, k = [], [], 0, 0
    budget = max_seq_length - 2
    first: list[int]                 # each kept word's first piece
    for s in sentences:
        ids, label_ids, first = [tokenizer.cls_id], [IGNORE_LABEL], []
        for w, tag in enumerate(s.tags):
            word = pieces[k + w] or [tokenizer.unk_id]
            if tag not in index:
                where = f"{s.path}:{s.line + w}" if s.path else f"sentence at line {s.line + w}"
                raise ValueError(f"{where}: tag {tag!r} is not in the label list "
                                 f"({', '.join(labels)})")
            if len(ids) - 1 >= budget:
                truncated += 1 if w == len(first) else 0
                continue
            word = word[:budget - (len(ids) - 1)]
            first.append(len(ids))
            label_ids += [index[tag]] + [IGNORE_LABEL] * (len(word) - 1)
            ids += word
        k += len(s.words)
        rows.append((ids + [tokenizer.sep_id], label_ids + [IGNORE_LABEL]))
        positions.append(first)
    width = max((len(r[0]) for r in rows), default=0)
    n = len(rows)
    input_ids = np.full((n, width), tokenizer.pad_id, "int32")
    label_array = np.full((n, width), IGNORE_LABEL, "int32")
    mask = np.zeros((n, width), "int32")
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, :len(ids)], label_array[i, :len(lab)], mask[i, :len(ids)] = ids, lab, 1
    features = {"input_ids": input_ids, "segment_ids": np.zeros_like(input_ids),
                "input_mask": mask, "label_ids": label_array,
                "label_weights": (label_array != IGNORE_LABEL).astype("float32")}
    return NerFeatures(features, positions, [len(s.words) for s in sentences], truncated)


def predictions_to_tags(predictions: Any, encoded: NerFeatures,
                        labels: Sequence[str]) -> list[list[str]]:
    """Model output [N, T, labels] (or label ids [N, T]) → one tag list per sentence, read at
    each word's first piece; words cut by truncation get "O"."""
    predictions = np.asarray(predictions)
    ids = predictions.argmax(-1) if predictions.ndim == 3 else predictions
    out = []
    for row, first, n in zip(ids, encoded.word_positions, encoded.num_words):
        tags = [labels[int(row[p])] if p < len(row) else "O" for p in first]
        out.append(tags + ["O"] * (n - len(tags)))
    return out


def evaluate_ner(sentences: Sequence[Sentence],
                 predicted_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity precision / recall / F1 (percentages), conlleval's rules."""
    from kbert.tasks import metrics
    return metrics.entity_scores([s.tags for s in sentences], predicted_tags)
