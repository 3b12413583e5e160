"""The `kbert` command on bad input: one line `kbert COMMAND: error: ...`, exit status 2, no
traceback (unless --debug or KBERT_DEBUG=1), checks made before any work, nothing half-written."""

import json
import os
import pickle

import pytest

from helpers import tiny_vocab, write_vocab
from kbert import cli


def _error(capsys, *argv, code=2):
    """The one line of an error on stderr, after any progress a command showed before it."""
    assert cli.main(list(argv)) == code
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if " elapsed, " not in line]
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    words = "the quick brown fox jumps over the lazy dog while a man went to the store".split()
    path.write_text("\n\n".join(" ".join(words[i:] + words[:i]).capitalize() + "."
                                for i in range(len(words))) + "\n")
    return str(path)


# --- build-vocab ---------------------------------------------------------------------------------
def test_build_vocab_output_directory_is_refused_and_leaves_nothing(tmp_path, capsys, corpus):
    out = tmp_path / "out"
    out.mkdir()
    err = _error(capsys, "build-vocab", "--input", corpus, "--vocab-size", "150", "--output",
                 str(out))
    assert err == f"kbert build-vocab: error: --output {out} is a directory; give the file to write"
    assert list(out.iterdir()) == [] and [p.name for p in tmp_path.iterdir()
                                       if ".tmp" in p.name] == []


@pytest.mark.parametrize("size", [110, 150, 200])
def test_build_vocab_size_is_a_maximum(tmp_path, capsys, corpus, size):
    out = tmp_path / "vocab.txt"
    assert cli.main(["build-vocab", "--input", corpus, "--vocab-size", str(size),
                     "--output", str(out)]) == 0
    vocab = out.read_text().splitlines()
    assert 104 < len(vocab) <= size                     # 104 reserved: [PAD], 99 unused, 4 specials
    assert f"wrote {out}: {len(vocab)} tokens" in capsys.readouterr().out
    assert len(set(vocab)) == len(vocab)


def test_build_vocab_size_too_small_for_the_characters_is_refused(tmp_path, capsys, corpus):
    err = _error(capsys, "build-vocab", "--input", corpus, "--vocab-size", "105", "--output",
                 str(tmp_path / "vocab.txt"))
    assert err == ("kbert build-vocab: error: vocab size 105 leaves room for 1 token after "
                   "the 104 reserved ones: too few for the text's characters")
    assert list(tmp_path.iterdir()) == [tmp_path / "corpus.txt"]


# --- pretrain arguments checked up front ---------------------------------------------------------
@pytest.mark.parametrize("option, value, message", [
    ("--checkpoint-every", "0", "--checkpoint-every must be a positive integer, got 0"),
    ("--batch-size", "0", "batch size must be a positive integer, got 0"),
    ("--steps", "-5", "steps must be a positive integer, got -5"),
    ("--warmup-steps", "2000", "warmup steps must be in [0, 1000] (the steps), got 2000"),
    ("--learning-rate", "0", "learning rate must be positive, got 0.0"),
])
def test_pretrain_bad_numbers_are_refused_before_any_work(tmp_path, capsys, option, value,
                                                          message):
    (tmp_path / "data").mkdir()
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    err = _error(capsys, "pretrain", "--data", str(tmp_path / "data"), "--config", "tiny",
                 "--vocab", vocab, "--output", str(tmp_path / "ck"), option, value)
    assert err == f"kbert pretrain: error: {message}"
    assert not os.path.exists(tmp_path / "ck") and not os.path.exists(tmp_path / "ck.backup")


def test_output_that_is_a_file_is_refused(tmp_path, capsys, corpus):
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    for argv in (["pretrain", "--data", str(tmp_path), "--config", "tiny", "--vocab", vocab],
                 ["create-pretraining-data", "--input", corpus, "--vocab", vocab],
                 ["convert", "--from", "hf", str(tmp_path)]):
        err = _error(capsys, *argv, "--output", str(taken))
        assert err == f"kbert {argv[0]}: error: --output {taken} exists and is not a directory"


# --- finetune arguments checked up front --------------------------------------------------------
@pytest.mark.parametrize("task", ["sst2", "retrieve", "rerank"])
@pytest.mark.parametrize("epochs", ["0", "-1"])
def test_finetune_epochs_below_one_are_refused(tmp_path, capsys, task, epochs):
    with pytest.raises(SystemExit) as e:
        cli.main(["finetune", task, "--init", "x", "--train", "t", "--dev", "d",
                  "--output", str(tmp_path / "o"), "--epochs", epochs])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err == f"kbert finetune: error: argument --epochs: must be >= 1, got {epochs}\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, message", [
    ([], "kbert: error: the following arguments are required: COMMAND"),
    (["index", "build"], "kbert index build: error: the following arguments are required: "
                         "FILE, --model, --output"),
    (["finetune", "sst2", "--bogus"], "kbert finetune: error: the following arguments are "
                                      "required: --init, --train, --output"),
])
def test_argument_errors_are_one_line_without_the_usage(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and capsys.readouterr().err == message + "\n"


def test_finetune_api_refuses_epochs_below_one_naming_them(tmp_path):
    from kbert import finetune
    from kbert.training import retrievers as training
    out = str(tmp_path / "o")
    with pytest.raises(ValueError, match=r"^epochs must be >= 1, got 0$"):
        finetune.finetune("sst2", "x", "t", "d", out, epochs=0)
    for train in (training.train_retriever, training.train_reranker):
        with pytest.raises(ValueError, match=r"^epochs must be >= 1, got 0$"):
            train("x", "t", out, epochs=0)
    with pytest.raises(ValueError, match=r"^batch_size must be >= 2, got 1$"):
        training.train_retriever("x", "t", out, batch_size=1)
    assert not (tmp_path / "o").exists()


# --- one place for expected errors ---------------------------------------------------------------
def test_permission_and_tensorflow_errors_are_one_line(tmp_path, capsys, corpus, monkeypatch):
    import tensorflow as tf

    from kbert.network import config
    out = str(tmp_path / "vocab.txt")

    def denied(vocab, path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(config, "write_vocab", denied)
    err = _error(capsys, "build-vocab", "--input", corpus, "--vocab-size", "150", "--output", out)
    assert err == f"kbert build-vocab: error: {out}: Permission denied"

    def tf_denied(vocab, path):
        raise tf.errors.PermissionDeniedError(None, None, f"{path}; Permission denied")
    monkeypatch.setattr(config, "write_vocab", tf_denied)
    err = _error(capsys, "build-vocab", "--input", corpus, "--vocab-size", "150", "--output", out)
    assert err == f"kbert build-vocab: error: {out}; Permission denied"


def test_traceback_only_with_debug(tmp_path, capsys, monkeypatch):
    argv = ["build-vocab", "--input", str(tmp_path / "nope.txt"), "--vocab-size", "150",
            "--output", str(tmp_path / "v.txt")]
    assert "nope.txt" in _error(capsys, *argv)
    with pytest.raises(FileNotFoundError):
        cli.main(["--debug", *argv])
    with pytest.raises(FileNotFoundError):
        cli.main([*argv, "--debug"])
    monkeypatch.setenv("KBERT_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        cli.main(argv)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_malicious_pickle_is_refused_in_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": 120,
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 32}))
    write_vocab(str(src), tiny_vocab(120))
    with open(src / "pytorch_model.bin", "wb") as f:
        pickle.dump({"embeddings.word_embeddings.weight": _Exploit()}, f)
    err = _error(capsys, "convert", "--from", "hf", str(src), "--output", str(tmp_path / "o"))
    assert err == (f"kbert convert: error: {src / 'pytorch_model.bin'}: refused: the pickle holds "
                   "more than tensors (it could run code when loaded); get safetensors weights "
                   "instead")
    assert "pwned" not in capsys.readouterr().out
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv,message", [
    (["--export", "x", "--arrays", "y", "--output", "r"], "give one of them"),
    (["--arrays", "y", "--output", "r", "--steps", "5"], "the plan --export fixed"),
    (["--arrays", "y", "--output", "r", "--quick"], "the plan --export fixed"),
    (["--quick"], "--output (the results folder) is required"),
])
def test_ablations_options_that_cannot_go_together_are_one_line(argv, message, capsys):
    assert cli.main(["experiments", "ablations", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("argv", [
    ["features", "--output", "r", "--train", "t", "--dev", "d", "--epochs", "0"],
    ["features", "--output", "r", "--train", "t", "--dev", "d", "--seeds", "-1"],
    ["ablations", "--output", "r", "--steps", "0"],
])
def test_experiments_counts_below_one_are_refused(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["experiments", *argv])
    assert exit_.value.code == 2 and "must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
