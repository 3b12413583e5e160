"""BertBackbone and the task models built on it (pretraining, classifier, tagger, QA, choice).

Inputs follow the original BERT feature names: `input_ids`, `segment_ids`, `input_mask`
(1 = real token, 0 = padding), and for pretraining `masked_lm_positions`.

The fine-tuning models (`BertClassifier`, `BertTokenClassifier`, `BertQuestionAnswerer`,
`BertMultipleChoice`) also take raw text once a preprocessor is attached
(`from_checkpoint` attaches one; see `kbert.preprocessing`), and `compile()` defaults to the
paper's recipe: AdamW (weight decay 0.01, none on LayerNorm and biases), lr 5e-5 with 10% warmup
then linear decay over the training steps (known at `fit` from the dataset's size × epochs),
and the task's loss and metrics.
"""

import dataclasses
import math
import warnings

import keras
from keras import ops

from kbert.config import BertConfig
from kbert.heads import (
    ClassificationHead,
    LeftToRightLMHead,
    MaskedLMHead,
    MultipleChoiceHead,
    NextSentenceHead,
    SpanHead,
    TokenClassificationHead,
)
from kbert.layers import BertEmbeddings, Pooler, TransformerEncoderBlock
from kbert.optimization import create_optimizer


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

    def __init__(self, config: BertConfig | dict | str | None = None, **kwargs):
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

    def call(self, inputs, training=False, output_hidden_states=False, output_attentions=False,
             pooled_only=False):
        input_ids, segment_ids, input_mask = _unpack(inputs)
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

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


class _TaskModel(keras.Model):
    """A backbone plus heads; `get_config` stores the encoder config and the head options."""

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(backbone, BertBackbone):
            backbone = BertBackbone(backbone, dtype=kwargs.get("dtype"))
        self.backbone = backbone

    @property
    def config(self):
        return self.backbone.config

    def get_config(self):
        return {**super().get_config(), "backbone": self.backbone.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertBackbone(config.pop("backbone")), **config)

    def _head_kwargs(self):
        c = self.config
        return dict(initializer_range=c.initializer_range, dtype=self.dtype_policy)

    def fit(self, *args, **kwargs):
        """`keras.Model.fit`, quiet about the pooler: heads that never read the pooled output
        (MLM without NSP, left-to-right LM, spans, tags) leave it without gradients."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
            return super().fit(*args, **kwargs)


class _FineTunedModel(_TaskModel):
    """A task model for fine-tuning: raw-text `fit`/`evaluate`/`predict` through its
    preprocessor, `compile()` with the paper's recipe, checkpoint directories in and out."""

    head_name = None
    default_learning_rate = 5e-5

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
        self.head_options = {}    # stored in config.json by save_checkpoint (labels, ...)
        self._recipe = None       # compile(optimizer=None)'s settings, for the schedule at fit

    # The preprocessor is kept out of Keras' tracking: it holds no weights, only TF tables.
    @property
    def preprocessor(self):
        return self.__dict__.get("_preprocessor")

    @preprocessor.setter
    def preprocessor(self, value):
        self.__dict__["_preprocessor"] = value

    def __setattr__(self, name, value):
        if name == "preprocessor":    # not via Keras / torch.nn.Module, which would track it
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    # --- checkpoints -----------------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, path: str, num_labels: int | None = None,
                        labels: list | None = None, max_seq_length: int | None = None,
                        **kwargs) -> "_FineTunedModel":
        """This task model on a kbert checkpoint directory, with its preprocessor attached.

        The checkpoint's head of this kind is kept unless `num_labels`/`labels` ask for
        another one (then a fresh head is made). `labels` are the label names in id order
        (tags for `BertTokenClassifier`); `num_labels=1` makes a regressor.
        `max_seq_length` defaults to 128 (384 for QA).
        """
        # The preprocessor needs TensorFlow (tf-text): imported on use, so kbert.models
        # imports without it.
        from kbert import preprocessing
        return preprocessing.task_from_checkpoint(cls, path, num_labels=num_labels,
                                                  labels=labels, max_seq_length=max_seq_length,
                                                  **kwargs)

    def save_checkpoint(self, directory: str, vocab: list | str | None = None,
                        do_lower_case: bool | None = None, dtype: str = "float32",
                        model_card: str | None = None) -> str:
        """Writes a checkpoint directory (atomically) that `kbert.load` reads; the head's
        labels go into config.json. The vocabulary comes from the preprocessor."""
        from kbert import preprocessing  # TensorFlow, on use: see from_checkpoint
        return preprocessing.save_task_checkpoint(self, directory, vocab, do_lower_case, dtype,
                                                  model_card)

    # --- compile ---------------------------------------------------------------------------
    def default_loss(self):
        """The task's loss (and `loss_weights`), as `compile` arguments."""
        raise NotImplementedError

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def compile(self, optimizer=None, loss=None, weighted_metrics=None, *,
                learning_rate: float | None = None, warmup: float = 0.1,
                weight_decay: float = 0.01, num_train_steps: int | None = None, **kwargs):
        """`keras.Model.compile` with the paper's defaults for what is left out.

        optimizer: None: AdamW from `kbert.optimization.create_optimizer` with peak
            `learning_rate` (5e-5), `warmup` (a fraction of the steps) then linear decay to 0
            over `num_train_steps` — when not given, the first `fit` sets it from its data
            (batches per epoch × epochs); a constant rate where that is unknown.
        loss, weighted_metrics: None: the task's (`default_loss`, `default_metrics`).
        """
        if optimizer is None:
            self._recipe = dict(learning_rate=learning_rate or self.default_learning_rate,
                                warmup=warmup, weight_decay=weight_decay,
                                steps=num_train_steps, compile=(loss, weighted_metrics, kwargs))
            optimizer = self._paper_optimizer(num_train_steps)
        else:
            self._recipe = None
        defaults = self.default_loss() if loss is None else {"loss": loss}
        if weighted_metrics is None and "metrics" not in kwargs:
            weighted_metrics = self.default_metrics()
        super().compile(optimizer=optimizer, **defaults, weighted_metrics=weighted_metrics,
                        **kwargs)

    def _paper_optimizer(self, steps):
        r = self._recipe
        if not steps:    # unknown length: a constant rate (no decay within 2^31 steps)
            return create_optimizer("adamw", r["learning_rate"], 2 ** 31 - 1, 0,
                                    r["weight_decay"])
        return create_optimizer("adamw", r["learning_rate"], steps,
                                int(round(r["warmup"] * steps)), r["weight_decay"])

    def _schedule(self, x, y, batch_size, epochs, kwargs):
        """At the first `fit` after `compile(optimizer=None)`: warmup and decay over its steps."""
        if self._recipe is None or self._recipe["steps"]:
            return
        per_epoch = kwargs.get("steps_per_epoch") or _batches_per_epoch(x, batch_size)
        if not per_epoch:
            return
        self._recipe["steps"] = per_epoch * (epochs - kwargs.get("initial_epoch", 0))
        loss, metrics, compile_kwargs = self._recipe["compile"]
        recipe = self._recipe
        self.compile(loss=loss, weighted_metrics=metrics, learning_rate=recipe["learning_rate"],
                     warmup=recipe["warmup"], weight_decay=recipe["weight_decay"],
                     num_train_steps=recipe["steps"], **compile_kwargs)

    # --- raw inputs ------------------------------------------------------------------------
    def _adapt(self, x, y, sample_weight, batch_size, shuffle=False):
        if self.preprocessor is None:
            return x, y, sample_weight, batch_size
        return self.preprocessor.adapt_inputs(x, y, sample_weight, batch_size, shuffle)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, sample_weight=None,
            validation_data=None, shuffle=True, **kwargs):
        """`keras.Model.fit`; with a preprocessor, `x` may be raw text (see the class)."""
        raw = x
        x, y, sample_weight, batch_size = self._adapt(x, y, sample_weight, batch_size, shuffle)
        shuffle = shuffle and x is raw    # a dataset made here is shuffled already
        if validation_data is not None and self.preprocessor is not None:
            validation_data = self._adapt(*keras.utils.unpack_x_y_sample_weight(
                validation_data), batch_size)[0] if isinstance(validation_data, tuple) \
                else self._adapt(validation_data, None, None, None)[0]
        self._schedule(x, y, batch_size, epochs, kwargs)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           sample_weight=sample_weight, validation_data=validation_data,
                           shuffle=shuffle, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        x, y, sample_weight, batch_size = self._adapt(x, y, sample_weight, batch_size)
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight,
                                **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        x, _, _, batch_size = self._adapt(x, None, None, batch_size)
        return super().predict(x, batch_size=batch_size, **kwargs)


def _batches_per_epoch(x, batch_size):
    """Batches in one pass over `x` (a dataset with a known size, or arrays); None if unknown."""
    if hasattr(x, "cardinality"):
        n = int(x.cardinality())
        return n if n > 0 else None
    leaves = [v for v in (x.values() if isinstance(x, dict) else [x]) if hasattr(v, "__len__")]
    if not leaves:
        return None
    return math.ceil(len(leaves[0]) / (batch_size or 32))


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(_TaskModel):
    """Masked LM + next-sentence prediction (paper, section 3.1).

    Inputs: `input_ids`, `segment_ids`, `input_mask`, `masked_lm_positions` [B, P].
    Outputs: `mlm_logits` [B, P, V] (only at the masked positions) and `nsp_logits` [B, 2].
    `compile()` defaults to the paper's loss: mean cross-entropy over the real predictions
    (weighted by `masked_lm_weights`) plus the NSP cross-entropy; see
    `kbert.data.inputs.pretraining_targets`. With `next_sentence=False` there is no NSP head
    and the loss is the masked LM's alone (the paper's "No NSP" ablation, section 5.1).

    Example:
    >>> model = BertPretrainer(BertConfig.preset("tiny", vocab_size=100))
    >>> out = model({"input_ids": ops.ones((2, 6), "int32"),
    ...              "masked_lm_positions": ops.ones((2, 3), "int32")})
    >>> tuple(out["mlm_logits"].shape), tuple(out["nsp_logits"].shape)
    ((2, 3, 100), (2, 2))
    """

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", mlm_head=None,
                 nsp_head=None, next_sentence: bool = True, **kwargs):
        super().__init__(backbone, **kwargs)
        c = self.config
        self.next_sentence = bool(next_sentence)
        self.mlm_head = mlm_head or MaskedLMHead(
            self.backbone.word_embeddings, c.hidden_act, c.layer_norm_epsilon,
            name="mlm", **self._head_kwargs())
        if not self.mlm_head.built:
            self.mlm_head.build((None, None, c.hidden_size))
        self.nsp_head = None
        if self.next_sentence:
            self.nsp_head = nsp_head or NextSentenceHead(name="nsp", **self._head_kwargs())
            if not self.nsp_head.built:
                self.nsp_head.build((None, c.hidden_size))

    @property
    def outputs_trained(self):
        return ("mlm_logits", "nsp_logits") if self.next_sentence else ("mlm_logits",)

    def call(self, inputs, training=False):
        out = self.backbone(inputs, training=training)
        positions = inputs.get("masked_lm_positions") if isinstance(inputs, dict) else None
        outputs = {"mlm_logits": self.mlm_head(out["sequence_output"], positions)}
        if self.next_sentence:
            outputs["nsp_logits"] = self.nsp_head(out["pooled_output"], training=training)
        return outputs

    def compile(self, optimizer="adam", loss=None, weighted_metrics=None, **kwargs):
        if loss is None:
            loss = {"mlm_logits": _sparse_ce(reduction="mean_with_sample_weight"),
                    "nsp_logits": _sparse_ce()}
            loss = {k: v for k, v in loss.items() if k in self.outputs_trained}
        if weighted_metrics is None:
            weighted_metrics = {k: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                                for k in self.outputs_trained}
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)

    def get_config(self):
        return {**super().get_config(), "next_sentence": self.next_sentence}


@keras.saving.register_keras_serializable(package="kbert")
class BertLeftToRightLM(_TaskModel):
    """A left-to-right language model on a causal encoder: the paper's "LTR & No NSP"
    ablation (section 5.1), next-token cross-entropy at every position, no NSP.

    Inputs: `input_ids`, `segment_ids`, `input_mask`. Output: `lm_logits` [B, T, V], where
    position t predicts token t + 1 (`kbert.heads.next_token_targets`). A config given here
    is made causal; a backbone given must be causal already.

    Example:
    >>> model = BertLeftToRightLM(BertConfig.preset("tiny", vocab_size=100))
    >>> model.config.causal, tuple(model({"input_ids": ops.ones((2, 6), "int32")})["lm_logits"]
    ...                            .shape)
    (True, (2, 6, 100))
    """

    outputs_trained = ("lm_logits",)

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", lm_head=None,
                 **kwargs):
        if not isinstance(backbone, BertBackbone):
            config = BertConfig.from_any(backbone if backbone is not None else BertConfig())
            backbone = BertBackbone(dataclasses.replace(config, causal=True),
                                    dtype=kwargs.get("dtype"))
        if not backbone.config.causal:
            raise ValueError("a left-to-right LM needs a causal encoder (BertConfig(causal=True))")
        super().__init__(backbone, **kwargs)
        c = self.config
        self.lm_head = lm_head or LeftToRightLMHead(
            self.backbone.word_embeddings, c.hidden_act, c.layer_norm_epsilon,
            name="ltr", **self._head_kwargs())
        if not self.lm_head.built:
            self.lm_head.build((None, None, c.hidden_size))

    def call(self, inputs, training=False):
        out = self.backbone(inputs, training=training)
        return {"lm_logits": self.lm_head(out["sequence_output"])}

    def compile(self, optimizer="adam", loss=None, weighted_metrics=None, **kwargs):
        if loss is None:
            loss = {"lm_logits": _sparse_ce(reduction="mean_with_sample_weight")}
        if weighted_metrics is None:
            weighted_metrics = {"lm_logits": [
                keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)


def _sparse_ce(**kwargs):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, **kwargs)


class _SingleHeadModel(_FineTunedModel):
    head_class = None

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", num_labels: int = 2,
                 head: keras.layers.Layer | None = None, dropout: float | None = None,
                 **kwargs):
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


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(_SingleHeadModel):
    """Sequence classification / regression on the pooled `[CLS]` output: logits [B, num_labels].

    Use `num_labels=1` for regression (STS-B): `compile()` then uses the mean squared error.
    With a preprocessor (`from_checkpoint`), `fit`/`evaluate`/`predict` take texts, or pairs
    as `x=(texts_a, texts_b)`, and labels as ids or as names from `labels`.

    Example:
    >>> model = BertClassifier(BertConfig.preset("tiny", vocab_size=100), num_labels=3)
    >>> tuple(model({"input_ids": ops.ones((2, 6), "int32")}).shape)
    (2, 3)
    >>> clf = BertClassifier.from_checkpoint("saved_models/NAME", labels=["neg", "pos"])
    ... # doctest: +SKIP
    >>> clf.compile()                                                  # doctest: +SKIP
    >>> clf.fit(["a fine film", "dull"], ["pos", "neg"], epochs=3)     # doctest: +SKIP
    >>> clf.save_checkpoint("out/")                                    # doctest: +SKIP
    """
    head_class = ClassificationHead
    head_name = "classifier"

    def default_loss(self):
        if self.num_labels == 1:
            return {"loss": keras.losses.MeanSquaredError()}
        return {"loss": _sparse_ce()}

    def default_metrics(self):
        if self.num_labels == 1:
            return [keras.metrics.MeanAbsoluteError(name="mae")]
        return super().default_metrics()

    def call(self, inputs, training=False):
        return self.head(self.backbone(inputs, training=training)["pooled_output"],
                         training=training)


@keras.saving.register_keras_serializable(package="kbert")
class BertTokenClassifier(_SingleHeadModel):
    """Token classification (NER) on the sequence output: logits [B, T, num_labels].

    With a preprocessor, `x` is a list of word lists and `y` their tags (names from `labels`
    or ids): each word's tag goes on its first WordPiece, the other positions get sample
    weight 0, and `compile()`'s loss and accuracy are the weighted means over the words.
    """
    head_class = TokenClassificationHead
    head_name = "tagger"

    def default_loss(self):
        return {"loss": _sparse_ce(reduction="mean_with_sample_weight")}

    def call(self, inputs, training=False):
        return self.head(self.backbone(inputs, training=training)["sequence_output"],
                         training=training)


@keras.saving.register_keras_serializable(package="kbert")
class BertQuestionAnswerer(_FineTunedModel):
    """SQuAD span QA: `start_logits` and `end_logits` [B, T] (paper, section 4.2).

    With a preprocessor, `x=(questions, contexts)` and `y=(answer_starts, answer_texts)`
    (character offsets; "" for no answer); a long context gives one row per window.
    """
    head_name = "span"

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str",
                 head: keras.layers.Layer | None = None, **kwargs):
        super().__init__(backbone, **kwargs)
        self.head = head or SpanHead(name="span", **self._head_kwargs())
        if not self.head.built:
            self.head.build((None, None, self.config.hidden_size))

    def call(self, inputs, training=False):
        start, end = self.head(self.backbone(inputs, training=training)["sequence_output"])
        return {"start_logits": start, "end_logits": end}

    def default_loss(self):
        # The paper's loss: the mean of the start and end cross-entropies.
        return {"loss": {"start_logits": _sparse_ce(), "end_logits": _sparse_ce()},
                "loss_weights": {"start_logits": 0.5, "end_logits": 0.5}}

    def default_metrics(self):
        return {k: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                for k in ("start_logits", "end_logits")}


@keras.saving.register_keras_serializable(package="kbert")
class BertMultipleChoice(_SingleHeadModel):
    """Multiple choice (SWAG): inputs [B, C, T], one shared scorer, logits [B, C].

    With a preprocessor, `x=(contexts, endings)` with `endings` [B, C] strings, `y` the index
    of the right ending; `compile()`'s loss is the cross-entropy over the C choices.
    """
    head_class = MultipleChoiceHead
    head_name = "choice"

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str",
                 head: keras.layers.Layer | None = None, dropout: float | None = None,
                 **kwargs):
        kwargs.pop("num_labels", None)
        super().__init__(backbone, num_labels=1, head=head, dropout=dropout, **kwargs)

    def default_loss(self):
        return {"loss": _sparse_ce()}

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
