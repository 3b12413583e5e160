"""Reranking with a cross-encoder (NSP or pair classifier), ranx metrics against hand-computed
values, the retrieval data readers, and fusion."""

import json

import numpy as np
import pytest

from helpers import PASSAGES
from kbert.retrieval import fusion, metrics


@pytest.mark.multibackend
@pytest.mark.parametrize("head", ["nsp", "classifier"])
def test_rerank_sorts_by_the_cross_encoders_pair_score(cross_encoders, head):
    m = cross_encoders[head]
    query = "who bought milk ?"
    ranked = m.rerank(query, PASSAGES)
    assert sorted(h["index"] for h in ranked) == list(range(len(PASSAGES)))
    if head == "nsp":
        want = [r["is_next"] for r in m.next_sentence([query] * len(PASSAGES), PASSAGES)]
    else:
        want = [r["relevant"] for r in m.classify([query] * len(PASSAGES), PASSAGES)]
    for hit in ranked:
        assert hit["text"] == PASSAGES[hit["index"]]
        assert hit["score"] == pytest.approx(want[hit["index"]], abs=1e-6)
    assert [h["score"] for h in ranked] == sorted(want, reverse=True)
    assert m.rerank(query, PASSAGES, top_k=2) == ranked[:2]

    # fused with a first stage: its min-max scores and the reranker's, half each
    first = np.linspace(1.0, 0.2, len(PASSAGES))
    fused = m.rerank(query, PASSAGES, first_scores=first)
    odds = np.log(want) - np.log1p(-np.asarray(want))
    expected = 0.5 * fusion.min_max(first) + 0.5 * fusion.min_max(odds)
    for hit in fused:
        assert hit["rerank_score"] == pytest.approx(odds[hit["index"]], abs=1e-4)
        assert hit["score"] == pytest.approx(expected[hit["index"]], abs=1e-5)
    assert [h["index"] for h in fused] == sorted(range(len(PASSAGES)),
                                                 key=lambda i: (-expected[i], i))
    for bad in ([1.0], [float("nan")] * len(PASSAGES)):
        with pytest.raises(ValueError, match="first_scores must be"):
            m.rerank(query, PASSAGES, first_scores=bad)


def test_metrics_are_ranx_and_match_hand_computed_values():
    rankings = [[4, 2, 9], [1, 0], [7, 8, 3, 5, 6, 0]]
    relevant = [{2}, {1}, {0}]
    out = metrics.score(rankings, relevant)
    assert out["recall@1"] == pytest.approx(100 / 3, abs=0.01)
    assert out["recall@5"] == pytest.approx(200 / 3, abs=0.01)
    assert out["recall@20"] == 100.0
    assert out["mrr@10"] == pytest.approx(100 * (1 / 2 + 1 + 1 / 6) / 3, abs=0.01)
    assert out["ndcg@10"] == pytest.approx(100 * (1 / np.log2(3) + 1 + 1 / np.log2(7)) / 3,
                                           abs=0.01)


def test_retrieval_data_from_squad_and_jsonl(tmp_path):
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "Paris is in France.", "qas": [{"id": "1", "question": "Where is Paris?",
                                                    "answers": []}]},
        {"context": "Cats purr.", "qas": [{"id": "2", "question": "What do cats do?",
                                           "answers": []}]}]}]}
    (tmp_path / "s.json").write_text(json.dumps(squad))
    data = metrics.read_data(str(tmp_path / "s.json"))
    assert data.corpus == ["Paris is in France.", "Cats purr."] and data.relevant == [{0}, {1}]
    lines = [{"query": "q1", "positive": "a"}, {"query": "q2", "positives": ["b", "a"],
                                                 "negatives": ["c"]}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    data = metrics.read_data(str(tmp_path / "d.jsonl"))
    assert data.corpus == ["a", "c", "b"] and data.relevant == [{0}, {2, 0}]
    (tmp_path / "bad.jsonl").write_text('{"query": "q"}\n')
    with pytest.raises(metrics.RetrievalDataError, match="bad.jsonl:1: no 'positive'"):
        metrics.read_data(str(tmp_path / "bad.jsonl"))


def test_fusion_normalizes_each_side_and_ties_go_to_the_lower_row():
    dense, lexical = np.array([0.2, 0.8, 0.5]), np.array([10.0, 0.0, 5.0])
    np.testing.assert_allclose(fusion.fuse(dense, lexical, 0.5), [0.5, 0.5, 0.5])
    np.testing.assert_allclose(fusion.fuse(dense, lexical, 1.0), [0.0, 1.0, 0.5])
    assert fusion.top_rows(fusion.fuse(dense, lexical, 0.5)[None], 3).tolist() == [[0, 1, 2]]
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=(4, 50)).astype(float)        # many ties
    want = np.lexsort((np.broadcast_to(np.arange(50), scores.shape), -scores))[:, :7]
    assert fusion.top_rows(scores, 7).tolist() == want.tolist()
