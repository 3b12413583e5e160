"""Sentence segmentation and reading of pretraining text.

A rule-based splitter (no model, deterministic): a sentence ends at `.`, `!`, `?` or `…`
(possibly repeated, possibly followed by closing quotes or brackets) when whitespace follows and
the next word does not start in lower case — unless the word before the period is a known
abbreviation (`Mr.`, `Dr.`, `e.g.`, `Jan.` …), an initial (`J. F. Kennedy`) or a dotted
abbreviation (`U.S.` before a capitalised name is ambiguous; it is kept in one sentence).
Decimal numbers and URLs are never split because no whitespace follows their periods.

Two input layouts are read (see `read_documents`):
- `documents`: one document per file, one paragraph per line, blank lines between paragraphs;
  paragraphs are split into sentences with `split_sentences`.
- `sentences`: google-research/bert's layout, one sentence per line, a blank line between
  documents, several documents per file; lines are taken as sentences as they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence

from kbert.wording import plural

ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft gen col capt lt sgt maj cmdr adm gov sen rep rev hon pres
messrs mme mlle esq vs cf viz approx dept univ assn bros inc ltd co corp no nos vol vols pp fig
figs op ed eds jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
e.g i.e a.m p.m ca al
""".split())
_END = re.compile(r"([.!?\u2026]+)([\"'\u201d\u2019)\]\u00bb]*)(\s+)")
_OPENERS = "\"'\u201c\u2018([\u00ab"
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    rest = text[match.end():].lstrip(_OPENERS)
    if not rest or rest[0].islower():
        return False
    if match.group(1) != ".":
        return True
    before = text[:match.start()].rsplit(None, 1)
    word = before[-1].lstrip(_OPENERS) if before else ""
    if not word:
        return True
    if len(word) == 1 and word.isalpha():          # an initial: "J. F. Kennedy"
        return False
    return not (word.lower() in ABBREVIATIONS or _DOTTED.match(word))


def split_sentences(paragraph: str) -> list[str]:
    """One paragraph → its sentences, stripped, in order.

    >>> split_sentences('Mr. Smith paid $3.50 at 5 p.m. today. "Really?" she asked. Yes!')
    ['Mr. Smith paid $3.50 at 5 p.m. today.', '"Really?" she asked.', 'Yes!']
    """
    sentences, start = [], 0
    for match in _END.finditer(paragraph):
        if _is_boundary(paragraph, match):
            sentences.append(paragraph[start:match.end() - len(match.group(3))].strip())
            start = match.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if s]


class InputReport:
    """What reading found: documents, and bytes that were not UTF-8 (replaced by U+FFFD);
    `bytes_read`, how far the reading is (within a file, by its documents' characters)."""

    def __init__(self) -> None:
        self.documents = 0
        self.bytes_read = 0
        self.replaced: dict[str, int] = {}   # file → number of undecodable byte sequences replaced

    def summary(self) -> str:
        return "; ".join(f"{path}: {plural(n, 'undecodable byte')} replaced"
                         for path, n in self.replaced.items())


def check_inputs(paths: Sequence[str | os.PathLike]) -> None:
    """Fail early, naming the file, when an input is missing or not a file."""
    if not paths:
        raise ValueError("no input files given")
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"input file not found: {path}")
        if not os.path.isfile(path):
            raise ValueError(f"input is not a file: {path}")


# A file where more than this share of the bytes are not UTF-8 text (undecodable, or NUL) is
# taken for a binary file and refused; a few stray Latin-1 bytes are replaced and reported.
MAX_NON_TEXT_SHARE = 0.05


def _read_text(path: str, report: InputReport) -> str:
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd") - data.count("\ufffd".encode())
    share = (replaced + data.count(b"\x00")) / max(len(data), 1)
    if share > MAX_NON_TEXT_SHARE:
        raise ValueError(f"{path}: {share:.0%} of its bytes are not UTF-8 text (a binary "
                         "file?); pretraining input must be UTF-8 text")
    if replaced:
        report.replaced[path] = report.replaced.get(path, 0) + replaced
    return text


def detect_format(lines: Sequence[str]) -> str:
    """`sentences` when two non-empty lines follow each other, else `documents`."""
    previous = ""
    for line in lines:
        if line.strip() and previous.strip():
            return "sentences"
        previous = line
    return "documents"


def read_documents(paths: Sequence[str], input_format: str = "auto",
                   report: InputReport | None = None) -> Iterator[list[str]]:
    """Yield documents, each a list of sentences (strings), streaming file by file.

    Args:
        paths: text files (UTF-8; undecodable bytes are replaced and counted in `report`).
        input_format: `documents`, `sentences` or `auto` (decided per file by `detect_format`).
        report: an `InputReport` to fill.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "doc.txt"
    >>> _ = p.write_text("First one. Second one.\\n\\nA new paragraph.\\n")
    >>> list(read_documents([str(p)]))
    [['First one.', 'Second one.', 'A new paragraph.']]
    """
    if input_format not in ("auto", "documents", "sentences"):
        raise ValueError(f"unknown input format {input_format!r}: use auto, documents or sentences")
    report = report if report is not None else InputReport()
    check_inputs(paths)
    for path in paths:
        start, size = report.bytes_read, os.path.getsize(path)
        lines = _read_text(path, report).splitlines()
        layout = detect_format(lines) if input_format == "auto" else input_format
        if layout == "documents":
            document = [s for line in lines for s in split_sentences(line)]
            documents = [document] if document else []
        else:
            documents, document = [], []
            for line in lines + [""]:
                if line.strip():
                    document.append(line.strip())
                elif document:
                    documents.append(document)
                    document = []
        characters = [sum(map(len, d)) + len(d) for d in documents]
        whole, done = max(1, sum(characters)), 0
        for document, n in zip(documents, characters):
            done += n
            report.documents += 1
            report.bytes_read = start + size * done // whole
            yield document
        report.bytes_read = start + size
