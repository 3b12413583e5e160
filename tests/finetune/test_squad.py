"""SQuAD: reader problems, window layout, answer recovery through character offsets, n-best."""

import json

import numpy as np
import pytest

from helpers import uncased_tokenizer
from kbert.tasks import metrics, squad
from kbert.tasks.squad_postprocess import apply_null_threshold, postprocess, tune_null_threshold
from kbert.tokenizer import char_index


@pytest.fixture(scope="module")
def tokenizer():
    return uncased_tokenizer()


def _json(context, qas, version="1.1"):
    return {"version": version, "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}


def _qa(qid, question, *answers, impossible=None):
    qa = {"id": qid, "question": question,
          "answers": [{"text": t, "answer_start": s} for t, s in answers]}
    if impossible is not None:
        qa["is_impossible"] = impossible
    return qa


def _one_hot_logits(features, width=None):
    """Logits peaked at the labelled start/end (CLS where the answer is not in the window)."""
    n, t = features.features["input_ids"].shape
    start, end = np.zeros((n, width or t)), np.zeros((n, width or t))
    start[np.arange(n), features.features["start_positions"]] = 10.0
    end[np.arange(n), features.features["end_positions"]] = 10.0
    return start, end


# --- reader --------------------------------------------------------------------------------------
def test_answer_start_mismatch_is_counted_or_raised(tmp_path):
    obj = _json("Paris is in France.", [_qa("ok", "Where?", ("France", 12)),
                                         _qa("bad", "What?", ("Paris", 3), ("Paris", 0))])
    data = squad.examples_from_json(obj, source="x.json")
    assert len(data.warnings) == 1
    assert "x.json: question bad: answer_start 3 gives 'is is', not the answer text 'Paris'" \
        in data.warnings[0]
    bad = data.examples[1]
    assert (bad.answer_text, bad.answer_start) == ("Paris", 0)  # trained on the good answer
    with pytest.raises(ValueError, match="question bad: answer_start 3"):
        squad.examples_from_json(obj, source="x.json", strict=True)


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n  {"title": "t",\n   "paragraphs": [}\n]}\n')
    with pytest.raises(ValueError, match=r"broken\.json:3: invalid JSON"):
        squad.read_squad(str(path))
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": [
        {"id": "1", "answers": []}]}]}]}))
    with pytest.raises(ValueError,
                       match=r"broken\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]: missing "
                             r"'question'"):
        squad.read_squad(str(path))
    with pytest.raises(FileNotFoundError, match="SQuAD file not found"):
        squad.read_squad(str(tmp_path / "none.json"))


def test_v2_reader(tmp_path):
    obj = _json("Some text.", [_qa("a", "Q?", impossible=True),
                               _qa("b", "Q?", ("text", 5), impossible=False)], "v2.0")
    data = squad.examples_from_json(obj)
    assert data.version == "2.0"
    assert [e.is_impossible for e in data.examples] == [True, False]


# --- features ------------------------------------------------------------------------------------
def test_windows_step_by_doc_stride(tokenizer):
    words = [f"w{i}" for i in range(300)]  # "w12" is two or more pieces; count real tokens
    context = " ".join(words)
    n = len(tokenizer.tokenize([context]).to_list()[0])
    ex = squad.SquadExample("q", "which?", context, [])
    f = squad.encode_squad(tokenizer, [ex], False, max_seq_length=64, doc_stride=20,
                           max_query_length=16)
    q = len(tokenizer.tokenize(["which?"]).to_list()[0])
    window = 64 - q - 3
    starts = [f.token_starts[i, q + 2] for i in range(len(f.example_index))]
    expected = list(range(0, n - window, 20)) + [(n - window + 19) // 20 * 20]
    assert len(starts) == len(expected)
    # each window's first token is the doc token at k * doc_stride
    ids, s, _ = tokenizer.tokenize_with_offsets([context])
    first_chars = [char_index(context)[b] for b in np.asarray(s.to_list()[0])]
    assert starts == [first_chars[k] for k in expected]
    # every context token is "max context" in exactly one window
    assert f.max_context.sum() == n


def test_unicode_offsets_and_positions(tokenizer):
    context = "Der Café Müller öffnete 1921 — in Zürich’s Altstadt (東京 nicht)."
    qas = [("Café Müller", "Which café?"), ("Zürich’s", "Whose?"), ("東京", "Not what?"),
           ("1921", "When?")]
    examples = [squad.SquadExample(str(i), q, context, [{"text": a}], False, a,
                                   context.index(a)) for i, (a, q) in enumerate(qas)]
    f = squad.encode_squad(tokenizer, examples, True)
    for i, ex in enumerate(examples):
        s, e = f.features["start_positions"][i], f.features["end_positions"][i]
        assert s > 0 and context[f.token_starts[i, s]:f.token_ends[i, e]] == ex.answer_text
    result = postprocess(examples, f, *_one_hot_logits(f))
    assert result.predictions == {str(i): a for i, (a, _) in enumerate(qas)}
    assert result.nbest["0"][0]["start"] == context.index("Café")


def test_long_question_is_cut_and_counted(tokenizer):
    ex = squad.SquadExample("q", "why " * 100, "short context", [])
    f = squad.encode_squad(tokenizer, [ex], False)
    assert f.features["input_ids"].shape[1] == 64 + 2 + 2 + 1
    assert f.warnings == ["1 question longer than 64 tokens cut"]


def test_answer_outside_window_points_at_cls(tokenizer):
    context = " ".join(["filler"] * 200) + " the answer is Denver ."
    ex = squad.SquadExample("q", "who?", context, [], False, "Denver", context.index("Denver"))
    f = squad.encode_squad(tokenizer, [ex], True, max_seq_length=128, doc_stride=64)
    positions = f.features["start_positions"]
    assert len(positions) >= 3 and positions[0] == 0 and positions[-1] > 0
    assert (f.features["start_positions"] <= f.features["end_positions"]).all()


def test_v2_null_answer_and_threshold(tokenizer):
    context = "Denver won the game in 2016."
    examples = [squad.SquadExample("a", "Who won?", context, [{"text": "Denver"}], False,
                                   "Denver", 0),
                squad.SquadExample("b", "Who lost?", context, [], True)]
    f = squad.encode_squad(tokenizer, examples, True)
    assert f.features["start_positions"].tolist()[1] == 0
    start, end = _one_hot_logits(f)
    result = postprocess(examples, f, start, end, version_2=True)
    assert result.predictions == {"a": "Denver", "b": ""}
    assert result.null_odds["a"] < 0 < result.null_odds["b"]
    assert apply_null_threshold(result, 1e9) == {"a": "Denver", "b": result.best_non_null["b"]}
    assert {e["text"] for e in result.nbest["b"]} >= {""}
    assert abs(sum(e["probability"] for e in result.nbest["a"]) - 1) < 1e-9


def test_span_rules_length_and_order(tokenizer):
    context = "one two three four five six seven eight nine ten"
    ex = squad.SquadExample("q", "what?", context, [])
    f = squad.encode_squad(tokenizer, [ex], False)
    q = len(tokenizer.tokenize(["what?"]).to_list()[0]) + 2
    start = np.full((1, f.features["input_ids"].shape[1]), -100.0)
    end = np.full_like(start, -100.0)
    start[0, q + 5], end[0, q + 1] = 9.0, 9.0    # end before start: not a span
    start[0, q + 6], end[0, q + 9] = 5.0, 5.0    # four tokens: too long for max_answer_length 3
    start[0, q + 2], end[0, q + 3] = 1.0, 1.0
    result = postprocess([ex], f, start, end, max_answer_length=3)
    assert result.predictions["q"] == "three four"


# --- real data -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_v1(tokenizer):
    from helpers import SHARED_DATA
    path = SHARED_DATA / "squad" / "dev-v1.1-part-a.json"
    if not path.is_file():
        pytest.skip("../shared/data is not available")
    data = squad.read_squad(str(path))
    return data, squad.encode_squad(tokenizer, data.examples, True)


def test_real_v1_counts(real_v1):
    data, f = real_v1
    assert len(data.examples) == 5488 and not data.warnings
    assert len(data.dataset) == 24 and sum(len(a["paragraphs"]) for a in data.dataset) == 1038
    assert not f.warnings and f.features["input_ids"].shape[1] == 384


def test_real_v1_spans_map_back_to_the_gold_text(real_v1):
    data, f = real_v1
    exact = normalized = total = 0
    for i in np.nonzero(f.features["start_positions"])[0]:
        ex = data.examples[f.example_index[i]]
        s, e = f.features["start_positions"][i], f.features["end_positions"][i]
        text = ex.context[f.token_starts[i, s]:f.token_ends[i, e]]
        total += 1
        exact += text == ex.answer_text
        normalized += metrics.normalize_answer(text) == metrics.normalize_answer(ex.answer_text)
        # where it differs, the gold answer is part of a word piece: the span only widens it
        assert ex.answer_text in text, (ex.qas_id, text, ex.answer_text)
    assert total > 5488 and exact / total > 0.995 and normalized >= exact


def test_real_v1_one_hot_logits_recover_the_answers(real_v1):
    data, f = real_v1
    result = postprocess(data.examples, f, *_one_hot_logits(f))
    scores = metrics.squad_v1_1(data.dataset, result.predictions)
    assert scores["exact_match"] > 99.5 and scores["f1"] > 99.5  # measured: 99.58 / 99.59


def test_real_v2_recovery_and_threshold(shared_data, tokenizer):
    data = squad.read_squad(str(shared_data / "squad" / "dev-v2.0-partial.json"))
    assert len(data.examples) == 6078 and sum(e.is_impossible for e in data.examples) == 3168
    f = squad.encode_squad(tokenizer, data.examples, True)
    result = postprocess(data.examples, f, *_one_hot_logits(f), version_2=True)
    scores = metrics.squad_v2_0(data.dataset, result.predictions)
    assert scores["NoAns_exact"] == 100.0 and scores["HasAns_exact"] > 99.5
    threshold, best_f1 = tune_null_threshold(data, result)
    assert best_f1 >= scores["f1"] - 1e-9 and -20 <= threshold <= 20
