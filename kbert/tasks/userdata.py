"""Your own files for `kbert finetune classify|regress|tag|qa` (QA reads SQuAD JSON: `squad.py`).

    read_table(path, text_column, text_pair_column, label_column)   CSV, TSV or JSONL rows with
        named columns → `glue.GlueExample`s whose `guid` is "FILE:LINE" (`table_rows`: the
        rows themselves)
    read_tagged(path, tokens_key, tags_key)   CoNLL (word ... tag, blank line between sentences)
        or JSONL ({"tokens": [...], "tags": [...]}) → `TaggedSentence`s
    label_list(examples)   the labels found in a file, sorted (by value when all are numbers)

The format follows the extension: `.csv`, `.tsv`, `.jsonl` (or `.json` with one object a line);
for tagging `.jsonl` or anything else as CoNLL. A bad row raises `ValueError("FILE:LINE: ...")`.

Example:
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "reviews.csv")
>>> _ = open(path, "w").write('text,label\\n"great, really",pos\\ndull,neg\\n')
>>> [(e.guid.rsplit(":", 1)[1], e.text_a, e.label) for e in read_table(path, "text")]
[('2', 'great, really', 'pos'), ('3', 'dull', 'neg')]
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kbert.hints import PathLike
from kbert.jsonl import json_lines, not_utf8
from kbert.tasks import glue, ner

TABLE_FORMATS = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".jsonl": None, ".json": None,
                 ".ndjson": None}


def _format(path: PathLike) -> str | None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"file not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in TABLE_FORMATS:
        raise ValueError(f"{path}: unknown format {ext or '(no extension)'}; use .csv, .tsv or "
                         ".jsonl")
    return TABLE_FORMATS[ext]


def _json_rows(path: PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file."""
    for number, row in json_lines(path, encoding="utf-8-sig"):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, found "
                             f"{type(row).__name__}")
        yield number, row


def _delimited_rows(path: PathLike, delimiter: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: value}) for each non-blank row of a CSV/TSV file with a header."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path}:1: the file is empty (a header row is needed)")
        start = reader.line_num
        for row in reader:
            if not any(cell.strip() for cell in row):
                start = reader.line_num
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{start + 1}: expected {len(header)} fields (the "
                                 f"header's), found {len(row)}")
            yield start + 1, dict(zip(header, row))
            start = reader.line_num


def table_rows(path: PathLike) -> Any:
    """(line number, {column: value}) for each row of a CSV, TSV or JSONL file (by its
    extension); a bad row raises `ValueError("FILE:LINE: ...")`."""
    delimiter = _format(path)
    return _utf8(path, _json_rows(path) if delimiter is None else
                 _delimited_rows(path, delimiter))


def _utf8(path: PathLike, rows: Iterable[tuple[int, dict[str, Any]]]
          ) -> Iterator[tuple[int, dict[str, Any]]]:
    """`rows`, with a file that is not UTF-8 named in one line (FILE:LINE)."""
    try:
        yield from rows
    except UnicodeDecodeError:
        raise ValueError(not_utf8(path)) from None


def read_table(path: PathLike, text_column: str = "text", text_pair_column: str | None = None,
               label_column: str = "label", regression: bool = False,
               labelled: bool = False) -> list[glue.GlueExample]:
    """Examples of a CSV, TSV or JSONL file; a row without its label gives `label=None`
    only when the whole file has no label column (a file to predict on) and not `labelled`."""
    rows = table_rows(path)
    examples, has_label = [], None
    for number, row in rows:
        where = f"{path}:{number}"
        texts = []
        for column in (text_column, text_pair_column):
            if column is None:
                continue
            value = row.get(column)
            if not isinstance(value, str):
                found = ("missing" if column not in row else "null" if value is None
                         else f"a {type(value).__name__}")
                raise ValueError(f"{where}: column {column!r} is {found}, not text "
                                 f"(columns: {', '.join(row)})")
            if not value.strip():
                raise ValueError(f"{where}: column {column!r} is empty")
            texts.append(value)
        label = row.get(label_column) if label_column else None
        if labelled and label is None:
            found = "missing" if label_column not in row else "null"
            raise ValueError(f"{where}: column {label_column!r} is {found} (columns: "
                             f"{', '.join(row)})")
        if has_label is None:
            has_label = label is not None
        if has_label != (label is not None):
            raise ValueError(f"{where}: no {label_column!r} column" if has_label else
                             f"{where}: a label where the first row has none")
        if label is not None:
            label = _label(label, regression, label_column, where)
        examples.append(glue.GlueExample(where, texts[0], texts[1] if len(texts) > 1 else None,
                                         label))
    if not examples:
        raise ValueError(f"{path}: no rows")
    return examples


def _label(value: Any, regression: bool, column: str, where: str) -> str | float:
    if regression:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {column} {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise ValueError(f"{where}: {column} {value!r} is not a class label")
    return str(value)


def label_list(examples: Sequence[glue.GlueExample]) -> list[Any]:
    """The distinct labels, sorted; numerically when every label is an integer."""
    found = {e.label for e in examples if e.label is not None}
    try:
        return sorted(found, key=int)
    except ValueError:
        return sorted(found)


@dataclasses.dataclass
class TaggedSentence(ner.Sentence):
    path: str = ""
    jsonl: bool = False

    def where(self, word: int = 0) -> str:
        """FILE:LINE of a word (CoNLL: its own line; JSONL: the sentence's line)."""
        return f"{self.path}:{self.line + (0 if self.jsonl else word)}"


def read_tagged(path: str, tokens_key: str = "tokens",
                tags_key: str = "tags") -> list[TaggedSentence]:
    """Sentences of a JSONL file of {tokens, tags} or of a CoNLL file (word ... tag)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"file not found: {path}")
    if os.path.splitext(path)[1].lower() in (".jsonl", ".json", ".ndjson"):
        out = []
        for number, row in _json_rows(path):
            where = f"{path}:{number}"
            words: Any      # each checked below: a list of strings
            tags: Any
            words, tags = row.get(tokens_key), row.get(tags_key)
            for key, value in ((tokens_key, words), (tags_key, tags)):
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"{where}: {key!r} should be a list of strings")
            if len(words) != len(tags):
                raise ValueError(f"{where}: {len(words)} tokens but {len(tags)} tags")
            if not words:
                continue
            for tag in tags:
                ner._check_tag(tag, where)
            out.append(TaggedSentence(words, tags, number, path=path, jsonl=True))
        return out
    return [TaggedSentence(s.words, s.tags, s.line, s.columns, path=path)
            for s in ner.read_conll(path, columns=_conll_columns(path))]


def _conll_columns(path: str) -> int:
    """The number of space-separated columns of the first word line (2: `word tag`)."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            parts = line.split()
            if parts and parts[0] != "-DOCSTART-":
                if len(parts) < 2:
                    raise ValueError(f"{path}:{number}: expected `word ... tag`, found one "
                                     "column")
                return len(parts)
    raise ValueError(f"{path}: no tagged words")
