"""The BERT encoder's parts: embeddings, the post-LN Transformer block, the pooler.

Written with `keras.ops` only, so they run on the TensorFlow, JAX and PyTorch backends.
Shapes: B batch, T sequence length, H hidden size, N heads, D = H / N head size, I intermediate.
"""

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from typing import Any

import keras
from keras import ops

from kbert.hints import Shape, Tensor
from kbert.network import attention
from kbert.network.dropout import Dropout

_FOR_GRAPHS = contextvars.ContextVar("kbert_tracing_for_graphs", default=False)


def _for_graphs() -> bool:
    """Whether `tracing_for_graphs` is on. Never inside a compiled PyTorch step (TorchDynamo
    cannot read a `ContextVar`; a graph export never runs there)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.compiler.is_compiling():
        return False
    return _FOR_GRAPHS.get()


@contextlib.contextmanager
def tracing_for_graphs() -> Iterator[None]:
    """Inside it, the encoder is traced in the forms graph compilers fuse (`LayerNorm`'s and
    `TransformerEncoderBlock._graph_attention`): what `kbert.runtime.graphs` exports for
    OpenVINO and ONNX Runtime. The same values (a test holds them equal); inference only."""
    token = _FOR_GRAPHS.set(True)
    try:
        yield
    finally:
        _FOR_GRAPHS.reset(token)


@keras.saving.register_keras_serializable(package="kbert")
def gelu(x: Tensor) -> Tensor:
    """The exact GELU, x * Phi(x), as the paper uses it.

    On TensorFlow written as 0.5 * x * (1 + erf(x / sqrt(2))): `tf.nn.gelu` computes it with
    erfc, whose CPU kernel cost ~4x erf's (6% of the whole encoder at batch 32; same values to
    6e-7). Other backends keep their fused kernel.
    """
    if keras.backend.backend() == "tensorflow":
        return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))
    return keras.activations.gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package="kbert")
class LayerNorm(keras.layers.LayerNormalization):
    """Keras' `LayerNormalization` over the last axis (centre and scale on).

    Under `tracing_for_graphs` it is written (x − mean) / √(var + ε) · γ + β in float32 with a
    one-element axis list: the pattern OpenVINO fuses into one MVN op (Keras' own form, moments
    and a fused multiply-add, stays a dozen elementwise ops there, and OpenVINO's fusion fails
    on a scalar axis). Twin of Keras' `ops.layer_normalization` (a test holds them equal).
    Training on TensorFlow takes `kbert.network.tf_gradients.layer_norm` (the same values, its
    gradient in a closed form: 21 ops a call with the gradient, where autodiff of Keras' form
    made 45).
    """

    def call(self, inputs: Tensor, training: bool | None = None) -> Tensor:
        if training and keras.backend.backend() == "tensorflow" and self._last_axis_only(inputs):
            from kbert.network import tf_gradients
            return tf_gradients.layer_norm(inputs, self.gamma, self.beta, self.epsilon)
        if not _for_graphs():
            return super().call(inputs)
        x = ops.cast(inputs, "float32")
        mean = ops.mean(x, axis=(-1,), keepdims=True)
        centered = x - mean
        variance = ops.mean(centered * centered, axis=(-1,), keepdims=True)
        x = centered / ops.sqrt(variance + self.epsilon)
        x = x * ops.cast(self.gamma, "float32") + ops.cast(self.beta, "float32")
        return ops.cast(x, self.compute_dtype)

    def _last_axis_only(self, inputs: Tensor) -> bool:
        """Centred and scaled over the last axis, no RMS scaling: the form `tf_gradients`
        writes (anything else keeps Keras' path)."""
        axes = list(self.axis) if isinstance(self.axis, (list, tuple)) else [self.axis]
        return (self.center and self.scale and not self.rms_scaling
                and axes in ([-1], [len(inputs.shape) - 1]))


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """The paper's GELU is the exact (erf) one; `gelu_new` is the tanh approximation."""
    if name == "gelu":
        return gelu
    if name in ("gelu_new", "gelu_approximate"):
        return lambda x: keras.activations.gelu(x, approximate=True)
    return keras.activations.get(name)


@keras.saving.register_keras_serializable(package="kbert")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` whose TensorFlow graph is MatMul → BiasAdd → activation on 2-D rows.

    Keras' own graph is tensordot (MatMul between two Reshapes) → AddV2, which TensorFlow's graph
    optimizer cannot fuse; this form it fuses into one oneDNN MatMul+BiasAdd kernel, about 15–20%
    off CPU inference of the encoder (SavedModels, `predict` without XLA). Same variables, same
    results (within float rounding); other backends, LoRA and quantized layers use Keras' path.
    Under `tracing_for_graphs` it is one N-D MatMul + Add, with none of the reshapes' shape
    arithmetic (~100 fewer ONNX nodes in a 6-layer encoder; OpenVINO's graph runs the same).
    """

    def call(self, inputs: Tensor, training: bool | None = None) -> Tensor:
        if (keras.backend.backend() != "tensorflow" or self.lora_enabled
                or self.quantization_mode is not None or self.bias is None):
            return super().call(inputs, training=training)
        import tensorflow as tf
        kernel = ops.cast(self.kernel, self.compute_dtype)
        bias = ops.cast(self.bias, self.compute_dtype)
        if _for_graphs():
            return self.activation(tf.matmul(inputs, kernel) + bias)
        shape = tf.shape(inputs)
        rows = tf.reshape(inputs, [-1, kernel.shape[0]])
        y = tf.nn.bias_add(tf.matmul(rows, kernel), bias)
        if training and self.activation is gelu:   # its gradient in fewer ops (as LayerNorm's)
            from kbert.network import tf_gradients
            y = tf_gradients.gelu(y)
        else:
            y = self.activation(y)
        y = tf.reshape(y, tf.concat([shape[:-1], [self.units]], 0))
        y.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return y


# True while layers are built whose every weight is assigned next (`weights_to_be_read`).
_WEIGHTS_READ_NEXT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "weights_read_next", default=False)


@contextlib.contextmanager
def weights_to_be_read() -> Iterator[None]:
    """Layers made inside start at zero instead of drawing their weights at random: for a
    model whose every weight is read from a checkpoint next (`kbert.checkpoint.files.read`),
    where drawing BERT-base's truncated normals would take 5 s of a load and zeros take 1.

    >>> with weights_to_be_read():
    ...     type(initializer(0.02)).__name__
    'Zeros'
    >>> type(initializer(0.02)).__name__
    'TruncatedNormal'
    """
    token = _WEIGHTS_READ_NEXT.set(True)
    try:
        yield
    finally:
        _WEIGHTS_READ_NEXT.reset(token)


def initializer(stddev: float) -> keras.initializers.Initializer:
    """A weight matrix's initializer: BERT's truncated normal (zeros in `weights_to_be_read`)."""
    if _WEIGHTS_READ_NEXT.get():
        return keras.initializers.Zeros()
    return keras.initializers.TruncatedNormal(stddev=stddev)


class BertEmbeddings(keras.layers.Layer):
    """Token + segment + learned position embeddings, then LayerNorm and dropout.

    Example:
    >>> layer = BertEmbeddings(vocab_size=100, hidden_size=8, max_position_embeddings=16)
    >>> tuple(layer(ops.ones((2, 5), "int32"), ops.zeros((2, 5), "int32")).shape)
    (2, 5, 8)
    """

    def __init__(self, vocab_size: int, hidden_size: int, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, dropout: float = 0.1,
                 layer_norm_epsilon: float = 1e-12, initializer_range: float = 0.02,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        init = initializer(initializer_range)
        # autocast=False: rows gathered from the float32 table, then cast (Keras casts the whole
        # [V, H] table first under a mixed policy, and its gradient back, on every step).
        self.word_embeddings = keras.layers.Embedding(
            vocab_size, hidden_size, embeddings_initializer=init, dtype=self.dtype_policy,
            name="word_embeddings", autocast=False)
        self.token_type_embeddings = keras.layers.Embedding(
            type_vocab_size, hidden_size, embeddings_initializer=init, dtype=self.dtype_policy,
            name="token_type_embeddings")
        self.layer_norm = LayerNorm(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dropout = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_ids_shape: Shape, segment_ids_shape: Shape | None = None) -> None:
        self.word_embeddings.build(input_ids_shape)
        self.token_type_embeddings.build(input_ids_shape)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.hidden_size),
            initializer=initializer(self.initializer_range))
        self.layer_norm.build(tuple(input_ids_shape) + (self.hidden_size,))

    def call(self, input_ids: Tensor, segment_ids: Tensor, training: bool = False) -> Tensor:
        seq_len = ops.shape(input_ids)[1]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(segment_ids)  # [B, T, H]
        positions = ops.cast(self.position_embeddings[:seq_len], x.dtype)             # [T, H]
        x = x + ops.expand_dims(positions, 0)
        return self.dropout(self.layer_norm(x), training=training)

    def get_config(self) -> dict:
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size,
                "max_position_embeddings": self.max_position_embeddings,
                "type_vocab_size": self.type_vocab_size, "dropout": self.dropout_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range}


class TransformerEncoderBlock(keras.layers.Layer):
    """One post-LN Transformer layer: self-attention, add & norm, feed-forward, add & norm.

    Query, key and value are one fused [H, 3H] projection (one matmul instead of three).
    `causal=True` lets each position attend only to itself and the positions before it.
    Call with `return_attention=True` to also get the attention probabilities [B, N, T, T], or
    with `first_token_only=True` to compute the output of the first position alone, [B, 1, H]
    (it still attends to every key): all a last layer must produce when only `[CLS]` is read.

    Attention is one fused call where the backend has one that fits: on PyTorch
    `attention.torch_attention` (`scaled_dot_product_attention`, which on a GPU also drops the
    probabilities in training); on TensorFlow Keras' `dot_product_attention`; on JAX
    `attention.jax_fused_attention` where cuDNN's flash attention runs (a GPU in bf16/fp16;
    elsewhere the explicit path is faster than XLA's). Training with attention dropout
    (`attention_dropout` > 0) runs the explicit path, which materialises the weights
    [B, N, T, T] to drop them, except with PyTorch on a GPU (`attention.fused_dropout`):
    TensorFlow's and JAX's fused kernels drop nothing with Keras' random generator, and
    PyTorch's CPU kernels fall back to a slower math path to drop. So there training is fused
    only with `attention_dropout=0`, a choice of regularisation left to the config, never made
    silently.

    Example:
    >>> block = TransformerEncoderBlock(hidden_size=8, num_heads=2, intermediate_size=32)
    >>> tuple(block(ops.ones((2, 5, 8)), ops.ones((2, 5), "int32")).shape)
    (2, 5, 8)
    """

    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int,
                 hidden_act: str = "gelu", dropout: float = 0.1, attention_dropout: float = 0.1,
                 layer_norm_epsilon: float = 1e-12, initializer_range: float = 0.02,
                 causal: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.dropout_rate = dropout
        self.attention_dropout_rate = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.causal = causal
        dense = dict(kernel_initializer=initializer(initializer_range), dtype=self.dtype_policy)
        norm = dict(epsilon=layer_norm_epsilon, dtype=self.dtype_policy)
        self.qkv = Dense(3 * hidden_size, name="qkv", **dense)
        self.attention_output = Dense(hidden_size, name="attention_output", **dense)
        self.attention_layer_norm = LayerNorm(
            name="attention_layer_norm", **norm)
        self.intermediate = Dense(
            intermediate_size, activation=activation(hidden_act), name="intermediate", **dense)
        self.output_dense = Dense(hidden_size, name="output", **dense)
        self.output_layer_norm = LayerNorm(name="output_layer_norm", **norm)
        self.attention_probs_dropout = Dropout(attention_dropout,
                                                            dtype=self.dtype_policy)
        self.dropout = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, x_shape: Shape, input_mask_shape: Shape | None = None) -> None:
        x_shape = tuple(x_shape)
        inter_shape = x_shape[:-1] + (self.intermediate_size,)
        self.qkv.build(x_shape)
        self.attention_output.build(x_shape)
        self.attention_layer_norm.build(x_shape)
        self.intermediate.build(x_shape)
        self.output_dense.build(inter_shape)
        self.output_layer_norm.build(x_shape)

    def _attention(self, x: Tensor, input_mask: Tensor, training: bool, return_attention: bool,
                   first_token_only: bool = False) -> Tensor:
        batch, seq_len = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.qkv(x), (batch, seq_len, 3, self.num_heads, self.head_size))
        mask = attention.attention_mask(input_mask, self.causal)        # [B, 1, 1 or T, T]
        if first_token_only:
            mask, seq_len = mask[:, :, :1], 1                                  # [B, 1, 1, T]
        drop_rate = self.attention_dropout_rate if training else 0.0
        if not training and not return_attention and _for_graphs():
            return self._graph_attention(qkv, mask, first_token_only), None
        backend = keras.backend.backend()
        if (return_attention or (drop_rate > 0 and not attention.fused_dropout(qkv))
                or (backend == "jax" and not attention.jax_fused(qkv))):
            return self._explicit_attention(qkv, mask, training, return_attention,
                                            first_token_only)
        q, k, v = ops.unstack(qkv, 3, axis=2)                                # [B, T, N, D]
        q = q[:, :1] if first_token_only else q
        scale = self.head_size ** -0.5
        if backend == "jax":
            context = attention.jax_fused_attention(q, k, v, input_mask, self.causal, scale)
        elif backend == "torch":
            context = attention.torch_attention(q, k, v, mask, scale, drop_rate)
        else:   # TensorFlow's is the same einsums as the explicit path
            context = ops.dot_product_attention(q, k, v, mask=mask, scale=scale,
                                                flash_attention=False)
        return ops.reshape(context, (batch, seq_len, self.hidden_size)), None

    def _graph_attention(self, qkv: Tensor, mask: Tensor, first_token_only: bool) -> Tensor:
        """softmax(Q·Kᵀ/√D + bias)·V in the form graph compilers fuse into one attention op
        (OpenVINO's MHA subgraph): heads leading, an additive mask bias, a plain softmax.
        Twin of `_explicit_attention` for inference (`tracing_for_graphs`; a test holds
        them equal). `qkv` [B, T, 3, N, D] → context [B, T or 1, H]."""
        q, k, v = ops.unstack(qkv, 3, axis=2)                                # [B, T, N, D]
        q = q[:, :1] if first_token_only else q
        batch, seq_len = ops.shape(q)[0], ops.shape(q)[1]
        q = ops.transpose(q, (0, 2, 1, 3))                                   # [B, N, T, D]
        k = ops.transpose(k, (0, 2, 3, 1))                                   # [B, N, D, T]
        v = ops.transpose(v, (0, 2, 1, 3))                                   # [B, N, T, D]
        bias = (1.0 - ops.cast(mask, q.dtype)) * ops.cast(-1e9, q.dtype)   # [B, 1, 1|T, T]
        scores = ops.matmul(q, k) * ops.cast(self.head_size ** -0.5, q.dtype) + bias
        context = ops.matmul(ops.softmax(scores, axis=-1), v)                # [B, N, T, D]
        return ops.reshape(ops.transpose(context, (0, 2, 1, 3)),
                           (batch, seq_len, self.hidden_size))                # [B, T, H]

    def _explicit_attention(self, qkv: Tensor, mask: Tensor, training: bool,
                            return_attention: bool, first_token_only: bool) -> Tensor:
        """softmax(Q·Kᵀ/√D + mask)·V with heads leading, the softmax normalised after the
        product with V (a division of [B, N, T, D], not of the [B, N, T, T] probabilities;
        dropout of the unnormalised weights is the same as of the probabilities). On XLA's CPU
        runtime this is 0.7x the time of `jax.nn.dot_product_attention` (32 x 144 tokens)."""
        qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))                          # [3, B, N, T, D]
        # Unstacked, not indexed: the gradient of an unstack is one stack, while each indexed
        # slice's gradient is a zero [3, B, N, T, D] tensor (TensorFlow's StridedSliceGrad, 12%
        # of a `mini` training step without XLA) that are then summed.
        q, k, v = ops.unstack(qkv, 3, axis=0)                                   # [B, N, T, D]
        q = q[:, :, :1] if first_token_only else q
        batch, seq_len = ops.shape(q)[0], ops.shape(q)[2]
        q = q * ops.cast(self.head_size ** -0.5, q.dtype)
        scores = ops.einsum("bntd,bnsd->bnts", q, k)                           # [B, N, T, T]
        weights, total = attention.masked_exp(scores, mask)
        dropped = self.attention_probs_dropout(ops.cast(weights, self.compute_dtype),
                                               training=training)
        context = ops.einsum("bnts,bnsd->bntd", dropped, v) / ops.cast(total, v.dtype)
        context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)),
                              (batch, seq_len, self.hidden_size))                 # [B, T, H]
        if not return_attention:
            return context, None
        # float32 whatever the policy, as logits are: in bfloat16 a row summed to 1 ± 0.008.
        return context, ops.cast(weights, "float32") / total

    def call(self, x: Tensor, input_mask: Tensor, training: bool = False,
             return_attention: bool = False, first_token_only: bool = False) -> Tensor:
        context, probs = self._attention(x, input_mask, training, return_attention,
                                         first_token_only)
        if first_token_only:
            x = x[:, :1]                                                       # [B, 1, H]
        attended = self.dropout(self.attention_output(context), training=training)
        x = self.attention_layer_norm(x + attended)
        ffn = self.dropout(self.output_dense(self.intermediate(x)), training=training)
        x = self.output_layer_norm(x + ffn)
        return (x, probs) if return_attention else x

    def get_config(self) -> dict:
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "num_heads": self.num_heads, "intermediate_size": self.intermediate_size,
                "hidden_act": self.hidden_act, "dropout": self.dropout_rate,
                "attention_dropout": self.attention_dropout_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range, "causal": self.causal}


class Pooler(keras.layers.Layer):
    """tanh(W · h_[CLS] + b): the pooled output the NSP and classification heads read.

    Given `input_mask`, it reads the last real token instead of `[CLS]`: what a causal
    (left-to-right) encoder uses, as there `[CLS]` has seen nothing but itself (GPT, too,
    classifies from the last token).
    """

    def __init__(self, hidden_size: int, initializer_range: float = 0.02, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = Dense(hidden_size, activation="tanh", name="dense",
                           kernel_initializer=initializer(initializer_range),
                           dtype=self.dtype_policy)

    def build(self, sequence_shape: Shape) -> None:
        self.dense.build((sequence_shape[0], sequence_shape[-1]))

    def call(self, sequence_output: Tensor, input_mask: Tensor | None = None) -> Tensor:
        if input_mask is None:
            return self.dense(sequence_output[:, 0])                           # [B, H]
        last = ops.sum(ops.cast(input_mask, "int32"), axis=1) - 1              # [B]
        last = ops.maximum(last, 0)[:, None, None]                             # [B, 1, 1]
        return self.dense(ops.take_along_axis(sequence_output, last, axis=1)[:, 0])

    def get_config(self) -> dict:
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "initializer_range": self.initializer_range}
