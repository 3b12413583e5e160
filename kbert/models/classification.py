"""One head on the encoder, `num_labels` outputs: sequence classification (and regression) on
the pooled `[CLS]` output, token classification (NER) on the sequence output."""

from typing import Any

import keras
from keras import ops  # noqa: F401  (the docstring examples)

from kbert.hints import Inputs
from kbert.models.base import sparse_ce
from kbert.models.finetuned import FineTunedModel
from kbert.network.backbone import BertBackbone
from kbert.network.config import BertConfig
from kbert.network.heads import ClassificationHead, TokenClassificationHead


class SingleHeadModel(FineTunedModel):
    head_class: Any = None

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", num_labels: int = 2,
                 head: keras.layers.Layer | None = None, dropout: float | None = None,
                 **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        self.num_labels = num_labels
        self.head_dropout = self.config.dropout if dropout is None else dropout
        self.head = head or self._make_head()

    @classmethod
    def with_head(cls, backbone: BertBackbone, head: keras.layers.Layer) -> "SingleHeadModel":
        return cls(backbone, num_labels=head.units, head=head)

    def _make_head(self) -> keras.layers.Layer:
        head = self.head_class(self.num_labels, dropout=self.head_dropout, name=self.head_name,
                               **self._head_kwargs())
        head.build((None, self.config.hidden_size))
        return head

    def get_config(self) -> dict:
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout": self.head_dropout}


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(SingleHeadModel):
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

    def default_loss(self) -> dict:
        if self.num_labels == 1:
            return {"loss": keras.losses.MeanSquaredError()}
        return {"loss": sparse_ce()}

    def default_metrics(self) -> Any:
        if self.num_labels == 1:
            return [keras.metrics.MeanAbsoluteError(name="mae")]
        return super().default_metrics()

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        return self.head(self.backbone(inputs, training=training)["pooled_output"],
                         training=training)


@keras.saving.register_keras_serializable(package="kbert")
class BertTokenClassifier(SingleHeadModel):
    """Token classification (NER) on the sequence output: logits [B, T, num_labels].

    With a preprocessor, `x` is a list of word lists and `y` their tags (names from `labels`
    or ids): each word's tag goes on its first WordPiece, the other positions get sample
    weight 0, and `compile()`'s loss and accuracy are the weighted means over the words.
    """
    head_class = TokenClassificationHead
    head_name = "tagger"

    def default_loss(self) -> dict:
        return {"loss": sparse_ce(reduction="mean_with_sample_weight")}

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        return self.head(self.backbone(inputs, training=training)["sequence_output"],
                         training=training)
