"""Bad task files give one line naming FILE(:LINE) — never a codec error, a KeyError or numpy's
"cannot reshape" — and duplicate SQuAD ids are refused instead of corrupting the score."""

import json

import pytest

from helpers import uncased_tokenizer
from kbert.tasks import glue, ner, squad


@pytest.fixture(scope="module")
def tokenizer():
    return uncased_tokenizer()


def _squad(tmp_path, paragraphs, name="dev.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                             "paragraphs": paragraphs}]}))
    return str(path)


def _qa(qid, answer="Paris", start=0):
    return {"id": qid, "question": "Where?", "answers": [{"text": answer, "answer_start": start}]}


# --- GLUE TSV ------------------------------------------------------------------------------------
def test_non_utf8_tsv_names_file_and_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"sentence\tlabel\ngood\t1\ncaf\xe9\t0\n")
    with pytest.raises(ValueError, match=r"train\.tsv:3: not UTF-8 \(byte 0xe9 at column 4\)"):
        glue.read_glue("sst2", str(path))


def test_tsv_without_its_label_column_names_the_column(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\ngood\n")
    with pytest.raises(ValueError, match=r"train\.tsv:1: header lacks the column 'label' "
                                         r"\(found: sentence\)"):
        glue.read_glue("sst2", str(path))
    test = tmp_path / "test.tsv"                 # test files have no labels, by design
    test.write_text("index\tsentence\n0\tgood\n")
    assert glue.read_glue("sst2", str(test))[0].label is None


# --- CoNLL ---------------------------------------------------------------------------------------
def test_non_utf8_conll_names_file_and_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(b"EU NNP B-NP B-ORG\n\nZ\xfcrich NNP B-NP B-LOC\n")
    with pytest.raises(ValueError, match=r"train\.txt:3: not UTF-8 \(byte 0xfc"):
        ner.read_conll(str(path))


def test_tag_outside_the_label_list_names_file_and_line(tmp_path, tokenizer):
    path = tmp_path / "dev.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP B-PER\n")
    sentences = ner.read_conll(str(path))
    with pytest.raises(ValueError, match=r"dev\.txt:4: tag 'B-PER' is not in the label list "
                                         r"\(O, B-ORG\)"):
        ner.encode_ner(tokenizer, sentences, ["O", "B-ORG"])


@pytest.mark.parametrize("text", ["", "\n\n", "-DOCSTART- -X- -X- O\n\n-DOCSTART- -X- -X- O\n"])
def test_empty_conll_is_refused(tmp_path, text):
    path = tmp_path / "empty.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"empty\.txt: no sentences"):
        ner.read_conll(str(path))


# --- SQuAD ---------------------------------------------------------------------------------------
def test_duplicate_question_ids_are_refused_with_file_and_id(tmp_path):
    path = _squad(tmp_path, [{"context": "Paris is nice.", "qas": [_qa("q1")]},
                             {"context": "Rome is old.", "qas": [_qa("q1", "Rome")]}])
    with pytest.raises(ValueError, match=r"dev\.json: data\[0\]\.paragraphs\[1\]\.qas\[0\]: "
                                         r"question id 'q1' is used twice \(first at "
                                         r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\)"):
        squad.read_squad(path)


def test_empty_context_and_empty_file_are_refused(tmp_path):
    path = _squad(tmp_path, [{"context": "  ", "qas": [_qa("q1")]}])
    with pytest.raises(ValueError, match=r"dev\.json: data\[0\]\.paragraphs\[0\]: empty context"):
        squad.read_squad(path)
    with pytest.raises(ValueError, match=r"dev\.json: no questions"):
        squad.read_squad(_squad(tmp_path, []))


def test_fully_filtered_training_file_is_one_clear_error(tmp_path, tokenizer):
    path = _squad(tmp_path, [{"context": "Paris is nice.", "qas": [_qa("q1", "Rome", 0)]}])
    data = squad.read_squad(path)                  # the only answer does not match its context
    with pytest.raises(ValueError, match=r"none of the 1 SQuAD questions gives a window to "
                                         r"train on \(first: question q1: no answer matches"):
        squad.encode_squad(tokenizer, data.examples, is_training=True)
