"""Pretraining: optimizer recipe, loss on real text, strategies agree, resume after SIGKILL."""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest

from helpers import tiny_vocab, write_vocab
from kbert import BertConfig, BertPretrainer
from kbert.models.optimization import (
    NO_WEIGHT_DECAY,
    AdamW,
    WarmupLinearDecay,
    create_optimizer,
    decayed_variables,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB_SIZE = 100


def _write_shards(directory, records=64, seq=16, preds=4, shards=2, seed=0):
    """Synthetic BERT shards; every example has exactly `preds` real predictions, so per-replica
    and global loss means coincide."""
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(directory, f"shard-{i:05d}.tfrecord"))
               for i in range(shards)]
    for n in range(records):
        ids = rng.integers(5, VOCAB_SIZE, seq)
        ids[0], ids[-1] = 2, 3
        positions = np.sort(rng.choice(np.arange(1, seq - 1), preds, replace=False))
        labels = ids[positions].copy()
        ids[positions] = 4
        feats = {"input_ids": ids, "input_mask": np.ones(seq, int),
                 "segment_ids": (np.arange(seq) >= seq // 2).astype(int),
                 "masked_lm_positions": positions, "masked_lm_ids": labels,
                 "next_sentence_labels": [int(labels[0]) % 2]}
        feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=list(map(int, v))))
                   for k, v in feats.items()}
        feature["masked_lm_weights"] = tf.train.Feature(
            float_list=tf.train.FloatList(value=[1.0] * preds))
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[n % shards].write(example.SerializeToString())
    for w in writers:
        w.close()
    return directory


def _setup(tmp_path, dropout=0.0):
    data = _write_shards(str(tmp_path / "data"))
    vocab = write_vocab(str(tmp_path), tiny_vocab(VOCAB_SIZE))
    config = BertConfig.preset("tiny", vocab_size=VOCAB_SIZE, num_layers=1, hidden_size=32,
                               num_heads=2, intermediate_size=64, max_position_embeddings=32,
                               dropout=dropout, attention_dropout=dropout)
    config_path = str(tmp_path / "config.json")
    with open(config_path, "w") as f:
        f.write(config.to_json())
    return data, vocab, config_path


RUNNER = textwrap.dedent("""
    import json, os, signal, sys
    args = json.loads(sys.argv[1])
    if args.get("logical_cpus"):
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args["logical_cpus"])
    import keras
    from kbert import training

    class Kill(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            from kbert.models.optimization import batches_seen
            if batches_seen(self.model.optimizer) == args["kill_at"]:
                os.kill(os.getpid(), signal.SIGKILL)
    callbacks = [Kill()] if args.get("kill_at") else []
    for run in args.get("runs", [{}]):        # several runs, one after the other, in this process
        run = dict(args, **run)
        r = training.pretrain(run["data"], run["output"], config=run["config"],
                              vocab=run["vocab"], batch_size=8, steps=run.get("steps", 3),
                              warmup_steps=1, learning_rate=1e-3, checkpoint_every=2,
                              strategy=run.get("strategy", "auto"),
                              jit_compile=run.get("jit_compile", False), verbose=0, seed=1,
                              shuffle_buffer=16, callbacks=callbacks)
        print("RESULT", json.dumps({"loss": r.history["loss"], "output": r.output}), flush=True)
""")


def _run(tmp_path, name, env=None, wait=True, **args):
    """One child process running `pretrain`: its result, or with `runs=[{...}, ...]` (each run's
    own arguments over the shared ones) the results of each run in order."""
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, **(env or {}))
    full_env.setdefault("KERAS_BACKEND", "tensorflow")
    args.setdefault("output", str(tmp_path / name))
    cmd = [sys.executable, str(script), json.dumps(args)]
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return _finish(proc, "runs" in args) if wait else proc


def _finish(proc, several=False):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    results = [json.loads(x[len("RESULT "):]) for x in out.splitlines() if x.startswith("RESULT ")]
    return results if several else results[-1]


def _weights(directory):
    from safetensors.numpy import load_file
    return load_file(os.path.join(directory, "model.safetensors"))


def _max_diff(a, b):
    a, b = _weights(a), _weights(b)
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


# --- the optimizer recipe ------------------------------------------------------------------------
@pytest.mark.multibackend
def test_schedule_warmup_then_linear_decay_and_round_trip():
    schedule = WarmupLinearDecay(1e-4, total_steps=100, warmup_steps=10)
    values = [float(schedule(s)) for s in (0, 5, 10, 55, 100, 150)]
    np.testing.assert_allclose(values, [0, 5e-5, 1e-4, 5e-5, 0, 0], atol=1e-9)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(again, WarmupLinearDecay) and again.get_config() == schedule.get_config()


@pytest.mark.multibackend
def test_no_weight_decay_on_layer_norm_and_bias():
    model = BertPretrainer(BertConfig.preset("tiny", vocab_size=VOCAB_SIZE, num_layers=1))
    optimizer = create_optimizer(learning_rate=0.1, total_steps=10, warmup_steps=0)
    assert optimizer.beta_1 == 0.9 and optimizer.beta_2 == 0.999 and optimizer.epsilon == 1e-6
    assert optimizer.global_clipnorm == 1.0 and optimizer.weight_decay == 0.01
    variables = model.trainable_variables
    decayed = set(decayed_variables(optimizer, variables))
    for v in variables:
        is_norm_or_bias = v.name in ("gamma", "beta", "bias", "output_bias")
        assert (v.path in decayed) != is_norm_or_bias, v.path
    assert any("position_embeddings" in p for p in decayed)
    # One update with zero gradients: Adam moves nothing, only the decay shrinks the matrices.
    before = {v.path: np.array(v.numpy()) for v in variables}
    optimizer.apply([keras.ops.zeros(v.shape) for v in variables], variables)
    for v in variables:
        changed = not np.allclose(before[v.path], v.numpy())
        nonzero = np.any(before[v.path] != 0)
        assert changed == (v.path in decayed and nonzero), v.path


@pytest.mark.multibackend
def test_adamw_steps_like_torch_adamw():
    """ε on the bias-corrected √v̂ (Adam's Algorithm 1, PyTorch, HF), not Keras' ε before it."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype("float32")
    # Gradients from 1e-7 to 1: the small ones are where the two ε placements differ.
    grads = [(rng.normal(size=(4, 3)) * 10.0 ** rng.integers(-7, 1, size=(4, 3))).astype("float32")
             for _ in range(5)]
    w = keras.Variable(start)
    ours = AdamW(learning_rate=1e-2, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6)
    t = torch.nn.Parameter(torch.tensor(start))
    theirs = torch.optim.AdamW([t], lr=1e-2, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6)
    for g in grads:
        ours.apply([keras.ops.convert_to_tensor(g)], [w])
        t.grad = torch.tensor(g)
        theirs.step()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(w), t.detach().numpy(),
                               rtol=1e-5, atol=1e-7)
    keras_form = keras.Variable(start)
    plain = keras.optimizers.AdamW(learning_rate=1e-2, weight_decay=0.01, epsilon=1e-6)
    for g in grads:
        plain.apply([keras.ops.convert_to_tensor(g)], [keras_form])
    assert np.abs(keras.ops.convert_to_numpy(keras_form) - t.detach().numpy()).max() > 1e-3


class _PortableAdamW(AdamW):
    """`AdamW.portable_update_step` for each variable, on every backend (TensorFlow otherwise
    runs its fused kernel, `_tf_adam_update`; torch updates all variables at once,
    `_torch_adam_update`), after Keras' backend-independent clipping and weight decay
    (TensorFlow otherwise runs `_tf_clip_by_global_norm` and `_tf_apply_weight_decay`)."""

    def _clip_gradients(self, grads):
        from keras.src.optimizers.base_optimizer import clip_by_global_norm
        return clip_by_global_norm(grads, self.global_clipnorm)

    def _apply_weight_decay(self, variables):
        from keras.src.optimizers.base_optimizer import BaseOptimizer
        BaseOptimizer._apply_weight_decay(self, variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        for grad, variable in zip(grads, trainable_variables):
            self.portable_update_step(grad, variable, learning_rate)


def _as_rows_of_a_gather(grad):
    """`grad` of an embedding table as TensorFlow gives a gather's gradient: `IndexedSlices`,
    one row per looked-up id, ids repeated (their rows sum to `grad`)."""
    import tensorflow as tf
    ids = [i for i in range(len(grad)) for _ in range(1 + i % 3)]
    counts = np.bincount(ids)[ids][:, None]
    return tf.IndexedSlices(tf.constant(grad[ids] / counts), tf.constant(ids),
                            tf.constant(grad.shape))


def _toy_variables(start):
    return [keras.Variable(v, name=n) for n, v in start.items()]


@pytest.mark.multibackend
def test_all_at_once_update_equals_the_per_variable_one():
    """The fused updates (`_tf_adam_update`, `_torch_adam_update`) against their twin
    `AdamW.portable_update_step`: same variables after steps with warmup, decay on the
    matrices only and clipping (elsewhere both are the same). On TensorFlow the embedding
    table's gradient comes as a gather's, rows of repeated ids (Keras' own clipping
    underestimates its norm: it squares the rows before summing them)."""
    rng = np.random.default_rng(0)
    start = {"kernel": rng.normal(size=(8, 4)), "bias": rng.normal(size=4),
             "gamma": 1 + rng.normal(size=4) * 0.1, "embeddings": rng.normal(size=(16, 8))}
    start = {k: v.astype("float32") for k, v in start.items()}
    results = []
    for cls in (AdamW, _PortableAdamW):
        variables = _toy_variables(start)
        optimizer = cls(learning_rate=WarmupLinearDecay(1e-2, total_steps=10, warmup_steps=2),
                        weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
        optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
        grads_rng = np.random.default_rng(1)
        for step in range(5):          # gradients from 1e-6 to 10: some steps are clipped
            grads = [(grads_rng.normal(size=v.shape) * 10.0 ** grads_rng.integers(-6, 2))
                     .astype("float32") for v in variables]
            tensors = [keras.ops.convert_to_tensor(g) for g in grads]
            if cls is AdamW and keras.backend.backend() == "tensorflow":
                tensors[-1] = _as_rows_of_a_gather(grads[-1])
            optimizer.apply(tensors, variables)
        results.append([keras.ops.convert_to_numpy(v) for v in variables])
    for name, ours, portable in zip(start, *results):
        np.testing.assert_allclose(ours, portable, rtol=1e-6, atol=1e-6, err_msg=name)
        assert np.abs(ours - start[name]).max() > 1e-3, name      # the steps did move it


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's tracing")
def test_the_tensorflow_step_is_traced_once():
    """The optimizer's variables exist before the step is traced: TensorFlow traces a function
    that creates variables twice (two traces of a whole training step)."""
    from kbert.models import BertClassifier
    model = BertClassifier(BertConfig.preset("tiny", vocab_size=VOCAB_SIZE, num_layers=1),
                           num_labels=2)
    rng = np.random.default_rng(0)
    x = {"input_ids": rng.integers(5, VOCAB_SIZE, (4, 8)).astype("int32"),
         "segment_ids": np.zeros((4, 8), "int32"), "input_mask": np.ones((4, 8), "int32")}
    model(x)                                             # built, as a loaded checkpoint is
    model.compile(create_optimizer(learning_rate=1e-3, total_steps=10, warmup_steps=0))
    traces, train_step = [], model.train_step
    model.train_step = lambda data: traces.append(1) or train_step(data)
    model.fit(x, np.array([0, 1, 0, 1]), batch_size=2, epochs=2, verbose=0)
    assert len(traces) == 1
    assert model.optimizer.iterations.numpy() == 4


@pytest.mark.multibackend
@pytest.mark.skipif(keras.backend.backend() != "torch" or not sys.platform.startswith("linux")
                    or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="PyTorch with glibc")
def test_torch_training_keeps_freed_memory_for_the_next_step():
    """After `keep_freed_memory` a freed 64 MB block comes back without page faults (glibc
    otherwise maps such a block afresh on each allocation and faults in all 16,384 pages)."""
    import ctypes
    import resource

    from kbert import hardware
    if hardware.gpu_in_use():
        pytest.skip("host memory is left alone when PyTorch trains on a GPU")
    assert hardware.keep_freed_memory("tensorflow") is False
    assert hardware.keep_freed_memory("torch") is True

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p

    def page_faults():                                 # of a block allocated, filled, freed
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = libc.malloc(64 * 2**20)
        ctypes.memset(block, 1, 64 * 2**20)
        libc.free(ctypes.c_void_p(block))
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults = [page_faults() for _ in range(4)]
    assert sum(faults[1:]) < 1_000, faults             # the heap holds it after the first


@pytest.mark.multibackend
@pytest.mark.skipif(keras.backend.backend() == "jax", reason="Keras' own clipping on JAX")
def test_global_norm_clipping_equals_keras():
    """The TensorFlow and torch twins of Keras' `clip_by_global_norm`."""
    from keras.src.optimizers.base_optimizer import clip_by_global_norm

    from kbert.models.optimization import _tf_clip_by_global_norm, _torch_clip_by_global_norm
    ours_clip = (_torch_clip_by_global_norm if keras.backend.backend() == "torch"
                 else _tf_clip_by_global_norm)
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1.0, 100.0):                       # below, about, far above the norm 1
        arrays = [(rng.normal(size=s) * scale).astype("float32") for s in [(8, 4), (4,), (16, 8)]]
        grads = [keras.ops.convert_to_tensor(a) for a in arrays]
        for ours, theirs in zip(ours_clip(grads, 1.0), clip_by_global_norm(grads, 1.0)):
            np.testing.assert_allclose(keras.ops.convert_to_numpy(ours),
                                       keras.ops.convert_to_numpy(theirs), rtol=1e-6, atol=1e-9)
    arrays[0][0, 0] = float("inf")
    assert all(np.isnan(keras.ops.convert_to_numpy(g)).all()
               for g in ours_clip([keras.ops.convert_to_tensor(a) for a in arrays], 1.0))


@pytest.mark.multibackend
def test_no_string_matching_after_the_optimizer_is_built(monkeypatch):
    """Which variables decay is decided at `build`; the steps, the first one included (the one
    `torch.compile` traces), only look it up."""
    import re
    model = BertPretrainer(BertConfig.preset("tiny", vocab_size=VOCAB_SIZE, num_layers=1))
    model.compile(create_optimizer(learning_rate=1e-3, total_steps=10, warmup_steps=0))
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    x = {"input_ids": rng.integers(5, VOCAB_SIZE, (2, 8)).astype("int32"),
         "masked_lm_positions": np.array([[1, 2], [3, 4]], "int32")}
    y = {"mlm_logits": rng.integers(5, VOCAB_SIZE, (2, 2)).astype("int32"),
         "nsp_logits": np.array([0, 1], "int32")}

    search = re.search

    def no_search(*args, **kwargs):     # TensorFlow's own tracing matches names: not refused
        if sys._getframe(1).f_code.co_filename.endswith("base_optimizer.py"):
            raise AssertionError("the optimizer matched a name in a training step")
        return search(*args, **kwargs)
    monkeypatch.setattr(re, "search", no_search)
    model.train_on_batch(x, y)
    model.train_on_batch(x, y)
    monkeypatch.undo()
    decayed = decayed_variables(model.optimizer, model.trainable_variables)
    assert decayed and all(not p.endswith(("gamma", "beta", "bias")) for p in decayed)


def test_lamb_and_accumulation_options():
    optimizer = create_optimizer("lamb", gradient_accumulation_steps=4, loss_scale=True)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(optimizer.inner_optimizer, keras.optimizers.Lamb)
    assert optimizer.inner_optimizer.gradient_accumulation_steps == 4
    with pytest.raises(ValueError, match="unknown optimizer"):
        create_optimizer("sgd")


# --- training on real text -----------------------------------------------------------------------
def test_loss_falls_on_a_slice_of_the_corpus_and_checkpoint_loads(tmp_path, shared_data):
    import kbert
    from helpers import minilm_dir
    from kbert import training
    from kbert.data import pretraining
    corpus = sorted((shared_data / "corpus" / "inaugural").glob("*.txt"))[:4]
    vocab = os.path.join(minilm_dir(), "vocab.txt")
    pretraining.create_pretraining_data(
        [str(p) for p in corpus], vocab, str(tmp_path / "data"),
        pretraining.Options(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1))
    config = BertConfig.preset("tiny", vocab_size=30522, num_layers=1, max_position_embeddings=64)
    result = training.pretrain(str(tmp_path / "data"), str(tmp_path / "ckpt"), config=config,
                               vocab=vocab, batch_size=16, steps=40, warmup_steps=4,
                               learning_rate=2e-3, checkpoint_every=10, jit_compile=False,
                               verbose=0, shuffle_buffer=100, log_dir=str(tmp_path / "tb"))
    losses = result.history["mlm_logits_loss"]
    assert losses[-1] < losses[0] - 2.0, losses                # from ~ln(30522) = 10.3
    assert result.history["learning_rate"] and result.history["examples_per_second"]
    assert os.listdir(tmp_path / "tb")
    m = kbert.load(result.output)
    assert len(m.fill_mask("the [MASK] of the people .", top_k=3)[0]) == 3
    assert 0.0 <= m.next_sentence("We the people.", "Of the United States.")["is_next"] <= 1.0
    scores = training.evaluate_pretraining(m.task_model("pretraining"), str(tmp_path / "data"))
    assert 0.0 < scores["mlm_accuracy"] < 1.0 and scores["examples"] > 0


def test_two_phases_with_dynamic_masking_lamb_accumulation_and_bfloat16(tmp_path):
    """Every option of `pretrain` at once: 128-then-512 style phases (16 then 32 tokens here),
    dynamic masking, LAMB, gradient accumulation and mixed bfloat16."""
    import kbert
    from kbert import training
    from kbert.models.optimization import batches_seen, inner_optimizer
    data, vocab, config = _setup(tmp_path)
    long_data = _write_shards(str(tmp_path / "data32"), seq=32, seed=1)
    result = training.pretrain([data, long_data], str(tmp_path / "ckpt"), config=config,
                               vocab=vocab, batch_size=8, phase_steps=[3, 2], accumulate=2,
                               optimizer="lamb", mixed_precision="mixed_bfloat16",
                               dynamic_masking=True, warmup_steps=1, learning_rate=1e-3,
                               checkpoint_every=2, jit_compile=False, verbose=0, seed=0,
                               shuffle_buffer=16)
    assert result.steps == 5                                     # optimizer updates, both phases
    optimizer = inner_optimizer(result.model.optimizer)
    assert isinstance(optimizer, keras.optimizers.Lamb)
    assert batches_seen(result.model.optimizer) == 10            # 2 accumulated batches each
    assert result.model.dtype_policy.name == "mixed_bfloat16"
    assert all(np.isfinite(result.history["loss"]))
    ckpt = kbert.load(result.output)
    assert len(ckpt.fill_mask("the [MASK] sat on the mat", top_k=2)[0]) == 2
    # a point per backup interval and at each phase's end, at the updates done (2 batches each)
    points = json.load(open(os.path.join(result.output, "history.json")))["points"]
    assert [p["step"] for p in points] == [2, 3, 5]


def test_history_json_and_curves_png_are_written_beside_the_checkpoint(tmp_path):
    """history.json: a point per `checkpoint_every` updates (and the last), holding what the
    returned history holds (losses, metrics, the learning rate); curves.png: a PNG; both
    recorded as the checkpoint's files."""
    import kbert
    from kbert import outputs, training
    data, vocab, config = _setup(tmp_path)
    out = str(tmp_path / "ckpt")
    result = training.pretrain(data, out, config=config, vocab=vocab, batch_size=8, steps=5,
                               warmup_steps=1, learning_rate=1e-3, checkpoint_every=2,
                               jit_compile=False, verbose=0, seed=0, shuffle_buffer=16)
    doc = json.load(open(os.path.join(out, "history.json")))
    assert (doc["command"], doc["unit"], doc["dev_metric"]) == ("kbert pretrain", "step", None)
    assert doc["settings"]["batch_size"] == 8 and doc["settings"]["checkpoint_every"] == 2
    assert [p["step"] for p in doc["points"]] == [2, 4, 5]
    assert {"loss", "learning_rate"} <= set(result.history)
    for key, values in result.history.items():
        assert [p[key] for p in doc["points"]] == pytest.approx(values), key
    assert doc["points"][-1]["learning_rate"] == pytest.approx(0.0, abs=1e-9)  # decayed to 0
    with open(os.path.join(out, "curves.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert {"history.json", "curves.png"} <= set(outputs.read_marker(out)["files"])
    assert outputs.foreign_entries(out) == [] and outputs.kind_of(out) == "checkpoint"
    assert len(kbert.load(out).fill_mask("the [MASK] sat", top_k=2)[0]) == 2


def _progress_lines(out):
    """The progress lines of `pretrain`'s output: [(step/total, ms per step), ...]."""
    lines = [line for line in out.splitlines() if re.match(r"\s*\d+/\d+ - ", line)]
    times = [re.search(r" (\d+)(ms|s)/step", line).groups() for line in lines]
    return [(line.split()[0], float(t) * (1 if unit == "ms" else 1000))
            for line, (t, unit) in zip(lines, times)]


def test_progress_line_counts_the_run_steps_without_epochs(tmp_path, capsys):
    """The progress line shows the updates done of the run's total, timed as they ran, and no
    epochs (`fit` runs one epoch per backup interval, which the user did not ask for)."""
    from kbert import cli, training
    data, vocab, config = _setup(tmp_path)
    assert cli.main(["pretrain", "--data", data, "--config", config, "--vocab", vocab,
                     "--output", str(tmp_path / "cli"), "--batch-size", "8", "--steps", "3",
                     "--jit-compile", "off", "--shuffle-buffer", "16"]) == 0
    out = capsys.readouterr().out
    assert "Epoch" not in out and "1000" not in out, out
    assert [step for step, _ in _progress_lines(out)] == ["3/3"], out

    class Slow(keras.callbacks.Callback):       # steps of 50 ms at least
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.05)
    training.pretrain(data, str(tmp_path / "api"), config=config, vocab=vocab, batch_size=8,
                      steps=5, checkpoint_every=2, jit_compile=False, verbose=2, seed=0,
                      shuffle_buffer=16, callbacks=[Slow()])
    out = capsys.readouterr().out
    assert "Epoch" not in out, out
    lines = _progress_lines(out)
    assert [step for step, _ in lines] == ["2/5", "4/5", "5/5"], out
    assert all(ms >= 50 for _, ms in lines), out
    left = [re.search(r" - (\S+) left - ", line).group(1) for line in out.splitlines()
            if re.match(r"\s*\d+/\d+ - ", line)]
    assert left[-1] == "0.0s" and left[0] != "0.0s", out     # 3 updates of >= 50 ms to go


def test_progress_in_a_log_is_a_line_every_interval_and_quiet_is_silent(tmp_path, capsys,
                                                                         monkeypatch):
    """Where the output is no terminal (a log file), a run writes its progress line at least
    every `LOG_INTERVAL` seconds, not only per backup interval; `--quiet` writes none."""
    from kbert import cli, progress
    data, vocab, config = _setup(tmp_path)
    argv = ["pretrain", "--data", data, "--config", config, "--vocab", vocab,
            "--batch-size", "8", "--steps", "4", "--jit-compile", "off", "--shuffle-buffer", "16"]
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    assert cli.main(argv + ["--output", str(tmp_path / "log")]) == 0
    out = capsys.readouterr().out
    assert [step for step, _ in _progress_lines(out)] == ["1/4", "2/4", "3/4", "4/4", "4/4"], out
    assert cli.main(argv + ["--output", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert _progress_lines(capsys.readouterr().out) == []


# --- strategies and torch.compile agree with one eager device ------------------------------------
@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """One child process with two logical CPUs: a one-device run, then a mirrored run."""
    tmp_path = tmp_path_factory.mktemp("mirrored")
    data, vocab, config = _setup(tmp_path)
    one, two = _run(tmp_path, "", data=data, vocab=vocab, config=config, steps=2, logical_cpus=2,
                    runs=[{"strategy": "default", "output": str(tmp_path / "one")},
                          {"strategy": "mirrored", "output": str(tmp_path / "two")}])
    return (data, vocab, config), one, two


def test_mirrored_strategy_on_two_cpus_matches_one_device(mirrored):
    _, one, two = mirrored
    np.testing.assert_allclose(two["loss"], one["loss"], atol=1e-5)
    assert _max_diff(one["output"], two["output"]) < 1e-5


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_multi_worker_mirrored_strategy_matches_one_device(tmp_path, mirrored):
    (data, vocab, config), one, _ = mirrored
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    procs = []
    for i in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker",
                                                                          "index": i}})
        procs.append(_run(tmp_path, "multi", env={"TF_CONFIG": tf_config}, wait=False,
                          data=data, vocab=vocab, config=config, steps=2))
    results = [_finish(p) for p in procs]
    np.testing.assert_allclose(results[0]["loss"], one["loss"], atol=1e-5)
    assert _max_diff(one["output"], results[0]["output"]) < 1e-5
    assert _max_diff(results[0]["output"], results[1]["output"]) == 0.0


def test_jax_data_parallel_on_two_devices_matches_one_device(tmp_path):
    data, vocab, config = _setup(tmp_path)
    env = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    one, two = _run(tmp_path, "", env=env, data=data, vocab=vocab, config=config, steps=2,
                    jit_compile=True,     # XLA: the un-jitted JAX step costs far more on a CPU
                    runs=[{"strategy": "default", "output": str(tmp_path / "one")},
                          {"strategy": "data-parallel", "output": str(tmp_path / "two")}])
    np.testing.assert_allclose(two["loss"], one["loss"], atol=1e-5)
    assert _max_diff(one["output"], two["output"]) < 1e-5


@pytest.mark.multibackend
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile is PyTorch's")
def test_torch_compile_pretrains_like_eager(tmp_path):
    """`jit_compile=True` on PyTorch (`torch.compile` of the whole step, optimizer included)."""
    from kbert import training
    from kbert.training.pretraining import jit_compile_setting
    assert jit_compile_setting("auto") is False          # a CPU: eager
    data, vocab, config = _setup(tmp_path)
    results = [training.pretrain(data, str(tmp_path / str(jit)), config=config, vocab=vocab,
                                 batch_size=8, steps=3, warmup_steps=1, learning_rate=1e-3,
                                 checkpoint_every=1, jit_compile=jit, verbose=0, seed=1,
                                 shuffle_buffer=16)
               for jit in (False, True)]
    eager, compiled = (r.history["loss"] for r in results)
    assert len(eager) == 3
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    assert _max_diff(results[0].output, results[1].output) < 1e-5


# --- resume --------------------------------------------------------------------------------------
def test_sigkilled_run_resumes_to_the_same_weights(tmp_path):
    data, vocab, config = _setup(tmp_path, dropout=0.1)
    killed = _run(tmp_path, "resumed", wait=False, data=data, vocab=vocab, config=config,
                  steps=6, kill_at=3)
    killed.communicate(timeout=300)
    assert killed.returncode == -9
    assert not os.path.exists(tmp_path / "resumed")
    # The same command again resumes; an uninterrupted run (first, in the same process) is the
    # reference.
    full, resumed = _run(tmp_path, "", data=data, vocab=vocab, config=config, steps=6,
                         runs=[{"output": str(tmp_path / "full")},
                               {"output": str(tmp_path / "resumed")}])
    assert _max_diff(full["output"], resumed["output"]) <= 1e-6


# --- bad input -----------------------------------------------------------------------------------
def _cli_error(capsys, *argv):
    from kbert import cli
    assert cli.main(["pretrain", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_bad_input_is_one_line(tmp_path, capsys):
    data, vocab, config = _setup(tmp_path)
    out = str(tmp_path / "out")
    err = _cli_error(capsys, "--data", str(tmp_path / "nope"), "--config", config,
                     "--vocab", vocab, "--output", out)
    assert "not found" in err
    bigger = write_vocab(str(tmp_path / "data"), tiny_vocab(VOCAB_SIZE + 20))
    err = _cli_error(capsys, "--data", data, "--config", config, "--vocab", bigger, "--output", out)
    assert "vocab_size 100" in err
    err = _cli_error(capsys, "--data", data, "--config", "tiny", "--output", out)
    assert "--vocab" in err
    small = write_vocab(str(tmp_path / "data"), tiny_vocab(50))
    err = _cli_error(capsys, "--data", data, "--config", "tiny", "--vocab", small, "--output", out)
    assert "outside the vocabulary" in err
    err = _cli_error(capsys, "--data", data, "--config", config, "--vocab", vocab,
                     "--max-seq-length", "128", "--output", out)
    assert "max_seq_length 16" in err
