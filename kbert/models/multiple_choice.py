"""Multiple choice (SWAG): one shared scorer over each [context, ending] pair."""

from typing import Any

import keras
from keras import ops

from kbert.hints import Inputs
from kbert.models.base import sparse_ce
from kbert.models.classification import SingleHeadModel
from kbert.network.backbone import BertBackbone, unpack_inputs
from kbert.network.config import BertConfig
from kbert.network.heads import MultipleChoiceHead


@keras.saving.register_keras_serializable(package="kbert")
class BertMultipleChoice(SingleHeadModel):
    """Multiple choice (SWAG): inputs [B, C, T], one shared scorer, logits [B, C].

    With a preprocessor, `x=(contexts, endings)` with `endings` [B, C] strings, `y` the index
    of the right ending; `compile()`'s loss is the cross-entropy over the C choices.
    """
    head_class = MultipleChoiceHead
    head_name = "choice"

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str",
                 head: keras.layers.Layer | None = None, dropout: float | None = None,
                 **kwargs: Any) -> None:
        kwargs.pop("num_labels", None)
        super().__init__(backbone, num_labels=1, head=head, dropout=dropout, **kwargs)

    @classmethod
    def with_head(cls, backbone: BertBackbone, head: keras.layers.Layer) -> "BertMultipleChoice":
        return cls(backbone, head=head)

    def default_loss(self) -> dict:
        return {"loss": sparse_ce()}

    def _make_head(self) -> keras.layers.Layer:
        head = MultipleChoiceHead(dropout=self.head_dropout, name="choice", **self._head_kwargs())
        head.build((None, self.config.hidden_size))
        return head

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        input_ids, segment_ids, input_mask = unpack_inputs(inputs)
        batch, choices = ops.shape(input_ids)[0], ops.shape(input_ids)[1]
        flat = {k: ops.reshape(v, (-1, ops.shape(v)[-1]))                      # [B·C, T]
                for k, v in (("input_ids", input_ids), ("segment_ids", segment_ids),
                             ("input_mask", input_mask))}
        pooled = self.backbone(flat, training=training)["pooled_output"]      # [B·C, H]
        scores = self.head(pooled, training=training)                         # [B·C, 1]
        return ops.reshape(scores, (batch, choices))                          # [B, C]
