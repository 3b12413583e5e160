"""What fine-tuning needs to know about each task: its head, its file reader, its features,
its loss and its official scores. `kbert.training.finetune` runs the same loop for all of them.

    GLUE (9 tasks)   classifier on [CLS] (STS-B: a regressor)   accuracy / F1 / MCC / Pearson
    squad, squad2    span head (start and end logits)           exact match and F1
    conll2003        tagger, each word's first piece            entity precision / recall / F1
    swag             one score per choice                       accuracy
  your own files (`userdata.py`), labels found in the training file:
    classify         CSV/TSV/JSONL, named columns, classifier   accuracy, macro F1
    regress          CSV/TSV/JSONL, named columns, regressor    Pearson, Spearman
    tag              CoNLL or JSONL tokens/tags, tagger         entity precision / recall / F1
    qa               SQuAD JSON (v1.1 or v2.0), span head       exact match and F1

Each task object has `read(path)`, `encode(tokenizer, data, max_seq_length, training,
options)` → `Prepared`, `targets(prepared)` → what `fit` reads and `score(prepared, outputs,
options, tune)` → (scores, head options to store). The loss and metrics are the task model's
`compile()` defaults (`kbert.models`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from kbert.hints import PathLike
from kbert.tasks import glue, ner, squad, squad_postprocess, swag, userdata
from kbert.wording import plural

if TYPE_CHECKING:   # type-only: the tokenizer needs TensorFlow
    from kbert.tokenizer import Tokenizer

# A task head's options as the checkpoint stores them (labels, problem, version, ...).
Options = dict[str, Any]
# The model's predictions on a file: one array, or a dict of arrays by output name.
Outputs = Any
# What `fit` reads: the features, the target name(s) and the sample-weight name (or None).
Targets = tuple[dict[str, np.ndarray], Union[str, tuple[str, ...]], Union[str, None]]
Scores = tuple[dict[str, float], Options]
# A task's examples as its `read` gives them (a list of examples, or a SquadData): `Any` here,
# as `kbert.training.finetune` hands each task back what that task read.
Data = Any

OWN_DATA_TASKS = ("classify", "regress", "tag", "qa")


def file_labels(options: Options) -> list[str]:
    """A classifier's labels as its data files spell them. `labels` are what the model answers
    (`rename_labels` may have named them); `label_values`, where stored, are the files' values
    in the same order."""
    return list(options.get("label_values") or options.get("labels") or ())


def rename_labels(options: Options, names: Sequence[str]) -> Options:
    """The head options with the classifier's labels named `names` (in the order of its labels:
    a GLUE task's table, e.g. sst2's 0, 1, or the training file's sorted labels); the files'
    values are kept as `label_values` so training and scoring still read them."""
    values = file_labels(options)
    if options.get("problem", "classification") != "classification" or not values:
        raise ValueError("label names are for classifier tasks (GLUE classification, classify)")
    names = [str(n).strip() for n in names]
    if len(names) != len(values):
        raise ValueError(f"{plural(len(names), 'label name')} given for "
                         f"{plural(len(values), 'label')} ({', '.join(map(str, values))})")
    if any(not n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"label names must be distinct and non-empty: {', '.join(names)}")
    return {**options, "labels": names, "label_values": [str(v) for v in values]}
TASKS = tuple(glue.TASKS) + ("squad", "squad2", "conll2003", "swag") + OWN_DATA_TASKS


@dataclasses.dataclass
class Prepared:
    """One file ready for the model: its examples, numpy features, and the mapping back."""
    data: Data         # the examples (a SquadData for SQuAD)
    features: dict     # input_ids, segment_ids, input_mask (+ labels) [N, ...]
    extra: Any = None


class GlueTask:
    head, sequence_output, max_seq_length = "classifier", False, 128

    def __init__(self, name: str) -> None:
        self.name, self.task = name, glue.get_task(name)
        self.metric = self.task.main_metric

    def read(self, path: PathLike) -> list[glue.GlueExample]:
        return glue.read_glue(self.task, path)

    def head_of(self, data: Data, n: int) -> Data:
        return data[:n]

    def size(self, prepared: Prepared) -> int:
        return len(prepared.data)

    def head_options(self, data: Data) -> Options:
        if self.task.is_regression:
            return {"task": self.name, "problem": "regression", "num_labels": 1}
        return {"task": self.name, "problem": "classification", "labels": list(self.task.labels)}

    def check_options(self, options: Options, where: str) -> None:
        expected = self.head_options([])
        if options.get("problem", "classification") != expected["problem"] or \
                options.get("labels") and file_labels(options) != expected.get("labels"):
            raise ValueError(f"checkpoint {where}: its classifier predicts "
                             f"{options.get('labels') or options.get('problem')}, not "
                             f"{self.name}'s {expected.get('labels') or expected['problem']}")

    def encode(self, tokenizer: Tokenizer, data: Data, max_seq_length: int, training: bool,
               options: Options) -> Prepared:
        features, _ = glue.encode_glue(tokenizer, self.task, data, max_seq_length)
        return Prepared(data, features)

    def targets(self, prepared: Prepared) -> Targets:
        return prepared.features, "label_ids", None

    def score(self, prepared: Prepared, outputs: Outputs, options: Options,
              tune: bool = False) -> Scores:
        return glue.evaluate_glue(self.task, prepared.data, outputs), options


class SquadTask:
    head, sequence_output, max_seq_length, metric = "span", True, 384, "f1"

    def __init__(self, name: str) -> None:
        self.name, self.version_2 = name, name == "squad2"

    def read(self, path: PathLike) -> squad.SquadData:
        return squad.read_squad(path)

    def head_of(self, data: Data, n: int) -> Data:
        return dataclasses.replace(data, examples=data.examples[:n])

    def size(self, prepared: Prepared) -> int:
        return len(prepared.data.examples)

    def head_options(self, data: Data) -> Options:
        return {"version": "2.0" if self.version_2 else "1.1", "null_score_diff_threshold": 0.0}

    def check_options(self, options: Options, where: str) -> None:
        pass

    def encode(self, tokenizer: Tokenizer, data: Data, max_seq_length: int, training: bool,
               options: Options) -> Prepared:
        encoded = squad.encode_squad(tokenizer, data.examples, is_training=training,
                                     max_seq_length=max_seq_length)
        return Prepared(data, encoded.features, encoded)

    def targets(self, prepared: Prepared) -> Targets:
        f = prepared.features
        features = {k: f[k] for k in ("input_ids", "segment_ids", "input_mask")}
        features.update(start_logits=f["start_positions"], end_logits=f["end_positions"])
        return features, ("start_logits", "end_logits"), None

    def score(self, prepared: Prepared, outputs: Outputs, options: Options,
              tune: bool = False) -> Scores:
        from kbert.tasks import metrics
        threshold = float(options.get("null_score_diff_threshold", 0.0))
        result = squad_postprocess.postprocess(
            prepared.data.examples, prepared.extra, outputs["start_logits"],
            outputs["end_logits"], version_2=self.version_2, null_score_diff_threshold=threshold)
        if not self.version_2:
            return metrics.squad_v1_1(prepared.data.dataset, result.predictions), options
        predictions = result.predictions
        if tune:
            threshold, _ = squad_postprocess.tune_null_threshold(prepared.data, result)
            predictions = squad_postprocess.apply_null_threshold(result, threshold)
            options = {**options, "null_score_diff_threshold": float(threshold)}
        raw = metrics.squad_v2_0(prepared.data.dataset, predictions)
        keys = ("exact_match", "f1", "HasAns_f1", "NoAns_f1")
        return {k: raw[k] for k in keys if k in raw}, options


class ConllTask:
    name, head, sequence_output, max_seq_length, metric = "conll2003", "tagger", True, 128, "f1"

    def read(self, path: PathLike) -> Sequence[ner.Sentence]:
        return ner.read_conll(path, scheme="iob2")

    def head_of(self, data: Data, n: int) -> Data:
        return data[:n]

    def size(self, prepared: Prepared) -> int:
        return len(prepared.data)

    def head_options(self, data: Data) -> Options:
        found = {t for s in data for t in s.tags}
        labels = ner.CONLL2003_LABELS if found <= set(ner.CONLL2003_LABELS) else \
            ner.label_list(data)
        return {"labels": list(labels)}

    def check_options(self, options: Options, where: str) -> None:
        if not options.get("labels"):
            raise ValueError(f"checkpoint {where}: its tagger head has no labels")

    def encode(self, tokenizer: Tokenizer, data: Data, max_seq_length: int, training: bool,
               options: Options) -> Prepared:
        encoded = ner.encode_ner(tokenizer, data, options["labels"], max_seq_length)
        return Prepared(data, encoded.features, encoded)

    def targets(self, prepared: Prepared) -> Targets:
        # Only a word's first piece is trained on: weight 1 there, 0 elsewhere (label -100).
        f = dict(prepared.features)
        f["label_ids"] = np.maximum(f["label_ids"], 0)
        return f, "label_ids", "label_weights"

    def score(self, prepared: Prepared, outputs: Outputs, options: Options,
              tune: bool = False) -> Scores:
        tags = ner.predictions_to_tags(outputs, prepared.extra, options["labels"])
        return ner.evaluate_ner(prepared.data, tags), options


class SwagTask:
    name, head, sequence_output, max_seq_length, metric = "swag", "choice", False, 128, \
        "accuracy"

    def read(self, path: PathLike) -> list[swag.SwagExample]:
        return swag.read_swag(path)

    def head_of(self, data: Data, n: int) -> Data:
        return data[:n]

    def size(self, prepared: Prepared) -> int:
        return len(prepared.data)

    def head_options(self, data: Data) -> Options:
        return {"num_choices": swag.NUM_CHOICES}

    def check_options(self, options: Options, where: str) -> None:
        pass

    def encode(self, tokenizer: Tokenizer, data: Data, max_seq_length: int, training: bool,
               options: Options) -> Prepared:
        features, _ = swag.encode_swag(tokenizer, data, max_seq_length)
        return Prepared(data, features)

    def targets(self, prepared: Prepared) -> Targets:
        return prepared.features, "label_ids", None

    def score(self, prepared: Prepared, outputs: Outputs, options: Options,
              tune: bool = False) -> Scores:
        return swag.evaluate_swag(prepared.data, outputs), options


class TableTask(GlueTask):
    """classify / regress: your own CSV, TSV or JSONL file with named columns."""

    def __init__(self, name: str, text_column: str | None = None,
                 text_pair_column: str | None = None, label_column: str | None = None) -> None:
        self.name, self.regression = name, name == "regress"
        self.columns = (text_column or "text", text_pair_column, label_column or "label")
        self.metric = "pearson" if self.regression else "accuracy"
        self.task = self._glue_task(())

    def _glue_task(self, labels: Sequence[str]) -> glue.GlueTask:
        metrics = ("pearson", "spearman") if self.regression else ("accuracy", "macro_f1")
        texts = tuple(c for c in self.columns[:2] if c)
        return glue.GlueTask(self.name, "", texts, self.columns[2], tuple(labels), metrics)

    def read(self, path: PathLike) -> list[glue.GlueExample]:
        return userdata.read_table(path, *self.columns, regression=self.regression,
                                   labelled=True)

    def head_options(self, data: Data) -> Options:
        if self.regression:
            return {"task": self.name, "problem": "regression", "num_labels": 1}
        labels = userdata.label_list(data)
        if len(labels) < 2:
            raise ValueError(f"{data[0].guid.rsplit(':', 1)[0]}: the training file has "
                             f"{plural(len(labels), 'distinct label')}; classify needs at least 2")
        return {"task": self.name, "problem": "classification", "labels": labels}

    def check_options(self, options: Options, where: str) -> None:
        problem = "regression" if self.regression else "classification"
        if options.get("problem", "classification") != problem:
            raise ValueError(f"checkpoint {where}: its classifier head does "
                             f"{options.get('problem', 'classification')}, not {problem}")
        if not self.regression and not options.get("labels"):
            raise ValueError(f"checkpoint {where}: its classifier head stores no labels")

    def encode(self, tokenizer: Tokenizer, data: Data, max_seq_length: int, training: bool,
               options: Options) -> Prepared:
        labels = file_labels(options)
        for e in data:
            if not self.regression and e.label is not None and e.label not in labels:
                raise ValueError(f"{e.guid}: label {e.label!r} is not one of the model's "
                                 f"labels ({', '.join(labels)})")
        features, _ = glue.encode_glue(tokenizer, self._glue_task(labels), data, max_seq_length)
        return Prepared(data, features)

    def score(self, prepared: Prepared, outputs: Outputs, options: Options,
              tune: bool = False) -> Scores:
        # The labels come with the options (the checkpoint's, or the training file's), not from
        # state left by encode: a set encoded elsewhere (`kbert.training.encode`) scores the same.
        task = self._glue_task(file_labels(options))
        return glue.evaluate_glue(task, prepared.data, outputs), options


class TagTask(ConllTask):
    """tag: your own CoNLL (word ... tag) or JSONL (tokens, tags) file; tags kept as given."""

    def __init__(self, tokens_key: str | None = None, tags_key: str | None = None) -> None:
        self.name, self.keys = "tag", (tokens_key or "tokens", tags_key or "tags")

    def read(self, path: PathLike) -> Sequence[userdata.TaggedSentence]:
        return userdata.read_tagged(str(path), *self.keys)

    def head_options(self, data: Data) -> Options:
        return {"labels": ner.label_list(data)}

    def encode(self, tokenizer: Tokenizer, data: Data, max_seq_length: int, training: bool,
               options: Options) -> Prepared:
        known = set(options["labels"])
        for s in data:
            for w, tag in enumerate(s.tags):
                if tag not in known:
                    raise ValueError(f"{s.where(w)}: tag {tag!r} is not one of the model's "
                                     f"tags ({', '.join(options['labels'])})")
        return super().encode(tokenizer, data, max_seq_length, training, options)


class QaTask(SquadTask):
    """qa: your own SQuAD-format JSON; v2.0 (no-answer questions) when the file says so."""

    def __init__(self) -> None:
        super().__init__("qa")

    def head_options(self, data: Data) -> Options:
        v2 = data.version.startswith("2") or any(e.is_impossible for e in data.examples)
        return {"version": "2.0" if v2 else "1.1", "null_score_diff_threshold": 0.0}

    def score(self, prepared: Prepared, outputs: Outputs, options: Options,
              tune: bool = False) -> Scores:
        self.version_2 = str(options.get("version", "1.1")).startswith("2")
        return super().score(prepared, outputs, options, tune)


# What `kbert.training.finetune` runs: one of the task classes above (they share no base class).
Task = Union[GlueTask, SquadTask, ConllTask, SwagTask]


def get_task(name: str, text_column: str | None = None, text_pair_column: str | None = None,
             label_column: str | None = None) -> Task:
    """The task object for a TASK name (`sst2`, `squad2`, `conll2003`, `classify`, ...).

    The column options are for the own-data tasks: `classify`/`regress` read `text_column`
    (default "text"), `text_pair_column` and `label_column` ("label"); `tag` reads JSONL keys
    `text_column` ("tokens") and `label_column` ("tags").
    """
    key = str(name).lower()
    if key in ("classify", "regress"):
        return TableTask(key, text_column, text_pair_column, label_column)
    if key == "tag":
        return TagTask(text_column, label_column)
    if key == "qa":
        return QaTask()
    if key in ("squad", "squad2"):
        return SquadTask(key)
    if key == "conll2003":
        return ConllTask()
    if key == "swag":
        return SwagTask()
    if key in glue.TASKS:
        return GlueTask(key)
    raise ValueError(f"unknown task {name!r}; choose one of {' '.join(TASKS)}")
