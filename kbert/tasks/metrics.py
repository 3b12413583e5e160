"""Evaluation metrics with the official definitions: SQuAD EM/F1, GLUE scores, CoNLL entity F1.

Every score is a percentage, as the official scripts print them. Plain Python and NumPy: no
framework, Model Garden, scikit-learn or scipy is needed to score.

- SQuAD v1.1 and v2.0: the scoring of the official evaluation scripts (`evaluate-v1.1.py`,
  `evaluate-v2.0.py`, Rajpurkar et al. 2016/2018), written out here; tests/finetune/test_metrics.py
  holds them equal to verbatim copies of the scripts.
- GLUE: accuracy, binary F1 (positive class 1), Matthews correlation (CoLA), Pearson and
  Spearman correlation (STS-B), in NumPy as scikit-learn / scipy define them (GLUE's own
  baselines use those; the tests hold ours equal to them).
- CoNLL-2003: entity-level precision / recall / F1 with the chunk rules of `conlleval`
  (`split_tag`, `chunk_ends`, `chunk_starts`: a chunk starts at `B-`, at `I-` after `O` or
  after another type, ...), which read IOB1 and IOB2 alike. The serving graph builds its entity
  tables from these same rules (`kbert.serving.graph_ops.chunk_tables`).

Example:
>>> squad_v1_1({"q1": ["Denver Broncos"]}, {"q1": "the Denver Broncos"})
{'exact_match': 100.0, 'f1': 100.0}
>>> entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])["f1"]
100.0
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

import numpy as np

# SQuAD's gold answers: the JSON (a dict with `data`), its `data` list, or {qid: [answer texts]}.
# Labels or predictions of a set: a list or a 1-D array.
Labels = Union[Sequence[Any], np.ndarray]
Gold = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]


# --- SQuAD ---------------------------------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, the articles a/an/the and extra whitespace (both scripts).

    >>> normalize_answer("The  Denver Broncos!")
    'denver broncos'
    """
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _token_f1(prediction_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """F1 of the bag-of-words overlap (0 when nothing is shared)."""
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def _questions(gold: Any) -> list[Mapping[str, Any]]:
    """The `qas` entries of SQuAD's `data` list; `{qid: [answer texts]}` is accepted too."""
    if isinstance(gold, dict) and "data" in gold:
        gold = gold["data"]
    if isinstance(gold, dict):
        return [{"id": qid, "answers": [{"text": t} for t in texts]} for qid, texts in gold.items()]
    return [qa for article in gold for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def squad_v1_1(gold: Gold, predictions: Mapping[str, str]) -> dict[str, float]:
    """SQuAD v1.1 exact match and F1 (max over the gold answers), as `evaluate-v1.1.py`.

    Args:
        gold: the SQuAD JSON (dict with `data`), its `data` list, or `{qid: [answer texts]}`.
        predictions: `{qid: answer text}`; a question without a prediction scores 0.
    """
    f1: float
    exact = f1 = total = 0
    for qa in _questions(gold):
        total += 1
        if qa["id"] not in predictions:
            continue
        prediction = normalize_answer(predictions[qa["id"]])
        truths = [normalize_answer(a["text"]) for a in qa["answers"]]
        exact += max(prediction == truth for truth in truths)
        f1 += max(_token_f1(prediction.split(), truth.split()) for truth in truths)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def squad_exact_f1(prediction: str, answers: Sequence[str]) -> tuple[int, float]:
    """One question's (exact, f1) in [0, 1] as `evaluate-v2.0.py`, max over gold answers; `[]`
    (or answers that normalize to nothing) means no answer, matched only by an empty prediction.

    >>> squad_exact_f1("Denver", ["Denver Broncos"])
    (0, 0.6666666666666666)
    >>> squad_exact_f1("", [])
    (1, 1)
    """
    golds = [a for a in answers if normalize_answer(a)] or [""]
    predicted = normalize_answer(prediction)

    def f1(gold: str) -> float:
        gold_tokens, prediction_tokens = gold.split(), predicted.split()
        if not gold_tokens or not prediction_tokens:
            return int(gold_tokens == prediction_tokens)
        return _token_f1(prediction_tokens, gold_tokens)

    golds = [normalize_answer(a) for a in golds]
    return max(int(g == predicted) for g in golds), max(f1(g) for g in golds)


def _best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                    na_probs: Mapping[str, float],
                    has_answer: Mapping[str, bool]) -> tuple[float, float]:
    """`evaluate-v2.0.py`'s best no-answer threshold: answer "" above it; (score, threshold)."""
    score: float
    best: float
    score = best = sum(1 for qid in has_answer if not has_answer[qid])
    threshold = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        else:
            score += -1 if predictions[qid] else 0
        if score > best:
            best, threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def squad_v2_0(gold: Gold, predictions: Mapping[str, str],
               na_probs: Mapping[str, float] | None = None) -> dict[str, float]:
    """SQuAD v2.0 scores as `evaluate-v2.0.py`: a question without answers has gold `[""]`.

    Returns `exact_match`, `f1`, `total` and the `HasAns_*` / `NoAns_*` breakdown of the
    predictions as given. With `na_probs` ({qid: no-answer score}, e.g. the null score
    difference) also `best_f1` / `best_f1_thresh` (and `best_exact*`): the best score reachable
    by answering "" whenever a question's score exceeds the threshold, with `predictions` read
    as the best non-null answers. Only questions that have a prediction are scored, as the
    official script does.
    """
    qas = [qa for qa in _questions(gold) if qa["id"] in predictions]
    has_answer = {qa["id"]: bool(qa["answers"]) for qa in qas}
    exact, f1 = {}, {}
    for qa in qas:
        texts = [a["text"] for a in qa["answers"]]
        exact[qa["id"]], f1[qa["id"]] = squad_exact_f1(predictions[qa["id"]], texts)
    out = {}
    groups = (("", list(exact)), ("HasAns_", [q for q in exact if has_answer[q]]),
              ("NoAns_", [q for q in exact if not has_answer[q]]))
    for prefix, qids in groups:
        if qids or not prefix:
            total = len(qids)
            out[f"{prefix}exact" if prefix else "exact_match"] = (
                100.0 * sum(exact[q] for q in qids) / total)
            out[f"{prefix}f1"] = 100.0 * sum(f1[q] for q in qids) / total
            out[f"{prefix}total"] = total
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = _best_threshold(
            predictions, exact, na_probs, has_answer)
        out["best_f1"], out["best_f1_thresh"] = _best_threshold(
            predictions, f1, na_probs, has_answer)
    return out


# --- GLUE ----------------------------------------------------------------------------------------
def accuracy(labels: Labels, predictions: Labels) -> float:
    return 100.0 * float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels: Labels, predictions: Labels) -> float:
    """Binary F1 of the positive class 1 (MRPC, QQP); 0 when nothing is positive.

    >>> f1([1, 1, 0, 0], [1, 0, 1, 0])
    50.0
    """
    positive, predicted = np.asarray(labels) == 1, np.asarray(predictions) == 1
    tp = np.sum(positive & predicted)
    wrong = np.sum(positive != predicted)
    return 100.0 * float(2 * tp / (2 * tp + wrong)) if tp + wrong else 0.0


def macro_f1(labels: Labels, predictions: Labels) -> float:
    """F1 averaged over the classes in the labels, each class counting the same."""
    from sklearn.metrics import f1_score
    return 100.0 * float(f1_score(labels, predictions, labels=np.unique(labels),
                                  average="macro", zero_division=0))


def mcc(labels: Labels, predictions: Labels) -> float:
    """Matthews correlation coefficient (CoLA), the multi-class form scikit-learn computes;
    0 when either side holds a single class.

    >>> mcc([1, 1, 0, 0], [1, 1, 0, 1])
    57.73502691896258
    """
    classes, index = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    n_labels = len(labels)
    confusion = np.zeros((len(classes), len(classes)), np.float64)
    np.add.at(confusion, (index[:n_labels], index[n_labels:]), 1)
    true, pred, n = confusion.sum(1), confusion.sum(0), confusion.sum()
    cov_true_pred = np.trace(confusion) * n - true @ pred
    cov_true, cov_pred = n * n - true @ true, n * n - pred @ pred
    if cov_true * cov_pred == 0:
        return 0.0
    return 100.0 * float(cov_true_pred / np.sqrt(cov_true * cov_pred))


def pearson(labels: Labels, predictions: Labels) -> float:
    """Pearson correlation (STS-B)."""
    x, y = np.asarray(predictions, "float64"), np.asarray(labels, "float64")
    x, y = x - x.mean(), y - y.mean()
    return 100.0 * float(np.sum(x * y) / np.sqrt(np.sum(x * x) * np.sum(y * y)))


def _ranks(values: Labels) -> np.ndarray:
    """1-based ranks, ties given their average rank (scipy's `rankdata`)."""
    values = np.asarray(values, "float64")
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(1, len(values) + 1)
    _, group = np.unique(values, return_inverse=True)
    return (np.bincount(group, ranks) / np.bincount(group))[group]


def spearman(labels: Labels, predictions: Labels) -> float:
    """Spearman rank correlation (STS-B): Pearson's of the ranks.

    >>> spearman([1.0, 2.0, 3.0, 4.0], [1.0, 4.0, 9.0, 16.0])
    100.0
    """
    return pearson(_ranks(labels), _ranks(predictions))


GLUE_METRICS = {"accuracy": accuracy, "f1": f1, "macro_f1": macro_f1, "mcc": mcc,
                "pearson": pearson, "spearman": spearman}


def glue_scores(metric_names: Iterable[str], labels: Labels,
                predictions: Labels) -> dict[str, float]:
    """`{name: score}` for the named metrics, e.g. `("accuracy", "f1")` for MRPC."""
    unknown = [m for m in metric_names if m not in GLUE_METRICS]
    if unknown:
        raise ValueError(f"unknown GLUE metric {unknown[0]!r}; known: {', '.join(GLUE_METRICS)}")
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    return {m: GLUE_METRICS[m](labels, predictions) for m in metric_names}


# --- CoNLL entities ------------------------------------------------------------------------------
def split_tag(tag: str) -> tuple[str, str]:
    """conlleval's reading of a tag: (prefix, type).

    >>> split_tag("B-PER"), split_tag("O")
    (('B', 'PER'), ('O', ''))
    """
    if tag in ("O", "."):
        return tag, ""
    prefix, _, kind = tag.partition("-")
    if not kind or prefix not in ("B", "I", "E", "S"):
        raise ValueError(f"tag {tag!r} is neither O nor B-/I-/E-/S-TYPE")
    return prefix, kind


def chunk_ends(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's `endOfChunk`: does a chunk end between the previous word and this one?"""
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != kind


def chunk_starts(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's `startOfChunk`: does a chunk start at this word, given the previous one?"""
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != kind


def entities(tags: Iterable[str]) -> list[tuple[str, int, int]]:
    """conlleval's chunks of one sentence: a list of (type, first, last) word indexes.

    Twin: `kbert.serving.graph_ops.group_entities` does this in the graph;
    tests/serving/test_graph_ops.py holds the two equal.

    >>> entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC"])
    [('PER', 0, 1), ('LOC', 3, 3), ('LOC', 4, 4)]
    """
    chunks, start = [], None
    prev_tag, prev_type = "O", ""
    for i, t in enumerate(list(tags) + ["O"]):
        tag, kind = split_tag(t)
        if start is not None and chunk_ends(prev_tag, tag, prev_type, kind):
            chunks.append((prev_type, start, i - 1))
            start = None
        if chunk_starts(prev_tag, tag, prev_type, kind):
            start = i
        prev_tag, prev_type = tag, kind
    return chunks


def entity_scores(gold_tags: Sequence[Sequence[str]],
                  predicted_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity precision / recall / F1 (percentages) over sentences, as conlleval counts them.

    Args:
        gold_tags, predicted_tags: lists of sentences, each a list of IOB1 or IOB2 tags.
    Returns `{"precision", "recall", "f1"}`; a chunk counts when type, start and end agree.
    """
    if len(gold_tags) != len(predicted_tags):
        raise ValueError(f"{len(gold_tags)} gold sentences but {len(predicted_tags)} predicted")
    found = correct = guessed = 0
    for n, (gold, pred) in enumerate(zip(gold_tags, predicted_tags)):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {n}: {len(gold)} gold tags but {len(pred)} predicted")
        g, p = set(entities(gold)), set(entities(pred))
        found, guessed, correct = found + len(g), guessed + len(p), correct + len(g & p)
    precision = 100.0 * correct / guessed if guessed else 0.0
    recall = 100.0 * correct / found if found else 0.0
    f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f}


def token_accuracy(gold_tags: Sequence[Sequence[str]],
                   predicted_tags: Sequence[Sequence[str]]) -> float:
    """Per-token tag accuracy (percent), the other number conlleval prints."""
    pairs = [(a, b) for g, p in zip(gold_tags, predicted_tags) for a, b in zip(g, p)]
    return 100.0 * sum(a == b for a, b in pairs) / len(pairs) if pairs else 0.0
