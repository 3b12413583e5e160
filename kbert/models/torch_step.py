"""The PyTorch training step compiled whole: what `jit_compile=True` runs on the torch backend.

Keras runs a torch step eagerly, and each of its ~35 layer calls per step goes through Keras'
Python (`Layer.__call__`, name scopes, dtype policies, tree maps) before a kernel starts: a
nano BERT step (2 layers, hidden 32, batch 4x16) took 15 ms where HF's eager loop takes 6, and
on a GPU the same overhead leaves the device idle (`mini` at batch 32: 82 ms a step against
HF's 12 on an H200). Keras' own `jit_compile=True` on torch (`torch.compile` of its whole step)
recompiles every step (dropout seeds are Python ints) until Dynamo gives up.

`CompiledStep` splits the step where autograd does:
1. the forward pass, the loss and the metrics' updates, compiled (`torch.compile`; AOTAutograd
   compiles their backward pass too), with no graph break: dropout draws from a counter-based
   hash of its `SeedGenerator`'s state (`kbert.network.dropout.Dropout._traced_torch_dropout`);
2. `loss.backward()`, which runs that compiled backward graph;
3. the optimizer's `apply` (global-norm clipping, weight decay, the learning-rate schedule and
   Adam's update as `torch._foreach_*` ops that Inductor fuses), compiled; eagerly where it
   branches on a value (gradient accumulation, loss scaling).
The gradients are dropped after the update (`grad = None`), as `zero_grad(set_to_none=True)`.
Each step object compiles its own copy of the step's code, so Dynamo's cache (eight entries
per code object) holds one model's graphs: a process that trains many models, as a test suite
or `kbert experiments` does, never runs out of entries and falls back to eager.

What stays in Keras: `fit`'s loop, callbacks, data adapters and the metrics' results. The first
step traces and compiles (tens of seconds on a CPU, Inductor caches its kernels on disk for the
next run); a new batch shape (the last, smaller batch; a length bucket) compiles once more
with dynamic shapes. `benchmarks/step_overhead.py` times it against HF and a bare step.

A kbert model compiled with `jit_compile=True` on PyTorch (`TaskModel.compile`; "auto" on a
GPU) trains through it in `fit` and `train_on_batch`; the first step runs eagerly (it builds
what Keras builds on a first call, which would otherwise cost a second compile).
"""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Callable
from typing import Any

import keras
import numpy as np


def _own_copy(function: Callable[..., Any], owner: object) -> Callable[..., Any]:
    """`function` bound to `owner` with a code object of its own: Dynamo keeps its compiled
    graphs per code object (at most `recompile_limit`, 8), so per-model copies keep one
    model's graphs from crowding out another's."""
    plain = function.__func__ if isinstance(function, types.MethodType) else function
    code = plain.__code__.replace()                              # an equal, distinct code object
    copy = types.FunctionType(code, plain.__globals__, plain.__name__, plain.__defaults__,
                              plain.__closure__)
    return types.MethodType(copy, owner)


class CompiledStep:
    """A torch-backend Keras model's train step, compiled (see the module's docstring); called
    as Keras calls its `train_function`: with `[data]`, returning the metrics' results."""

    def __init__(self, model: keras.Model, backend: str = "inductor") -> None:
        import torch
        self.model = model
        self.forward = torch.compile(_own_copy(self._forward, self), backend=backend)
        self.update = torch.compile(_own_copy(self._update, self), backend=backend)
        if _branches(model.optimizer):
            self.update = self._update           # eager: its branches would break the graph
        self._params: list[Any] | None = None
        self._variables: list[Any] | None = None

    def _forward(self, x: Any, y: Any, sample_weight: Any) -> tuple[Any, Any]:
        import torch
        model = self.model
        y_pred = model(x, training=True) if model._call_has_training_arg else model(x)
        loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                   training=True)
        with torch.no_grad():
            rows = next(i for i in keras.tree.flatten(x) if i is not None).shape[0]
            model._loss_tracker.update_state(loss, sample_weight=rows)
            logs = model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        if model.optimizer is not None:
            loss = model.optimizer.scale_loss(loss)
        return loss, logs

    def _update(self, grads: list[Any]) -> None:
        import torch
        with torch.no_grad():
            self.model.optimizer.apply(grads, self._variables)

    def __call__(self, data: Any) -> Any:
        from keras.src.trainers.data_adapters import data_adapter_utils
        # `train_on_batch` passes NumPy arrays as given (`fit`'s adapters, tensors): traced,
        # they would make Dynamo's guards on NumPy inputs, and a recompile per call
        batch = keras.tree.map_structure(
            lambda v: keras.ops.convert_to_tensor(v) if isinstance(v, np.ndarray) else v, data[0])
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(batch)
        if self._variables is None:              # the first step: Keras' own, eagerly
            self._variables = list(self.model.trainable_weights)
            self._params = [v.value for v in self._variables]
            self.model.zero_grad(set_to_none=True)
            logs = self.model.train_step(batch)
            self.model.zero_grad(set_to_none=True)      # Keras leaves the step's gradients
            return logs
        loss, logs = self.forward(x, y, sample_weight)
        loss.backward()
        params = self._params or []
        grads = [p.grad for p in params]
        self.update(grads)
        for p in params:
            p.grad = None
        return logs


def _branches(optimizer: Any) -> bool:
    """Whether `optimizer.apply` branches on a tensor's value (`ops.cond`): gradient
    accumulation (apply every n-th batch) and loss scaling (skip a step whose gradients
    overflowed). Traced, each branch is a graph break; such an update runs eagerly."""
    return bool(getattr(optimizer, "gradient_accumulation_steps", None)
                or isinstance(optimizer, keras.optimizers.LossScaleOptimizer))


def unavailable() -> str | None:
    """Why this machine cannot compile the step, in words, or None. Inductor writes C++ (on a
    CPU) or Triton (on a GPU, with a C launcher) and needs a C++ compiler to build it."""
    compiler = os.environ.get("CXX") or next(
        (c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)
    if not compiler or not shutil.which(compiler):
        return ("compiling the PyTorch step needs a C++ compiler (g++ or clang++, or CXX set) "
                "and none was found")
    return None


def compiles_by_default() -> bool:
    """What `jit_compile="auto"` means for a kbert model on PyTorch: compile the step on a GPU
    (kernel launches bound its eager step) and run it eagerly on a CPU, where the first step's
    tracing (~30 s for any size of BERT) pays back only over thousands of steps of a small
    model; `jit_compile=True` compiles there too. `benchmarks/step_overhead.py` measures both."""
    import torch
    return bool(torch.cuda.is_available()) and unavailable() is None
