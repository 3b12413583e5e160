"""kbert.tasks.metrics against the official SQuAD scripts (verbatim copies), seqeval and
sklearn/scipy."""

import json
import random

import numpy as np
import pytest
import seqeval.metrics

import squad_official
from kbert.tasks import metrics

GOLD = {  # qid -> gold answer texts ([] = unanswerable in v2.0)
    "articles": ["the Denver Broncos", "Denver Broncos"],
    "an": ["An apple a day"],
    "punct": ["U.S.A.", "United States"],
    "unicode": ["Café Müller", "naïve résumé"],
    "curly": ["“Quoted” text"],
    "dash": ["1990–1995"],
    "greek": ["Ο Θεός"],
    "spaces": ["  New   York  "],
    "numbers": ["3,000", "3000 people"],
    "repeat": ["the the the"],
    "only_punct": ["!!!"],
    "no_answer": [],
    "no_answer_2": [],
    "partial": ["Super Bowl 50 halftime show"],
    "case": ["BEYONCÉ"],
}
PREDICTIONS = {
    "articles": "The Broncos",
    "an": "apple a day",
    "punct": "USA",
    "unicode": "cafe muller",
    "curly": "Quoted text",
    "dash": "1990-1995",
    "greek": "ο θεός",
    "spaces": "new york",
    "numbers": "3000",
    "repeat": "",
    "only_punct": "",
    "no_answer": "",
    "no_answer_2": "something",
    "partial": "halftime show of Super Bowl",
    "case": "Beyoncé.",
}


def _dataset(gold):
    qas = [{"id": q, "answers": [{"text": t, "answer_start": 0} for t in texts]}
           for q, texts in gold.items()]
    return [{"title": "t", "paragraphs": [{"context": "", "qas": qas}]}]


def test_squad_v1_1_matches_official_script():
    dataset = _dataset({q: a or ["x"] for q, a in GOLD.items()})
    ours = metrics.squad_v1_1({"data": dataset}, PREDICTIONS)
    ref = squad_official.evaluate(dataset, PREDICTIONS)
    assert abs(ours["exact_match"] - ref["exact_match"]) < 1e-9
    assert abs(ours["f1"] - ref["f1"]) < 1e-9
    assert 0 < ref["exact_match"] < 100 and 0 < ref["f1"] < 100  # "" vs "!!!": EM 1, F1 0


def test_squad_v1_1_missing_prediction_scores_zero():
    dataset = _dataset({"a": ["x"], "b": ["y"]})
    ours = metrics.squad_v1_1(dataset, {"a": "x"})
    assert ours == pytest.approx(squad_official.evaluate(dataset, {"a": "x"}), abs=1e-9)
    assert ours["exact_match"] == 50.0


def test_squad_v2_0_matches_official_script():
    dataset = _dataset(GOLD)
    ours = metrics.squad_v2_0(dataset, PREDICTIONS)
    ref = squad_official.v2_main(dataset, PREDICTIONS)
    for k in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        key = {"exact": "exact_match"}.get(k, k)
        assert abs(ours[key] - ref[k]) < 1e-9, k
    assert ours["NoAns_total"] == 2 and ours["NoAns_exact"] == 50.0
    # the per-question helper agrees with the official per-answer functions
    for q, texts in GOLD.items():
        em, f1 = metrics.squad_exact_f1(PREDICTIONS[q], texts)
        golds = [t for t in texts if squad_official.v2_normalize_answer(t)] or [""]
        assert em == max(squad_official.v2_compute_exact(t, PREDICTIONS[q]) for t in golds)
        assert f1 == max(squad_official.v2_compute_f1(t, PREDICTIONS[q]) for t in golds)


def test_squad_v2_0_best_threshold_matches_official_script():
    dataset = _dataset(GOLD)
    rng = random.Random(0)
    na_probs = {q: rng.uniform(-3, 3) for q in GOLD}
    ours = metrics.squad_v2_0(dataset, PREDICTIONS, na_probs=na_probs)
    ref = squad_official.v2_main(dataset, PREDICTIONS, na_probs=na_probs)
    for k in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"):
        assert abs(ours[k] - ref[k]) < 1e-9, k


def _perturbed_predictions(dataset, seed=0):
    """Realistic wrong and right answers: gold, gold with words dropped or added, context spans."""
    rng = random.Random(seed)
    preds = {}
    for article in dataset:
        for p in article["paragraphs"]:
            words = p["context"].split()
            for qa in p["qas"]:
                golds = [a["text"] for a in qa["answers"]] or [""]
                g = rng.choice(golds).split()
                choice = rng.randrange(6)
                if choice == 0 or not g:
                    text = " ".join(g)
                elif choice == 1:
                    text = " ".join(g[1:])
                elif choice == 2:
                    text = "The " + " ".join(g) + "."
                elif choice == 3:
                    i = rng.randrange(len(words))
                    text = " ".join(words[i:i + rng.randint(1, 6)])
                elif choice == 4:
                    text = ""
                else:
                    text = " ".join(g).upper()
                preds[qa["id"]] = text
    return preds


@pytest.mark.parametrize("name", ["dev-v1.1-part-a.json", "dev-v2.0-partial.json"])
def test_squad_official_parity_on_real_dev(shared_data, name):
    with open(shared_data / "squad" / name, encoding="utf-8") as f:
        dataset = json.load(f)["data"]
    preds = _perturbed_predictions(dataset)
    if name.startswith("dev-v1.1"):
        ours, ref = metrics.squad_v1_1(dataset, preds), squad_official.evaluate(dataset, preds)
        pairs = [("exact_match", "exact_match"), ("f1", "f1")]
    else:
        ours, ref = metrics.squad_v2_0(dataset, preds), squad_official.v2_main(dataset, preds)
        pairs = [("exact_match", "exact"), ("f1", "f1"), ("HasAns_f1", "HasAns_f1"),
                 ("NoAns_f1", "NoAns_f1")]
    for a, b in pairs:
        assert abs(ours[a] - ref[b]) < 1e-9, (a, ours[a], ref[b])


# --- GLUE ----------------------------------------------------------------------------------------
def test_glue_scores_by_hand():
    labels = [1, 1, 0, 0, 1, 0]
    preds = [1, 0, 0, 1, 1, 0]
    s = metrics.glue_scores(("accuracy", "f1", "mcc"), labels, preds)
    # tp=2 fp=1 fn=1 tn=2: acc 4/6, f1 2/3, mcc (4-1)/sqrt(3*3*3*3) = 1/3
    assert s["accuracy"] == pytest.approx(100 * 4 / 6)
    assert s["f1"] == pytest.approx(100 * 2 / 3)
    assert s["mcc"] == pytest.approx(100 / 3)
    x = [1.0, 2.0, 3.0, 4.0]
    y = [1.0, 4.0, 9.0, 16.0]
    r = metrics.glue_scores(("pearson", "spearman"), x, y)
    assert r["spearman"] == pytest.approx(100.0)
    assert r["pearson"] == pytest.approx(100 * np.corrcoef(x, y)[0, 1])
    with pytest.raises(ValueError, match="unknown GLUE metric 'auc'"):
        metrics.glue_scores(("auc",), labels, preds)


def test_glue_metrics_match_sklearn_and_scipy():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    for n, classes in ((40, 2), (200, 2), (200, 3)):
        labels = rng.integers(0, classes, n)
        preds = np.where(rng.random(n) < 0.7, labels, rng.integers(0, classes, n))
        assert metrics.mcc(labels, preds) == pytest.approx(
            100 * matthews_corrcoef(labels, preds), abs=1e-9)
        if classes == 2:
            assert metrics.f1(labels, preds) == pytest.approx(
                100 * f1_score(labels, preds), abs=1e-9)
    assert metrics.f1([0, 0], [0, 0]) == 0.0 and metrics.mcc([1, 1], [1, 0]) == 0.0
    scores = np.round(rng.uniform(0, 5, 300), 1)          # STS-B-like, with many ties
    guesses = scores + rng.normal(0, 1, 300)
    guesses[::7] = np.round(guesses[::7])
    assert metrics.pearson(scores, guesses) == pytest.approx(
        100 * pearsonr(guesses, scores)[0], abs=1e-9)
    assert metrics.spearman(scores, guesses) == pytest.approx(
        100 * spearmanr(guesses, scores)[0], abs=1e-9)


# --- entities ------------------------------------------------------------------------------------
def _random_tags(rng, n, scheme):
    """Random tag sequences, including malformed ones (I- after O, I- of another type)."""
    kinds = ["PER", "LOC", "ORG"]
    prefixes = ["B", "I"] if scheme == "iob2" else ["I", "I", "B"]
    return [rng.choice(["O", "O"] + [f"{rng.choice(prefixes)}-{rng.choice(kinds)}"
                                     for _ in range(3)]) for _ in range(n)]


@pytest.mark.parametrize("scheme", ["iob1", "iob2"])
def test_entity_scores_match_seqeval(scheme):
    rng = random.Random(7 if scheme == "iob1" else 8)
    gold = [_random_tags(rng, rng.randint(1, 25), scheme) for _ in range(300)]
    pred = [[t if rng.random() < 0.7 else rng.choice(["O", "B-PER", "I-PER", "I-LOC", "B-ORG"])
             for t in s] for s in gold]
    ours = metrics.entity_scores(gold, pred)
    assert abs(ours["precision"] - 100 * seqeval.metrics.precision_score(gold, pred)) < 1e-9
    assert abs(ours["recall"] - 100 * seqeval.metrics.recall_score(gold, pred)) < 1e-9
    assert abs(ours["f1"] - 100 * seqeval.metrics.f1_score(gold, pred)) < 1e-9
    assert 20 < ours["f1"] < 95


def test_entities_conlleval_rules():
    # I- after O starts a chunk; a type change starts one; B- always starts one (IOB1 and IOB2)
    assert metrics.entities(["O", "I-PER", "I-PER", "I-LOC"]) == [("PER", 1, 2), ("LOC", 3, 3)]
    assert metrics.entities(["I-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 2)]
    assert metrics.entities(["B-PER", "I-PER"]) == [("PER", 0, 1)]
    with pytest.raises(ValueError, match="'PER'"):
        metrics.entities(["PER"])
    perfect = metrics.entity_scores([["B-LOC", "O"]], [["B-LOC", "O"]])
    assert perfect == {"precision": 100.0, "recall": 100.0, "f1": 100.0}
    assert metrics.token_accuracy([["B-LOC", "O"]], [["B-LOC", "B-PER"]]) == 50.0
