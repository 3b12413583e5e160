"""GLUE readers (real files and malformed ones), features and metrics."""

import collections

import numpy as np
import pytest

from helpers import uncased_tokenizer
from kbert.tasks import batching, glue


@pytest.fixture(scope="module")
def tokenizer():
    return uncased_tokenizer()


@pytest.mark.parametrize("task,split,rows,counts", [
    ("cola", "dev", 527, {"0": 162, "1": 365}),
    ("cola", "train", 8551, {"0": 2528, "1": 6023}),
    ("mrpc", "dev", 408, {"0": 129, "1": 279}),
    ("mrpc", "train", 3668, {"0": 1194, "1": 2474}),
    ("rte", "train", 2490, {"entailment": 1249, "not_entailment": 1241}),
    ("sst2", "dev", 872, {"0": 428, "1": 444}),
    ("sst2", "train", 6920, {"0": 3310, "1": 3610}),
])
def test_real_files_match_the_data_readme(shared_data, task, split, rows, counts):
    examples = glue.read_glue(task, glue.task_file(task, shared_data / "glue", split))
    assert len(examples) == rows
    assert dict(collections.Counter(e.label for e in examples)) == counts
    assert all(e.text_a for e in examples)
    assert all((e.text_b is not None) == (len(glue.get_task(task).text_columns) == 2)
               for e in examples)


def test_real_mrpc_columns(shared_data):
    first = glue.read_glue("mrpc", shared_data / "glue" / "MRPC" / "train.tsv")[0]
    assert first.label == "1"  # the header's byte-order mark did not hide "Quality"
    assert first.text_a.startswith("Amrozi accused his brother")
    assert first.text_b.startswith("Referring to him as only \"the witness\"")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_every_layout(tmp_path):
    cola = _write(tmp_path, "dev.tsv", "gj04\t1\t\tGood.\ngj04\t0\t*\tBad bad.\n")
    assert [(e.text_a, e.label) for e in glue.read_glue("cola", cola)] == \
        [("Good.", "1"), ("Bad bad.", "0")]
    cola_test = _write(tmp_path, "test.tsv", "index\tsentence\n0\tA test.\n")
    assert glue.read_glue("cola", cola_test)[0].label is None
    sts = _write(tmp_path, "sts.tsv",
                 "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                 "sentence2\tscore\n0\tmain\tf\t2012\t1\tnone\tnone\tA plane.\tA jet.\t4.2\n")
    e = glue.read_glue("stsb", sts)[0]
    assert (e.text_a, e.text_b, e.label) == ("A plane.", "A jet.", pytest.approx(4.2))
    mnli_dev = _write(tmp_path, "dev_matched.tsv", "\t".join(
        ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
         "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
         "sentence2", "label1", "label2", "label3", "label4", "label5", "gold_label"]) + "\n" +
        "\t".join(["0", "1", "1e", "fiction", "(", "(", "(", "(", "P.", "H.", "neutral",
                   "entailment", "entailment", "entailment", "entailment", "entailment"]) + "\n")
    e = glue.read_glue("mnli", mnli_dev)[0]
    assert (e.text_a, e.text_b, e.label) == ("P.", "H.", "entailment")  # gold_label, the last
    qqp = _write(tmp_path, "qqp.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                 "1\t2\t3\tWhy?\tHow?\t0\n")
    assert glue.read_glue("qqp", qqp)[0].text_b == "How?"
    qnli = _write(tmp_path, "qnli.tsv", "index\tquestion\tsentence\tlabel\n0\tQ?\tS.\tentailment\n")
    assert glue.read_glue("qnli", qnli)[0].label == "entailment"
    assert glue.task_file("mnli", "/g", "dev_mismatched") == "/g/MNLI/dev_mismatched.tsv"


@pytest.mark.parametrize("task,text,message", [
    ("sst2", "sentence\tlabel\ngood\t1\nbad\n", r"bad\.tsv:3: expected 2 tab-separated columns, "
                                               r"found 1"),
    ("sst2", "sentence\tlabel\ngood\t1\nbad\t2\n", r"bad\.tsv:3: label '2' is not one of 0, 1"),
    ("rte", "index\tsentence1\tlabel\n", r"bad\.tsv:1: header lacks the column 'sentence2'"),
    ("cola", "gj04\t1\t\tOk.\ngj04\t1\tOk.\n", r"bad\.tsv:2: expected 4 tab-separated columns"),
    ("stsb", "sentence1\tsentence2\tscore\na\tb\tx\n", r"bad\.tsv:2: score 'x' is not a number"),
    ("sst2", "", r"bad\.tsv: the file is empty"),
])
def test_malformed_lines_name_file_and_line(tmp_path, task, text, message):
    with pytest.raises(ValueError, match=message):
        glue.read_glue(task, _write(tmp_path, "bad.tsv", text))


def test_unknown_task_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown GLUE task 'foo'"):
        glue.get_task("foo")
    with pytest.raises(FileNotFoundError, match="GLUE file not found"):
        glue.read_glue("sst2", str(tmp_path / "nope.tsv"))
    assert glue.get_task("SST-2").name == "sst2" and glue.get_task("STS-B").is_regression


def test_pair_features_and_truncation(tokenizer):
    examples = [glue.GlueExample("1", "The cat sat.", "A dog ran far away today.", "1"),
                glue.GlueExample("2", "word " * 200, "short", "0")]
    features, truncated = glue.encode_glue(tokenizer, "mrpc", examples, max_seq_length=16)
    ids = features["input_ids"]
    assert ids.shape == (2, 16) and truncated == 1
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    a = tokenizer.tokenize(["The cat sat."]).to_list()[0]
    b = tokenizer.tokenize(["A dog ran far away today."]).to_list()[0]
    n = len(a) + len(b) + 3
    assert ids[0, :n].tolist() == [cls] + a + [sep] + b + [sep]
    assert features["segment_ids"][0, :n].tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    assert features["input_mask"][0].sum() == n and ids[0, n:].tolist() == [0] * (16 - n)
    # the long side is cut first: "short" survives whole
    short = tokenizer.tokenize(["short"]).to_list()[0]
    assert ids[1, -len(short) - 1:].tolist() == short + [sep]
    assert features["label_ids"].tolist() == [1, 0]


def test_sst2_bucketed_batches_pad_less(shared_data, tokenizer):
    examples = glue.read_glue("sst2", shared_data / "glue" / "SST-2" / "dev.tsv")
    features, _ = glue.encode_glue(tokenizer, "sst2", examples, max_seq_length=128)
    lengths = batching.sequence_lengths(features)
    real = lengths.sum()
    plain = sum(b["input_ids"].size for _, b in batching.batches(features, 32, bucket=False))
    bucketed = sum(b["input_ids"].size for _, b in
                   batching.batches(features, 32, bucket=True, shuffle=True))
    assert real / bucketed > 0.9 and bucketed < 0.7 * plain
    seen = np.concatenate([i for i, _ in batching.batches(features, 32, shuffle=True)])
    assert sorted(seen.tolist()) == list(range(len(examples)))
    ds = batching.to_dataset(features, 32, label_keys="label_ids", shuffle=True)
    x, y = next(iter(ds))
    assert set(x) == {"input_ids", "segment_ids", "input_mask"} and y.shape == (32,)
    assert x["input_ids"].shape[1] == int(x["input_mask"].numpy().sum(1).max())
    # the PyDataset feed (JAX, PyTorch: no TensorFlow) gives the very same batches
    feed = batching.Batches(features, 32, "label_ids", shuffle=True, multiple=16)
    for epoch in range(2):
        tf_batches = list(batching.to_dataset(features, 32, "label_ids", shuffle=True,
                                              multiple=16).repeat(2).as_numpy_iterator())
        tf_batches = tf_batches[epoch * len(feed):(epoch + 1) * len(feed)]
        ours = [feed[i] for i in range(len(feed))]
        assert len(ours) == len(tf_batches) == len(batching.length_batches(
            batching.sequence_lengths(features), 32))
        for (x1, y1), (x2, y2) in zip(ours, tf_batches):
            assert (y1 == y2).all() and all((x1[k] == x2[k]).all() for k in x2)
        feed.on_epoch_end()


def test_evaluate_glue_metrics():
    examples = [glue.GlueExample(str(i), "a", None, str(label))
                for i, label in enumerate([1, 0, 1, 1])]
    scores = glue.evaluate_glue("cola", examples, np.array([[0, 1], [1, 0], [1, 0], [0, 1]]))
    assert scores == {"mcc": pytest.approx(100 * 1 / np.sqrt(3))}
    sts = [glue.GlueExample(str(i), "a", "b", s) for i, s in enumerate([0.0, 1.0, 2.5, 5.0])]
    assert glue.evaluate_glue("stsb", sts, [[0.1], [0.9], [3.0], [4.0]])["spearman"] == \
        pytest.approx(100.0)
