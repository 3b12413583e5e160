"""JAX's compiled programs: the persistent cache (a second run compiles nothing) and the batch
widths a fine-tuning epoch compiles for (`width_ladder`)."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from kbert.tasks.batching import batch_shapes, width_ladder

RUN = textwrap.dedent("""
    import json, sys
    import numpy as np, keras, kbert
    from kbert.models.compilation import Compiles, enable_persistent_cache
    enable_persistent_cache()                   # as the `kbert` command does at its start
    with Compiles() as compiles:
        keras.utils.set_random_seed(0)
        config = kbert.BertConfig(vocab_size=100, num_layers=1, hidden_size=16, num_heads=2,
                                  intermediate_size=32, max_position_embeddings=16)
        model = kbert.BertClassifier(config, num_labels=2)
        model.compile("adam")
        ids = np.random.default_rng(0).integers(5, 100, (8, 12)).astype("int32")
        model.fit({"input_ids": ids, "input_mask": np.ones_like(ids)}, np.arange(8) % 2,
                  batch_size=4, verbose=0)
    print(json.dumps({"compiled": compiles.count, "cached": compiles.cached}))
""")


@pytest.mark.multibackend
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's persistent cache")
def test_a_second_run_compiles_nothing(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", KBERT_COMPILATION_CACHE=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["compiled"] > 0 and runs[0]["cached"] == 0
    assert runs[1] == {"compiled": 0, "cached": runs[0]["compiled"]}


def test_the_cache_directory_follows_the_setting(monkeypatch, tmp_path):
    from kbert.models import compilation
    monkeypatch.setenv("KBERT_COMPILATION_CACHE", "off")
    assert compilation.cache_dir() is None
    monkeypatch.setenv("KBERT_COMPILATION_CACHE", str(tmp_path))
    assert compilation.cache_dir() == str(tmp_path)
    monkeypatch.delenv("KBERT_COMPILATION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation.cache_dir() == str(tmp_path / "xdg" / "kbert" / "jax")


@pytest.mark.parametrize("full", [64, 128, 256, 384, 512])
def test_an_epoch_compiles_at_most_eight_step_programs(full):
    """Every length from 1 to `full` tokens, shuffled into batches of 32 and a last smaller
    one: at most 7 widths (the ladder) and the last batch's shape."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, full + 1, 1000)
    mask = (np.arange(full)[None] < lengths[:, None]).astype("int32")
    shapes = batch_shapes({"input_ids": mask, "input_mask": mask}, 32)
    assert len(shapes) <= 8, sorted(shapes)
    assert {w for _, w in shapes} <= set(width_ladder(full))
    ladder = width_ladder(full)
    assert ladder[-1] == full and all(w % 16 == 0 or w == full for w in ladder)
    assert all(b / a <= 1.5 for a, b in zip(ladder, ladder[1:]))     # padding stays bounded
