"""benchmarks/squad_vs_hf.py end to end on a few questions: prepare (TensorFlow Text) once,
then kbert on JAX and PyTorch and HF's loop, each in its own process, from the same bundle."""

import json
import math
import os
import subprocess
import sys

from helpers import REPO

SCRIPT = REPO / "benchmarks" / "squad_vs_hf.py"


def test_prepare_then_every_engine_trains_and_scores(tmp_path, shared_data):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    bundle, out = tmp_path / "bundle", tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "prepare", "--squad",
         str(shared_data / "squad" / "dev-v1.1-part-a.json"), "--output", str(bundle),
         "--max-train-questions", "16", "--max-heldout-questions", "8",
         "--max-seq-length", "64"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((bundle / "meta.json").read_text())
    assert meta["train_questions"] == 16 and meta["heldout_questions"] == 8
    assert meta["train_windows"] >= 16 and meta["max_seq_length"] == 64
    engines = ["hf", "kbert-jax", "kbert-torch"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "--bundle", str(bundle), "--epochs", "1",
         "--batch-size", "8", "--engines", *engines, "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert sorted(rows) == sorted(engines), done.stdout[-3000:]
    for name, row in rows.items():
        assert len(row["epoch_seconds"]) == 1 and row["epoch_seconds"][0] > 0, name
        assert row["steps_per_epoch"] == math.ceil(meta["train_windows"] / 8), name
        assert 0 <= row["exact_match"] <= row["f1"] <= 100, name
    assert "x HF (last epoch)" in done.stdout
