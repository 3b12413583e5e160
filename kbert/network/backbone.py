"""BertBackbone: the BERT encoder (embeddings → Transformer blocks → pooler), the network every
task model and every checkpoint is built on.

Inputs follow the original BERT feature names: `input_ids`, `segment_ids`, `input_mask`
(1 = real token, 0 = padding).
"""

from typing import Any

import keras
from keras import ops

from kbert.hints import Inputs, Tensor
from kbert.network.config import BertConfig
from kbert.network.layers import BertEmbeddings, Pooler, TransformerEncoderBlock


def unpack_inputs(inputs: Inputs) -> tuple[Tensor, Tensor, Tensor]:
    """(input_ids, segment_ids, input_mask) from a dict or a bare `input_ids` tensor."""
    if not isinstance(inputs, dict):
        inputs = {"input_ids": inputs}
    if "input_ids" not in inputs:
        raise ValueError(f"BERT inputs need 'input_ids'; got keys {sorted(inputs)}")
    input_ids = ops.convert_to_tensor(inputs["input_ids"])
    segment_ids = inputs.get("segment_ids")
    input_mask = inputs.get("input_mask")
    if segment_ids is None:
        segment_ids = ops.zeros_like(input_ids)
    if input_mask is None:
        input_mask = ops.ones_like(input_ids)
    return input_ids, ops.convert_to_tensor(segment_ids), ops.convert_to_tensor(input_mask)


@keras.saving.register_keras_serializable(package="kbert")
class BertBackbone(keras.Model):
    """The BERT encoder: embeddings → `num_layers` post-LN Transformer blocks → tanh pooler.

    With `config.causal` each position attends to itself and the positions before it only
    (a left-to-right encoder) and the pooler reads the last real token instead of `[CLS]`.

    Returns a dict with `sequence_output` [B, T, H] and `pooled_output` [B, H]; with
    `output_hidden_states=True` also `hidden_states` (embeddings + every layer, L + 1 tensors)
    and with `output_attentions=True` also `attentions` (L tensors of [B, N, T, T]). With
    `pooled_only=True` (for callers that read `[CLS]` alone) the last layer computes the first
    position only, a sixth less work for six layers, and `sequence_output` is [B, 1, H].

    Example:
    >>> backbone = BertBackbone(BertConfig.preset("tiny", vocab_size=100))
    >>> out = backbone({"input_ids": ops.ones((2, 6), "int32")})
    >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
    ((2, 6, 128), (2, 128))
    """

    def __init__(self, config: BertConfig | dict | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = BertConfig.from_any(config if config is not None else BertConfig())
        c = self.config
        self.embeddings = BertEmbeddings(
            c.vocab_size, c.hidden_size, c.max_position_embeddings, c.type_vocab_size,
            dropout=c.dropout, layer_norm_epsilon=c.layer_norm_epsilon,
            initializer_range=c.initializer_range, dtype=self.dtype_policy, name="embeddings")
        self.encoder_layers = [
            TransformerEncoderBlock(
                c.hidden_size, c.num_heads, c.intermediate_size, c.hidden_act, dropout=c.dropout,
                attention_dropout=c.attention_dropout, layer_norm_epsilon=c.layer_norm_epsilon,
                initializer_range=c.initializer_range, causal=c.causal, dtype=self.dtype_policy,
                name=f"layer_{i}")
            for i in range(c.num_layers)]
        self.pooler = Pooler(c.hidden_size, c.initializer_range, dtype=self.dtype_policy,
                             name="pooler")
        self.build()

    def build(self, input_shape: object = None) -> None:
        shape = (None, None)
        self.embeddings.build(shape, shape)
        for layer in self.encoder_layers:
            layer.build(shape + (self.config.hidden_size,), shape)
        self.pooler.build(shape + (self.config.hidden_size,))
        self.built = True

    @property
    def word_embeddings(self) -> keras.layers.Embedding:
        return self.embeddings.word_embeddings

    def call(self, inputs: Inputs, training: bool = False, output_hidden_states: bool = False,
             output_attentions: bool = False, pooled_only: bool = False) -> dict[str, Tensor]:
        input_ids, segment_ids, input_mask = unpack_inputs(inputs)
        x = self.embeddings(input_ids, segment_ids, training=training)
        hidden_states, attentions = [x], []
        first_only = pooled_only and not self.config.causal
        last = len(self.encoder_layers) - 1
        for i, layer in enumerate(self.encoder_layers):
            x = layer(x, input_mask, training=training, return_attention=output_attentions,
                      first_token_only=first_only and i == last)
            if output_attentions:
                x, probs = x
                attentions.append(probs)
            hidden_states.append(x)
        # A causal encoder pools its last real token, the one that has seen the whole input.
        pooled = self.pooler(x, input_mask if self.config.causal else None)
        outputs = {"sequence_output": x, "pooled_output": pooled}
        if output_hidden_states:
            outputs["hidden_states"] = hidden_states
        if output_attentions:
            outputs["attentions"] = attentions
        return outputs

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}
