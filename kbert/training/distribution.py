"""Where training runs: one device, several GPUs, several workers, a TPU, or JAX devices.

`select_distribution` picks the topology; the `Distribution` it returns opens the strategy's
scope, splits each global batch across the input pipelines, and `prepare_for_fit` adapts a
compiled model to the two places where Keras' `fit` does not work under a `tf.distribute`
strategy as it does on one device.

Example:
>>> dist = select_distribution("default")
>>> dist.kind, dist.num_replicas, dist.is_chief
('default', 1, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from typing import Any, ContextManager

import keras

STRATEGIES = ("auto", "default", "mirrored", "multi-worker", "tpu", "data-parallel")


def _targets(features: dict[str, Any]) -> Any:
    # The tf.data inputs need TensorFlow; imported on use so this module does not.
    from kbert.data.inputs import pretraining_targets
    return pretraining_targets(features)


@dataclasses.dataclass
class Distribution:
    """The devices a run uses and how a global batch is split across them.

    `strategy` is a `tf.distribute.Strategy` on TensorFlow (None for one device); on JAX a
    `keras.distribution.DataParallel` is set globally and `strategy` is None.
    """

    kind: str
    strategy: Any = None       # a tf.distribute.Strategy (TensorFlow only)
    num_replicas: int = 1
    worker_index: int = 0

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    def scope(self) -> ContextManager:
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def dataset(self, make_stream: Callable[[], Any], global_batch_size: int,
                targets: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        """`make_stream()` gives global batches of features; returns what `fit` should read,
        mapped by `targets` (default: MLM + NSP, `kbert.data.inputs.pretraining_targets`).

        Every input pipeline reads the same deterministic stream and keeps its slice of each
        global batch, so global batch k is the same whatever the number of devices (and a
        resumed run can skip to its position).
        """
        if global_batch_size % self.num_replicas:
            raise ValueError(f"batch size {global_batch_size} is not divisible by the "
                             f"{self.num_replicas} replicas")
        targets = targets or _targets
        if self.strategy is None:
            return make_stream().map(targets)

        stream = make_stream()                  # built here: the same seeds as one device

        def per_pipeline(context: Any) -> Any:
            size = global_batch_size // context.num_input_pipelines
            start = context.input_pipeline_id * size
            ds = stream.map(lambda f: {k: v[start:start + size] for k, v in f.items()})
            ds = ds.rebatch(context.get_per_replica_batch_size(global_batch_size))
            return ds.map(targets)
        return self.strategy.distribute_datasets_from_function(per_pipeline)

    def prepare_for_fit(self, model: keras.Model, local_batch: Any) -> None:
        """Adapts a compiled `model` to `fit` under this strategy; call it once per model.

        `local_batch` is one batch of (features, targets) as a single device reads it.
        """
        if self.strategy is None:
            return
        if self.kind == "multi-worker":
            _logs_with_a_replica_axis(model)
        _build_metrics_from(model, local_batch)


def _logs_with_a_replica_axis(model: keras.Model) -> None:
    """Keras averages the per-replica logs of `train_step` over axis 0, which scalar logs lack
    under `MultiWorkerMirroredStrategy`: give each a length-1 axis. `train_step` is the public
    method `fit` calls (Keras' documented way to change a step)."""
    import tensorflow as tf
    step = model.train_step
    model.train_step = lambda data: {k: tf.reshape(v, [1]) for k, v in step(data).items()}


def _build_metrics_from(model: keras.Model, local_batch: Any) -> None:
    """Keras' `fit` builds the compiled metrics from its first batch reduced across replicas,
    which fails under `MultiWorkerMirroredStrategy`; hand it a local batch instead.

    The one Keras private left in the training code: `_maybe_symbolic_build` has no public
    counterpart, and `fit` calls it before any callback runs.
    """
    build = model._maybe_symbolic_build
    model._maybe_symbolic_build = (
        lambda iterator=None, data_batch=None: build(data_batch=local_batch))


def select_distribution(kind: str = "auto", tpu: str | None = None) -> Distribution:
    """One entry point for every topology.

    TensorFlow: "tpu" (a `TPUClusterResolver`, `tpu` names it; "auto" picks it when `TPU_NAME`
    is set), "multi-worker" (`MultiWorkerMirroredStrategy` from `TF_CONFIG`; "auto" when it is
    set), "mirrored" (every GPU, or every logical CPU when there is no GPU; "auto" with 2+ GPUs),
    "default" (one device). JAX: "data-parallel" (`keras.distribution.DataParallel` over all
    devices; "auto" with 2+ devices). PyTorch: one device.
    """
    if kind not in STRATEGIES:
        raise ValueError(f"unknown strategy {kind!r}; choose one of {', '.join(STRATEGIES)}")
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_distribution(kind)
    if backend != "tensorflow":
        if kind not in ("auto", "default"):
            raise ValueError(f"strategy {kind!r} is not available on the {backend} backend")
        return Distribution("default")
    return _tensorflow_distribution(kind, tpu)


def _jax_distribution(kind: str) -> Distribution:
    import jax
    if kind in ("auto", "data-parallel") and (kind == "data-parallel" or jax.device_count() > 1):
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        return Distribution("data-parallel", None, jax.device_count(), jax.process_index())
    if kind not in ("auto", "default"):
        raise ValueError(f"strategy {kind!r} needs the tensorflow backend")
    return Distribution("default")


def _tensorflow_distribution(kind: str, tpu: str | None) -> Distribution:
    import tensorflow as tf
    if kind == "auto":                          # TPU and TF_CONFIG first: listing devices
        kind = ("tpu" if tpu or os.environ.get("TPU_NAME") else          # starts the runtime
                "multi-worker" if os.environ.get("TF_CONFIG") else
                "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default")
    if kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif kind == "multi-worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        strategy = tf.distribute.MirroredStrategy([d.name for d in devices])
    else:
        return Distribution("default")
    resolver = strategy.cluster_resolver
    index = resolver.task_id if resolver is not None and resolver.task_id is not None else 0
    return Distribution(kind, strategy, strategy.num_replicas_in_sync, int(index))
