"""Passages: texts longer than the encoder reads, split into overlapping windows; and the files
`kbert index build` reads (plain text, JSONL, CSV).

A window holds at most `max_tokens` WordPieces, starts at a word's first piece and shares about
`overlap` pieces with the one before, so a sentence cut at one window's end is whole in the
next. Each passage is a substring of its text, with character offsets.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbert.jsonl import json_lines, not_utf8

if TYPE_CHECKING:   # type-only: the tokenizer needs TensorFlow
    from kbert.tokenizer import Tokenizer


class PassageError(ValueError):
    """An input file or text that cannot become passages (one line, naming the file)."""


@dataclasses.dataclass(frozen=True)
class Passage:
    """A passage of a text: `text` is `texts[source][start:end]`."""

    text: str
    source: int
    start: int
    end: int


def windows(starts: Sequence[int], is_word_start: Sequence[bool], max_tokens: int,
            overlap: int) -> list[tuple[int, int]]:
    """[(first, last + 1)] piece ranges covering `len(starts)` pieces: each at most `max_tokens`
    long, starting at a word start where one lies in reach, `overlap` pieces shared.

    >>> windows(range(10), [True] * 10, 4, 1)
    [(0, 4), (3, 7), (6, 10)]
    >>> windows(range(6), [True, False, True, False, False, True], 4, 1)   # no word is cut
    [(0, 4), (2, 6)]
    """
    n, out, first = len(starts), [], 0
    step = max(1, max_tokens - overlap)
    while True:
        last = min(n, first + max_tokens)
        out.append((first, last))
        if last >= n:
            return out
        nxt = max(first + 1, last - overlap)
        back = nxt
        while back > first + 1 and not is_word_start[back]:   # a word's first piece
            back -= 1
        nxt = back if is_word_start[back] else max(nxt, first + step)
        first = nxt


def split_passages(tokenizer: Tokenizer, texts: Sequence[str], max_tokens: int,
                   overlap: int = 32) -> tuple[list[Passage], int]:
    """(passages, how many texts were split): each text in one passage if its WordPieces fit
    in `max_tokens`, else cut into overlapping windows (see `windows`)."""
    if max_tokens < 2 or not 0 <= overlap < max_tokens // 2 + 1:
        raise ValueError(f"passages: need max_tokens >= 2 and 0 <= overlap <= max_tokens / 2, "
                         f"got {max_tokens} and {overlap}")
    lengths = [len(ids) for ids in tokenizer.encode_batch(list(texts))]
    long = [i for i, n in enumerate(lengths) if n > max_tokens]
    pieces = dict(zip(long, tokenizer.batch_tokenize_with_char_offsets([texts[i] for i in long])))
    out = []
    for i, text in enumerate(texts):
        if i not in pieces:
            out.append(Passage(text, i, 0, len(text)))
            continue
        ids, starts, ends = pieces[i]
        tokens = tokenizer.convert_ids_to_tokens(ids)
        word_start = [not t.startswith("##") for t in tokens]
        for a, b in windows(starts, word_start, max_tokens, overlap):
            out.append(Passage(text[starts[a]:ends[b - 1]], i, int(starts[a]), int(ends[b - 1])))
    return out, len(long)


# --- files ---------------------------------------------------------------------------------------
def read_texts(paths: Sequence[str], column: str | None = None) -> tuple[list[str], list[dict]]:
    """(texts, metadata) from files: `.jsonl` (one object a line, the text under `column`,
    default "text"), `.csv`/`.tsv` (a header; the text in `column`, default "text"), anything
    else plain text (the whole file one text; blank-line-separated paragraphs stay together).
    Metadata says where each text came from: {"file", "line"} (line only for JSONL/CSV)."""
    texts, meta = [], []
    for path in paths:
        if not os.path.isfile(path):
            raise PassageError(f"{path}: no such file")
        suffix = os.path.splitext(path)[1].lower()
        rows: list[tuple[int | None, str]]
        try:
            if suffix == ".jsonl":
                rows = _jsonl(path, column or "text")
            elif suffix in (".csv", ".tsv"):
                rows = _csv(path, column or "text", "\t" if suffix == ".tsv" else ",")
            else:
                with open(path, encoding="utf-8") as f:
                    rows = [(None, f.read())]
        except UnicodeDecodeError:
            raise PassageError(not_utf8(path)) from None
        for line, text in rows:
            if text.strip():
                texts.append(text)
                meta.append({"file": os.path.basename(path)} | ({"line": line} if line else {}))
    if not texts:
        raise PassageError(f"no text found in {', '.join(paths)}")
    return texts, meta


def _jsonl(path: str, column: str) -> list[tuple[int | None, str]]:
    rows: list[tuple[int | None, str]] = []
    for n, record in json_lines(path, error=PassageError, invalid="not valid JSON ({msg})"):
        if not isinstance(record, dict) or not isinstance(record.get(column), str):
            raise PassageError(f"{path}:{n}: expected an object with a string '{column}'")
        rows.append((n, record[column]))
    return rows


def _csv(path: str, column: str, delimiter: str) -> list[tuple[int | None, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if column not in (reader.fieldnames or []):
            raise PassageError(f"{path}: no column '{column}' (columns: "
                               f"{', '.join(reader.fieldnames or []) or 'none'}); "
                               f"name it with --text-column")
        return [(reader.line_num, row[column] or "") for row in reader]
