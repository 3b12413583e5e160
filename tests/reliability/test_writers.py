"""Every command that writes, as a user meets it: a directory of the user's is refused in one
line and left as it was, an output of the command's own kind is replaced only with
--overwrite (the user's other files in it kept), two `kbert index add` at once both land, and
what is written is readable by another user (TF Serving, a colleague) under the usual umask."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

import kbert
from helpers import PASSAGES, save_tiny_encoder, tiny_vocab
from kbert import cli, outputs

SHIPPED = "minilm-l6-mlm-nsp"
VOCAB = tiny_vocab(size=120)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("enc") / "tiny-encoder", VOCAB)


@pytest.fixture
def user_dir(tmp_path):
    path = tmp_path / "u"
    path.mkdir()
    (path / "notes.txt").write_text("precious")
    return path


def _one_line(capsys, argv):
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def _writers(tmp_path, encoder_dir, out):
    train = tmp_path / "train.csv"
    train.write_text("text,label\ngreat,pos\ndull,neg\n")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "a", "positive": "b", "negative": "c"}) + "\n")
    text = tmp_path / "doc.txt"
    text.write_text("The man went to the store.\n\nHe bought milk.\n")
    return {
        "export saved_model": ["export", SHIPPED, "--output", out],
        "export onnx": ["export", SHIPPED, "--format", "onnx", "--output", out],
        "export openvino": ["export", SHIPPED, "--format", "openvino", "--output", out],
        "finetune": ["finetune", "classify", "--init", SHIPPED, "--train", train, "--dev",
                     train, "--output", out],
        "finetune retrieve": ["finetune", "retrieve", "--init", encoder_dir, "--train", pairs,
                              "--output", out],
        "finetune rerank": ["finetune", "rerank", "--init", SHIPPED, "--train", pairs,
                            "--output", out],
        "pretrain": ["pretrain", "--text", text, "--config", "tiny", "--vocab",
                     os.path.join(encoder_dir, "vocab.txt"), "--output", out],
        "convert from": ["convert", "--from", "hf", encoder_dir, "--output", out],   # checked first
        "convert to": ["convert", "--to", "hf", encoder_dir, "--output", out],
        "index build": ["index", "build", text, "--model", encoder_dir, "--output", out],
        "create-pretraining-data": ["create-pretraining-data", "--input", text, "--vocab",
                                    os.path.join(encoder_dir, "vocab.txt"), "--output", out],
        "experiments features": ["experiments", "features", "--output", out, "--train", text,
                                 "--dev", text],
    }


WRITERS = ["export saved_model", "export onnx", "export openvino", "finetune",
           "finetune retrieve", "finetune rerank", "pretrain", "convert from", "convert to",
           "index build", "create-pretraining-data", "experiments features"]


@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_refuses_the_users_directory(writer, tmp_path, user_dir, encoder_dir,
                                                  capsys):
    argv = _writers(tmp_path, encoder_dir, user_dir)[writer]
    for extra in ([], ["--overwrite"] if writer != "experiments features" else []):
        code, err = _one_line(capsys, argv + extra)
        assert code == 2 and len(err) == 1, err
        assert "holds files kbert did not write (notes.txt)" in err[0], err
    assert sorted(os.listdir(user_dir)) == ["notes.txt"]
    assert (user_dir / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize("writer", ["export saved_model", "export onnx", "finetune",
                                    "index build", "convert from"])
def test_the_current_directory_is_never_an_output(writer, tmp_path, encoder_dir, capsys,
                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = _one_line(capsys, _writers(tmp_path, encoder_dir, ".")[writer] + ["--overwrite"])
    assert code == 2 and err == [f"kbert {writer.split()[0]}: error: --output .: refusing to "
                                 f"write over the current directory"]


def test_build_vocab_needs_overwrite_for_an_existing_file(tmp_path, capsys):
    text = tmp_path / "doc.txt"
    text.write_text("The man went to the store. He bought a gallon of milk.\n" * 20)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("mine\n")
    argv = ["build-vocab", "--input", text, "--vocab-size", "150", "--output", vocab]
    code, err = _one_line(capsys, argv)
    assert code == 2 and err == [f"kbert build-vocab: error: --output {vocab} exists; pass "
                                 f"--overwrite to replace it"]
    assert vocab.read_text() == "mine\n"
    assert cli.main([str(a) for a in argv + ["--overwrite"]]) == 0
    assert "[PAD]" in vocab.read_text()


def test_index_build_replaces_its_own_kind_only_with_overwrite(tmp_path, encoder_dir, capsys):
    text = tmp_path / "a.txt"
    text.write_text(PASSAGES[0])
    out = tmp_path / "idx"
    argv = ["index", "build", text, "--model", encoder_dir, "--output", out]
    assert cli.main([str(a) for a in argv]) == 0
    (out / "notes.txt").write_text("mine")
    code, err = _one_line(capsys, argv)
    assert code == 2 and "holds a kbert index already; pass --overwrite" in err[0]
    text.write_text(PASSAGES[1])
    assert cli.main([str(a) for a in argv + ["--overwrite"]]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert kbert.retrieval.Index.load(out).passages[0]["text"] == PASSAGES[1]


def test_convert_to_hf_replaces_its_own_kind_keeping_the_users_files(tmp_path, encoder_dir):
    out = tmp_path / "hf"
    argv = ["convert", "--to", "hf", encoder_dir, "--output", str(out)]
    assert cli.main(argv) == 0
    (out / "README.md").write_text("mine")
    assert cli.main(argv) == 2
    assert cli.main(argv + ["--overwrite"]) == 0
    assert (out / "README.md").read_text() == "mine" and (out / "model.safetensors").is_file()
    assert outputs.kind_of(out) == "hf"


def test_saved_model_versions_go_beside_kbert_s_own_in_the_base_directory(tmp_path, encoder_dir,
                                                                         capsys):
    """TF Serving's layout, `base/<version>/`: a new version beside kbert's earlier ones (here
    one from before kbert recorded its outputs), the same version replaced only with
    overwrite; a file of the user's in the base refuses every export, before any work."""
    from kbert import serving
    base = tmp_path / "sm"
    (base / "1" / "assets.extra").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_text("")
    (base / "1" / "assets.extra" / "export_options.json").write_text("{}")
    assert serving.export(encoder_dir, base, version=2) == str(base / "2")
    with pytest.raises(outputs.OutputError, match="holds version 2 already; pass --overwrite"):
        serving.export(encoder_dir, base, version=2)
    serving.export(encoder_dir, base, version=2, overwrite=True,
                   options=serving.ExportOptions(top_k=3))
    options = json.loads((base / "2" / "assets.extra" / "export_options.json").read_text())
    assert options["top_k"] == 3 and outputs.kind_of(base / "2") == "saved_model"
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert sorted(os.listdir(tmp_path)) == ["sm"]
    (base / "notes.txt").write_text("precious")
    code, err = _one_line(capsys, ["export", encoder_dir, "--output", base, "--version", "3"])
    assert code == 2 and err == [f"kbert export: error: --output {base} holds files kbert did "
                                 f"not write (notes.txt); choose a new or empty directory"]
    assert sorted(os.listdir(base)) == ["1", "2", "notes.txt"]


@pytest.mark.parametrize("where", ["/", "~", ".", ".."])
def test_no_saved_model_base_is_a_protected_place(where, tmp_path, encoder_dir, monkeypatch):
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from kbert import serving
    with pytest.raises(outputs.OutputError, match="refusing to write over"):
        serving.export(encoder_dir, os.path.expanduser(where), overwrite=True)
    assert os.listdir(tmp_path / "project") == [] and os.listdir(tmp_path / "home") == []


# --- two writers at once -----------------------------------------------------------------------
def test_two_index_adds_at_once_both_land(tmp_path, encoder_dir):
    """Both processes start while the test holds the index's lock: each says it waits, then
    they add one after the other, each to what the other wrote."""
    (tmp_path / "a.txt").write_text(PASSAGES[0])
    (tmp_path / "b.txt").write_text(PASSAGES[1])
    (tmp_path / "c.txt").write_text(PASSAGES[2])
    idx = tmp_path / "idx"
    assert cli.main(["index", "build", str(tmp_path / "a.txt"), "--model", encoder_dir,
                     "--output", str(idx)]) == 0
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    with outputs.locked(str(idx)):
        children = [subprocess.Popen([sys.executable, "-m", "kbert", "index", "add", str(idx),
                                      str(tmp_path / name)], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    for name in ("b.txt", "c.txt")]
        waiting = [c.stderr.readline() for c in children]
    assert all("kbert index: waiting for kbert process" in line for line in waiting), waiting
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        assert "added 1 passage from 1 text" in out
    texts = sorted(p["text"] for p in kbert.retrieval.Index.load(idx).passages)
    assert texts == sorted(PASSAGES[:3])
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt", "c.txt", "idx"]   # no lock left


def test_an_index_changed_since_it_was_loaded_is_not_saved_over(tmp_path, encoder_dir):
    model = kbert.load(encoder_dir)
    first = kbert.retrieval.Index.build(model, PASSAGES[:1])
    first.save(tmp_path / "idx")
    mine = kbert.retrieval.Index.load(tmp_path / "idx")
    theirs = kbert.retrieval.Index.load(tmp_path / "idx")
    theirs.add(model, PASSAGES[1:2])
    theirs.save(tmp_path / "idx")
    mine.add(model, PASSAGES[2:3])
    with pytest.raises(ValueError, match="was changed by another writer since this index was "
                                         "loaded; load it again"):
        mine.save(tmp_path / "idx")
    assert len(kbert.retrieval.Index.load(tmp_path / "idx")) == 2


# --- modes, read as another user -----------------------------------------------------------------
def _can_switch_user():
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.fixture(scope="module")
def outputs_dir(encoder_dir):
    """A world-traversable folder holding one output of each kind, written under umask 022."""
    root = tempfile.mkdtemp(prefix="kbert-modes-")
    os.chmod(root, 0o755)
    old = os.umask(0o022)
    try:
        text = os.path.join(root, "doc.txt")
        with open(text, "w") as f:
            f.write("The man went to the store.\n\nHe bought milk. It was cold.\n")
        vocab = os.path.join(encoder_dir, "vocab.txt")
        for argv in (["convert", "--to", "hf", encoder_dir, "--output", f"{root}/hf"],
                     ["convert", "--from", "hf", f"{root}/hf", "--output", f"{root}/checkpoint"],
                     ["export", encoder_dir, "--format", "onnx", "--output", f"{root}/onnx"],
                     ["export", encoder_dir, "--output", f"{root}/saved_model"],
                     ["index", "build", text, "--model", encoder_dir, "--output",
                      f"{root}/index"],
                     ["create-pretraining-data", "--input", text, "--vocab", vocab,
                      "--output", f"{root}/shards", "--max-seq-length", "16",
                      "--workers", "1"],
                     ["build-vocab", "--input", text, "--vocab-size", "120", "--output",
                      f"{root}/vocab.txt"]):
            assert cli.main(argv) == 0, argv
    finally:
        os.umask(old)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_every_output_kind_has_the_umasks_modes(outputs_dir):
    seen = 0
    for top, dirs, files in os.walk(outputs_dir):
        assert stat.S_IMODE(os.stat(top).st_mode) == 0o755, top
        for name in files:
            path = os.path.join(top, name)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o644, path
            seen += 1
    assert seen > 20
    assert [n for n in os.listdir(outputs_dir) if n.startswith(".")] == []   # no leftovers


@pytest.mark.skipif(not _can_switch_user(), reason="needs root and setpriv to act as another "
                                                   "user (make test runs it as nobody too)")
def test_another_user_reads_every_output_file(outputs_dir):
    read = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           "find", outputs_dir, "-type", "f", "-exec", "cat", "{}", "+"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert read.returncode == 0, read.stderr


def test_the_user_who_exported_serves_the_export(outputs_dir):
    """The ONNX export and the SavedModel open for the user who wrote them (their graph
    folders were 0644, unsearchable, before)."""
    m = kbert.load(os.path.join(outputs_dir, "onnx"))
    assert m.runtime == "onnx" and m.embed(["He bought milk."]).shape == (1, 128)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)
    served = tf.saved_model.load(os.path.join(outputs_dir, "saved_model", "1"))
    assert served.signatures["embed"](text=tf.constant(["milk"]))["embedding"].shape == (1, 128)


def test_the_user_trains_and_loads_what_they_trained(tmp_path, encoder_dir):
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in
                                                [("great film", "pos"), ("dull", "neg")] * 4))
    out = tmp_path / "clf"
    assert cli.main(["finetune", "classify", "--init", encoder_dir, "--train", str(train),
                     "--dev", str(train), "--epochs", "1", "--batch-size", "4",
                     "--output", str(out)]) == 0
    assert outputs.kind_of(out) == "checkpoint"
    assert set(kbert.load(str(out)).classify("great film")) == {"neg", "pos"}
    for top, _, files in os.walk(out):
        assert stat.S_IMODE(os.stat(top).st_mode) & 0o755 == 0o755
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode) & 0o644 == 0o644


def test_the_python_api_names_the_path_and_the_cli_names_output(tmp_path, encoder_dir, capsys):
    """A refusal from `save_checkpoint` or `serving.export` reads `PATH holds ...`; the same
    refusal from a command reads `--output PATH holds ...`."""
    from kbert import serving
    user_dir = tmp_path / "d"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("precious")
    said = (f"{user_dir} holds files kbert did not write (notes.txt); choose a new or empty "
            "directory")
    clf = kbert.BertClassifier.from_checkpoint(encoder_dir, num_labels=2)
    with pytest.raises(outputs.OutputError) as refused:
        clf.save_checkpoint(str(user_dir))
    assert str(refused.value) == said and refused.value.path == str(user_dir)
    with pytest.raises(outputs.OutputError) as refused:
        serving.export(encoder_dir, user_dir)
    assert str(refused.value) == said
    code, err = _one_line(capsys, ["export", encoder_dir, "--output", user_dir])
    assert code == 2 and err == [f"kbert export: error: --output {said}"]
    assert sorted(os.listdir(user_dir)) == ["notes.txt"]
