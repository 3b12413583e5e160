"""kbert.load(...) inference methods on a small real checkpoint (converted MiniLM) and tiny ones."""

import numpy as np
import pytest

import kbert
from kbert import BertConfig, checkpoint
from helpers import tiny_vocab

pytestmark = pytest.mark.multibackend


@pytest.fixture(scope="module")
def tiny_pretrained(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    model = kbert.BertPretrainer(BertConfig.preset("tiny", vocab_size=120))
    checkpoint.save(path, model, vocab=tiny_vocab(size=120))
    return kbert.load(str(path))


def test_fill_mask_returns_one_ranked_list_per_mask(tiny_pretrained):
    out = tiny_pretrained.fill_mask("the [MASK] sat on the [MASK] .", top_k=4)
    assert len(out) == 2 and all(len(r) == 4 for r in out)
    for ranked in out:
        scores = [r["score"] for r in ranked]
        assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
        assert all(isinstance(r["token"], str) for r in ranked)


def test_fill_mask_scores_match_softmax_of_model(tiny_pretrained):
    m = tiny_pretrained
    out = m.fill_mask("the dog [MASK] .", top_k=120)[0]
    assert abs(sum(r["score"] for r in out) - 1.0) < 1e-5


def test_fill_mask_without_mask_says_so(tiny_pretrained):
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        tiny_pretrained.fill_mask("the dog sat .")


def test_next_sentence_is_a_probability(tiny_pretrained):
    p = tiny_pretrained.next_sentence("the man went to the store .", "he bought milk .")
    assert set(p) == {"is_next"} and 0.0 <= p["is_next"] <= 1.0


def test_embed_cls_and_mean(tiny_pretrained):
    texts = ["the dog", "the quick brown fox jumps over the lazy dog", "a"]
    cls = tiny_pretrained.embed(texts, pooling="cls")
    mean = tiny_pretrained.embed(texts, pooling="mean")
    assert cls.shape == mean.shape == (3, 128)
    one = tiny_pretrained.embed(texts[1:2], pooling="mean")   # batching/padding change nothing
    np.testing.assert_allclose(one[0], mean[1], atol=1e-5)
    with pytest.raises(ValueError, match="pooling"):
        tiny_pretrained.embed(texts, pooling="max")


def _save_task(tmp_path, model, options):
    path = tmp_path / type(model).__name__
    checkpoint.save(path, model, vocab=tiny_vocab(size=120), head_options=options)
    return kbert.load(str(path))


def test_answer_returns_spans_of_the_context(tmp_path):
    m = _save_task(tmp_path, kbert.BertQuestionAnswerer(BertConfig.preset("tiny", vocab_size=120)),
                   {"span": {"version": "1.1"}})
    context = "the man went to the store . he bought milk . " * 60   # several windows
    out = m.answer("what did he buy ?", context, top_k=3)
    assert 1 <= len(out) <= 3
    for a in out:
        assert context[a["start"]:a["end"]] == a["text"] and a["text"]
    assert [a["score"] for a in out] == sorted((a["score"] for a in out), reverse=True)
    with pytest.raises(ValueError, match="context is empty"):
        m.answer("why ?", "  ")


def test_answer_v2_can_abstain(tmp_path):
    m = _save_task(tmp_path, kbert.BertQuestionAnswerer(BertConfig.preset("tiny", vocab_size=120)),
                   {"span": {"version": "2.0", "null_score_diff_threshold": -1e9}})
    assert m.answer("who ?", "the dog sat on the mat .")[0] == {
        "text": "", "score": m.answer("who ?", "the dog sat on the mat .")[0]["score"],
        "start": -1, "end": -1}


def test_tag_groups_words_into_entities(tmp_path):
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    model = kbert.BertTokenClassifier(BertConfig.preset("tiny", vocab_size=120), num_labels=5)
    bias = np.zeros(5, "float32")
    bias[3] = 50.0                               # every word B-LOC: one entity per word
    model.head.dense.bias.assign(bias)
    m = _save_task(tmp_path, model, {"tagger": {"labels": labels}})
    text = "the quick brown fox went to paris , jumping"
    found = m.tag(text)
    assert [e["text"] for e in found] == text.split()
    for entity in found:
        assert entity["label"] in ("PER", "LOC")
        assert text[entity["start"]:entity["end"]] == entity["text"]
        assert 0 < entity["score"] <= 1
