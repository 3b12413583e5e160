"""SQuAD post-processing: start/end logits of every window → answer text, as `run_squad.py`.

For each example, over all its windows: the `n_best_size` best start and end positions,
kept when both fall in the context, the start is in the window that gives it the most
context, start <= end and the span is at most `max_answer_length` tokens; a span's score is
start_logit + end_logit. Its text is cut from the original context with the tokens' character
offsets. For v2.0 the null score is the smallest [CLS] score (start_logits[0] + end_logits[0])
over the windows; the answer is "" when null score − best span score > the threshold.

Example (one window, logits one-hot at the gold tokens):
>>> import numpy as np
>>> from kbert.tasks import squad
>>> from kbert.tokenizer import Tokenizer
>>> tok = Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "won", "?",
...                  "denver", "."])
>>> ex = squad.SquadExample("q", "Who won?", "Denver won.", [])
>>> f = squad.encode_squad(tok, [ex], is_training=False)
>>> start, end = np.zeros((1, 9)), np.zeros((1, 9))
>>> start[0, 5] = end[0, 5] = 10.0
>>> postprocess([ex], f, start, end).predictions
{'q': 'Denver'}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:   # type-only
    from kbert.tasks.squad import SquadData, SquadExample, SquadFeatures

N_BEST_SIZE, MAX_ANSWER_LENGTH = 20, 30


@dataclasses.dataclass
class SquadPredictions:
    predictions: dict    # qid -> answer text ("" = no answer, v2.0)
    nbest: dict          # qid -> [{"text", "probability", "score", "start", "end"}], best first
    null_odds: dict      # qid -> null score − best span score (v2.0; the official na_prob)
    best_non_null: dict  # qid -> best non-empty answer (what threshold tuning reads)


def _top(values: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-values, kind="stable")[:k]


def _softmax(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, "float64")
    e = np.exp(scores - scores.max())
    return e / e.sum()


def _window_spans(s_log: np.ndarray, e_log: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  best: np.ndarray, n_best_size: int,
                  max_answer_length: int) -> list[tuple[float, int, int]]:
    """(score, char start, char end) of the legal spans among one window's top start and end
    logits: inside the context, in the window that sees the start token best, end >= start,
    at most `max_answer_length` tokens."""
    spans = []
    for i in _top(s_log, n_best_size):
        if starts[i] < 0 or not best[i]:
            continue
        for j in _top(e_log, n_best_size):
            if ends[j] < 0 or j < i or j - i + 1 > max_answer_length:
                continue
            spans.append((float(s_log[i] + e_log[j]), int(starts[i]), int(ends[j])))
    return spans


def _distinct_best(candidates: Sequence[tuple[float, int, int]], context: str,
                   n_best_size: int) -> list[dict[str, Any]]:
    """The `n_best_size` best spans with distinct texts, best first."""
    nbest, seen = [], set()
    for score, a, b in sorted(candidates, key=lambda c: -c[0]):
        text = context[a:b]
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "score": score, "start": a, "end": b})
        if len(nbest) == n_best_size:
            break
    return nbest


def postprocess(examples: Sequence[SquadExample], features: SquadFeatures, start_logits: Any,
                end_logits: Any, version_2: bool = False, null_score_diff_threshold: float = 0.0,
                n_best_size: int = N_BEST_SIZE,
                max_answer_length: int = MAX_ANSWER_LENGTH) -> SquadPredictions:
    """Answers for `examples` from the model's logits on `features` (`encode_squad`'s output).

    Args:
        start_logits, end_logits: [F, T'] for the F windows in order (T' >= the window's
            length; extra columns are ignored).
        version_2: allow the empty answer (SQuAD v2.0).
    Returns a `SquadPredictions`; each n-best entry carries character `start` / `end`
    offsets into its context (end exclusive), -1 for the empty answer.

    Twin: `kbert.serving.squad_graph.answer` does these steps in the graph;
    tests/serving/test_export.py holds the exported answers equal to the pipeline's.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if len(start_logits) != len(features.example_index):
        raise ValueError(f"{len(start_logits)} rows of logits for "
                         f"{len(features.example_index)} windows")
    width = min(start_logits.shape[1], features.token_starts.shape[1])
    by_example: dict[int, list[int]] = {}
    for f, e in enumerate(features.example_index):
        by_example.setdefault(int(e), []).append(f)
    out = SquadPredictions({}, {}, {}, {})
    for e, example in enumerate(examples):
        candidates, null_score = [], None
        for f in by_example.get(e, []):
            s_log, e_log = start_logits[f, :width], end_logits[f, :width]
            starts, ends = features.token_starts[f, :width], features.token_ends[f, :width]
            best = features.max_context[f, :width]
            null = float(s_log[0] + e_log[0])
            null_score = null if null_score is None else min(null_score, null)
            candidates += _window_spans(s_log, e_log, starts, ends, best, n_best_size,
                                        max_answer_length)
        nbest = _distinct_best(candidates, example.context, n_best_size)
        non_null = nbest[0] if nbest else None
        if version_2 and null_score is not None:
            nbest.append({"text": "", "score": null_score, "start": -1, "end": -1})
            nbest.sort(key=lambda c: -c["score"])
        if not nbest:
            nbest = [{"text": "", "score": 0.0, "start": -1, "end": -1}]
        for entry, p in zip(nbest, _softmax([c["score"] for c in nbest])):
            entry["probability"] = float(p)
        qid = example.qas_id
        out.nbest[qid] = nbest
        out.best_non_null[qid] = non_null["text"] if non_null else ""
        if version_2:
            diff = (null_score - non_null["score"]) if non_null and null_score is not None \
                else float("inf")
            out.null_odds[qid] = diff
            out.predictions[qid] = "" if diff > null_score_diff_threshold \
                else non_null["text"]   # type: ignore[index]  # without one, diff is inf
        else:
            out.predictions[qid] = out.best_non_null[qid]
    return out


def apply_null_threshold(result: SquadPredictions, threshold: float) -> dict[str, str]:
    """v2.0 answers for another threshold: "" where null_odds > threshold."""
    return {q: ("" if result.null_odds[q] > threshold else result.best_non_null[q])
            for q in result.predictions}


def tune_null_threshold(gold: SquadData | dict[str, Any] | list[Any],
                        result: SquadPredictions) -> tuple[float, float]:
    """The null_score_diff_threshold with the best dev F1 (evaluate-v2.0.py's best_f1_thresh).

    Args:
        gold: the SQuAD JSON, its `data` list or a `SquadData`.
        result: `postprocess(..., version_2=True)` on that data.
    Returns (threshold, best F1 in percent).
    """
    from kbert.tasks import metrics
    dataset: Any = getattr(gold, "dataset", gold)
    finite = {q: (v if np.isfinite(v) else 1e30) for q, v in result.null_odds.items()}
    scores = metrics.squad_v2_0(dataset, result.best_non_null, na_probs=finite)
    return scores["best_f1_thresh"], scores["best_f1"]
