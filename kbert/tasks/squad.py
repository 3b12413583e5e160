"""SQuAD v1.1 / v2.0 (Rajpurkar et al., 2016, 2018): reader and sliding-window features.

Features follow google-research/bert `run_squad.py`: the question (at most `max_query_length`
tokens) and a window of the context packed as `[CLS] question [SEP] context [SEP]`
(`max_seq_length` tokens). Windows start every `doc_stride` tokens — `doc_stride` is the STEP
between window starts, as in `run_squad.py` (not the overlap). An answer not wholly inside a
window, and every v2.0 impossible question, points at `[CLS]` (start = end = 0).

Tokens keep their character offsets into the original context (the tokenizer's byte offsets,
converted here), so a predicted span is cut straight from the context — no re-alignment of
normalized text as `run_squad.py`'s `get_final_text` needs. Post-processing lives in
`kbert.tasks.squad_postprocess`.

Example:
>>> data = examples_from_json({"version": "1.1", "data": [{"title": "t", "paragraphs": [
...     {"context": "Denver won.", "qas": [{"id": "q", "question": "Who won?",
...      "answers": [{"text": "Denver", "answer_start": 0}]}]}]}]})
>>> data.examples[0].answer_text, data.examples[0].answer_start
('Denver', 0)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert.hints import PathLike
from kbert.wording import plural

if TYPE_CHECKING:   # type-only: the tokenizer needs TensorFlow
    from kbert.tokenizer import Tokenizer

log = logging.getLogger(__name__)

MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH = 384, 128, 64


@dataclasses.dataclass
class SquadExample:
    qas_id: str
    question: str
    context: str
    answers: list                # [{"text", "answer_start"}], all given (used for evaluation)
    is_impossible: bool = False
    answer_text: str | None = None    # the training answer: the first that matches its context
    answer_start: int | None = None   # character offset into context


@dataclasses.dataclass
class SquadData:
    """A SQuAD file: its examples, its `data` list (for the official scores) and the problems
    found (answers whose `answer_start` does not match their text)."""
    path: str
    version: str
    examples: list
    dataset: list
    warnings: list


def read_squad(path: PathLike, strict: bool = False) -> SquadData:
    """Reads a SQuAD JSON file. Broken JSON raises `ValueError("FILE:LINE: ...")`; a missing
    field names its place (`FILE: data[0].paragraphs[3].qas[1]: ...`). An answer whose
    `answer_start` does not point at its text is counted in `warnings` (and not trained on),
    or raises with `strict=True`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    with open(path, encoding="utf-8") as f:
        try:
            obj = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    return examples_from_json(obj, source=str(path), strict=strict)


def split_by_article(path: PathLike, every: int = 4) -> tuple[dict[str, Any], ...]:
    """(train, held-out) SQuAD JSON objects of a file's articles: every `every`-th article
    (indexes every-1, 2·every-1, ...) is held out. On `dev-v1.1-part-a.json` that is the
    18/6-article split the fine-tuning results use (`benchmarks/data_splits.py`).

    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "s.json")
    >>> _ = open(path, "w").write(json.dumps({"version": "1.1", "data": [
    ...     {"title": str(i), "paragraphs": []} for i in range(8)]}))
    >>> [[a["title"] for a in part["data"]] for part in split_by_article(path)]
    [['0', '1', '2', '4', '5', '6'], ['3', '7']]
    """
    with open(path, encoding="utf-8") as f:
        squad = json.load(f)
    parts: tuple[list, list] = ([], [])
    for i, article in enumerate(squad["data"]):
        parts[i % every == every - 1].append(article)
    version = squad.get("version", "1.1")
    return tuple({"version": version, "data": part} for part in parts)


def _need(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"{where}: missing '{key}'")
    if not isinstance(obj[key], kind):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"{where}: '{key}' should be a {names}, not {type(obj[key]).__name__}")
    return obj[key]


def examples_from_json(obj: Any, source: str = "<json>", strict: bool = False) -> SquadData:
    """`SquadData` from an already loaded SQuAD JSON object (see `read_squad`)."""
    data = _need(obj, "data", list, source)
    version = str(obj.get("version", "1.1")).lstrip("v")
    places: dict
    examples, warnings, places = [], [], {}
    for a, article in enumerate(data):
        for p, para in enumerate(_need(article, "paragraphs", list, f"{source}: data[{a}]")):
            where = f"{source}: data[{a}].paragraphs[{p}]"
            context = _need(para, "context", str, where)
            if not context.strip():
                raise ValueError(f"{where}: empty context")
            for q, qa in enumerate(_need(para, "qas", list, where)):
                here = f"{where}.qas[{q}]"
                qid = str(_need(qa, "id", (str, int), here))
                if qid in places:       # scores are kept per id: a repeat would overwrite one
                    raise ValueError(f"{here}: question id {qid!r} is used twice (first at "
                                     f"{places[qid].split(': ', 1)[-1]})")
                places[qid] = here
                question = _need(qa, "question", str, here)
                answers = _need(qa, "answers", list, here) if "answers" in qa else []
                impossible = bool(qa.get("is_impossible", False))
                if impossible and answers:
                    raise ValueError(f"{here}: question {qid} is impossible but has answers")
                example = SquadExample(qid, question, context, answers, impossible)
                for n, ans in enumerate(answers):
                    text = _need(ans, "text", str, f"{here}.answers[{n}]")
                    start = _need(ans, "answer_start", int, f"{here}.answers[{n}]")
                    found = context[start:start + len(text)]
                    if found != text:
                        message = (f"{source}: question {qid}: answer_start {start} gives "
                                   f"{found!r}, not the answer text {text!r}")
                        if strict:
                            raise ValueError(message)
                        warnings.append(message)
                    elif example.answer_text is None:
                        example.answer_text, example.answer_start = text, start
                examples.append(example)
    if not examples:
        raise ValueError(f"{source}: no questions (the file's 'data' holds none)")
    if warnings:
        log.warning("%s: %d answers whose answer_start does not match their text (first: %s)",
                    source, len(warnings), warnings[0])
    return SquadData(source, version, examples, data, warnings)


# --- features ------------------------------------------------------------------------------------
@dataclasses.dataclass
class SquadFeatures:
    """Windows over the examples. `features` is what the model reads (numpy, [F, T] and [F]);
    the rest maps each window's tokens back to its example's context."""
    features: dict               # input_ids, segment_ids, input_mask (+ start/end_positions)
    example_index: np.ndarray    # [F] the example each window belongs to
    token_starts: np.ndarray     # [F, T] character offsets into the context; -1: not context
    token_ends: np.ndarray       # [F, T] end (exclusive)
    max_context: np.ndarray      # [F, T] True where this window gives the token most context
    warnings: list


CHUNK = 256          # texts a tokenizer call


def _tokenize_contexts(
        tokenizer: Tokenizer, contexts: Sequence[str], questions: Sequence[str] = (),
) -> tuple[dict[str, tuple[list[int], np.ndarray, np.ndarray]], list[list[int]] | None]:
    """{context: (ids, char starts, char ends)} for the distinct contexts, and the questions'
    ids. A short list (one request) goes through one tokenizer call, questions included: a
    TensorFlow call costs ~0.3-0.5 ms, and a request this small takes the Rust tokenizer."""
    unique = list(dict.fromkeys(contexts))
    question_ids = None
    if questions and len(questions) + len(unique) <= CHUNK:
        rows = tokenizer.batch_tokenize_with_char_offsets(list(questions) + unique)
        question_ids, rows = [ids for ids, _, _ in rows[:len(questions)]], rows[len(questions):]
    else:
        if questions:
            question_ids = tokenizer.encode_batch(list(questions), mask_literal=False)
        rows = [row for i in range(0, len(unique), CHUNK)
                for row in tokenizer.batch_tokenize_with_char_offsets(unique[i:i + CHUNK])]
    out = {text: (ids, np.asarray(starts, np.int64), np.asarray(ends, np.int64))
           for text, (ids, starts, ends) in zip(unique, rows)}
    return out, question_ids


def _windows(n: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window: starts every `doc_stride` tokens, as run_squad.py.
    Twin: `kbert.serving.squad_graph.windows` (in the graph)."""
    spans, start = [], 0
    while True:
        length = min(n - start, max_tokens)
        spans.append((start, length))
        if start + length >= n:
            return spans
        start += min(length, doc_stride)


def _max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """run_squad.py's `_check_is_max_context`: min(left, right) context + 0.01 * length.
    Twin: `kbert.serving.squad_graph._max_context` (in the graph)."""
    best_score, best = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, i
    return best == span_index


def answer_token_span(starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray,
                      answer_start: int, answer_text: str) -> tuple[int, int] | None:
    """(first, last) context tokens covering the answer's characters, or None."""
    stop = answer_start + len(answer_text)
    inside = np.nonzero((np.asarray(ends) > answer_start) & (np.asarray(starts) < stop))[0]
    return (int(inside[0]), int(inside[-1])) if len(inside) else None


def encode_squad(tokenizer: Tokenizer, examples: Sequence[SquadExample], is_training: bool,
                 max_seq_length: int = MAX_SEQ_LENGTH, doc_stride: int = DOC_STRIDE,
                 max_query_length: int = MAX_QUERY_LENGTH) -> SquadFeatures:
    """Sliding-window features of `SquadExample`s (see the module docstring).

    With `is_training`, adds `start_positions` / `end_positions` and leaves out (counting
    them in `warnings`) possible questions without a usable answer. Questions longer than
    `max_query_length` tokens are cut, and counted.
    """
    warnings = []
    contexts, questions = _tokenize_contexts(tokenizer, [e.context for e in examples],
                                             [e.question for e in examples])
    questions = questions or []
    rows, meta = [], []
    long_questions = 0
    for index, (example, query) in enumerate(zip(examples, questions)):
        if len(query) > max_query_length:
            long_questions += 1
            query = query[:max_query_length]
        ids, starts, ends = contexts[example.context]
        span = None
        if is_training and not example.is_impossible:
            if example.answer_text is None:
                warnings.append(f"question {example.qas_id}: no answer matches the context; "
                                "left out of training")
                continue
            span = answer_token_span(starts, ends, example.answer_start,  # type: ignore[arg-type]
                                     example.answer_text)     # (set with answer_text)
            if span is None:
                warnings.append(f"question {example.qas_id}: the answer covers no token; "
                                "left out of training")
                continue
        max_tokens = max_seq_length - len(query) - 3
        if max_tokens < 1:
            raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the context "
                             f"after question {example.qas_id}'s {len(query)} tokens")
        spans = _windows(len(ids), max_tokens, doc_stride)
        for w, (start, length) in enumerate(spans):
            offset = len(query) + 2                      # [CLS] question [SEP]
            input_ids = [tokenizer.cls_id] + query + [tokenizer.sep_id] + \
                list(ids[start:start + length]) + [tokenizer.sep_id]
            segment_ids = [0] * offset + [1] * (length + 1)
            tok_starts = [-1] * offset + list(starts[start:start + length]) + [-1]
            tok_ends = [-1] * offset + list(ends[start:start + length]) + [-1]
            best = [False] * offset + [_max_context(spans, w, start + i)
                                       for i in range(length)] + [False]
            positions = (0, 0)
            if span is not None and start <= span[0] and span[1] < start + length:
                positions = (span[0] - start + offset, span[1] - start + offset)
            rows.append((input_ids, segment_ids, tok_starts, tok_ends, best, positions))
            meta.append(index)
    if long_questions:
        warnings.append(f"{plural(long_questions, 'question')} longer than "
                        f"{max_query_length} tokens cut")
    if not rows:
        note = f" (first: {warnings[0]})" if warnings else ""
        raise ValueError(f"none of the {len(examples)} SQuAD questions gives a window to "
                         f"{'train on' if is_training else 'score'}{note}")
    for first_warning in warnings[:1]:
        log.warning("SQuAD features: %d problems (first: %s)", len(warnings), first_warning)
    return _stack(rows, meta, is_training, tokenizer.pad_id, warnings)


def _stack(rows: Sequence[tuple[Any, ...]], meta: Sequence[int], is_training: bool, pad_id: int,
           warnings: list[str]) -> SquadFeatures:
    width = max((len(r[0]) for r in rows), default=0)
    n = len(rows)

    def fill(k: int, value: Any, dtype: Any) -> np.ndarray:
        out = np.full((n, width), value, dtype)
        for i, r in enumerate(rows):
            out[i, :len(r[k])] = r[k]
        return out

    input_ids = fill(0, pad_id, "int32")
    features = {"input_ids": input_ids, "segment_ids": fill(1, 0, "int32"),
                "input_mask": fill(1, 0, "int32")}
    for i, r in enumerate(rows):
        features["input_mask"][i, :len(r[0])] = 1
    if is_training:
        features["start_positions"] = np.array([r[5][0] for r in rows], "int32").reshape(n)
        features["end_positions"] = np.array([r[5][1] for r in rows], "int32").reshape(n)
    return SquadFeatures(features, np.array(meta, "int64"), fill(2, -1, "int64"),
                         fill(3, -1, "int64"), fill(4, False, bool), warnings)
