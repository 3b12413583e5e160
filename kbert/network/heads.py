"""The task heads that sit on the encoder's outputs (paper, sections 3.1 and 4).

Every head follows one pattern: (gather) → dropout/transform → dense → reshape for the task.
"""

from typing import Any

import keras
from keras import ops

from kbert.hints import Shape, Tensor
from kbert.network.dropout import Dropout
from kbert.network.layers import LayerNorm, activation, initializer


class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head, scored only at `masked_lm_positions`.

    transform (dense + GELU + LayerNorm) → logits against the word embeddings (tied decoder)
    plus an output bias. Scoring only the ~15% masked positions instead of every position is
    what makes pretraining cheap: the [.., H] × [H, V] product is the largest matmul in BERT.

    Args:
        word_embeddings: the encoder's `keras.layers.Embedding`; its matrix is the decoder.

    Example:
    >>> emb = keras.layers.Embedding(100, 8); emb.build((None,))
    >>> head = MaskedLMHead(emb)
    >>> tuple(head(ops.ones((2, 5, 8)), ops.zeros((2, 3), "int32")).shape)
    (2, 3, 100)
    """

    def __init__(self, word_embeddings: keras.layers.Embedding, hidden_act: str = "gelu",
                 layer_norm_epsilon: float = 1e-12, initializer_range: float = 0.02,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.word_embeddings = word_embeddings
        self.hidden_act = hidden_act
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        hidden = word_embeddings.output_dim
        self.transform = keras.layers.Dense(
            hidden, activation=activation(hidden_act), name="transform",
            kernel_initializer=initializer(initializer_range), dtype=self.dtype_policy)
        self.layer_norm = LayerNorm(
            epsilon=layer_norm_epsilon, name="layer_norm", dtype=self.dtype_policy)

    def build(self, sequence_output_shape: Shape,
              masked_lm_positions_shape: Shape | None = None) -> None:
        hidden = sequence_output_shape[-1]
        self.transform.build((None, hidden))
        self.layer_norm.build((None, hidden))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.word_embeddings.input_dim,), initializer="zeros",
            autocast=False)                  # added to float32 logits: read as float32

    def call(self, sequence_output: Tensor, masked_lm_positions: Tensor | None = None) -> Tensor:
        x = sequence_output                                                   # [B, T, H]
        if masked_lm_positions is not None:
            positions = ops.cast(masked_lm_positions, "int32")[:, :, None]    # [B, P, 1]
            x = ops.take_along_axis(x, positions, axis=1)                     # [B, P, H]
        x = self.layer_norm(self.transform(x))
        decoder = ops.cast(self.word_embeddings.embeddings, x.dtype)          # [V, H]
        # One [N, H] x [V, H] GEMM contracted on H as stored: `matmul(x, transpose(decoder))`
        # made XLA copy the [H, V] transpose on every call (fill_mask 2.4x slower on JAX's CPU).
        rows = ops.reshape(x, (-1, ops.shape(x)[-1]))
        # float32 logits whatever the policy (the loss, the metrics and softmax read them), the
        # bias added unrounded.
        bias = ops.cast(self.output_bias, "float32")
        if keras.backend.backend() == "torch":
            # PyTorch's einsum copies the [H, V] transpose every call; its matmul reads the
            # transposed view in place (a bfloat16 `mini` pretraining step: -15 ms). Its add
            # widens a bfloat16 product to float32 as it adds: one pass over [N, V], not two.
            logits = ops.add(ops.matmul(rows, ops.transpose(decoder)), bias)
        else:
            # Cast right after the product: cast after the reshape, TensorFlow's graph optimizer
            # copied the [N, V] cast once per reader (a mixed step's largest cast, twice).
            logits = ops.cast(ops.einsum("nh,vh->nv", rows, decoder), "float32") + bias
        return ops.reshape(logits, (*ops.shape(x)[:-1], ops.shape(decoder)[0]))  # [B, P, V]

    def get_config(self) -> dict:
        # The tied embedding is shared with the encoder; the task model re-links it on load.
        return {**super().get_config(), "hidden_act": self.hidden_act,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range}


class LeftToRightLMHead(MaskedLMHead):
    """Left-to-right LM head (the paper's "LTR & No NSP" ablation, section 5.1): the MLM head's
    transform and tied decoder at every position, where position t predicts token t + 1.

    It reads a causal encoder (`BertConfig(causal=True)`), so position t has seen tokens
    0..t only. `next_token_targets` gives the labels and weights its loss uses.

    Example:
    >>> emb = keras.layers.Embedding(100, 8); emb.build((None,))
    >>> tuple(LeftToRightLMHead(emb)(ops.ones((2, 5, 8))).shape)
    (2, 5, 100)
    """

    def call(self, sequence_output: Tensor, masked_lm_positions: Tensor | None = None) -> Tensor:
        return super().call(sequence_output)                                  # [B, T, V]


def next_token_targets(input_ids: Tensor, input_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(labels, weights) [B, T] for `LeftToRightLMHead`'s logits: label t is token t + 1,
    weighted 1 where that token is real (the last position and padding weigh 0).

    The loss is the mean cross-entropy over the weighted positions, as for the masked LM.
    The TensorFlow twin that feeds `fit` is `kbert.data.inputs.next_token_batch`.

    >>> labels, weights = next_token_targets(ops.array([[2, 7, 8, 3, 0]]),
    ...                                      ops.array([[1, 1, 1, 1, 0]]))
    >>> ops.convert_to_numpy(labels).tolist(), ops.convert_to_numpy(weights).tolist()
    ([[7, 8, 3, 0, 0]], [[1.0, 1.0, 1.0, 0.0, 0.0]])
    """
    pad = ops.zeros_like(input_ids[:, :1])
    labels = ops.concatenate([input_ids[:, 1:], pad], axis=1)                 # [B, T]
    weights = ops.concatenate([input_mask[:, 1:], ops.zeros_like(input_mask[:, :1])], axis=1)
    return labels, ops.cast(weights, "float32")


class _DenseHead(keras.layers.Layer):
    """dropout → dense(units): the shared body of the classification-style heads."""

    def __init__(self, units: int, dropout: float = 0.1, initializer_range: float = 0.02,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.dropout_rate = dropout
        self.initializer_range = initializer_range
        self.dropout = Dropout(dropout, dtype=self.dtype_policy)
        self.dense = keras.layers.Dense(units, name="dense", dtype=self.dtype_policy,
                                        kernel_initializer=initializer(initializer_range))

    def build(self, input_shape: Shape) -> None:
        self.dense.build(input_shape)

    def call(self, x: Tensor, training: bool = False) -> Tensor:
        return self.dense(self.dropout(x, training=training))

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units, "dropout": self.dropout_rate,
                "initializer_range": self.initializer_range}


class NextSentenceHead(_DenseHead):
    """IsNext / NotNext logits [B, 2] from the pooled output (label 0 = IsNext)."""

    def __init__(self, initializer_range: float = 0.02, **kwargs: Any) -> None:
        kwargs.pop("units", None)
        kwargs.setdefault("dropout", 0.0)
        super().__init__(2, initializer_range=initializer_range, **kwargs)


class ClassificationHead(_DenseHead):
    """Sequence classification (or regression with `units=1`) from the pooled output: [B, units]."""


class TokenClassificationHead(_DenseHead):
    """Per-token labels (NER) from the sequence output: [B, T, units]."""


class SpanHead(keras.layers.Layer):
    """SQuAD span prediction: start and end logits [B, T] from the sequence output."""

    def __init__(self, initializer_range: float = 0.02, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(2, name="dense", dtype=self.dtype_policy,
                                        kernel_initializer=initializer(initializer_range))

    def build(self, sequence_shape: Shape) -> None:
        self.dense.build(sequence_shape)

    def call(self, sequence_output: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.dense(sequence_output)                                  # [B, T, 2]
        return logits[..., 0], logits[..., 1]

    def get_config(self) -> dict:
        return {**super().get_config(), "initializer_range": self.initializer_range}


class MultipleChoiceHead(_DenseHead):
    """One score per choice from each choice's pooled output; the model reshapes to [B, C]."""

    def __init__(self, dropout: float = 0.1, initializer_range: float = 0.02,
                 **kwargs: Any) -> None:
        kwargs.pop("units", None)
        super().__init__(1, dropout=dropout, initializer_range=initializer_range, **kwargs)


def sentence_embedding(sequence_output: Tensor, input_mask: Tensor,
                       pooling: str = "mean") -> Tensor:
    """One float32 vector per text [B, H]: the `[CLS]` hidden state (`"cls"`) or the mean of
    the real tokens' (`"mean"`, as sentence-transformers' all-MiniLM); not normalized.

    Example:
    >>> seq = ops.convert_to_tensor([[[1.0, 0.0], [3.0, 2.0], [9.0, 9.0]]])
    >>> ops.convert_to_numpy(sentence_embedding(seq, ops.convert_to_tensor([[1, 1, 0]]))).tolist()
    [[2.0, 1.0]]
    """
    sequence_output = ops.cast(sequence_output, "float32")
    if pooling == "cls":
        return sequence_output[:, 0]
    if pooling != "mean":
        raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
    mask = ops.cast(input_mask, "float32")[..., None]                      # [B, T, 1]
    return ops.sum(sequence_output * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
