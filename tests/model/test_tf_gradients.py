"""TensorFlow's training forms (`kbert.network.tf_gradients`) against their Keras twins: the same
values and gradients, in float32 to float rounding and under `mixed_bfloat16` to bfloat16
rounding."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.network import layers

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="TensorFlow's own training forms")


def _values_and_gradients(fn, inputs, upstream):
    """fn(*inputs) and the gradients of sum(fn(*inputs) · upstream) with respect to `inputs`
    (tensors or variables), all as float32 numpy arrays."""
    with tf.GradientTape() as tape:
        tape.watch([x for x in inputs if not isinstance(x, tf.Variable)])
        y = fn(*inputs)
        total = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    grads = tape.gradient(total, list(inputs))
    return y, [np.asarray(tf.cast(a, tf.float32)) for a in [y, *grads]]


# (policy, tolerance): float32 to float rounding; bfloat16 keeps 8 bits of the mantissa, and
# sums of products rounded one way or the other differ by a few of them, so its tolerance is
# 2^-6 of the largest value compared (a wrong term in a gradient is off by its whole size).
PRECISIONS = [("float32", 1e-5), ("mixed_bfloat16", 2.0 ** -6)]


def _assert_close(ours, theirs, tolerance):
    for a, b in zip(ours, theirs):
        scale = max(1.0, float(np.abs(b).max())) if tolerance > 1e-4 else 1.0
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * scale)


@pytest.mark.parametrize("policy,tolerance", PRECISIONS)
def test_layer_norm_in_training_equals_keras(policy, tolerance):
    """`LayerNorm(training=True)` (TensorFlow: `tf_gradients.layer_norm`) against Keras' own
    layer norm (`training=False`): outputs, and gradients for the input, γ and β, of rows with
    an offset and a scale (the closed-form gradient's mean terms must cancel them)."""
    rng = np.random.default_rng(0)
    norm = layers.LayerNorm(epsilon=1e-12, dtype=policy)
    norm.build((2, 5, 16))
    norm.gamma.assign(rng.normal(1.0, 0.3, 16).astype("float32"))
    norm.beta.assign(rng.normal(0.0, 0.3, 16).astype("float32"))
    x = tf.cast(rng.normal(2.0, 3.0, (2, 5, 16)).astype("float32"), norm.compute_dtype)
    upstream = tf.constant(rng.normal(size=(2, 5, 16)).astype("float32"))
    results = []
    for training in (True, False):
        y, arrays = _values_and_gradients(
            lambda x, gamma, beta, training=training: norm(x, training=training),
            [x, norm.gamma.value, norm.beta.value], upstream)
        assert y.dtype == norm.compute_dtype
        results.append(arrays)
    _assert_close(*results, tolerance)


@pytest.mark.parametrize("policy,tolerance", PRECISIONS)
def test_gelu_in_training_equals_keras(policy, tolerance):
    """The encoder's GELU dense layer in training (TensorFlow: `tf_gradients.gelu` after the
    product) against the same layer's inference form (`kbert.network.layers.gelu`) and against
    Keras' exact GELU: outputs and gradients for the input, kernel and bias, over inputs from -8
    to 8."""
    rng = np.random.default_rng(1)
    dense = layers.Dense(24, activation=layers.activation("gelu"), dtype=policy)
    dense.build((3, 7, 16))
    x = tf.cast(rng.uniform(-2.0, 2.0, (3, 7, 16)).astype("float32"), dense.compute_dtype)
    upstream = tf.constant(rng.normal(size=(3, 7, 24)).astype("float32"))
    results = [
        _values_and_gradients(lambda x, k, b, training=training: dense(x, training=training),
                              [x, dense.kernel.value, dense.bias.value], upstream)[1]
        for training in (True, False)]
    _assert_close(*results, tolerance)

    from kbert.network import tf_gradients
    z = tf.cast(tf.linspace(-8.0, 8.0, 401), dense.compute_dtype)
    upstream = tf.constant(rng.normal(size=401).astype("float32"))
    ours = _values_and_gradients(tf_gradients.gelu, [z], upstream)[1]
    theirs = _values_and_gradients(lambda z: keras.activations.gelu(z, approximate=False), [z],
                                   upstream)[1]
    _assert_close(ours, theirs, tolerance)


def test_cross_entropy_rows_equal_keras():
    """kbert's loss on TensorFlow (`tf_gradients.softmax_cross_entropy_rows`) against Keras'
    loss (TensorFlow's fused kernel): the same per-row values and gradients, for logits of any
    scale, labels given as floats (what `Loss.__call__` hands over) and [B, P] positions."""
    from kbert.models.base import SparseCategoricalCrossentropy
    rng = np.random.default_rng(0)
    ours = SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    theirs = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    for shape, scale in (((6, 50), 1.0), ((2, 3, 1000), 30.0), ((4, 2), 1e-3)):
        logits = tf.constant(rng.normal(size=shape).astype("float32") * scale)
        labels = rng.integers(0, shape[-1], shape[:-1]).astype("float32")
        upstream = tf.constant(rng.normal(size=shape[:-1]).astype("float32"))
        results = []
        for loss in (ours, theirs):
            with tf.GradientTape() as tape:
                tape.watch(logits)
                values = loss(labels, logits)
                total = tf.reduce_sum(values * upstream)
            results.append((values.numpy(), tape.gradient(total, logits).numpy()))
        (values, grads), (want_values, want_grads) = results
        assert values.shape == shape[:-1]
        np.testing.assert_allclose(values, want_values, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads, want_grads, rtol=1e-5, atol=1e-7)
