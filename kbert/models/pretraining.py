"""The pretraining task models: masked LM + next sentence (the paper's objective) and the
left-to-right LM of its "LTR & No NSP" ablation."""

import dataclasses
from typing import Any

import keras
from keras import ops  # noqa: F401  (the docstring examples)

from kbert.hints import Inputs
from kbert.models.base import TaskModel, sparse_ce
from kbert.network.backbone import BertBackbone
from kbert.network.config import BertConfig
from kbert.network.heads import LeftToRightLMHead, MaskedLMHead, NextSentenceHead


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(TaskModel):
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

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str",
                 mlm_head: keras.layers.Layer | None = None,
                 nsp_head: keras.layers.Layer | None = None, next_sentence: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        c = self.config
        self.next_sentence = bool(next_sentence)
        self.mlm_head = mlm_head or MaskedLMHead(
            self.backbone.word_embeddings, c.hidden_act, c.layer_norm_epsilon,
            name="mlm", **self._head_kwargs())
        if not self.mlm_head.built:
            self.mlm_head.build((None, None, c.hidden_size))
        self.nsp_head: Any = None
        if self.next_sentence:
            self.nsp_head = nsp_head or NextSentenceHead(name="nsp", **self._head_kwargs())
            if not self.nsp_head.built:
                self.nsp_head.build((None, c.hidden_size))

    @property
    def outputs_trained(self) -> tuple[str, ...]:
        return ("mlm_logits", "nsp_logits") if self.next_sentence else ("mlm_logits",)

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        out = self.backbone(inputs, training=training)
        positions = inputs.get("masked_lm_positions") if isinstance(inputs, dict) else None
        outputs = {"mlm_logits": self.mlm_head(out["sequence_output"], positions)}
        if self.next_sentence:
            outputs["nsp_logits"] = self.nsp_head(out["pooled_output"], training=training)
        return outputs

    def compile(self, optimizer: Any = "adam", loss: Any = None, weighted_metrics: Any = None,
                **kwargs: Any) -> None:
        if loss is None:
            loss = {"mlm_logits": sparse_ce(reduction="mean_with_sample_weight"),
                    "nsp_logits": sparse_ce()}
            loss = {k: v for k, v in loss.items() if k in self.outputs_trained}
        if weighted_metrics is None:
            weighted_metrics = {k: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                                for k in self.outputs_trained}
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)

    def get_config(self) -> dict:
        return {**super().get_config(), "next_sentence": self.next_sentence}

    def checkpoint_components(self) -> tuple[BertBackbone, dict]:
        heads = {"mlm": self.mlm_head, "nsp": self.nsp_head}
        return self.backbone, {k: v for k, v in heads.items() if v is not None}


@keras.saving.register_keras_serializable(package="kbert")
class BertLeftToRightLM(TaskModel):
    """A left-to-right language model on a causal encoder: the paper's "LTR & No NSP"
    ablation (section 5.1), next-token cross-entropy at every position, no NSP.

    Inputs: `input_ids`, `segment_ids`, `input_mask`. Output: `lm_logits` [B, T, V], where
    position t predicts token t + 1 (`kbert.network.heads.next_token_targets`). A config given here
    is made causal; a backbone given must be causal already.

    Example:
    >>> model = BertLeftToRightLM(BertConfig.preset("tiny", vocab_size=100))
    >>> model.config.causal, tuple(model({"input_ids": ops.ones((2, 6), "int32")})["lm_logits"]
    ...                            .shape)
    (True, (2, 6, 100))
    """

    outputs_trained = ("lm_logits",)

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str",
                 lm_head: keras.layers.Layer | None = None, **kwargs: Any) -> None:
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

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        out = self.backbone(inputs, training=training)
        return {"lm_logits": self.lm_head(out["sequence_output"])}

    def checkpoint_components(self) -> tuple[BertBackbone, dict]:
        return self.backbone, {"ltr": self.lm_head}

    def compile(self, optimizer: Any = "adam", loss: Any = None, weighted_metrics: Any = None,
                **kwargs: Any) -> None:
        if loss is None:
            loss = {"lm_logits": sparse_ce(reduction="mean_with_sample_weight")}
        if weighted_metrics is None:
            weighted_metrics = {"lm_logits": [
                keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)
