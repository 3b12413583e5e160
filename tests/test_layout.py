"""Installation and layout: shipped checkpoints by name from any directory, the import graph."""

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def _python(code, cwd, **env):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO),
               **{"KERAS_BACKEND": "tensorflow", **env})
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_shipped_checkpoint_by_name_from_any_directory(tmp_path):
    code = ("import kbert\n"
            "m = kbert.load('minilm-l6-mlm-nsp')\n"
            "print(m.checkpoint.path)\n"
            "print(m.fill_mask('paris is the capital of [MASK].', top_k=1)[0][0]['token'])\n")
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    path, token = done.stdout.split()[-2:]
    assert pathlib.Path(path).resolve() == REPO / "saved_models" / "minilm-l6-mlm-nsp"
    assert token == "france"


def test_name_search_path_and_its_error(tmp_path):
    from helpers import tiny_vocab
    from kbert import BertBackbone, BertConfig, checkpoint

    mine = tmp_path / "mine"
    checkpoint.save(mine / "tiny-encoder", BertBackbone(BertConfig.preset(
        "tiny", vocab_size=len(tiny_vocab()))), vocab=tiny_vocab())
    (mine / "minilm-l6-mlm-nsp").mkdir()          # not a checkpoint: skipped, the shipped one wins
    work = tmp_path / "work"
    work.mkdir()
    code = ("from kbert import checkpoint\n"
            "print(checkpoint.resolve('tiny-encoder'))\n"
            "print(checkpoint.resolve('minilm-l6-mlm-nsp'))\n"
            "checkpoint.resolve('nope')\n")
    done = _python(code, work, KBERT_MODELS=str(mine), KERAS_BACKEND="jax")  # no TF needed
    found_mine, found_shipped = done.stdout.split()
    assert found_mine == str(mine / "tiny-encoder")
    assert pathlib.Path(found_shipped).resolve() == REPO / "saved_models" / "minilm-l6-mlm-nsp"
    err = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "checkpoint directory not found: nope" in err
    for where in (str(mine), str(REPO / "saved_models"), "tiny-encoder", "minilm-l6-squad"):
        assert where in err, err
    # an existing directory wins over a name; a path that does not exist is not looked up
    (work / "tiny-encoder").mkdir()
    done = _python("from kbert import checkpoint\nprint(checkpoint.resolve('tiny-encoder'))\n"
                   "checkpoint.resolve('./minilm-l6-squad')\n", work, KBERT_MODELS=str(mine),
                   KERAS_BACKEND="jax")
    assert done.stdout.split() == ["tiny-encoder"]
    assert done.stderr.strip().splitlines()[-1].endswith(
        "checkpoint directory not found: ./minilm-l6-squad")


def test_app_serves_the_shipped_checkpoints_from_any_directory(tmp_path):
    code = ("from app import server\n"
            "demo, registry = server.build()\n"
            "print(' '.join(registry.names))\n")
    done = _python(code, tmp_path, GRADIO_ANALYTICS_ENABLED="False")
    assert done.returncode == 0, done.stderr[-2000:]
    names = done.stdout.split()
    assert "minilm-l6-mlm-nsp" in names and "minilm-l6-squad" in names, done.stdout
