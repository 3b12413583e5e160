"""CoNLL-2003: reader counts, malformed lines, IOB1/IOB2, first-piece alignment round trip."""

import numpy as np
import pytest

from helpers import uncased_tokenizer
from kbert.tasks import ner


@pytest.fixture(scope="module")
def tokenizer():
    return uncased_tokenizer()


SAMPLE = ("-DOCSTART- -X- -X- O\n\n"
          "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n\n"
          "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n"
          "-DOCSTART- -X- -X- O\n\n"
          "Zürich NNP B-NP B-LOC\nunbelievably RB B-ADVP O")  # no final newline


def _write(tmp_path, text, name="train.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_reader_docstart_and_missing_final_newline(tmp_path):
    sentences = ner.read_conll(_write(tmp_path, SAMPLE))
    assert [s.words for s in sentences] == [["EU", "rejects", "German", "call"],
                                            ["Peter", "Blackburn"], ["Zürich", "unbelievably"]]
    assert sentences[1].tags == ["B-PER", "I-PER"] and sentences[1].line == 8
    assert sentences[0].columns[0] == ["NNP", "B-NP"]
    assert ner.label_list(sentences) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]


@pytest.mark.parametrize("text,message", [
    ("EU NNP B-NP B-ORG\nrejects VBZ O\n", r"bad\.txt:2: expected 4 space-separated columns"),
    ("EU NNP B-NP ORG\n", r"bad\.txt:1: tag 'ORG' is neither O nor B-/I-TYPE"),
])
def test_malformed_lines(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        ner.read_conll(_write(tmp_path, text, "bad.txt"))
    with pytest.raises(FileNotFoundError):
        ner.read_conll(str(tmp_path / "missing.txt"))


def test_iob_conversions_round_trip():
    iob1 = ["I-ORG", "O", "I-PER", "I-PER", "B-PER", "I-LOC", "I-MISC", "O"]
    iob2 = ["B-ORG", "O", "B-PER", "I-PER", "B-PER", "B-LOC", "B-MISC", "O"]
    assert ner.to_iob2(iob1) == iob2
    assert ner.to_iob1(iob2) == iob1
    assert ner.detect_scheme([iob1]) == "iob1" and ner.detect_scheme([iob2]) == "iob2"
    from kbert.tasks import metrics
    assert metrics.entities(iob1) == metrics.entities(iob2)


def test_first_piece_alignment_round_trip(tmp_path, tokenizer):
    sentences = ner.read_conll(_write(tmp_path, SAMPLE))
    labels = list(ner.CONLL2003_LABELS)
    enc = ner.encode_ner(tokenizer, sentences, labels)
    f = enc.features
    # "unbelievably" is several pieces: only the first carries the label
    pieces = tokenizer.tokenize(["unbelievably"]).to_list()[0]
    assert len(pieces) > 1
    row = f["label_ids"][2]
    p = enc.word_positions[2][1]
    assert f["input_ids"][2, p:p + len(pieces)].tolist() == pieces
    assert row[p] == labels.index("O") and (row[p + 1:p + len(pieces)] == -100).all()
    assert row[0] == -100 and f["label_weights"][2].sum() == 2
    assert (f["label_weights"] == (f["label_ids"] != -100)).all()
    # one-hot "predictions" at the labels give back the tags
    onehot = np.eye(len(labels))[np.maximum(f["label_ids"], 0)]
    assert ner.predictions_to_tags(onehot, enc, labels) == [s.tags for s in sentences]


def test_truncation_tags_cut_words_o(tokenizer):
    s = ner.Sentence(["Paris"] * 10, ["B-LOC"] * 10)
    enc = ner.encode_ner(tokenizer, [s], list(ner.CONLL2003_LABELS), max_seq_length=6)
    assert enc.truncated == 1 and enc.features["input_ids"].shape == (1, 6)
    ids = enc.features["label_ids"]
    assert ner.predictions_to_tags(np.maximum(ids, 0), enc, list(ner.CONLL2003_LABELS)) == \
        [["B-LOC"] * 4 + ["O"] * 6]


def test_real_conll_counts_and_round_trip(shared_data, tokenizer):
    train = ner.read_conll(str(shared_data / "conll2003" / "train.txt"))
    valid = ner.read_conll(str(shared_data / "conll2003" / "valid.txt"))
    assert (len(train), sum(len(s.words) for s in train)) == (14041, 203621)
    assert (len(valid), sum(len(s.words) for s in valid)) == (3250, 51362)
    assert ner.detect_scheme(train) == "iob2"
    assert ner.label_list(train) == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG",
                                     "I-ORG", "B-PER", "I-PER"]
    labels = list(ner.CONLL2003_LABELS)
    enc = ner.encode_ner(tokenizer, valid, labels, max_seq_length=128)
    assert enc.features["input_ids"].shape[1] <= 128
    onehot = np.maximum(enc.features["label_ids"], 0)
    predicted = ner.predictions_to_tags(onehot, enc, labels)
    scores = ner.evaluate_ner(valid, predicted)
    # only words cut by the 128-piece limit can be lost
    assert enc.truncated < 10 and scores["f1"] > 99.9
    if not enc.truncated:
        assert predicted == [s.tags for s in valid] and scores["f1"] == 100.0
