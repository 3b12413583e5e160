"""Attention's two paths agree: the fused call (on JAX `attention.jax_fused_attention`, which
the layer runs where cuDNN's kernel does and the tests force here with XLA's; elsewhere
`ops.dot_product_attention` with a mask) equals the explicit one that materialises the
probabilities, forward and (on JAX) gradients, with padding and causal masks."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from helpers import REPO
from kbert.network import attention, layers
from kbert.network.layers import TransformerEncoderBlock

pytestmark = pytest.mark.multibackend
JAX = keras.backend.backend() == "jax"
SUFFIX = np.array([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7], "int32")   # full, partial
# A real token after padding. Every query sees a real key, also under `causal`: a query that
# sees none has flat logits, whose gradient the explicit path's additive -1e9 still passes on.
NOT_SUFFIX = np.array([[1] * 9, [1, 0, 0] + [1] * 6, [1, 0] * 4 + [1]], "int32")


@pytest.fixture(autouse=True)
def fused_on_jax(monkeypatch):
    """The JAX fused call on this machine's device too (with XLA's kernel, not cuDNN's)."""
    monkeypatch.setattr(attention, "jax_fused", lambda q: True)


def _block(causal):
    block = TransformerEncoderBlock(hidden_size=16, num_heads=2, intermediate_size=32,
                                    causal=causal)
    x = np.random.default_rng(0).normal(size=(3, 9, 16)).astype("float32")
    block(x, SUFFIX)
    return block, x


def _run(block, x, mask, explicit, jit=False):
    """The block's output [B, T, H]: fused, or explicit (`return_attention=True`)."""
    def call(x, mask):
        out = block(x, mask, return_attention=explicit)
        return out[0] if explicit else out
    if jit:
        import jax
        call = jax.jit(call)
    return ops.convert_to_numpy(call(x, mask))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [SUFFIX, NOT_SUFFIX], ids=["suffix", "not_suffix"])
def test_fused_attention_equals_explicit_path(causal, mask):
    block, x = _block(causal)
    explicit = _run(block, x, mask, explicit=True)
    np.testing.assert_allclose(_run(block, x, mask, explicit=False), explicit, rtol=0, atol=1e-6)
    if JAX:  # traced, padding's layout is only known at run time: the `lax.cond`
        np.testing.assert_allclose(_run(block, x, mask, False, jit=True), explicit,
                                   rtol=0, atol=1e-6)


@pytest.mark.skipif(not JAX, reason="the fused JAX path")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [SUFFIX, NOT_SUFFIX], ids=["suffix", "not_suffix"])
def test_fused_attention_gradients_equal_explicit_path(causal, mask):
    import jax

    block, x = _block(causal)
    weights = [v.value for v in block.trainable_variables]
    seeds = [v.value for v in block.non_trainable_variables]      # the dropout layers' RNG
    readout = np.random.default_rng(1).normal(size=x.shape).astype("float32")

    def loss(weights, x, explicit):
        # A weighted sum: the plain sum of a LayerNorm output has no gradient.
        out, _ = block.stateless_call(weights, seeds, x, mask, return_attention=explicit)
        return (ops.convert_to_tensor(out[0] if explicit else out) * readout).sum()

    grads = {e: jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(weights, x, e)
             for e in (False, True)}
    fused, explicit = (jax.tree_util.tree_leaves(grads[e]) for e in (False, True))
    assert len(fused) == len(weights) + 1
    for a, b in zip(fused, explicit):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("dtype,atol", [("bfloat16", 1e-2), ("float16", 2e-3)])
def test_low_precision_softmax_is_close_to_float32(dtype, atol):
    rng = np.random.default_rng(2)
    scores = (4 * rng.normal(size=(2, 3, 5, 5))).astype("float32")
    mask = np.zeros((2, 1, 1, 5), bool)
    mask[0, ..., :3] = True                       # row 1: no real key at all

    def softmax(scores):
        weights, total = attention.masked_exp(scores, mask)
        assert keras.backend.standardize_dtype(total.dtype) == "float32"
        return weights, weights / ops.cast(total, weights.dtype)
    reference = ops.convert_to_numpy(softmax(ops.convert_to_tensor(scores))[1])
    weights, low = softmax(ops.cast(scores, dtype))
    assert keras.backend.standardize_dtype(weights.dtype) == dtype
    low = ops.convert_to_numpy(ops.cast(low, "float32"))
    assert (low[0, ..., 3:] == 0).all()                              # masked keys: exactly 0
    np.testing.assert_allclose(low, reference, rtol=0, atol=atol)    # row 1: uniform, finite


@pytest.mark.skipif(not JAX, reason="the fused JAX path")
def test_attention_dropout_keeps_the_explicit_path(monkeypatch):
    calls = []
    fused = attention.jax_fused_attention
    monkeypatch.setattr(attention, "jax_fused_attention",
                        lambda *a: calls.append(1) or fused(*a))
    x = np.ones((2, 4, 8), "float32")
    mask = np.ones((2, 4), "int32")
    with_dropout = TransformerEncoderBlock(8, 2, 16, attention_dropout=0.1)
    with_dropout(x, mask, training=True)
    assert calls == []                                   # dropout needs the probabilities
    with_dropout(x, mask, training=False)
    TransformerEncoderBlock(8, 2, 16, attention_dropout=0.0)(x, mask, training=True)
    assert calls == [1, 1]


@pytest.mark.skipif(not JAX, reason="the fused JAX path")
@pytest.mark.parametrize("device,dtype,head_size,expected", [
    (("cpu", "cpu", None), "bfloat16", 64, "xla"),
    (("gpu", "cuda 12090", "9.0"), "bfloat16", 64, "cudnn"),
    (("gpu", "cuda 12090", "8.0"), "float16", 128, "cudnn"),
    (("gpu", "cuda 12090", "9.0"), "float32", 64, "xla"),          # cuDNN: bf16/fp16 only
    (("gpu", "cuda 12090", "9.0"), "bfloat16", 12, "xla"),         # not a multiple of 8
    (("gpu", "cuda 12090", "8.6"), "bfloat16", 256, "xla"),        # 256 from Hopper on
    (("gpu", "cuda 12090", "9.0"), "bfloat16", 256, "cudnn"),
    (("gpu", "cuda 12090", "7.5"), "bfloat16", 64, "xla"),         # before Ampere
    (("gpu", "rocm 6.3", "gfx942"), "bfloat16", 64, "xla"),
])
def test_cudnn_is_chosen_where_its_kernel_takes_the_inputs(monkeypatch, device, dtype,
                                                           head_size, expected):
    import types

    import jax
    import jax.numpy as jnp

    platform, version, capability = device
    fake = types.SimpleNamespace(platform=platform, compute_capability=capability,
                                 client=types.SimpleNamespace(platform_version=version))
    monkeypatch.setattr(jax, "devices", lambda *a: [fake])
    q = jnp.zeros((1, 4, 2, head_size), dtype)
    assert attention.jax_attention_implementation(q) == expected


@pytest.mark.skipif(not JAX, reason="a JAX benchmark")
def test_gpu_benchmark_smoke_runs_without_tensorflow():
    code = ("import runpy, sys\n"
            "class NoTensorFlow:\n"
            "    def find_spec(self, name, *args):\n"
            "        if name.partition('.')[0] == 'tensorflow':\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, NoTensorFlow())\n"
            "sys.argv = ['attention_gpu.py', '--smoke']\n"
            "runpy.run_path('benchmarks/attention_gpu.py', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1].split()
    assert last[0] == "2x16" and len(last) == 8, done.stdout
    assert all(float(n) >= 0 for n in last[1:])


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="PyTorch's fused attention")
def test_torch_attention_drops_probabilities_without_bias():
    """scaled_dot_product_attention's dropout is dropout of the probabilities, scaled by
    1/(1-p): averaged over many draws it gives the undropped context; on a GPU the layer
    trains through it (no explicit path) and its draws follow PyTorch's seed; on a CPU it
    trains through the explicit path (`attention.fused_dropout`: faster there)."""
    import torch

    rng = np.random.default_rng(3)
    q, k, v = (torch.tensor(rng.normal(size=(1, 6, 2, 4)), dtype=torch.float32)
               for _ in range(3))
    mask = torch.tensor(SUFFIX[1:2, :6].astype(bool))[:, None, None, :]
    exact = attention.torch_attention(q, k, v, mask, 0.5, 0.0)
    many = attention.torch_attention(*(t.expand(20000, -1, -1, -1) for t in (q, k, v)),
                                   mask.expand(20000, -1, -1, -1), 0.5, 0.3)
    assert not torch.allclose(many[0], exact[0], atol=1e-3)             # one draw: dropped
    np.testing.assert_allclose(many.mean(0).numpy(), exact[0].numpy(), rtol=0, atol=2e-2)

    block, x = _block(causal=False)
    calls = []
    explicit = block._explicit_attention
    block._explicit_attention = lambda *a: calls.append(1) or explicit(*a)
    outputs = []
    for _ in range(2):
        torch.manual_seed(0)
        outputs.append(ops.convert_to_numpy(block(x, SUFFIX, training=True)))
    if not torch.cuda.is_available():
        assert calls == [1, 1]
        return
    assert calls == []
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_a_row_without_real_tokens_stays_finite():
    """An all-padding row (a filler row of a padded last batch) gives finite outputs on the
    fused path, in training too; the other rows are as the explicit path gives them, and on
    PyTorch and TensorFlow that row too (JAX's fused call attends to its first key instead)."""
    block, x = _block(causal=False)
    mask = SUFFIX.copy()
    mask[2] = 0
    fused, explicit = (_run(block, x, mask, explicit=e) for e in (False, True))
    rows = slice(0, 2) if JAX else slice(None)
    np.testing.assert_allclose(fused[rows], explicit[rows], rtol=0, atol=1e-6)
    assert np.isfinite(fused).all()
    assert np.isfinite(ops.convert_to_numpy(block(x, mask, training=True))).all()


@pytest.mark.multibackend
def test_dropout_drops_at_its_rate_and_keeps_the_mean():
    """kbert's `Dropout` (16 random bits per element on TensorFlow, 15 of an int64 draw on
    PyTorch): the dropped fraction is the rate in every lane of a draw, kept elements are
    scaled by 1/(1 - rate), a seeded layer repeats its draws, the next call draws anew, and the
    gradient is the mask times the scale."""
    x = np.ones((64, 128, 96), "float32")
    first, second = (layers.Dropout(0.1, seed=7) for _ in range(2))
    a = ops.convert_to_numpy(first(x, training=True))
    assert abs((a == 0).mean() - 0.1) < 3e-3
    lanes = (a.reshape(-1, 4) == 0).mean(axis=0)          # the 16-bit lanes of a 64-bit draw
    np.testing.assert_allclose(lanes, 0.1, atol=5e-3)
    np.testing.assert_allclose(np.unique(a), [0.0, 1 / 0.9], rtol=1e-6)
    np.testing.assert_array_equal(a, ops.convert_to_numpy(second(x, training=True)))
    assert (a != ops.convert_to_numpy(first(x, training=True))).any()
    np.testing.assert_array_equal(ops.convert_to_numpy(first(x, training=False)), x)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        v = tf.Variable(x)
        with tf.GradientTape() as tape:
            y = first(v, training=True)
        grad = tape.gradient(y, v).numpy()
        np.testing.assert_array_equal(grad, (y.numpy() != 0) / np.float32(0.9))
    if keras.backend.backend() == "torch":
        import torch
        v = torch.ones((64, 128, 96), dtype=torch.bfloat16, requires_grad=True)
        y = layers.Dropout(0.1, seed=7, dtype="bfloat16")(v, training=True)
        assert y.dtype == torch.bfloat16 and abs((y == 0).float().mean().item() - 0.1) < 3e-3
        y.float().sum().backward()
        scale = torch.tensor(1 / 0.9, dtype=torch.bfloat16)
        np.testing.assert_array_equal(v.grad.float().numpy(),
                                      ((y != 0) * scale).float().numpy())


@pytest.mark.multibackend
def test_attention_probabilities_are_float32_under_a_bfloat16_policy():
    """Returned attention probabilities (the playground's heatmap) stay float32 under
    `mixed_bfloat16`, so each row sums to 1 (cast to bfloat16 a row was off by up to 0.008)."""
    block = TransformerEncoderBlock(hidden_size=16, num_heads=2, intermediate_size=32,
                                    dtype="mixed_bfloat16")
    x = np.random.default_rng(0).normal(size=(3, 9, 16)).astype("float32")
    out, probs = block(x, SUFFIX, return_attention=True)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(probs.dtype) == "float32"
    probs = ops.convert_to_numpy(probs)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=0, atol=1e-5)
    assert (probs[1, :, :, 5:] == 0).all()                    # padded keys: exactly 0
