"""The Keras runtime: the model's pass for each `kbert.load` method, compiled once per backend.

`ForwardPasses` keeps one compiled function per method ("kind"): a `tf.function` with unknown
batch and length on TensorFlow, a TorchScript trace on PyTorch (both run any packed shape), and a
`jax.jit` per bucket shape on JAX, whose static shapes need each batch padded to its bucket
(`kbert.runtime.batching`). The passes themselves are
`kbert.runtime.passes.run_pass`; `kbert.pipeline.Bert` tokenizes, batches and post-processes
around them.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import keras
from keras import ops

from kbert.runtime.kinds import Kind
from kbert.runtime.passes import run_pass

if TYPE_CHECKING:
    import numpy as np

    from kbert.network.backbone import BertBackbone

# A compiled pass: a dict of features in, the pass's output (backend tensors) out.
Compiled = Callable[[dict[str, Any]], Any]


class ForwardPasses:
    """The model's forward pass for each method, compiled once (JAX: once per bucket shape).

    `traces` counts how often a function body was traced; `shapes` holds the (kind, bucket
    shapes) it has run on. JAX compiles for static shapes, so its inputs are padded to the
    bucket; a TensorFlow graph (input signature with unknown sizes) and a PyTorch trace take
    any batch and length, so they run on the batch as packed, without padding compute.
    """

    runtime = "keras"

    def __init__(self, backbone: BertBackbone, heads: dict[str, Any],
                 dtype: str = "float32") -> None:
        self.backbone, self.heads = backbone, heads
        self.dtype = dtype
        self.backend = keras.backend.backend()
        self.pads = self.backend == "jax"
        self.traces = 0
        self.shapes: set[tuple] = set()
        self._functions: dict[tuple, Compiled] = {}

    def _body(self, kind: Kind, features: dict[str, Any]) -> Any:
        self.traces += 1
        return run_pass(self.backbone, self.heads, kind, features)

    def _traced(self, kind: Kind, features: Mapping[str, Any]) -> Any:
        return self._body(kind, dict(features))

    def _compile(self, kind: Kind, features: dict[str, Any]) -> Compiled:
        if self.backend == "tensorflow":
            import tensorflow as tf
            # A partial, not a lambda: TF keys its "frequent retracing" warning on a function's
            # code, and these functions (one per method) share it but each trace once.
            # Unknown sizes: one graph runs every batch at its own shape (the kernels are the
            # same as for a fixed shape; padding would only add work).
            spec = {key: tf.TensorSpec([None, None], value.dtype)
                    for key, value in features.items()}
            return tf.function(functools.partial(self._traced, kind), input_signature=[spec])
        if self.backend == "jax":
            import jax
            variables = self._variables()

            def stateless(values: list[Any], features: dict[str, Any]) -> Any:
                with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                    return self._body(kind, dict(features))
            jitted = jax.jit(stateless)
            return lambda features: jitted([v.value for v in variables], features)
        return self._torch_trace(kind, features)

    def _torch_trace(self, kind: Kind, features: dict[str, Any]) -> Compiled:
        """The pass as a TorchScript trace: the recorded tensor ops replayed without Keras'
        Python dispatch per layer (eager Keras spent ~2/3 of a short input's time there).

        The trace reads the layers' own parameters (a fine-tuned update is seen) and records
        sizes as they flow, so it runs any batch and length (the tests compare it with eager).
        """
        import torch

        runner, keys = self, sorted(features)

        class Pass(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers = torch.nn.ModuleList([runner.backbone, *runner.heads.values()])

            def forward(self, *tensors: Any) -> Any:
                return runner._body(kind, dict(zip(keys, tensors)))

        example = tuple(torch.as_tensor(features[key]) for key in keys)
        with torch.no_grad(), warnings.catch_warnings():
            # The tracer's notes are about Keras' input-shape checks and constants, which
            # are not data flow; torch.jit.trace itself is marked deprecated in torch 2.x.
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(Pass(), example, check_trace=False)

        def run(features: dict[str, Any]) -> Any:
            with torch.no_grad():
                return traced(*(torch.as_tensor(features[key]) for key in keys))
        return run

    def _variables(self) -> list[Any]:
        seen, out = set(), []
        for layer in (self.backbone, *self.heads.values()):
            for v in layer.variables:
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    def prepare(self, heads: Iterable[str]) -> None:
        """Nothing to make ahead: each method compiles on its first call (one trace; on JAX,
        one per bucket shape), in seconds."""

    def __call__(self, kind: Kind, features: dict[str, np.ndarray],
                 padded: dict[str, np.ndarray]) -> Any:
        """Numpy features → numpy output of the `kind` pass; `padded` is the batch padded to
        its bucket shape (what JAX runs: one compilation per bucket shape). TensorFlow and
        PyTorch run the packed batch through one function per kind, whatever its shape."""
        shape = (kind, tuple(sorted((k, v.shape) for k, v in padded.items())))
        key = shape if self.pads else (kind, tuple(sorted(features)))
        inputs = padded if self.pads else features
        if key not in self._functions:   # compiled once, reused by every later call
            self._functions[key] = self._compile(kind, inputs)
        self.shapes.add(shape)
        return keras.tree.map_structure(ops.convert_to_numpy, self._functions[key](inputs))
