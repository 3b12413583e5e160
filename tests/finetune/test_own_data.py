"""Fine-tuning on your own data: the preprocessing layers, `compile()`'s defaults, `fit` on raw
strings on every backend, checkpoints in and out, and `kbert finetune|evaluate classify|regress|
tag|qa` on tiny CSV, TSV, JSONL, CoNLL and SQuAD files."""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from helpers import tiny_vocab
from kbert import cli
from kbert.models.optimization import AdamW, WarmupLinearDecay
from kbert.tasks import glue, ner, preprocessing, userdata
from kbert.tokenizer import Tokenizer

NOUNS = "man dog cat fox store milk mat paris france".split()
# XLA where it pays: on JAX an un-jitted step runs op by op; on TensorFlow's CPU the compile
# costs more than these few steps (Keras' "auto" would compile there).
JIT = {"jit_compile": keras.backend.backend() == "jax"}
KEYWORDS = {"good": "pos", "bad": "neg", "quick": "fast"}


def _reviews(n, seed):
    """(text, label): random nouns plus one keyword that decides the label (3 classes)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = [str(w) for w in rng.choice(NOUNS + ["the", "a", "sat", "on"],
                                            rng.integers(2, 7))]
        keyword = list(KEYWORDS)[i % 3]
        words.insert(int(rng.integers(0, len(words) + 1)), keyword)
        rows.append((" ".join(words), KEYWORDS[keyword]))
    return rows


# --- the preprocessing layers ------------------------------------------------------------------
def test_pair_packing_matches_the_tokenizers_and_pads_per_batch():
    vocab = tiny_vocab()
    tok = Tokenizer(vocab)
    rng = np.random.default_rng(0)
    words = [w for w in vocab[5:40] if w.isalpha()]
    first = [" ".join(rng.choice(words, rng.integers(1, 14))) for _ in range(24)]
    second = [" ".join(rng.choice(words, rng.integers(1, 14))) for _ in range(24)]
    p = preprocessing.BertPreprocessor(vocab, max_seq_length=12, pad_to_multiple_of=1)
    ours = p((first, second))
    ref, cut = tok.pack(tok.tokenize(first).to_list(), tok.tokenize(second).to_list(), 12)
    assert sum(1 for c in cut if c) > 5          # truncation was exercised
    for key in ref:
        np.testing.assert_array_equal(ours[key].numpy(), ref[key], err_msg=key)
    short = p(["the dog", "a cat sat"])["input_ids"].numpy()
    assert short.shape == (2, 5)                  # the batch's longest row, not 12
    rounded = preprocessing.BertPreprocessor(vocab, max_seq_length=12, pad_to_multiple_of=8)
    assert rounded(["the dog"])["input_ids"].shape == (1, 8)


def test_string_labels_become_ids_and_run_inside_tf_data():
    p = preprocessing.BertPreprocessor(tiny_vocab(), labels=["neg", "pos"])
    ds = tf.data.Dataset.from_tensor_slices((["a good dog", "bad", "good"],
                                             ["pos", "neg", "pos"])).batch(2).map(p)
    batches = list(ds)
    assert [b[1].numpy().tolist() for b in batches] == [[1, 0], [1]]
    assert batches[0][0]["input_mask"].numpy().sum(1).tolist() == [5, 3]
    with pytest.raises(ValueError, match="example 1: label 'meh'"):
        p.dataset(["a", "b"], ["pos", "meh"])


def test_tagging_targets_are_ner_encoders():
    vocab, labels = tiny_vocab(), ["O", "B-PER", "I-PER", "B-LOC"]
    p = preprocessing.BertTokenClassifierPreprocessor(vocab, labels=labels, pad_to_multiple_of=1)
    words = [["the", "quickly", "man"], ["paris", "jumps", "over", "the", "dog"]]
    tags = [["O", "O", "B-PER"], ["B-LOC", "O", "O", "O", "B-PER"]]
    x, y, w = p(tf.ragged.constant(words), tf.ragged.constant(tags))
    ref = ner.encode_ner(Tokenizer(vocab), [ner.Sentence(a, b) for a, b in zip(words, tags)],
                         labels).features
    np.testing.assert_array_equal(x["input_ids"].numpy(), ref["input_ids"])
    np.testing.assert_array_equal(y.numpy(), np.maximum(ref["label_ids"], 0))
    np.testing.assert_array_equal(w.numpy(), ref["label_weights"])
    assert w.numpy().sum() == 8                   # one weight per word, on its first piece
    with pytest.raises(ValueError, match="example 0: tag 'B-ORG'"):
        p.dataset([["a"]], [["B-ORG"]])


# --- compile ------------------------------------------------------------------------------------
def test_compile_defaults_follow_the_paper(tiny_init):
    clf = kbert.BertClassifier.from_checkpoint(tiny_init, labels=["a", "b", "c"])
    clf.compile(**JIT)
    assert isinstance(clf.optimizer, AdamW)
    assert isinstance(clf.loss, keras.losses.SparseCategoricalCrossentropy)
    clf.fit(["the dog"] * 10, [0] * 10, batch_size=4, epochs=2, verbose=0)
    schedule = clf.optimizer._learning_rate
    assert isinstance(schedule, WarmupLinearDecay)
    assert (schedule.total_steps, schedule.warmup_steps) == (6, 1)     # 3 batches x 2 epochs
    assert schedule.peak_learning_rate == pytest.approx(5e-5)
    assert float(clf.optimizer.weight_decay) == pytest.approx(0.01)
    reg = kbert.BertClassifier.from_checkpoint(tiny_init, num_labels=1)
    reg.compile(num_train_steps=100)
    assert isinstance(reg.loss, keras.losses.MeanSquaredError)
    assert reg.optimizer._learning_rate.total_steps == 100
    tagger = kbert.BertTokenClassifier.from_checkpoint(tiny_init, labels=["O", "B-X", "I-X"])
    tagger.compile()
    assert tagger.loss.reduction == "mean_with_sample_weight"
    qa = kbert.BertQuestionAnswerer.from_checkpoint(tiny_init)
    qa.compile()
    assert set(qa.loss) == {"start_logits", "end_logits"}


# --- fit on strings, on every backend ----------------------------------------------------------
@pytest.fixture(scope="module")
def fitted(tiny_init, tmp_path_factory):
    """A classifier fitted on raw strings, its training history, and its saved checkpoint."""
    keras.utils.set_random_seed(1234)         # module fixtures are set up before `_seed` runs
    train = _reviews(48, 0)
    clf = kbert.BertClassifier.from_checkpoint(tiny_init, labels=["fast", "neg", "pos"])
    clf.compile(learning_rate=2e-3, warmup=0.0, **JIT)
    history = clf.fit([t for t, _ in train], [y for _, y in train], batch_size=8, epochs=6,
                      verbose=0).history
    return clf, history, clf.save_checkpoint(str(tmp_path_factory.mktemp("fitted") / "clf"))


@pytest.mark.multibackend
def test_fit_on_strings_then_the_saved_checkpoint_answers(fitted):
    clf, history, out = fitted
    assert history["loss"][-1] < 0.7 * history["loss"][0]
    assert history["accuracy"][-1] > 0.6
    dev = _reviews(12, 1)
    logits = clf.predict([t for t, _ in dev], verbose=0)
    assert logits.shape == (12, 3)
    loaded = kbert.load(out)
    for (text, _), row in zip(dev, logits):
        probs = loaded.classify(text)
        assert list(probs) == ["fast", "neg", "pos"]
        expected = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        np.testing.assert_allclose(list(probs.values()), expected, atol=1e-4)
    right = sum(max(loaded.classify(t), key=loaded.classify(t).get) == y for t, y in dev)
    assert right >= 8


@pytest.mark.multibackend
def test_tagger_fits_words_and_tags(tiny_init, tmp_path):
    labels = ["O", "B-PER", "I-PER", "B-LOC"]
    rng = np.random.default_rng(0)
    words, tags = [], []
    for _ in range(32):
        sentence = [str(w) for w in rng.choice(["the", "a", "sat", "on", "mat"], 4)]
        k = int(rng.integers(0, 4))
        sentence[k] = "man"
        words.append(sentence)
        tags.append(["B-PER" if w == "man" else "O" for w in sentence])
    tagger = kbert.BertTokenClassifier.from_checkpoint(tiny_init, labels=labels)
    tagger.compile(learning_rate=2e-3, warmup=0.0, **JIT)
    history = tagger.fit(words, tags, batch_size=8, epochs=3, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    tagger.save_checkpoint(str(tmp_path / "tagger"))
    entities = kbert.load(str(tmp_path / "tagger")).tag("the man sat on a mat")
    assert [(e["text"], e["label"]) for e in entities] == [("man", "PER")]


def test_pairs_qa_and_multiple_choice_take_strings(tiny_init):
    pair = kbert.BertClassifier.from_checkpoint(tiny_init, num_labels=2)
    pair.compile(learning_rate=2e-3, warmup=0.0, **JIT)
    a, b = ["the dog sat"] * 16, ["on the mat", "a cat"] * 8
    history = pair.fit((a, b), [0, 1] * 8, batch_size=8, epochs=4, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    qa = kbert.BertQuestionAnswerer.from_checkpoint(tiny_init, max_seq_length=64)
    qa.compile(learning_rate=2e-3, warmup=0.0, **JIT)
    questions, contexts = ["who went ?", "what is good ?"] * 4, \
        ["the man went to the store", "paris is good"] * 4
    answers = ([0, 0] * 4, ["the man", "paris"] * 4)
    history = qa.fit((questions, contexts), answers, batch_size=4, epochs=3, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    out = qa.predict((questions[:2], contexts[:2]), verbose=0)
    assert out["start_logits"].shape[0] == 2
    with pytest.raises(ValueError, match="example 0: the context at 3"):
        qa.fit((["who ?"], ["the man"]), ([3], ["man"]), verbose=0)
    choice = kbert.BertMultipleChoice.from_checkpoint(tiny_init)
    choice.compile(learning_rate=2e-3, warmup=0.0, **JIT)
    contexts = ["the man went to the store"] * 8
    endings = [["he bought milk", "a dog sat", "the cat", "fox"]] * 8
    history = choice.fit((contexts, endings), [0] * 8, batch_size=4, epochs=2,
                         verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    assert choice.predict((contexts[:3], endings[:3]), verbose=0).shape == (3, 4)


def test_from_checkpoint_keeps_a_fitting_head(tiny_init, tmp_path):
    clf = kbert.BertClassifier.from_checkpoint(tiny_init, labels=["neg", "pos"])
    out = clf.save_checkpoint(str(tmp_path / "c"))
    again = kbert.BertClassifier.from_checkpoint(out)
    assert again.head_options["labels"] == ["neg", "pos"]
    x = again.preprocessor(["the dog"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(x)),
                               keras.ops.convert_to_numpy(clf(x)), atol=1e-6)
    fresh = kbert.BertClassifier.from_checkpoint(out, num_labels=3)
    assert fresh.head.units == 3
    with pytest.raises(ValueError, match="needs `labels`"):
        kbert.BertTokenClassifier.from_checkpoint(tiny_init, num_labels=3)


def test_export_writes_classify_for_a_checkpoint_from_fit(fitted, tmp_path):
    from kbert import serving
    _, _, out = fitted
    path = serving.export(out, str(tmp_path / "sm"))
    assert "classify" in serving.list_signatures(path)
    fn = tf.saved_model.load(path).signatures["classify"]
    texts = ["the good dog", "a quick fox sat"]
    result = fn(text=tf.constant(texts))
    m = kbert.load(out)
    ref = [[m.classify(t)[k] for k in ("fast", "neg", "pos")] for t in texts]
    np.testing.assert_allclose(result["probabilities"].numpy(), ref, atol=1e-4)


# --- the CLI on your own files -----------------------------------------------------------------
def _run(capsys, *args):
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out.strip().splitlines(), captured.err.strip().splitlines()


FAST = ("--epochs", "2", "--batch-size", "8", "--learning-rate", "2e-3", "--jit-compile", "off")


def test_cli_classify_csv_and_jsonl(tiny_init, tmp_path, capsys):
    train, dev = tmp_path / "train.csv", tmp_path / "dev.jsonl"
    train.write_text("review,stars\n" + "".join(f'"{t}",{y}\n' for t, y in _reviews(48, 0)))
    dev.write_text("".join(json.dumps({"review": t, "stars": y}) + "\n"
                           for t, y in _reviews(12, 1)))
    out = tmp_path / "clf"
    columns = ("--text-column", "review", "--label-column", "stars")
    code, lines, err = _run(capsys, "finetune", "classify", "--init", tiny_init, "--train",
                            train, "--dev", dev, "--output", out, *columns, *FAST)
    assert code == 0
    # progress on stderr (no terminal here: lines), the epochs' summaries on stdout
    assert [line for line in lines if line.startswith("epoch ")][-1].startswith("epoch 2: ")
    trained = [line for line in err if line.startswith("training")]
    assert trained and re.search(r": (\d+)/\1 batch \(100%\), .* left", trained[-1]), err
    assert "loss=" in trained[-1] and any(line.startswith("scoring dev: 12/12 example")
                                          for line in err), err
    config = json.loads((out / "config.json").read_text())
    assert config["heads"]["classifier"]["labels"] == ["fast", "neg", "pos"]
    code, lines, err = _run(capsys, "evaluate", "classify", "--model", out, "--data", dev,
                            *columns)
    scores = json.loads(lines[-1])
    assert code == 0 and set(scores) == {"accuracy", "macro_f1"}
    assert err[-1].startswith("scoring: 12/12 example (100%)"), err
    code, quiet, err = _run(capsys, "evaluate", "classify", "--model", out, "--data", dev,
                            *columns, "--quiet")
    assert json.loads(quiet[-1]) == scores and err == []   # the same numbers again, silently
    m = kbert.load(str(out))
    predicted = [max(m.classify(t), key=m.classify(t).get) for t, _ in _reviews(12, 1)]
    gold = [y for _, y in _reviews(12, 1)]
    assert scores["accuracy"] == pytest.approx(100 * np.mean(np.array(predicted) ==
                                                             np.array(gold)))


def test_label_names_name_what_the_model_answers_and_files_still_score(tiny_init, tmp_path,
                                                                      capsys):
    """`--label-names`: sst2's 0/1 become negative/positive in the checkpoint (what classify,
    exports and the playground show), while `evaluate sst2` still reads the 0/1 files."""
    sentiment = {"pos": "1", "neg": "0"}
    rows = [(t, sentiment[y]) for t, y in _reviews(60, 0) if y in sentiment]
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    dev.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows[:12]))
    out = tmp_path / "sentiment"
    code, lines, _ = _run(capsys, "finetune", "sst2", "--init", tiny_init, "--train", train,
                          "--dev", dev, "--output", out, "--label-names", "negative,positive",
                          *FAST)
    assert code == 0
    head = json.loads((out / "config.json").read_text())["heads"]["classifier"]
    assert head["labels"] == ["negative", "positive"] and head["label_values"] == ["0", "1"]
    code, lines, _ = _run(capsys, "evaluate", "sst2", "--model", out, "--data", dev)
    scores = json.loads(lines[-1])
    m = kbert.load(str(out))
    answers = m.classify([t for t, _ in rows[:12]])
    assert all(set(a) == {"negative", "positive"} for a in answers)
    predicted = [{"negative": "0", "positive": "1"}[max(a, key=a.get)] for a in answers]
    assert scores["accuracy"] == pytest.approx(
        100 * np.mean([p == y for p, (_, y) in zip(predicted, rows[:12])]))
    # own labels (sorted: neg, pos) renamed; bad names are one line before any training
    csv = tmp_path / "reviews.csv"
    csv.write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in _reviews(24, 0)
                                             if y != "fast"))
    code, _, _ = _run(capsys, "finetune", "classify", "--init", tiny_init, "--train", csv,
                      "--dev", csv, "--output", tmp_path / "own", "--label-names", "bad,good",
                      *FAST)
    assert code == 0 and set(kbert.load(str(tmp_path / "own")).classify("good")) == {"bad", "good"}
    for task, names, message in (
            ("sst2", "a,b,c", "3 label names given for 2 labels (0, 1)"),
            ("sst2", "a,a", "label names must be distinct and non-empty: a, a"),
            ("conll2003", "a,b", "label names are for classifier tasks, not conll2003")):
        code, _, err = _run(capsys, "finetune", task, "--init", tiny_init, "--train", train,
                            "--dev", dev, "--output", tmp_path / "x", "--label-names", names)
        assert code == 2 and err[-1].endswith(message), err
    assert not (tmp_path / "x").exists()


def test_own_labels_encoded_once_score_as_from_the_files(tiny_init, tmp_path):
    """`encode` then `finetune(encoded=...)` on your own labels: the labels travel with the
    encoded set (the task object that trains is not the one that encoded)."""
    from kbert import finetune
    from kbert.checkpoint import load
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    for path, rows in ((train, _reviews(32, 0)), (dev, _reviews(12, 1))):
        path.write_text("review,stars\n" + "".join(f'"{t}",{y}\n' for t, y in rows))
    columns = {"text_column": "review", "label_column": "stars"}
    settings = dict(epochs=1, batch_size=8, learning_rate=2e-3, jit_compile=False,
                    verbose=False, task_options=columns)
    encoded = finetune.encode("classify", load(tiny_init).vocab, train, dev, 64,
                              task_options=columns)
    assert encoded.options["labels"] == ["fast", "neg", "pos"]
    runs = [finetune.finetune("classify", tiny_init, train, dev, tmp_path / "a", **settings),
            finetune.finetune("classify", tiny_init, None, None, tmp_path / "b",
                              encoded=encoded, **settings)]
    assert runs[0].best_scores == runs[1].best_scores
    assert set(runs[1].best_scores) == {"accuracy", "macro_f1"}


def test_cli_regress_tsv_pairs(tiny_init, tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(NOUNS, 3)), " ".join(rng.choice(NOUNS, 3))) for _ in range(24)]
    lines = "".join(f"{a}\t{b}\t{len(set(a.split()) & set(b.split()))}\n" for a, b in rows)
    data = tmp_path / "pairs.tsv"
    data.write_text("first\tsecond\tscore\n" + lines)
    out = tmp_path / "reg"
    columns = ("--text-column", "first", "--text-pair-column", "second", "--label-column",
               "score")
    code, _, _ = _run(capsys, "finetune", "regress", "--init", tiny_init, "--train", data,
                      "--dev", data, "--output", out, *columns, *FAST)
    assert code == 0
    code, lines, _ = _run(capsys, "evaluate", "regress", "--model", out, "--data", data, *columns)
    scores = json.loads(lines[-1])
    assert code == 0 and set(scores) == {"pearson", "spearman"}
    assert -100 <= scores["pearson"] <= 100
    assert "score" in kbert.load(str(out)).classify(rows[0][0], rows[0][1])


def test_cli_tag_conll_and_jsonl(tiny_init, tmp_path, capsys):
    sentences = [(["the", "man", "went", "to", "paris"], ["O", "B-PER", "O", "O", "B-LOC"]),
                 (["a", "dog", "sat"], ["O", "O", "O"])] * 6
    conll = tmp_path / "train.conll"
    conll.write_text("\n".join("\n".join(f"{w} {t}" for w, t in zip(*s)) + "\n"
                               for s in sentences))
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("".join(json.dumps({"words": w, "labels": t}) + "\n" for w, t in sentences))
    out = tmp_path / "tagger"
    keys = ("--text-column", "words", "--label-column", "labels")
    code, _, _ = _run(capsys, "finetune", "tag", "--init", tiny_init, "--train", conll, "--dev",
                      jsonl, "--output", out, *keys, *FAST)
    assert code == 0
    labels = json.loads((out / "config.json").read_text())["heads"]["tagger"]["labels"]
    assert labels == ["O", "B-LOC", "B-PER"]
    code, lines, _ = _run(capsys, "evaluate", "tag", "--model", out, "--data", conll)
    assert code == 0 and set(json.loads(lines[-1])) == {"precision", "recall", "f1"}
    bad = tmp_path / "bad.conll"
    bad.write_text("the O\nman B-ORG\n")
    code, _, err = _run(capsys, "evaluate", "tag", "--model", out, "--data", bad)
    assert code != 0 and len(err) == 1 and f"{bad}:2: tag 'B-ORG'" in err[0]


def test_cli_qa_squad(tiny_init, tmp_path, capsys):
    qas = [{"id": str(i), "question": q, "answers": [{"text": a, "answer_start": s}]}
           for i, (q, a, s) in enumerate([("who went ?", "the man", 0),
                                          ("where ?", "the store", 19)] * 4)]
    data = tmp_path / "train.json"
    data.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "the man went to the store .", "qas": qas}]}]}))
    out = tmp_path / "qa"
    code, _, _ = _run(capsys, "finetune", "qa", "--init", tiny_init, "--train", data, "--dev",
                      data, "--output", out, "--max-seq-length", "64", *FAST)
    assert code == 0
    assert json.loads((out / "config.json").read_text())["heads"]["span"]["version"] == "1.1"
    code, lines, _ = _run(capsys, "evaluate", "qa", "--model", out, "--data", data,
                          "--max-seq-length", "64")
    assert code == 0 and set(json.loads(lines[-1])) == {"exact_match", "f1"}


@pytest.mark.parametrize("name, text, where, message", [
    ("train.csv", "text,label\nthe dog,pos\nthe cat\n", 3, "expected 2 fields"),
    ("train.tsv", "text\tlabel\nthe dog\tpos\n\t neg\n", 3, "column 'text' is empty"),
    ("train.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": "y"\n', 2,
     "invalid JSON"),
    ("train.jsonl", '{"text": "a", "label": "x"}\n{"label": "y"}\n', 2,
     "column 'text' is missing"),
    ("train.csv", "text,score\nthe dog,1\n", 2,
     "column 'label' is missing (columns: text, score)"),
])
def test_cli_bad_row_is_one_line_with_file_and_line(tiny_init, tmp_path, capsys, name, text,
                                                    where, message):
    path = tmp_path / name
    path.write_text(text)
    code, _, err = _run(capsys, "finetune", "classify", "--init", tiny_init, "--train", path,
                        "--dev", path, "--output", tmp_path / "out")
    assert code != 0 and len(err) == 1
    assert f"{path}:{where}: " in err[0] and message in err[0]
    assert not (tmp_path / "out").exists()


def test_read_table_keeps_quoted_commas_and_sorts_numeric_labels(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text('text,label\n"a, b",10\nc,9\nd,10\n')
    examples = userdata.read_table(str(path))
    assert [e.text_a for e in examples] == ["a, b", "c", "d"]
    assert userdata.label_list(examples) == ["9", "10"]
    assert isinstance(examples[0], glue.GlueExample) and examples[0].guid == f"{path}:2"
