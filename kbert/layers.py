"""The BERT encoder's parts: embeddings, the post-LN Transformer block, the pooler.

Written with `keras.ops` only, so they run on the TensorFlow, JAX and PyTorch backends.
Shapes: B batch, T sequence length, H hidden size, N heads, D = H / N head size, I intermediate.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kbert")
def gelu(x):
    """The exact GELU, x * Phi(x), as the paper uses it.

    On TensorFlow written as 0.5 * x * (1 + erf(x / sqrt(2))): `tf.nn.gelu` computes it with
    erfc, whose CPU kernel cost ~4x erf's (6% of the whole encoder at batch 32; same values to
    6e-7). Other backends keep their fused kernel.
    """
    if keras.backend.backend() == "tensorflow":
        return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))
    return keras.activations.gelu(x, approximate=False)


def activation(name):
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
    """

    def call(self, inputs, training=None):
        if (keras.backend.backend() != "tensorflow" or self.lora_enabled
                or self.quantization_mode is not None or self.bias is None):
            return super().call(inputs, training=training)
        import tensorflow as tf
        kernel = ops.cast(self.kernel, self.compute_dtype)
        bias = ops.cast(self.bias, self.compute_dtype)
        shape = tf.shape(inputs)
        rows = tf.reshape(inputs, [-1, kernel.shape[0]])
        y = self.activation(tf.nn.bias_add(tf.matmul(rows, kernel), bias))
        y = tf.reshape(y, tf.concat([shape[:-1], [self.units]], 0))
        y.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return y


def attention_mask(input_mask, causal=False):
    """Which keys each query may attend to: bool [B, 1, 1, T], or [B, 1, T, T] when `causal`.

    `input_mask` [B, T] is 1 for real tokens, 0 for padding. A causal (left-to-right) mask also
    hides every key after the query: position i sees positions 0..i only, as in a left-to-right
    language model (the paper's "LTR & No NSP" ablation, section 5.1).

    >>> m = attention_mask(ops.array([[1, 1, 0]]), causal=True)
    >>> ops.convert_to_numpy(m)[0, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    """
    mask = ops.cast(input_mask, "bool")[:, None, None, :]                     # [B, 1, 1, T]
    if not causal:
        return mask
    seq_len = ops.shape(input_mask)[1]
    positions = ops.arange(seq_len)
    left = positions[None, :] <= positions[:, None]                          # [T, T] key <= query
    return ops.logical_and(mask, left[None, None, :, :])                     # [B, 1, T, T]


def initializer(stddev):
    return keras.initializers.TruncatedNormal(stddev=stddev)


class BertEmbeddings(keras.layers.Layer):
    """Token + segment + learned position embeddings, then LayerNorm and dropout.

    Example:
    >>> layer = BertEmbeddings(vocab_size=100, hidden_size=8, max_position_embeddings=16)
    >>> tuple(layer(ops.ones((2, 5), "int32"), ops.zeros((2, 5), "int32")).shape)
    (2, 5, 8)
    """

    def __init__(self, vocab_size, hidden_size, max_position_embeddings=512, type_vocab_size=2,
                 dropout=0.1, layer_norm_epsilon=1e-12, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        init = initializer(initializer_range)
        self.word_embeddings = keras.layers.Embedding(
            vocab_size, hidden_size, embeddings_initializer=init, dtype=self.dtype_policy,
            name="word_embeddings")
        self.token_type_embeddings = keras.layers.Embedding(
            type_vocab_size, hidden_size, embeddings_initializer=init, dtype=self.dtype_policy,
            name="token_type_embeddings")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_ids_shape, segment_ids_shape=None):
        self.word_embeddings.build(input_ids_shape)
        self.token_type_embeddings.build(input_ids_shape)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.hidden_size),
            initializer=initializer(self.initializer_range))
        self.layer_norm.build(tuple(input_ids_shape) + (self.hidden_size,))

    def call(self, input_ids, segment_ids, training=False):
        seq_len = ops.shape(input_ids)[1]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(segment_ids)  # [B, T, H]
        positions = ops.cast(self.position_embeddings[:seq_len], x.dtype)             # [T, H]
        x = x + ops.expand_dims(positions, 0)
        return self.dropout(self.layer_norm(x), training=training)

    def get_config(self):
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
    Call with `return_attention=True` to also get the attention probabilities [B, N, T, T].

    Example:
    >>> block = TransformerEncoderBlock(hidden_size=8, num_heads=2, intermediate_size=32)
    >>> tuple(block(ops.ones((2, 5, 8)), ops.ones((2, 5), "int32")).shape)
    (2, 5, 8)
    """

    def __init__(self, hidden_size, num_heads, intermediate_size, hidden_act="gelu", dropout=0.1,
                 attention_dropout=0.1, layer_norm_epsilon=1e-12, initializer_range=0.02,
                 causal=False, **kwargs):
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
        self.attention_layer_norm = keras.layers.LayerNormalization(
            name="attention_layer_norm", **norm)
        self.intermediate = Dense(
            intermediate_size, activation=activation(hidden_act), name="intermediate", **dense)
        self.output_dense = Dense(hidden_size, name="output", **dense)
        self.output_layer_norm = keras.layers.LayerNormalization(name="output_layer_norm", **norm)
        self.attention_probs_dropout = keras.layers.Dropout(attention_dropout,
                                                            dtype=self.dtype_policy)
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, x_shape, input_mask_shape=None):
        x_shape = tuple(x_shape)
        inter_shape = x_shape[:-1] + (self.intermediate_size,)
        self.qkv.build(x_shape)
        self.attention_output.build(x_shape)
        self.attention_layer_norm.build(x_shape)
        self.intermediate.build(x_shape)
        self.output_dense.build(inter_shape)
        self.output_layer_norm.build(x_shape)

    def _attention(self, x, input_mask, training, return_attention):
        batch, seq_len = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.qkv(x), (batch, seq_len, 3, self.num_heads, self.head_size))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]                  # [B, T, N, D] each
        use_dropout = training and self.attention_dropout_rate > 0
        mask = attention_mask(input_mask, self.causal)                  # [B, 1, 1 or T, T]
        if not (return_attention or use_dropout):
            # The mask rules out flash attention. JAX on a GPU would try cuDNN's fused kernel
            # first, which rejects it (logging a traceback per trace) before falling back to
            # XLA's; Keras' torch probe for it stops `torch.compile`'s graph at every layer
            # (PyTorch still picks its fastest kernel that takes a mask).
            flash = False if keras.backend.backend() in ("jax", "torch") else None
            context = ops.dot_product_attention(q, k, v, mask=mask, flash_attention=flash,
                                                scale=self.head_size ** -0.5)  # [B, T, N, D]
            return ops.reshape(context, (batch, seq_len, self.hidden_size)), None
        scores = ops.einsum("btnd,bsnd->bnts", q, k) * ops.cast(self.head_size ** -0.5, q.dtype)
        scores = ops.cast(scores, "float32")                                   # [B, N, T, T]
        mask_bias = (1.0 - ops.cast(mask, "float32")) * -1e9                # [B, 1, 1 or T, T]
        probs = ops.softmax(scores + mask_bias, axis=-1)
        probs = ops.cast(probs, self.compute_dtype)
        probs_dropped = self.attention_probs_dropout(probs, training=training)
        context = ops.einsum("bnts,bsnd->btnd", probs_dropped, v)              # [B, T, N, D]
        return ops.reshape(context, (batch, seq_len, self.hidden_size)), probs  # [B, T, H]

    def call(self, x, input_mask, training=False, return_attention=False):
        context, probs = self._attention(x, input_mask, training, return_attention)
        attention = self.dropout(self.attention_output(context), training=training)
        x = self.attention_layer_norm(x + attention)
        ffn = self.dropout(self.output_dense(self.intermediate(x)), training=training)
        x = self.output_layer_norm(x + ffn)
        return (x, probs) if return_attention else x

    def get_config(self):
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

    def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = Dense(hidden_size, activation="tanh", name="dense",
                           kernel_initializer=initializer(initializer_range),
                           dtype=self.dtype_policy)

    def build(self, sequence_shape):
        self.dense.build((sequence_shape[0], sequence_shape[-1]))

    def call(self, sequence_output, input_mask=None):
        if input_mask is None:
            return self.dense(sequence_output[:, 0])                           # [B, H]
        last = ops.sum(ops.cast(input_mask, "int32"), axis=1) - 1              # [B]
        last = ops.maximum(last, 0)[:, None, None]                             # [B, 1, 1]
        return self.dense(ops.take_along_axis(sequence_output, last, axis=1)[:, 0])

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "initializer_range": self.initializer_range}
