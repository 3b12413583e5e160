"""SWAG: the CSV reader, malformed rows and four-choice features."""

import numpy as np
import pytest

from helpers import uncased_tokenizer
from kbert.tasks import batching, swag

HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2," \
         "ending3,label\n"
ROWS = ('0,lsmdc1,4,"Someone, smiling, waves.",Someone waves.,"He",gold,leaves the room.,'
        'eats a car.,"sings, loudly.",sleeps.,0\n'
        '1,anetv_x,9,The man jumps.,The man jumps.,The crowd,gen,cheers.,boos.,sits.,runs.,3\n')


def _write(tmp_path, text, name="val.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_reader(tmp_path):
    examples = swag.read_swag(_write(tmp_path, HEADER + ROWS))
    assert len(examples) == 2
    e = examples[0]
    assert (e.context, e.start_ending, e.label) == ("Someone waves.", "He", 0)
    assert e.endings == ["leaves the room.", "eats a car.", "sings, loudly.", "sleeps."]
    assert examples[1].label == 3 and examples[1].guid == "val.csv-3"
    test = swag.read_swag(_write(tmp_path, HEADER.replace(",label", "") +
                                 "0,v,1,s,A.,B,gen,c,d,e,f\n", "test.csv"))
    assert test[0].label is None


@pytest.mark.parametrize("text,message", [
    (HEADER + ROWS + "2,v,1,s,A.,B,gen,c,d,e\n", r"bad\.csv:4: expected 12 comma-separated "
                                                   r"fields, found 10"),
    (HEADER + "2,v,1,s,A.,B,gen,c,d,e,f,7\n", r"bad\.csv:2: label '7' is not 0, 1, 2 or 3"),
    ("sent1,sent2,label\n", r"bad\.csv:1: header lacks the column 'ending0'"),
    ("", r"bad\.csv: the file is empty"),
])
def test_malformed(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        swag.read_swag(_write(tmp_path, text, "bad.csv"))


def test_features(tmp_path):
    tokenizer = uncased_tokenizer()
    examples = swag.read_swag(_write(tmp_path, HEADER + ROWS))
    features, truncated = swag.encode_swag(tokenizer, examples, max_seq_length=32)
    assert features["input_ids"].shape[:2] == (2, 4) and truncated == 0
    assert features["label_ids"].tolist() == [0, 3]
    a = tokenizer.tokenize(["The man jumps."]).to_list()[0]
    b = tokenizer.tokenize(["The crowd runs."]).to_list()[0]
    n = len(a) + len(b) + 3
    row = features["input_ids"][1, 3]
    assert row[:n].tolist() == [tokenizer.cls_id] + a + [tokenizer.sep_id] + b + \
        [tokenizer.sep_id]
    assert features["segment_ids"][1, 3, :n].tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    (_, batch), = batching.batches(features, 8)
    assert batch["input_ids"].shape == (2, 4, int(features["input_mask"].sum(-1).max()))
    assert swag.evaluate_swag(examples, np.eye(4)[[0, 1]]) == {"accuracy": 50.0}
