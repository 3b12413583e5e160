"""SWAG (Zellers et al., 2018): the CSV reader and four-way multiple-choice features.

The CSV is the one the SWAG authors distribute (`train.csv`, `val.csv`; `test.csv` has no
`label`): a header naming `sent1` (the context), `sent2` (the start of the next sentence),
`ending0` … `ending3` and `label`. Each choice is encoded, as in the BERT paper (section 4.4),
as the pair `[CLS] sent1 [SEP] sent2 ending_i [SEP]`.

Example:
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "val.csv")
>>> _ = open(path, "w").write(",video-id,fold-ind,startphrase,sent1,sent2,gold-source,"
...     "ending0,ending1,ending2,ending3,label\\n0,v,1,A b,He sits.,He,gold,eats.,runs.,"
...     "flies.,sleeps.,0\\n")
>>> read_swag(path)[0].endings
['eats.', 'runs.', 'flies.', 'sleeps.']
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert.hints import PathLike

if TYPE_CHECKING:   # type-only: the tokenizer needs TensorFlow
    from kbert.tokenizer import Tokenizer

NUM_CHOICES = 4
REQUIRED = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")


@dataclasses.dataclass
class SwagExample:
    guid: str
    context: str       # sent1
    start_ending: str  # sent2, the start every ending continues
    endings: list      # four endings
    label: int | None = None  # index of the true ending; None in the test file


def read_swag(path: PathLike) -> list[SwagExample]:
    """The examples of a SWAG CSV file; a malformed row raises `ValueError("FILE:LINE: ...")`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SWAG file not found: {path}")
    examples = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: the file is empty")
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise ValueError(f"{path}:1: header lacks the column {missing[0]!r}")
        col = {name: header.index(name) for name in REQUIRED + ("label",) if name in header}
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"{where}: expected {len(header)} comma-separated fields, "
                                 f"found {len(row)}")
            label = None
            if "label" in col:
                value = row[col["label"]]
                if value not in ("0", "1", "2", "3"):
                    raise ValueError(f"{where}: label {value!r} is not 0, 1, 2 or 3")
                label = int(value)
            examples.append(SwagExample(
                f"{os.path.basename(path)}-{reader.line_num}", row[col["sent1"]],
                row[col["sent2"]], [row[col[f"ending{i}"]] for i in range(NUM_CHOICES)],
                label))
    return examples


def encode_swag(tokenizer: Tokenizer, examples: Sequence[SwagExample],
                max_seq_length: int = 128) -> tuple[dict[str, np.ndarray], int]:
    """Features [N, 4, T]: `input_ids`, `segment_ids`, `input_mask` (+ `label_ids` [N]).

    Returns (features, truncated): the number of choices cut to `max_seq_length`
    (the longer side first).
    """
    if not examples:
        raise ValueError("SWAG: no examples to encode")
    contexts = [e.context for e in examples for _ in range(NUM_CHOICES)]
    choices = [f"{e.start_ending} {ending}".strip() for e in examples for ending in e.endings]
    first = tokenizer.tokenize(contexts).to_list()
    second = tokenizer.tokenize(choices).to_list()
    flat, cut = tokenizer.pack(first, second, max_seq_length=max_seq_length)
    features = {k: v.reshape(len(examples), NUM_CHOICES, -1) for k, v in flat.items()}
    if all(e.label is not None for e in examples):
        features["label_ids"] = np.array([e.label for e in examples], "int32")
    return features, sum(1 for c in cut if c)


def evaluate_swag(examples: Sequence[SwagExample], logits: Any) -> dict[str, float]:
    """Accuracy (percent) of the highest-scoring ending."""
    from kbert.tasks import metrics
    return {"accuracy": metrics.accuracy([e.label for e in examples],
                                         np.asarray(logits).argmax(-1))}
