"""Extractive question answering (SQuAD): start and end logits over the tokens."""

from typing import Any

import keras

from kbert.hints import Inputs
from kbert.models.base import sparse_ce
from kbert.models.finetuned import FineTunedModel
from kbert.network.backbone import BertBackbone
from kbert.network.config import BertConfig
from kbert.network.heads import SpanHead


@keras.saving.register_keras_serializable(package="kbert")
class BertQuestionAnswerer(FineTunedModel):
    """SQuAD span QA: `start_logits` and `end_logits` [B, T] (paper, section 4.2).

    With a preprocessor, `x=(questions, contexts)` and `y=(answer_starts, answer_texts)`
    (character offsets; "" for no answer); a long context gives one row per window.
    """
    head_name = "span"

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str",
                 head: keras.layers.Layer | None = None, **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        self.head = head or SpanHead(name="span", **self._head_kwargs())
        if not self.head.built:
            self.head.build((None, None, self.config.hidden_size))

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        start, end = self.head(self.backbone(inputs, training=training)["sequence_output"])
        return {"start_logits": start, "end_logits": end}

    def default_loss(self) -> dict:
        # The paper's loss: the mean of the start and end cross-entropies.
        return {"loss": {"start_logits": sparse_ce(), "end_logits": sparse_ce()},
                "loss_weights": {"start_logits": 0.5, "end_logits": 0.5}}

    def default_metrics(self) -> Any:
        return {k: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                for k in ("start_logits", "end_logits")}
