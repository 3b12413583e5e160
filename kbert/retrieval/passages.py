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
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kbert import progress
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
    in `max_tokens`, else cut into overlapping windows (see `windows`). Tokenized in calls of
    about `CHUNK_CHARS` characters (a long text in pieces cut between words): time linear in
    the text, and Ctrl-C acts between two calls."""
    if max_tokens < 2 or not 0 <= overlap < max_tokens // 2 + 1:
        raise ValueError(f"passages: need max_tokens >= 2 and 0 <= overlap <= max_tokens / 2, "
                         f"got {max_tokens} and {overlap}")
    cuts = [chunks(text, CHUNK_CHARS) for text in texts]
    counts = iter(len(ids) for ids in _calls(tokenizer.encode_batch, [
        text[a:b] for text, at in zip(texts, cuts) for a, b in zip(at[:-1], at[1:])]))
    out, split = [], 0
    for i, text in enumerate(texts):
        if sum(next(counts) for _ in cuts[i][1:]) <= max_tokens:
            out.append(Passage(text, i, 0, len(text)))
            continue
        ids, starts, ends = _pieces(tokenizer, text, cuts[i])
        split += 1
        word_start = [not t.startswith("##") for t in tokenizer.convert_ids_to_tokens(ids)]
        for a, b in windows(starts, word_start, max_tokens, overlap):
            out.append(Passage(text[starts[a]:ends[b - 1]], i, int(starts[a]), int(ends[b - 1])))
    return out, split


# Characters a tokenizer call is given at most (but for one longer word): ~0.1 s.
CHUNK_CHARS = 16384
# Where a chunk may begin: before a space, an ASCII punctuation mark (not a bracket: `[MASK]`
# stays whole), a CJK ideograph or a few other marks, which every route splits on (so a word
# is never cut); and just after one, where a run of `_LONG` other characters starts.
_SPACE = "\t\n\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_MARKS = "!-/:-@\\\\^-`{-~\u2010-\u2027\u3001\u3002\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff"
_CUT = re.compile(f"[{_SPACE}{_MARKS}]")
_LONG = 256
_LONG_RUN = re.compile(f"[^{_SPACE}{_MARKS}]{{{_LONG},}}")


def _calls(tokenize: Callable[[list[str]], list], texts: list[str]) -> list:
    """`tokenize` over `texts` in calls of about `CHUNK_CHARS` characters."""
    out: list = []
    group: list[str] = []
    size = 0
    for text in texts:
        if group and size + len(text) > CHUNK_CHARS:
            progress.check_interrupt()              # Ctrl-C acts between two calls
            out += tokenize(group)
            group, size = [], 0
        group.append(text)
        size += len(text)
    return out + (tokenize(group) if group else [])


def chunks(text: str, size: int) -> list[int]:
    """Offsets [0, ..., len(text)] cutting `text` into pieces of about `size` characters
    between words (past `size` only inside a longer word); a word of `_LONG` characters or more
    is a piece of its own (a tokenizer call's memory grows with its words times its longest).

    >>> chunks("one two three", 5)
    [0, 3, 7, 13]
    """
    cuts = [0]
    for run in _LONG_RUN.finditer(text):
        _fill(cuts, text, run.start(), size)
        cuts += [run.start(), run.end()] if run.start() > cuts[-1] else [run.end()]
    _fill(cuts, text, len(text), size)
    if cuts[-1] < len(text):
        cuts.append(len(text))
    return cuts if len(cuts) > 1 else [0, 0]


def _fill(cuts: list[int], text: str, end: int, size: int) -> None:
    """Cuts from `cuts[-1]` on, `size` characters apart or less, up to `end` (not added)."""
    while end - cuts[-1] > size:
        at = cuts[-1] + size
        # the last cut place in the chunk's second half, else the first after it
        last = None
        for last in _CUT.finditer(text, cuts[-1] + max(1, size // 2), at + 1):
            pass
        found = last or _CUT.search(text, at, end)
        if found is None or found.start() >= end:
            return
        cuts.append(found.start())


def _pieces(tokenizer: Tokenizer, text: str,
            cuts: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(ids, starts, ends) of `text`'s WordPieces, offsets in characters: tokenized in the
    chunks `cuts` gives (see `chunks`), the same as in one call."""
    parts = _calls(tokenizer.batch_tokenize_with_char_offsets,
                   [text[a:b] for a, b in zip(cuts[:-1], cuts[1:])])
    ids: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    for at, (i, s, e) in zip(cuts, parts):
        ids += i
        starts += [at + x for x in s]
        ends += [at + x for x in e]
    return ids, starts, ends


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
