"""Evaluation metrics with the official definitions: SQuAD EM/F1, GLUE scores, CoNLL entity F1.

Every score is a percentage, as the official scripts print them.

- SQuAD v1.1 and v2.0: the official evaluation scripts, as Model Garden ships them
  (`official/nlp/tools/squad_evaluate_v1_1.py`, `squad_evaluate_v2_0.py`).
- GLUE: accuracy, binary F1 (positive class 1), Matthews correlation (CoLA), Pearson and
  Spearman correlation (STS-B), computed with scikit-learn / scipy as GLUE's own baselines do.
- CoNLL-2003: entity-level precision / recall / F1 with the chunk rules of `conlleval`
  (a chunk starts at `B-`, at `I-` after `O` or after another type, ...), which read IOB1 and
  IOB2 alike.

Example:
>>> squad_v1_1({"q1": ["Denver Broncos"]}, {"q1": "the Denver Broncos"})
{'exact_match': 100.0, 'f1': 100.0}
>>> entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])["f1"]
100.0
"""

import numpy as np
from official.nlp.tools import squad_evaluate_v1_1 as _squad_v1
from official.nlp.tools import squad_evaluate_v2_0 as _squad_v2

# --- SQuAD ---------------------------------------------------------------------------------------
normalize_answer = _squad_v2._normalize_answer  # lower, drop punctuation, articles, extra spaces


def _as_dataset(gold):
    """The official scripts read SQuAD's `data` list; `{qid: [answer texts]}` is accepted too."""
    if isinstance(gold, dict) and "data" in gold:
        return gold["data"]
    if isinstance(gold, dict):
        qas = [{"id": qid, "answers": [{"text": t} for t in texts]} for qid, texts in gold.items()]
        return [{"paragraphs": [{"qas": qas}]}]
    return gold


def squad_v1_1(gold, predictions):
    """SQuAD v1.1 exact match and F1 (max over the gold answers), as `evaluate-v1.1.py`.

    Args:
        gold: the SQuAD JSON (dict with `data`), its `data` list, or `{qid: [answer texts]}`.
        predictions: `{qid: answer text}`; a question without a prediction scores 0.
    """
    scores = _squad_v1.evaluate(_as_dataset(gold), predictions)
    # The official script prints 100.0 * sum / total; Model Garden returns sum / total.
    return {"exact_match": 100.0 * scores["exact_match"], "f1": 100.0 * scores["final_f1"]}


def squad_v2_0(gold, predictions, na_probs=None):
    """SQuAD v2.0 scores as `evaluate-v2.0.py`: a question without answers has gold `[""]`.

    Returns `exact_match`, `f1`, `total` and the `HasAns_*` / `NoAns_*` breakdown of the
    predictions as given. With `na_probs` ({qid: no-answer score}, e.g. the null score
    difference) also `best_f1` / `best_f1_thresh` (and `best_exact*`): the best score reachable
    by answering "" whenever a question's score exceeds the threshold, with `predictions` read
    as the best non-null answers. Only questions that have a prediction are scored, as the
    official script does.
    """
    dataset = _as_dataset(gold)
    raw = _squad_v2.evaluate(dataset, predictions)
    out = {"exact_match": raw["exact"], "f1": raw["f1"], "total": raw["total"]}
    for prefix in ("HasAns", "NoAns"):
        for key in ("exact", "f1", "total"):
            if f"{prefix}_{key}" in raw:
                out[f"{prefix}_{key}"] = raw[f"{prefix}_{key}"]
    if na_probs is not None:
        best = _squad_v2.evaluate(dataset, predictions, na_probs=na_probs)
        out.update(best_exact=best["final_exact"], best_exact_thresh=best["final_exact_thresh"],
                   best_f1=best["final_f1"], best_f1_thresh=best["final_f1_thresh"])
    return out


def squad_exact_f1(prediction, answers):
    """One question's (exact, f1) in [0, 1], max over gold answers; `[]` means no answer."""
    golds = [a for a in answers if normalize_answer(a)] or [""]
    return (max(_squad_v2._compute_exact(a, prediction) for a in golds),
            max(_squad_v2._compute_f1(a, prediction) for a in golds))


# --- GLUE ----------------------------------------------------------------------------------------
def accuracy(labels, predictions):
    return 100.0 * float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions):
    """Binary F1 of the positive class 1 (MRPC, QQP)."""
    from sklearn.metrics import f1_score
    return 100.0 * float(f1_score(labels, predictions, pos_label=1, average="binary"))


def macro_f1(labels, predictions):
    """F1 averaged over the classes in the labels, each class counting the same."""
    from sklearn.metrics import f1_score
    return 100.0 * float(f1_score(labels, predictions, labels=np.unique(labels),
                                  average="macro", zero_division=0))


def mcc(labels, predictions):
    """Matthews correlation coefficient (CoLA)."""
    from sklearn.metrics import matthews_corrcoef
    return 100.0 * float(matthews_corrcoef(labels, predictions))


def pearson(labels, predictions):
    from scipy.stats import pearsonr
    return 100.0 * float(pearsonr(np.asarray(predictions, "float64"),
                                  np.asarray(labels, "float64"))[0])


def spearman(labels, predictions):
    from scipy.stats import spearmanr
    return 100.0 * float(spearmanr(predictions, labels)[0])


GLUE_METRICS = {"accuracy": accuracy, "f1": f1, "macro_f1": macro_f1, "mcc": mcc,
                "pearson": pearson, "spearman": spearman}


def glue_scores(metric_names, labels, predictions):
    """`{name: score}` for the named metrics, e.g. `("accuracy", "f1")` for MRPC."""
    unknown = [m for m in metric_names if m not in GLUE_METRICS]
    if unknown:
        raise ValueError(f"unknown GLUE metric {unknown[0]!r}; known: {', '.join(GLUE_METRICS)}")
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    return {m: GLUE_METRICS[m](labels, predictions) for m in metric_names}


# --- CoNLL entities ------------------------------------------------------------------------------
def _split_tag(tag):
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '')."""
    if tag in ("O", "."):
        return tag, ""
    prefix, _, kind = tag.partition("-")
    if not kind or prefix not in ("B", "I", "E", "S"):
        raise ValueError(f"tag {tag!r} is neither O nor B-/I-/E-/S-TYPE")
    return prefix, kind


def _chunk_ends(prev_tag, tag, prev_type, kind):
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != kind


def _chunk_starts(prev_tag, tag, prev_type, kind):
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != kind


def entities(tags):
    """conlleval's chunks of one sentence: a list of (type, first, last) word indexes.

    >>> entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC"])
    [('PER', 0, 1), ('LOC', 3, 3), ('LOC', 4, 4)]
    """
    chunks, start = [], None
    prev_tag, prev_type = "O", ""
    for i, t in enumerate(list(tags) + ["O"]):
        tag, kind = _split_tag(t)
        if start is not None and _chunk_ends(prev_tag, tag, prev_type, kind):
            chunks.append((prev_type, start, i - 1))
            start = None
        if _chunk_starts(prev_tag, tag, prev_type, kind):
            start = i
        prev_tag, prev_type = tag, kind
    return chunks


def entity_scores(gold_tags, predicted_tags):
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


def token_accuracy(gold_tags, predicted_tags):
    """Per-token tag accuracy (percent), the other number conlleval prints."""
    pairs = [(a, b) for g, p in zip(gold_tags, predicted_tags) for a, b in zip(g, p)]
    return 100.0 * sum(a == b for a, b in pairs) / len(pairs) if pairs else 0.0
