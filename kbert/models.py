"""BertBackbone and the task models built on it (pretraining, classifier, tagger, QA, choice).

Inputs follow the original BERT feature names: `input_ids`, `segment_ids`, `input_mask`
(1 = real token, 0 = padding), and for pretraining `masked_lm_positions`.
"""

import keras
from keras import ops

from kbert.config import BertConfig
from kbert.heads import (ClassificationHead, MaskedLMHead, MultipleChoiceHead, NextSentenceHead,
                         SpanHead, TokenClassificationHead)
from kbert.layers import BertEmbeddings, Pooler, TransformerEncoderBlock


def _unpack(inputs):
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

    Returns a dict with `sequence_output` [B, T, H] and `pooled_output` [B, H]; with
    `output_hidden_states=True` also `hidden_states` (embeddings + every layer, L + 1 tensors)
    and with `output_attentions=True` also `attentions` (L tensors of [B, N, T, T]).

    Example:
    >>> backbone = BertBackbone(BertConfig.preset("tiny", vocab_size=100))
    >>> out = backbone({"input_ids": ops.ones((2, 6), "int32")})
    >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
    ((2, 6, 128), (2, 128))
    """

    def __init__(self, config=None, **kwargs):
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
                initializer_range=c.initializer_range, dtype=self.dtype_policy, name=f"layer_{i}")
            for i in range(c.num_layers)]
        self.pooler = Pooler(c.hidden_size, c.initializer_range, dtype=self.dtype_policy,
                             name="pooler")
        self.build()

    def build(self, input_shape=None):
        shape = (None, None)
        self.embeddings.build(shape, shape)
        for layer in self.encoder_layers:
            layer.build(shape + (self.config.hidden_size,), shape)
        self.pooler.build(shape + (self.config.hidden_size,))
        self.built = True

    @property
    def word_embeddings(self):
        return self.embeddings.word_embeddings

    def call(self, inputs, training=False, output_hidden_states=False, output_attentions=False):
        input_ids, segment_ids, input_mask = _unpack(inputs)
        x = self.embeddings(input_ids, segment_ids, training=training)
        hidden_states, attentions = [x], []
        for layer in self.encoder_layers:
            if output_attentions:
                x, probs = layer(x, input_mask, training=training, return_attention=True)
                attentions.append(probs)
            else:
                x = layer(x, input_mask, training=training)
            hidden_states.append(x)
        outputs = {"sequence_output": x, "pooled_output": self.pooler(x)}
        if output_hidden_states:
            outputs["hidden_states"] = hidden_states
        if output_attentions:
            outputs["attentions"] = attentions
        return outputs

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


class _TaskModel(keras.Model):
    """A backbone plus heads; `get_config` stores the encoder config and the head options."""

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(backbone, BertBackbone):
            backbone = BertBackbone(backbone, dtype=kwargs.get("dtype"))
        self.backbone = backbone

    @property
    def config(self):
        return self.backbone.config

    def get_config(self):
        return {**super().get_config(), "backbone": self.backbone.config.to_dict()}

    def _head_kwargs(self):
        c = self.config
        return dict(initializer_range=c.initializer_range, dtype=self.dtype_policy)


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(_TaskModel):
    """Masked LM + next-sentence prediction (paper, section 3.1).

    Inputs: `input_ids`, `segment_ids`, `input_mask`, `masked_lm_positions` [B, P].
    Outputs: `mlm_logits` [B, P, V] (only at the masked positions) and `nsp_logits` [B, 2].
    `compile()` defaults to the paper's loss: mean cross-entropy over the real predictions
    (weighted by `masked_lm_weights`) plus the NSP cross-entropy; see
    `kbert.data.inputs.pretraining_targets`.

    Example:
    >>> model = BertPretrainer(BertConfig.preset("tiny", vocab_size=100))
    >>> out = model({"input_ids": ops.ones((2, 6), "int32"),
    ...              "masked_lm_positions": ops.ones((2, 3), "int32")})
    >>> tuple(out["mlm_logits"].shape), tuple(out["nsp_logits"].shape)
    ((2, 3, 100), (2, 2))
    """

    def __init__(self, backbone, mlm_head=None, nsp_head=None, **kwargs):
        super().__init__(backbone, **kwargs)
        c = self.config
        self.mlm_head = mlm_head or MaskedLMHead(
            self.backbone.word_embeddings, c.hidden_act, c.layer_norm_epsilon,
            name="mlm", **self._head_kwargs())
        self.nsp_head = nsp_head or NextSentenceHead(name="nsp", **self._head_kwargs())
        if not self.mlm_head.built:
            self.mlm_head.build((None, None, c.hidden_size))
        if not self.nsp_head.built:
            self.nsp_head.build((None, c.hidden_size))

    def call(self, inputs, training=False):
        out = self.backbone(inputs, training=training)
        positions = inputs.get("masked_lm_positions") if isinstance(inputs, dict) else None
        return {"mlm_logits": self.mlm_head(out["sequence_output"], positions),
                "nsp_logits": self.nsp_head(out["pooled_output"], training=training)}

    def compile(self, optimizer="adam", loss=None, weighted_metrics=None, **kwargs):
        if loss is None:
            loss = {"mlm_logits": keras.losses.SparseCategoricalCrossentropy(
                        from_logits=True, reduction="mean_with_sample_weight"),
                    "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
        if weighted_metrics is None:
            weighted_metrics = {
                "mlm_logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                "nsp_logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertBackbone(config.pop("backbone")), **config)


class _SingleHeadModel(_TaskModel):
    head_class = None
    head_name = None

    def __init__(self, backbone, num_labels=2, head=None, dropout=None, **kwargs):
        super().__init__(backbone, **kwargs)
        self.num_labels = num_labels
        self.head_dropout = self.config.dropout if dropout is None else dropout
        self.head = head or self._make_head()

    def _make_head(self):
        head = self.head_class(self.num_labels, dropout=self.head_dropout, name=self.head_name,
                               **self._head_kwargs())
        head.build((None, self.config.hidden_size))
        return head

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout": self.head_dropout}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertBackbone(config.pop("backbone")), **config)


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(_SingleHeadModel):
    """Sequence classification / regression on the pooled `[CLS]` output: logits [B, num_labels].

    Use `num_labels=1` for regression (STS-B).

    Example:
    >>> model = BertClassifier(BertConfig.preset("tiny", vocab_size=100), num_labels=3)
    >>> tuple(model({"input_ids": ops.ones((2, 6), "int32")}).shape)
    (2, 3)
    """
    head_class = ClassificationHead
    head_name = "classifier"

    def call(self, inputs, training=False):
        return self.head(self.backbone(inputs, training=training)["pooled_output"],
                         training=training)


@keras.saving.register_keras_serializable(package="kbert")
class BertTokenClassifier(_SingleHeadModel):
    """Token classification (NER) on the sequence output: logits [B, T, num_labels]."""
    head_class = TokenClassificationHead
    head_name = "tagger"

    def call(self, inputs, training=False):
        return self.head(self.backbone(inputs, training=training)["sequence_output"],
                         training=training)


@keras.saving.register_keras_serializable(package="kbert")
class BertQuestionAnswerer(_TaskModel):
    """SQuAD span QA: `start_logits` and `end_logits` [B, T] (paper, section 4.2)."""

    def __init__(self, backbone, head=None, **kwargs):
        super().__init__(backbone, **kwargs)
        self.head = head or SpanHead(name="span", **self._head_kwargs())
        if not self.head.built:
            self.head.build((None, None, self.config.hidden_size))

    def call(self, inputs, training=False):
        start, end = self.head(self.backbone(inputs, training=training)["sequence_output"])
        return {"start_logits": start, "end_logits": end}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertBackbone(config.pop("backbone")), **config)


@keras.saving.register_keras_serializable(package="kbert")
class BertMultipleChoice(_SingleHeadModel):
    """Multiple choice (SWAG): inputs [B, C, T], one shared scorer, logits [B, C]."""
    head_class = MultipleChoiceHead
    head_name = "choice"

    def __init__(self, backbone, head=None, dropout=None, **kwargs):
        kwargs.pop("num_labels", None)
        super().__init__(backbone, num_labels=1, head=head, dropout=dropout, **kwargs)

    def _make_head(self):
        head = MultipleChoiceHead(dropout=self.head_dropout, name="choice", **self._head_kwargs())
        head.build((None, self.config.hidden_size))
        return head

    def call(self, inputs, training=False):
        input_ids, segment_ids, input_mask = _unpack(inputs)
        batch, choices = ops.shape(input_ids)[0], ops.shape(input_ids)[1]
        flat = {k: ops.reshape(v, (-1, ops.shape(v)[-1]))                      # [B·C, T]
                for k, v in (("input_ids", input_ids), ("segment_ids", segment_ids),
                             ("input_mask", input_mask))}
        pooled = self.backbone(flat, training=training)["pooled_output"]      # [B·C, H]
        scores = self.head(pooled, training=training)                         # [B·C, 1]
        return ops.reshape(scores, (batch, choices))                          # [B, C]
