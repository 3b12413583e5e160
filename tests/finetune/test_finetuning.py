"""Fine-tuning and evaluation on tiny models and tiny data: learning, best-epoch keeping, the
CLI's JSON line, SQuAD, CoNLL-2003, and clear errors on bad input."""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops

import kbert
from helpers import tiny_vocab
from kbert import checkpoint, cli, finetune, outputs
from kbert.tasks.registry import get_task
from kbert.tokenizer import Tokenizer

NOUNS = "man dog cat fox store milk mat paris france".split()
# XLA on JAX only: there an un-jitted step runs op by op (slow); on TensorFlow and PyTorch the
# compile costs more than these few steps.
FAST = dict(batch_size=8, warmup=0.1, verbose=False,
            jit_compile=keras.backend.backend() == "jax")


def _keyword_rows(n, seed):
    """Sentences of random words; label 1 iff "good" appears — learnable from one token."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = list(rng.choice(NOUNS + ["the", "a", "sat", "on"], size=rng.integers(3, 9)))
        if i % 2:
            words.insert(rng.integers(0, len(words) + 1), "good")
        rows.append((" ".join(words), i % 2))
    return rows


def _write_sst2(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    return str(path)


@pytest.fixture(scope="module")
def keyword_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sst2")
    return _write_sst2(d / "train.tsv", _keyword_rows(96, 0)), \
        _write_sst2(d / "dev.tsv", _keyword_rows(32, 1))


@pytest.fixture(scope="module")
def keyword_model(tiny_init, keyword_files, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ft") / "sst2")
    result = finetune.finetune("sst2", tiny_init, *keyword_files, out, epochs=5,
                                 learning_rate=1e-3, seed=0, **FAST)
    return out, result


@pytest.mark.multibackend
def test_finetuning_learns_a_keyword_task(tiny_init, keyword_files, keyword_model):
    ckpt = checkpoint.load(tiny_init)
    ckpt.heads = {"classifier": checkpoint.make_head("classifier", ckpt.backbone,
                                                     {"labels": ["0", "1"]})}
    ckpt.head_options = {"classifier": {"labels": ["0", "1"], "problem": "classification"}}
    before = finetune.evaluate("sst2", ckpt, keyword_files[1])["accuracy"]
    out, result = keyword_model
    after = finetune.evaluate("sst2", out, keyword_files[1])
    assert after == result.best_scores
    assert after["accuracy"] >= 90.0 and after["accuracy"] > before + 20, (before, after)
    assert [h["epoch"] for h in result.history] == [1, 2, 3, 4, 5]
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["heads"] == {"classifier": {"task": "sst2", "problem": "classification",
                                              "labels": ["0", "1"]}}
    m = kbert.load(out)
    assert set(m.classify("the good dog")) == {"0", "1"}
    assert os.path.isfile(os.path.join(out, "MODEL_CARD.md"))


@pytest.mark.multibackend
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile is PyTorch's")
def test_torch_compile_fine_tunes_like_eager(keyword_files, tmp_path):
    """`jit_compile=True` on PyTorch (`torch.compile` of the whole step, optimizer included)."""
    init = str(tmp_path / "init")
    config = kbert.BertConfig.preset("tiny", vocab_size=len(tiny_vocab()), num_layers=1,
                                     dropout=0.0, attention_dropout=0.0)
    checkpoint.save(init, kbert.BertBackbone(config), vocab=tiny_vocab())
    results = [finetune.finetune("sst2", init, *keyword_files, str(tmp_path / str(jit)),
                                 epochs=1, learning_rate=1e-3, batch_size=8, verbose=False,
                                 max_seq_length=16, max_train_examples=24, bucketing=False,
                                 jit_compile=jit)
               for jit in (False, True)]
    eager, compiled = ([h["loss"] for h in r.history] for r in results)
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    assert results[1].best_scores == results[0].best_scores


@pytest.mark.multibackend
def test_encoded_sets_fine_tune_as_the_files_do(tiny_init, keyword_files, tmp_path):
    """`encode` once, `finetune(encoded=...)` many times: the same run as from the files."""
    settings = dict(epochs=2, learning_rate=1e-3, seed=3, max_train_examples=48, **FAST)
    encoded = finetune.encode("sst2", checkpoint.load(tiny_init).vocab, *keyword_files,
                              max_seq_length=64, max_train_examples=48)
    runs = [finetune.finetune("sst2", tiny_init, *keyword_files, str(tmp_path / "files"),
                              **settings),
            finetune.finetune("sst2", tiny_init, None, None, str(tmp_path / "encoded"),
                              encoded=encoded, **settings)]
    assert runs[0].train_examples == runs[1].train_examples == 48
    np.testing.assert_allclose(*([h["loss"] for h in r.history] for r in runs), rtol=1e-5)
    assert runs[0].best_scores == runs[1].best_scores
    other = dict(encoded.__dict__, vocab=list(reversed(encoded.vocab)))
    with pytest.raises(ValueError, match="another vocabulary"):
        finetune.finetune("sst2", tiny_init, None, None, str(tmp_path / "bad"),
                          encoded=finetune.Encoded(**other), **settings)
    with pytest.raises(ValueError, match="for sst2, not mrpc"):
        finetune.finetune("mrpc", tiny_init, None, None, str(tmp_path / "bad"),
                          encoded=encoded, **settings)


def test_encoded_sets_fine_tune_where_tensorflow_is_not(tiny_init, keyword_files, tmp_path):
    """Encoded and pickled here; fine-tuned by a JAX process that cannot import TensorFlow."""
    import pickle
    import subprocess
    import sys
    path = tmp_path / "sst2.pkl"
    path.write_bytes(pickle.dumps(finetune.encode("sst2", checkpoint.load(tiny_init).vocab,
                                                  *keyword_files, 64)))
    code = ("import sys, pickle\n"
            "sys.modules['tensorflow'] = None  # any import of it fails\n"
            "from kbert import finetune\n"
            f"encoded = pickle.load(open({str(path)!r}, 'rb'))\n"
            f"r = finetune.finetune('sst2', {tiny_init!r}, None, None, {str(tmp_path / 'out')!r},"
            " encoded=encoded, epochs=5, learning_rate=1e-3, batch_size=8, verbose=False,"
            " jit_compile=True)\n"
            "print(r.best_scores['accuracy'])\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.split()[-1]) >= 75.0                 # it learned the keyword
    assert checkpoint.load(str(tmp_path / "out")).heads


def test_keep_best_saves_only_improving_epochs():
    scores = iter([{"f1": 60.0}, {"f1": 80.0}, {"f1": 70.0}])
    saved = []
    keeper = finetune.KeepBest(lambda model: next(scores),
                                 lambda history: saved.append(history[-1]["epoch"]), "f1",
                                 verbose=False)
    for epoch in range(3):
        keeper.on_epoch_begin(epoch)
        keeper.on_epoch_end(epoch, {"loss": 1.0})
    assert saved == [1, 2]
    assert (keeper.best_epoch, keeper.best_scores) == (2, {"f1": 80.0})
    assert [h["f1"] for h in keeper.history] == [60.0, 80.0, 70.0]


def test_best_checkpoint_is_the_best_epoch(keyword_model, keyword_files):
    out, result = keyword_model
    best = max(result.history, key=lambda h: h["accuracy"])
    assert result.best_epoch == min(h["epoch"] for h in result.history
                                    if h["accuracy"] == best["accuracy"])
    card = open(os.path.join(out, "MODEL_CARD.md")).read()
    assert f"epoch {result.best_epoch}: " in card


@pytest.mark.multibackend
def test_history_json_and_curves_png_are_written_beside_the_checkpoint(keyword_model):
    """history.json holds each epoch's loss, Keras' metrics, the learning rate and the dev
    scores, as the returned history has them; curves.png is a PNG; both are the checkpoint's
    own files (recorded), and the checkpoint loads."""
    out, result = keyword_model
    doc = json.load(open(os.path.join(out, "history.json")))
    assert (doc["command"], doc["unit"], doc["dev_metric"]) == (
        "kbert finetune sst2", "epoch", "dev_accuracy")
    assert doc["best_epoch"] == result.best_epoch
    assert doc["settings"]["epochs"] == 5 and doc["settings"]["learning_rate"] == 1e-3
    points = doc["points"]
    assert [p["epoch"] for p in points] == [h["epoch"] for h in result.history]
    for point, h in zip(points, result.history):
        assert point["loss"] == pytest.approx(h["loss"])
        assert point["dev_accuracy"] == pytest.approx(h["accuracy"])   # the dev score
        assert 0.0 <= point["accuracy"] <= 1.0                         # Keras' training metric
    rates = [p["learning_rate"] for p in points]
    assert rates == sorted(rates, reverse=True) and rates[-1] < 1e-4 < rates[0] <= 1e-3
    with open(os.path.join(out, "curves.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert {"history.json", "curves.png"} <= set(outputs.read_marker(out)["files"])
    assert outputs.foreign_entries(out) == []
    assert set(kbert.load(out).classify("the good dog")) == {"0", "1"}


@pytest.mark.multibackend
def test_predict_keeps_row_order_and_matches_the_model(keyword_model, keyword_files):
    out, _ = keyword_model
    m = kbert.load(out)
    rows = _keyword_rows(20, 5)
    features, _ = m.tokenizer.pack([m.tokenizer.encode(s) for s, _ in rows])
    batched = finetune.predict(m.model, features, batch_size=3)
    direct = ops.convert_to_numpy(m.model(features))
    np.testing.assert_allclose(batched, direct, atol=1e-4)


def test_evaluate_cli_prints_one_json_line(keyword_model, keyword_files, capsys):
    out, result = keyword_model
    assert cli.main(["evaluate", "sst2", "--model", out, "--data", keyword_files[1]]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result.best_scores


def _squad_json(path, n, seed, impossible=0):
    """Questions whose answer is the context's first word (learnable from its position)."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for i in range(n):
        first = str(rng.choice(NOUNS))
        context = f"{first} sat on the mat . the dog went to the store and bought milk ."
        qa = {"id": f"q{seed}-{i}", "question": "who sat on the mat ?",
              "answers": [{"text": first, "answer_start": 0}]}
        if i < impossible:
            qa = {"id": qa["id"], "question": "who is the capital of france ?", "answers": [],
                  "is_impossible": True}
        paragraphs.append({"context": context, "qas": [qa]})
    version = "v2.0" if impossible else "1.1"
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]}, f)
    return str(path)


@pytest.mark.multibackend
def test_squad_finetune_and_evaluate(tiny_init, tmp_path):
    train, dev = _squad_json(tmp_path / "train.json", 48, 0), _squad_json(tmp_path / "dev.json",
                                                                            16, 1)
    out = str(tmp_path / "squad")
    result = finetune.finetune("squad", tiny_init, train, dev, out, epochs=4,
                                 learning_rate=2e-3, max_seq_length=48, **FAST)
    scores = finetune.evaluate("squad", out, dev, max_seq_length=48)
    assert set(scores) == {"exact_match", "f1"} and scores == result.best_scores
    assert scores["exact_match"] >= 75.0, result.history
    answer = kbert.load(out).answer("who sat on the mat ?", "cat sat on the mat .")[0]
    assert answer["text"] == "cat"


def test_squad2_tunes_and_stores_the_null_threshold(tiny_init, tmp_path):
    train = _squad_json(tmp_path / "train.json", 24, 0, impossible=8)
    dev = _squad_json(tmp_path / "dev.json", 12, 1, impossible=4)
    out = str(tmp_path / "squad2")
    result = finetune.finetune("squad2", tiny_init, train, dev, out, epochs=1,
                                 learning_rate=1e-3, max_seq_length=48,
                                 tune_null_threshold=True, **FAST)
    options = json.load(open(os.path.join(out, "config.json")))["heads"]["span"]
    assert options["version"] == "2.0"
    assert isinstance(options["null_score_diff_threshold"], float)
    scores = finetune.evaluate("squad2", out, dev, max_seq_length=48)
    assert set(scores) == {"exact_match", "f1", "HasAns_f1", "NoAns_f1"}
    assert scores == result.best_scores   # evaluate reads the stored threshold


def _conll(path, n, seed):
    """word POS chunk NER lines; each noun's tag is fixed (paris/france LOC, man PER ...)."""
    tags = {"paris": "LOC", "france": "LOC", "man": "PER", "dogs": "ORG", "store": "ORG"}
    rng = np.random.default_rng(seed)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(n):
        words = list(rng.choice(list(tags) + ["the", "sat", "on", "mat", "a", "."], size=6))
        prev = None
        for w in words:
            kind = tags.get(w)
            tag = "O" if kind is None else ("I-" if prev == kind else "B-") + kind
            lines.append(f"{w} NN I-NP {tag}")
            prev = kind
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return str(path)


@pytest.mark.multibackend
def test_conll2003_finetune_and_evaluate(tiny_init, tmp_path):
    train, dev = _conll(tmp_path / "train.txt", 48, 0), _conll(tmp_path / "valid.txt", 16, 1)
    out = str(tmp_path / "ner")
    result = finetune.finetune("conll2003", tiny_init, train, dev, out, epochs=4,
                                 learning_rate=2e-3, **FAST)
    scores = finetune.evaluate("conll2003", out, dev)
    assert set(scores) == {"precision", "recall", "f1"} and scores == result.best_scores
    assert scores["f1"] >= 80.0, result.history
    labels = json.load(open(os.path.join(out, "config.json")))["heads"]["tagger"]["labels"]
    assert labels[0] == "O" and "B-LOC" in labels


def test_ner_targets_weight_only_first_pieces(tiny_init, tmp_path):
    task = get_task("conll2003")
    data = task.read(_conll(tmp_path / "t.txt", 4, 0))
    tokenizer = Tokenizer(tiny_vocab())
    prepared = task.encode(tokenizer, data, 64, True, task.head_options(data))
    features, label_key, weight_key = task.targets(prepared)
    ids, weights = features["input_ids"], features[weight_key]
    pieces = np.array(tokenizer.convert_ids_to_tokens(ids.ravel())).reshape(ids.shape)
    first = ~np.char.startswith(pieces, "##") & (features["input_mask"] == 1) & \
        ~np.isin(pieces, ["[CLS]", "[SEP]"])
    assert "##s" in pieces                          # "dogs" is two pieces
    np.testing.assert_array_equal(weights == 1, first)
    assert features[label_key].min() >= 0           # -100 never reaches the loss


def _cli(*args):
    return cli.main(list(args))


def test_bad_tsv_names_file_and_line(tiny_init, keyword_files, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\nthe good dog\t1\nthe dog\t0\textra\n")
    rc = _cli("finetune", "sst2", "--init", tiny_init, "--train", str(bad), "--dev",
              keyword_files[1], "--output", str(tmp_path / "out"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert f"{bad}:3:" in err and "columns" in err
    assert not os.path.exists(tmp_path / "out")


def test_checkpoint_without_the_head_is_named(tiny_init, keyword_files, keyword_model, capsys):
    rc = _cli("evaluate", "sst2", "--model", tiny_init, "--data", keyword_files[1])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "classifier" in err and len(err.splitlines()) == 1
    rc = _cli("evaluate", "conll2003", "--model", keyword_model[0], "--data", keyword_files[1])
    assert rc == 2 and "tagger" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (("evaluate", "sst2", "--model", "/nonexistent/ckpt", "--data", "x.tsv"), "not found"),
    (("evaluate", "rte", "--model", "KEYWORD", "--data", "DEV"), "not rte's"),
])
def test_other_bad_inputs_are_one_line(args, message, keyword_model, keyword_files, capsys):
    args = [{"KEYWORD": keyword_model[0], "DEV": keyword_files[1]}.get(a, a) for a in args]
    assert _cli(*args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_unknown_task_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        _cli("evaluate", "imdb", "--model", "m", "--data", "d")
    assert e.value.code == 2 and "imdb" in capsys.readouterr().err


def test_finetune_cli_ends_with_the_best_scores(tiny_init, keyword_files, tmp_path, capsys):
    out = str(tmp_path / "cli")
    rc = _cli("finetune", "sst2", "--init", tiny_init, "--train", keyword_files[0], "--dev",
              keyword_files[1], "--output", out, "--epochs", "1", "--batch-size", "16",
              "--max-seq-length", "32", "--jit-compile", "off", "--no-bucketing",
              "--log-dir", str(tmp_path / "tb"))
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and set(json.loads(lines[-1])) == {"accuracy"}
    assert json.load(open(os.path.join(out, "config.json")))["heads"]["classifier"]
    assert "bucketing False" in open(os.path.join(out, "MODEL_CARD.md")).read()
    events = list((tmp_path / "tb").rglob("events.out.tfevents.*"))   # --log-dir: TensorBoard
    assert events and all(e.stat().st_size > 0 for e in events)
    points = json.load(open(os.path.join(out, "history.json")))["points"]
    assert [p["epoch"] for p in points] == [1] and "dev_accuracy" in points[0]

    # TensorBoard's folder inside the checkpoint would be a folder not kbert's: refused
    rc = _cli("finetune", "sst2", "--init", tiny_init, "--train", keyword_files[0], "--dev",
              keyword_files[1], "--output", out, "--overwrite", "--log-dir",
              os.path.join(out, "tb"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "is inside --output" in err, err


def test_an_error_during_training_leaves_only_its_line(tiny_init, keyword_files, tmp_path,
                                                       capsys, monkeypatch):
    """Keras does not end a callback's bar when `fit` fails: the command clears it, and its
    stderr is the error's one line."""
    from kbert.training import curves

    def fail(*args, **kwargs):
        raise ValueError("the epoch failed")
    monkeypatch.setattr(curves.Recorder, "on_train_batch_end", fail)
    rc = _cli("finetune", "sst2", "--init", tiny_init, "--train", keyword_files[0], "--dev",
              keyword_files[1], "--output", str(tmp_path / "out"), "--epochs", "1",
              "--batch-size", "16", "--max-seq-length", "32", "--jit-compile", "off")
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines() == ["kbert finetune: error: the epoch failed"], err
