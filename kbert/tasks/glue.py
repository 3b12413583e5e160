"""GLUE (Wang et al., 2018): the TSV readers, the task table and sentence(-pair) features.

Files are read as GLUE distributes them: tab-separated, no quoting (a `"` is text), UTF-8 (a
byte-order mark is dropped, as MRPC's header has one). Columns are found by the header's names;
CoLA's train/dev files have no header (source, label, judgement, sentence). An example's `guid`
is `SPLIT-LINE`. Test files, which have no label column, give examples with `label=None`.

Example:
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "dev.tsv")
>>> _ = open(path, "w").write("sentence\\tlabel\\na fine film\\t1\\n")
>>> read_glue("sst2", path)
[GlueExample(guid='dev-2', text_a='a fine film', text_b=None, label='1')]
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


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """One GLUE task: where its text and label are, its labels and its official metrics."""
    name: str
    directory: str           # the folder name in the GLUE download
    text_columns: tuple      # header names of sentence A (and B)
    label_column: str        # header name of the label
    labels: tuple            # label strings in id order; () for regression
    metrics: tuple           # names in kbert.tasks.metrics.GLUE_METRICS
    header: bool = True      # False: CoLA train/dev
    positions: tuple = ()    # column indexes (texts..., label) for files without a header

    @property
    def is_regression(self) -> bool:
        return not self.labels

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1

    @property
    def main_metric(self) -> str:
        return self.metrics[0]


_NLI = ("entailment", "not_entailment")
TASKS = {t.name: t for t in (
    GlueTask("cola", "CoLA", ("sentence",), "label", ("0", "1"), ("mcc",), header=False,
             positions=(3, 1)),
    GlueTask("sst2", "SST-2", ("sentence",), "label", ("0", "1"), ("accuracy",)),
    GlueTask("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"),
             ("accuracy", "f1")),
    GlueTask("stsb", "STS-B", ("sentence1", "sentence2"), "score", (), ("pearson", "spearman")),
    GlueTask("qqp", "QQP", ("question1", "question2"), "is_duplicate", ("0", "1"),
             ("accuracy", "f1")),
    GlueTask("mnli", "MNLI", ("sentence1", "sentence2"), "gold_label",
             ("contradiction", "entailment", "neutral"), ("accuracy",)),
    GlueTask("qnli", "QNLI", ("question", "sentence"), "label", _NLI, ("accuracy",)),
    GlueTask("rte", "RTE", ("sentence1", "sentence2"), "label", _NLI, ("accuracy",)),
    GlueTask("wnli", "WNLI", ("sentence1", "sentence2"), "label", ("0", "1"), ("accuracy",)),
)}
# MNLI's evaluation files: dev_matched.tsv / dev_mismatched.tsv (same layout as train.tsv).
SPLIT_FILES = {"mnli": {"dev": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv",
                        "test": "test_matched.tsv", "test_mismatched": "test_mismatched.tsv"}}


@dataclasses.dataclass
class GlueExample:
    guid: str
    text_a: str
    text_b: str | None
    label: object  # label string, float score (STS-B), or None (test files)


def get_task(name: str) -> GlueTask:
    """The task table entry; accepts `sst2`, `SST-2`, `mnli-mm` ..."""
    key = name.lower().replace("-", "").replace("_", "")
    key = {"mnlimm": "mnli", "mnlim": "mnli", "stsb": "stsb"}.get(key, key)
    if key not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[key]


def task_file(task: str | GlueTask, glue_dir: PathLike, split: str) -> str:
    """The path of a split (`train`, `dev`, `test`, MNLI `dev_mismatched`) in a GLUE folder."""
    task = get_task(task) if isinstance(task, str) else task
    name = SPLIT_FILES.get(task.name, {}).get(split, f"{split}.tsv")
    return os.path.join(glue_dir, task.directory, name)


def _columns(task: GlueTask, header: list[str], path: PathLike) -> tuple[list[int], int | None]:
    """Indexes of the text columns and the label column (None when absent) from the header.

    Only a test file (its name starts with `test`) may lack the label column."""
    is_test = os.path.basename(path).startswith("test")
    missing = [c for c in task.text_columns if c not in header]
    if task.label_column not in header and not is_test:
        missing.append(task.label_column)
    if missing:
        raise ValueError(f"{path}:1: header lacks the column {missing[0]!r} "
                         f"(found: {', '.join(header)})")
    texts = [header.index(c) for c in task.text_columns]
    # MNLI dev files have label1..label5 then gold_label: the label is the last column.
    label = len(header) - 1 - header[::-1].index(task.label_column) \
        if task.label_column in header else None
    return texts, label


def read_glue(task: str | GlueTask, path: PathLike) -> list[GlueExample]:
    """The examples of one GLUE TSV file; a malformed line raises `ValueError("FILE:LINE: ...")`.

    Labels are checked against the task's label list (STS-B: a float in [0, 5]).
    """
    task = get_task(task) if isinstance(task, str) else task
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GLUE file not found: {path}")
    split = os.path.splitext(os.path.basename(path))[0]
    lines = read_text(path).splitlines()
    if not lines:
        raise ValueError(f"{path}: the file is empty")
    first = lines[0].split("\t")
    has_header = task.header or (first[0] == "index" and len(first) == 2)  # CoLA's test.tsv
    if has_header:
        texts, label = _columns(task, first, path)
        width, start = len(first), 1
    else:
        texts, label = list(task.positions[:-1]), task.positions[-1]
        width, start = max(task.positions) + 1, 0
    examples = []
    value: str | float | None     # a label, an STS-B score, or None (test files)
    for number, line in enumerate(lines[start:], start=start + 1):
        if not line.strip():
            continue
        row = line.split("\t")
        if len(row) != width:
            raise ValueError(f"{path}:{number}: expected {width} tab-separated columns, "
                             f"found {len(row)}")
        value = row[label] if label is not None else None
        if value is not None:
            value = _check_label(task, value, f"{path}:{number}")
        text_b = row[texts[1]] if len(texts) > 1 else None
        examples.append(GlueExample(f"{split}-{number}", row[texts[0]], text_b, value))
    return examples


def _check_label(task: GlueTask, value: str, where: str) -> str | float:
    if task.is_regression:
        try:
            score = float(value)
        except ValueError:
            raise ValueError(f"{where}: score {value!r} is not a number") from None
        if not 0.0 <= score <= 5.0:
            raise ValueError(f"{where}: score {score} is outside [0, 5]")
        return score
    if value not in task.labels:
        raise ValueError(f"{where}: label {value!r} is not one of {', '.join(task.labels)}")
    return value


def label_ids(task: GlueTask, examples: Sequence[GlueExample]) -> np.ndarray:
    """Labels as model targets: int ids (classification) or float32 scores (STS-B)."""
    task = get_task(task) if isinstance(task, str) else task
    if any(e.label is None for e in examples):
        raise ValueError(f"{task.name}: some examples have no label (a test file?)")
    if task.is_regression:
        return np.array([e.label for e in examples], dtype="float32")
    return np.array([task.labels.index(e.label) for e in examples], dtype="int32")


def encode_glue(tokenizer: Tokenizer, task: GlueTask, examples: Sequence[GlueExample],
                max_seq_length: int = 128) -> tuple[dict[str, np.ndarray], int]:
    """`[CLS] A [SEP] (B [SEP])` features, the longer side truncated first.

    Returns (features, truncated): numpy `input_ids`, `segment_ids`, `input_mask` [N, T] padded
    to the longest example (T <= max_seq_length; `kbert.tasks.batching` trims per batch), plus
    `label_ids` when every example has a label; `truncated` counts the examples cut.
    """
    task = get_task(task) if isinstance(task, str) else task
    if not examples:
        raise ValueError(f"{task.name}: no examples to encode")
    first = tokenizer.tokenize([e.text_a for e in examples]).to_list()
    second = None
    if examples[0].text_b is not None:
        second = tokenizer.tokenize([e.text_b for e in examples]).to_list()
    features, cut = tokenizer.pack(first, second, max_seq_length=max_seq_length)
    if all(e.label is not None for e in examples):
        features["label_ids"] = label_ids(task, examples)
    return features, sum(1 for c in cut if c)


def predictions_to_labels(task: str | GlueTask, predictions: Any) -> np.ndarray:
    """Model outputs → what the metrics compare: label ids (argmax) or scores (STS-B)."""
    task = get_task(task) if isinstance(task, str) else task
    predictions = np.asarray(predictions)
    if task.is_regression:
        return predictions.reshape(len(predictions))
    return predictions.argmax(-1)


def evaluate_glue(task: str | GlueTask, examples: Sequence[GlueExample],
                  predictions: Any) -> dict[str, float]:
    """The task's official metrics (percentages) of model outputs against the examples' labels.

    >>> evaluate_glue("mrpc", [GlueExample("1", "a", "b", "1")], [[0.1, 0.9]])
    {'accuracy': 100.0, 'f1': 100.0}
    """
    from kbert.tasks import metrics
    task = get_task(task) if isinstance(task, str) else task
    return metrics.glue_scores(task.metrics, label_ids(task, examples),
                               predictions_to_labels(task, predictions))
