"""Installation and layout: shipped checkpoints by name from any directory, the import graph."""

import os
import pathlib
import subprocess
import sys

import pytest

from helpers import tiny_vocab
from kbert import BertBackbone, BertConfig, checkpoint

REPO = pathlib.Path(__file__).resolve().parents[1]


def _python(code, cwd, **env):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO),
               **{"KERAS_BACKEND": "tensorflow", **env})
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_shipped_checkpoints_load_and_serve_from_any_directory(tmp_path):
    """A fresh interpreter in a temporary directory: the library and the app find the shipped
    checkpoints by name (one child process for both)."""
    code = ("import kbert\n"
            "m = kbert.load('minilm-l6-mlm-nsp')\n"
            "print(m.checkpoint.path)\n"
            "print(m.fill_mask('paris is the capital of [MASK].', top_k=1)[0][0]['token'])\n"
            "from app import server\n"
            "demo, registry = server.build()\n"
            "print(' '.join(registry.names))\n")
    done = _python(code, tmp_path, GRADIO_ANALYTICS_ENABLED="False")
    assert done.returncode == 0, done.stderr[-2000:]
    path, token, names = done.stdout.strip().splitlines()[-3:]
    assert pathlib.Path(path).resolve() == REPO / "saved_models" / "minilm-l6-mlm-nsp"
    assert token == "france"
    assert "minilm-l6-mlm-nsp" in names.split() and "minilm-l6-squad" in names.split(), names


def test_name_search_path_and_its_error(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    checkpoint.save(mine / "tiny-encoder", BertBackbone(BertConfig.preset(
        "tiny", vocab_size=len(tiny_vocab()))), vocab=tiny_vocab())
    (mine / "minilm-l6-mlm-nsp").mkdir()          # not a checkpoint: skipped, the shipped one wins
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)                       # `$KBERT_MODELS` is read at each call
    monkeypatch.setenv("KBERT_MODELS", str(mine))
    assert checkpoint.resolve("tiny-encoder") == str(mine / "tiny-encoder")
    found_shipped = checkpoint.resolve("minilm-l6-mlm-nsp")
    assert pathlib.Path(found_shipped).resolve() == REPO / "saved_models" / "minilm-l6-mlm-nsp"
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.resolve("nope")
    err = str(e.value)
    assert "\n" not in err and err.startswith("checkpoint directory not found: nope")
    for where in (str(mine), str(REPO / "saved_models"), "tiny-encoder", "minilm-l6-squad"):
        assert where in err, err
    # an existing directory wins over a name; a path that does not exist is not looked up
    (work / "tiny-encoder").mkdir()
    assert checkpoint.resolve("tiny-encoder") == "tiny-encoder"
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.resolve("./minilm-l6-squad")
    assert str(e.value) == "checkpoint directory not found: ./minilm-l6-squad"
