"""The base of every task model: a backbone plus heads, with the encoder config in `get_config`."""

import sys
import warnings
from typing import Any

import keras

from kbert import hardware
from kbert.models import compilation
from kbert.network.backbone import BertBackbone
from kbert.network.config import BertConfig


class TaskModel(keras.Model):
    """A backbone plus heads; `get_config` stores the encoder config and the head options."""

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(backbone, BertBackbone):
            backbone = BertBackbone(backbone, dtype=kwargs.get("dtype"))
        self.backbone = backbone

    @property
    def config(self) -> BertConfig:
        return self.backbone.config

    def get_config(self) -> dict:
        return {**super().get_config(), "backbone": self.backbone.config.to_dict()}

    @classmethod
    def from_config(cls, config: dict) -> "TaskModel":
        config = dict(config)
        return cls(BertBackbone(config.pop("backbone")), **config)

    def checkpoint_components(self) -> tuple[BertBackbone, dict]:
        """(backbone, {head name: layer}): what `kbert.checkpoint.save` writes of this model."""
        raise TypeError(f"cannot save a {type(self).__name__} as a checkpoint; "
                        f"use its own save_checkpoint")

    def _head_kwargs(self) -> dict:
        c = self.config
        return dict(initializer_range=c.initializer_range, dtype=self.dtype_policy)

    def fit(self, *args: Any, **kwargs: Any) -> keras.callbacks.History:
        """`keras.Model.fit`, quiet about the pooler: heads that never read the pooled output
        (MLM without NSP, left-to-right LM, spans, tags) leave it without gradients."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
            return super().fit(*args, **kwargs)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """`keras.Model.compile`; on PyTorch `jit_compile=True` compiles the whole train step
        (`kbert.models.torch_step`), and "auto" (the default) does where
        `torch_step.compiles_by_default`."""
        if kwargs.get("jit_compile", "auto") == "auto" and keras.backend.backend() == "torch":
            from kbert.models import torch_step
            kwargs["jit_compile"] = torch_step.compiles_by_default()
        super().compile(*args, **kwargs)

    def _should_torch_compile(self) -> bool:
        """Keras' switch for `torch.compile` of its own train, test and predict functions:
        off, as the train step compiles through `torch_step.CompiledStep` and evaluation and
        prediction run eagerly (a compile per batch shape would not pay back there)."""
        return False

    def make_train_function(self, force: bool = False) -> Any:
        """Keras' (`fit` and `train_on_batch` build it), after two things that speed training:

        - TensorFlow: the optimizer's variables made here, not in the first trace of the step
          (Keras builds it there when no distribution strategy is set, and TensorFlow traces a
          function that creates variables twice: a MiniLM classifier's first `fit` took 13.8
          s, 8.4 with one trace).
        - PyTorch on a CPU: freed host memory kept for reuse (`kbert.hardware.
          keep_freed_memory`: a step without page faults).
        And on PyTorch with `jit_compile`, the step compiled whole (`kbert.models.torch_step`);
        on JAX, the persistent compilation cache on (`kbert.models.compilation`).
        """
        backend = keras.backend.backend()
        optimizer = getattr(self, "optimizer", None)
        if (backend == "tensorflow" and optimizer is not None and not optimizer.built
                and self.layers and all(layer.built for layer in self.layers)):
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)
        hardware.keep_freed_memory(backend)
        compilation.enable_persistent_cache()          # JAX: a second run compiles nothing
        trainer: Any = self                # Keras' attributes, untyped
        if backend == "torch" and trainer.jit_compile and (force or trainer.train_function is None):
            from kbert.models import torch_step
            reason = torch_step.unavailable()
            if reason is None:
                trainer.train_function = torch_step.CompiledStep(self)
                return trainer.train_function
            print(f"jit_compile=True: {reason}; the step runs eagerly (jit_compile=False)",
                  file=sys.stderr)
            trainer.jit_compile = False
        return super().make_train_function(force)


@keras.saving.register_keras_serializable(package="kbert")
class SparseCategoricalCrossentropy(keras.losses.SparseCategoricalCrossentropy):
    """Keras' sparse categorical cross-entropy on [N, C] rows: logits [..., C] are flattened
    first and the per-example losses given back in their shape [...].

    PyTorch's cross-entropy takes the classes on axis 1, so Keras moves them there for a
    [B, P, C] input: the masked LM's [32, 20, 30522] logits were copied to [32, 30522, 20] and
    back, and its log-softmax ran along a strided axis (a bfloat16 `mini` pretraining step:
    ~60 ms of ~870). Rows are what every backend's kernel reads best. On TensorFlow the rows'
    loss is `kbert.network.tf_gradients.softmax_cross_entropy_rows`.
    """

    def call(self, y_true: Any, y_pred: Any) -> Any:
        classes = keras.ops.shape(y_pred)[-1]
        labels, logits = keras.ops.reshape(y_true, (-1,)), keras.ops.reshape(y_pred, (-1, classes))
        if (keras.backend.backend() == "tensorflow" and self.from_logits
                and self.ignore_class is None):
            from kbert.network import tf_gradients
            rows = tf_gradients.softmax_cross_entropy_rows(labels, logits)
        else:
            rows = super().call(labels, logits)
        return keras.ops.reshape(rows, keras.ops.shape(y_pred)[:-1])


def sparse_ce(**kwargs: Any) -> keras.losses.Loss:
    """Sparse categorical cross-entropy on logits (every task's classification loss)."""
    return SparseCategoricalCrossentropy(from_logits=True, **kwargs)
