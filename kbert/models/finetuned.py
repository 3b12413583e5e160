"""What the fine-tuning task models share: raw-text `fit`/`evaluate`/`predict` through an attached
preprocessor (`kbert.tasks.preprocessing`), `compile()` with the paper's recipe (AdamW, weight decay
0.01 but none on LayerNorm and biases, lr 5e-5 with 10% warmup then linear decay over the
training steps, known at `fit` from the dataset's size × epochs), and checkpoint directories in
and out (`from_checkpoint`, `save_checkpoint`).
"""

import math
from typing import Any

import keras

from kbert import hub
from kbert.checkpoint.files import Contents, head_options_for, make_head, read, write
from kbert.models.base import TaskModel
from kbert.models.optimization import create_optimizer
from kbert.network.backbone import BertBackbone
from kbert.network.config import BertConfig


class FineTunedModel(TaskModel):
    """A task model for fine-tuning: raw-text `fit`/`evaluate`/`predict` through its
    preprocessor, `compile()` with the paper's recipe, checkpoint directories in and out."""

    head_name: str | None = None
    default_learning_rate = 5e-5

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        self.head_options: dict = {}    # stored in config.json by save_checkpoint (labels, ...)
        self._recipe: Any = None       # compile(optimizer=None)'s settings, for the schedule at fit

    # The preprocessor is kept out of Keras' tracking: it holds no weights, only TF tables.
    @property
    def preprocessor(self) -> Any:
        return self.__dict__.get("_preprocessor")

    @preprocessor.setter
    def preprocessor(self, value: Any) -> None:
        self.__dict__["_preprocessor"] = value

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "preprocessor":    # not via Keras / torch.nn.Module, which would track it
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    # --- checkpoints -----------------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, path: str, num_labels: int | None = None,
                        labels: list | None = None, max_seq_length: int | None = None, *,
                        version_2: bool = False, dtype: str | None = None,
                        **kwargs: Any) -> "FineTunedModel":
        """This task model on a kbert checkpoint directory (or a shipped name, or a hub
        address: `kbert.hub.resolve`), with its preprocessor attached.

        The checkpoint's head of this kind is kept unless `num_labels`/`labels` ask for
        another one (then a fresh head is made). `labels` are the label names in id order
        (tags for `BertTokenClassifier`); `num_labels=1` makes a regressor.
        `max_seq_length` defaults to 128 (384 for QA). `dtype`: the encoder's Keras policy
        (e.g. "mixed_bfloat16" to train in mixed precision; the head stays float32);
        `version_2`: a SQuAD 2.0 span head; other keywords go to the preprocessor.
        """
        # The preprocessor needs TensorFlow (tf-text): imported on use, so kbert.models
        # imports without it.
        from kbert.tasks.preprocessing import PREPROCESSORS
        ckpt: Contents = read(hub.resolve(path), dtype, head_dtype="float32" if dtype else None)
        head: str = cls.head_name   # type: ignore[assignment]  # every task model names its head
        if num_labels is not None and labels is not None and len(labels) != num_labels:
            raise ValueError(f"num_labels {num_labels} but {len(labels)} labels")
        old = ckpt.head_options.get(head, {})
        asked = labels is not None or num_labels is not None or version_2
        same = (labels is None or list(labels) == old.get("labels")) and (
            num_labels is None or head not in ckpt.heads or getattr(
                ckpt.heads[head], "units", num_labels) == num_labels)
        if head in ckpt.heads and (not asked or same):
            options, layer = dict(old), ckpt.heads[head]
        else:
            options = head_options_for(head, labels, num_labels, version_2)
            layer = cls.new_head(ckpt, options)
        model = cls.with_head(ckpt.backbone, layer)
        model.head_options = options
        length = max_seq_length or min(384 if head == "span" else 128,
                                       ckpt.config.max_position_embeddings)
        model.preprocessor = PREPROCESSORS[head](
            ckpt.vocab, ckpt.do_lower_case, length, options.get("labels"), **kwargs)
        return model

    @classmethod
    def new_head(cls, ckpt: Contents, options: dict) -> keras.layers.Layer:
        """The fresh head `from_checkpoint` puts on `ckpt` when it has none of this kind."""
        return make_head(cls.head_name, ckpt.backbone, options,  # type: ignore[arg-type]
                         dtype=head_dtype(ckpt.backbone))

    @classmethod
    def with_head(cls, backbone: BertBackbone, head: keras.layers.Layer) -> "FineTunedModel":
        """This task model on `backbone` with an existing `head` (weights shared)."""
        return cls(backbone, head=head)

    def checkpoint_components(self) -> tuple[Any, dict]:
        if self.head_name is None:
            return super().checkpoint_components()
        return self.backbone, {self.head_name: self.head}

    def save_checkpoint(self, directory: str, vocab: list | str | None = None,
                        do_lower_case: bool | None = None, dtype: str = "float32",
                        model_card: str | None = None, overwrite: bool = True) -> str:
        """Writes a checkpoint directory (atomically) that `kbert.load` reads; the head's
        labels go into config.json. The vocabulary comes from the preprocessor. `overwrite`
        replaces a checkpoint already there (as Keras' `model.save`); nothing else is ever
        replaced (`kbert.outputs`)."""
        p = self.preprocessor
        vocab, do_lower_case = self._vocabulary(vocab, do_lower_case)
        options = self.head_options or head_options_for(
            self.head_name, getattr(p, "labels", None), getattr(self, "num_labels", None))
        return write(directory, self.backbone, {self.head_name: self.head}, vocab,
                     do_lower_case, {self.head_name: options}, dtype, model_card,
                     overwrite=overwrite)

    def _vocabulary(self, vocab: list | str | None,
                    do_lower_case: bool | None) -> tuple[list | str, bool]:
        """The vocabulary and casing a checkpoint is written with: given, else the
        preprocessor's."""
        p = self.preprocessor
        if vocab is None and p is None:
            raise ValueError("save_checkpoint needs the vocabulary: attach a preprocessor "
                             "(from_checkpoint does) or pass vocab=")
        vocab = p.tokenizer.vocab if vocab is None else vocab
        if do_lower_case is None:
            do_lower_case = p.tokenizer.lower_case if p is not None else True
        return vocab, bool(do_lower_case)

    # --- compile ---------------------------------------------------------------------------
    def default_loss(self) -> dict:
        """The task's loss (and `loss_weights`), as `compile` arguments."""
        raise NotImplementedError

    def default_metrics(self) -> Any:
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def compile(self, optimizer: Any = None, loss: Any = None, weighted_metrics: Any = None, *,
                learning_rate: float | None = None, warmup: float = 0.1,
                weight_decay: float = 0.01, num_train_steps: int | None = None,
                loss_scale: bool = False, **kwargs: Any) -> None:
        """`keras.Model.compile` with the paper's defaults for what is left out.

        optimizer: None: AdamW from `kbert.models.optimization.create_optimizer` with peak
            `learning_rate` (5e-5), `warmup` (a fraction of the steps) then linear decay to 0
            over `num_train_steps` — when not given, the first `fit` sets it from its data
            (batches per epoch × epochs); a constant rate where that is unknown;
            `loss_scale` (for a mixed_float16 model) wraps it in dynamic loss scaling.
        loss, weighted_metrics: None: the task's (`default_loss`, `default_metrics`).
        """
        if optimizer is None:
            self._recipe = dict(learning_rate=learning_rate or self.default_learning_rate,
                                warmup=warmup, weight_decay=weight_decay,
                                steps=num_train_steps, compile=(loss, weighted_metrics, kwargs),
                                loss_scale=loss_scale)
            optimizer = self._paper_optimizer(num_train_steps)
        else:
            self._recipe = None
        defaults = self.default_loss() if loss is None else {"loss": loss}
        if weighted_metrics is None and "metrics" not in kwargs:
            weighted_metrics = self.default_metrics()
        super().compile(optimizer=optimizer, **defaults, weighted_metrics=weighted_metrics,
                        **kwargs)

    def _paper_optimizer(self, steps: int | None) -> keras.optimizers.Optimizer:
        r = self._recipe
        if not steps:    # unknown length: a constant rate (no decay within 2^31 steps)
            return create_optimizer("adamw", r["learning_rate"], 2 ** 31 - 1, 0,
                                    r["weight_decay"], loss_scale=r["loss_scale"])
        return create_optimizer("adamw", r["learning_rate"], steps,
                                int(round(r["warmup"] * steps)), r["weight_decay"],
                                loss_scale=r["loss_scale"])

    def _schedule(self, x: Any, y: Any, batch_size: int | None, epochs: int,
                  kwargs: dict) -> None:
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
    def _adapt(self, x: Any, y: Any, sample_weight: Any, batch_size: int | None,
               shuffle: bool = False) -> tuple[Any, Any, Any, int | None]:
        if self.preprocessor is None:
            return x, y, sample_weight, batch_size
        return self.preprocessor.adapt_inputs(x, y, sample_weight, batch_size, shuffle)

    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            sample_weight: Any = None, validation_data: Any = None, shuffle: bool = True,
            **kwargs: Any) -> keras.callbacks.History:
        """`keras.Model.fit`; with a preprocessor, `x` may be raw text (see the class)."""
        raw = x
        x, y, sample_weight, batch_size = self._adapt(x, y, sample_weight, batch_size, shuffle)
        shuffle = shuffle and x is raw    # a dataset made here is shuffled already
        if validation_data is not None and self.preprocessor is not None:
            if isinstance(validation_data, tuple):
                vx, vy, vw = keras.utils.unpack_x_y_sample_weight(validation_data)
                validation_data = self._adapt(vx, vy, vw, batch_size)[0]
            else:
                validation_data = self._adapt(validation_data, None, None, None)[0]
        self._schedule(x, y, batch_size, epochs, kwargs)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           sample_weight=sample_weight, validation_data=validation_data,
                           shuffle=shuffle, **kwargs)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 sample_weight: Any = None, **kwargs: Any) -> Any:
        x, y, sample_weight, batch_size = self._adapt(x, y, sample_weight, batch_size)
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight,
                                **kwargs)

    def predict(self, x: Any, batch_size: int | None = None, **kwargs: Any) -> Any:
        x, _, _, batch_size = self._adapt(x, None, None, batch_size)
        return super().predict(x, batch_size=batch_size, **kwargs)


def head_dtype(backbone: BertBackbone) -> Any:
    """A fresh head's dtype policy: float32 on an encoder in mixed precision (the logits and
    the loss in float32), else the encoder's."""
    policy = backbone.dtype_policy
    return "float32" if policy.compute_dtype != policy.variable_dtype else policy


def _batches_per_epoch(x: Any, batch_size: int | None) -> int | None:
    """Batches in one pass over `x` (a dataset with a known size, or arrays); None if unknown."""
    if hasattr(x, "cardinality"):
        n = int(x.cardinality())
        return n if n > 0 else None
    leaves = [v for v in (x.values() if isinstance(x, dict) else [x]) if hasattr(v, "__len__")]
    if not leaves:
        return None
    return math.ceil(len(leaves[0]) / (batch_size or 32))
