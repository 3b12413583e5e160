"""The PyTorch step compiled whole (`kbert.models.torch_step`): it trains as the eager step does,
compiles without a graph break and without a recompile per call, and its dropout is seeded by
the layers' `SeedGenerator`s."""

import keras
import numpy as np
import pytest

import kbert
from kbert.models.optimization import create_optimizer

pytestmark = [pytest.mark.multibackend,
              pytest.mark.skipif(keras.backend.backend() != "torch",
                                 reason="the compiled step is PyTorch's")]

CONFIG = dict(vocab_size=200, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
              max_position_embeddings=32)


def _batches(n, batch=4, seq=12, seed=0):
    rng = np.random.default_rng(seed)
    x = {"input_ids": rng.integers(5, 200, (n * batch, seq)).astype("int32"),
         "segment_ids": np.zeros((n * batch, seq), "int32"),
         "input_mask": (np.arange(seq)[None] < rng.integers(4, seq + 1, (n * batch, 1)))
         .astype("int32")}
    return x, rng.integers(0, 3, n * batch).astype("int32")


def _classifier(jit, dropout=0.0):
    keras.utils.set_random_seed(0)
    config = kbert.BertConfig(**CONFIG, dropout=dropout, attention_dropout=dropout)
    model = kbert.BertClassifier(config, num_labels=3)
    model.compile(create_optimizer(learning_rate=1e-3, total_steps=20, warmup_steps=2),
                  jit_compile=jit)
    return model


@pytest.fixture(scope="module")
def trained():
    """An eager and a compiled classifier after the same 6 batches of `fit`."""
    x, y = _batches(6)
    out = {}
    for jit in (False, True):
        model = _classifier(jit)
        history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
        out[jit] = model, history.history
    return out


def test_compiled_step_trains_like_the_eager_step(trained):
    (eager, eager_history), (compiled, compiled_history) = trained[False], trained[True]
    from kbert.models.torch_step import CompiledStep
    assert isinstance(compiled.train_function, CompiledStep)
    assert not isinstance(eager.train_function, CompiledStep)
    np.testing.assert_allclose(compiled_history["loss"], eager_history["loss"], rtol=1e-5)
    for a, b in zip(eager.weights, compiled.weights):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(b), keras.ops.convert_to_numpy(a),
                                   atol=2e-6, err_msg=a.path)
    assert int(compiled.optimizer.iterations) == int(eager.optimizer.iterations) == 6


def test_compiled_step_has_no_graph_break_and_no_recompile_per_call(trained):
    import torch
    model, _ = trained[True]
    step = model.train_function
    # `train_on_batch` after `fit`, NumPy arrays of new values each call: the graphs are reused
    torch._dynamo.utils.counters.clear()
    for seed in (2, 3, 4):
        xs, ys = _batches(1, seed=seed)
        model.train_on_batch(xs, ys)
    assert not torch._dynamo.utils.counters["stats"]["unique_graphs"]
    # `explain` (which resets Dynamo's caches) on the step's two compiled functions
    x, y = _batches(1, seed=1)
    x = {k: torch.as_tensor(v) for k, v in x.items()}
    y = torch.as_tensor(y)
    forward = torch._dynamo.explain(step.forward._torchdynamo_orig_callable)(x, y, None)
    assert forward.graph_break_count == 0, [b.reason for b in forward.break_reasons]
    loss, _ = step.forward(x, y, None)
    loss.backward()
    grads = [p.grad for p in step._params]
    update = torch._dynamo.explain(step.update._torchdynamo_orig_callable)(grads)
    assert update.graph_break_count == 0, [b.reason for b in update.break_reasons]
    for p in step._params:
        p.grad = None


def test_each_step_object_compiles_its_own_code():
    """Dynamo keeps at most 8 graphs per code object: one per model, not per process."""
    from kbert.models.torch_step import CompiledStep
    model = _classifier(True)
    one, two = CompiledStep(model), CompiledStep(model)
    code = [s.forward._torchdynamo_orig_callable.__func__.__code__ for s in (one, two)]
    assert code[0] is not code[1] and code[0] == code[1]


def test_traced_dropout_is_seeded_by_the_layer_and_drops_at_its_rate():
    import torch

    from kbert.network.dropout import Dropout
    layer = Dropout(0.1, seed=7)
    x = torch.ones(64, 64, 32)

    @torch.compile
    def drop(x):
        return layer(x, training=True)
    state = keras.ops.convert_to_numpy(layer.seed_generator.state).copy()
    first, second = drop(x), drop(x)
    kept = (first != 0).float().mean().item()
    assert abs(kept - 0.9) < 0.005
    assert torch.allclose(first[first != 0], torch.tensor(1 / 0.9))
    assert (first != second).any()                             # a new mask each call
    layer.seed_generator.state.assign(state)                   # a resumed run's state
    assert torch.equal(drop(x), first)


def test_without_a_compiler_the_step_runs_eagerly_and_says_why(monkeypatch, capsys):
    """Bad setting: `jit_compile=True` where Inductor cannot build its kernels."""
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    model = _classifier(True)
    x, y = _batches(1)
    model.train_on_batch(x, y)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["jit_compile=True: compiling the PyTorch step needs a C++ compiler (g++ or "
                   "clang++, or CXX set) and none was found; the step runs eagerly "
                   "(jit_compile=False)"]
    from kbert.models.torch_step import CompiledStep
    assert not isinstance(model.train_function, CompiledStep) and model.jit_compile is False
