"""TensorFlow training forms with hand-written gradients: LayerNorm, the exact GELU, and the
cross-entropy of logit rows.

TensorFlow runs every op of a graph as its own pass over memory (no fusion without XLA, and XLA
on a CPU does not reach the bfloat16 products' rate), and its autodiff writes the gradient op by
op from the forward: Keras' LayerNorm (moments, then a fused multiply-add) and its gradient are
45 ops a call (constants aside), the GELU's gradient 10 elementwise passes, the fused
cross-entropy a slow kernel for the masked LM's [640, 30,522] logits. The forms here compute
the same values in fewer passes and keep what their gradients need; fewer ops also trace and
start faster. Only training uses them (`kbert.network.layers` on TensorFlow with `training=True`,
kbert's loss on TensorFlow): inference keeps the forms TensorFlow's graph optimizer and the
exporters fuse. Each has its Keras twin in a test (values and gradients equal).

Import only where the backend is TensorFlow.
"""

from typing import Any

import tensorflow as tf

_SQRT_HALF = 0.7071067811865476            # 1/√2
_PDF_SCALE = 0.3989422804014327            # 1/√(2π)


def layer_norm(x: Any, gamma: Any, beta: Any, epsilon: float) -> Any:
    """(x − mean) / √(var + ε) · γ + β over the last axis, computed in float32 (float64 for a
    float64 `x`) and given back in `x`'s dtype: Keras' `LayerNormalization` (centre and scale
    on) in 9 passes forward and 13 back, 21 ops a call with its gradient (Keras': 45). The
    gradient is the closed form rstd · (g − mean(g) − x̂ · mean(g · x̂)), g = dy · γ, from the
    kept x̂ and rstd.
    """
    dtype = x.dtype
    compute = tf.float64 if dtype == tf.float64 else tf.float32
    gamma, beta = tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)   # variables read

    @tf.custom_gradient
    def norm(x: Any, gamma: Any, beta: Any) -> Any:
        wide = tf.cast(x, compute)
        centered = wide - tf.reduce_mean(wide, axis=-1, keepdims=True)
        rstd = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
                             + epsilon)
        normed = centered * rstd
        scale = tf.cast(gamma, compute)

        def gradient(upstream: Any) -> Any:
            dy = tf.cast(upstream, compute)
            rows = list(range(dy.shape.rank - 1))
            g = dy * scale
            dx = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                         - normed * tf.reduce_mean(g * normed, axis=-1, keepdims=True))
            return (tf.cast(dx, dtype), tf.cast(tf.reduce_sum(dy * normed, rows), gamma.dtype),
                    tf.cast(tf.reduce_sum(dy, rows), beta.dtype))

        return tf.cast(normed * scale + tf.cast(beta, compute), dtype), gradient

    return norm(x, gamma, beta)


def gelu(x: Any) -> Any:
    """The exact GELU x · Φ(x), Φ(x) = ½ + ½ erf(x/√2), in `x`'s dtype; the gradient
    Φ(x) + x · φ(x) from the kept Φ (7 passes, where autodiff of the forward made 10)."""

    @tf.custom_gradient
    def exact(x: Any) -> Any:
        cdf = 0.5 + 0.5 * tf.math.erf(x * _SQRT_HALF)

        def gradient(upstream: Any) -> Any:
            pdf = tf.exp(tf.square(x) * -0.5) * _PDF_SCALE
            return upstream * (cdf + x * pdf)

        return x * cdf, gradient

    return exact(x)


def softmax_cross_entropy_rows(labels: Any, logits: Any) -> Any:
    """−log softmax(logits)[label] of each row [N, C], its gradient softmax − one-hot, in ops
    that each make one pass: TensorFlow's fused kernel (`SparseSoftmaxCrossEntropyWithLogits`,
    what Keras calls) took 83 ms forward and backward for the masked LM's [640, 30,522] float32
    logits on 2 cores, these 45 (a `mini` pretraining step, A/B in one process: 645-660 ->
    605-617 ms in bfloat16, 1,038 -> 984 in float32). The exponentials made for the loss are
    the gradient's, kept as the fused kernel keeps its gradient.
    """
    labels = tf.cast(labels, "int32")

    @tf.custom_gradient
    def rows(logits: Any) -> Any:
        top = tf.reduce_max(logits, axis=-1, keepdims=True)
        exp = tf.exp(logits - top)
        total = tf.reduce_sum(exp, axis=-1, keepdims=True)
        loss = tf.squeeze(top + tf.math.log(total), -1) - tf.gather(logits, labels, batch_dims=1)

        def gradient(upstream: Any) -> Any:
            picked = tf.stack([tf.range(tf.shape(labels)[0]), labels], axis=1)
            return tf.tensor_scatter_nd_sub(exp * (upstream[:, None] / total), picked, upstream)

        return loss, gradient

    return rows(logits)
