"""The paper's optimizer recipe (Devlin et al., 2018, appendix A.2) with Keras optimizers.

Adam with β1 = 0.9, β2 = 0.999, ε = 1e-6, L2 weight decay 0.01 (decoupled, as in AdamW and the
original `AdamWeightDecayOptimizer`) on every variable except LayerNorm and bias variables,
learning-rate warmup over the first steps then linear decay to 0, gradients clipped to a global
norm of 1.0. LAMB (You et al., 2019) is the large-batch alternative.

Example:
>>> optimizer = create_optimizer(learning_rate=1e-4, total_steps=1000, warmup_steps=100)
>>> round(float(optimizer.learning_rate), 8)      # step 0 of the warmup
0.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import keras
from keras import ops

from kbert.hints import Tensor

if TYPE_CHECKING:   # type-only: the mixins below are Keras optimizers to the type checker
    from keras.optimizers import Optimizer as _Optimizer
else:
    _Optimizer = object

# Keras privates this module still uses, each where Keras has no public counterpart:
# - `_clip_gradients` (`_ClipAcrossReplicas`): the one hook between the gradients and the update;
# - `_momentums`, `_velocities`, `_get_variable_index` (`AdamW.update_step`): Adam's slots, read
#   as `keras.optimizers.Adam.update_step` itself reads them (new slots would double the memory
#   and change what a backup holds);
# - `_use_weight_decay`, `_trainable_variables_indices`, `_var_key` (`_DecayDecidedOnce`): Keras'
#   own decision (a regular expression on the name), taken once per variable at `build` and
#   looked up at every step after, so no step matches strings (TorchDynamo cannot trace `re`);
# - `_backend_update_step` (`AdamW`, torch): where Keras' torch optimizers update all variables
#   at once; `clipnorm` (`_ClipAcrossReplicas`): per-gradient clipping, which Keras prefers to
#   the global norm when both are set;
# - `_apply_weight_decay`, `_distribution_strategy` (`_tf_apply_weight_decay`): the weight decay
#   step, and the strategy it is applied under with TensorFlow's `maybe_merge_call`, as Keras'
#   TensorFlow optimizer applies it;
# - `_iterations` (`batches_seen`): the batch counter; the public `iterations` counts updates,
#   which under gradient accumulation is batches // accumulation steps.

# Variable names (Keras `variable.name`, the last part of the path) that get no weight decay:
# LayerNorm's scale and offset and every bias, the MLM head's `output_bias` included.
NO_WEIGHT_DECAY = ("gamma", "beta", "bias")
OPTIMIZERS = ("adamw", "lamb")


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate` over `warmup_steps`, then linear decay to
    `end_learning_rate` at `total_steps` (constant after).

    Example:
    >>> schedule = WarmupLinearDecay(1e-4, total_steps=100, warmup_steps=10)
    >>> [round(float(schedule(s)), 7) for s in (0, 5, 10, 55, 100, 120)]
    [0.0, 5e-05, 0.0001, 5e-05, 0.0, 0.0]
    """

    def __init__(self, peak_learning_rate: float, total_steps: int, warmup_steps: int = 0,
                 end_learning_rate: float = 0.0) -> None:
        if total_steps <= 0 or not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"need 0 <= warmup_steps ({warmup_steps}) <= total_steps "
                             f"({total_steps}) and total_steps > 0")
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step: Tensor) -> Tensor:
        step = ops.cast(step, "float32")
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * step / max(self.warmup_steps, 1)
        fraction = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
        decay = peak + (end - peak) * ops.minimum(fraction, 1.0)
        return ops.where(step < self.warmup_steps, warmup, decay)

    def get_config(self) -> dict[str, Any]:
        return {"peak_learning_rate": self.peak_learning_rate, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "end_learning_rate": self.end_learning_rate}


class _ClipAcrossReplicas(_Optimizer):
    """Clips the global norm of the gradient summed over replicas (Keras clips each replica's
    own part under a `tf.distribute` strategy, which changes the update with the device count).

    Under a strategy the gradients are summed, clipped, and handed on divided by the replica
    count, so the sum Keras takes next gives back the clipped global gradient. TensorFlow and
    PyTorch clip in their own ops (`_tf_clip_by_global_norm`, `_torch_clip_by_global_norm`).
    """

    def _clip_gradients(self, grads: list[Tensor]) -> list[Tensor]:
        backend = keras.backend.backend()
        if (backend not in ("tensorflow", "torch") or not self.global_clipnorm or self.clipnorm
                or any(g is None for g in grads)):
            return super()._clip_gradients(grads)
        if backend == "torch":
            return _torch_clip_by_global_norm(grads, self.global_clipnorm)
        import tensorflow as tf
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        grads = [tf.convert_to_tensor(g) for g in grads]   # a gather's rows summed, once
        if replicas > 1:
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        grads = _tf_clip_by_global_norm(grads, self.global_clipnorm)
        return [g / replicas for g in grads] if replicas > 1 else grads


def _tf_clip_by_global_norm(grads: list[Tensor], clip_norm: float) -> list[Tensor]:
    """Keras' global-norm clipping (`clip_by_global_norm` in keras/src/optimizers/
    base_optimizer.py) on dense TensorFlow gradients, each squared norm in one pass (`L2Loss`,
    ½·Σg², where Keras squares into a copy and sums it). A non-finite norm makes every gradient
    NaN, as there. Twin: Keras' `clip_by_global_norm`; a test holds them equal.
    """
    import tensorflow as tf
    norm = tf.sqrt(2.0 * tf.add_n([tf.cast(tf.nn.l2_loss(g), "float32") for g in grads]))
    scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)
    return [g * tf.cast(scale, g.dtype) for g in grads]


def _torch_clip_by_global_norm(grads: list[Tensor], clip_norm: float) -> list[Tensor]:
    """Keras' global-norm clipping (`clip_by_global_norm` in keras/src/optimizers/
    base_optimizer.py) in `torch._foreach_*` ops: one norm and one scaling over all gradients
    instead of three ops per gradient. A non-finite norm makes every gradient NaN, as there.
    Twin: Keras' `clip_by_global_norm`; a test holds them equal.
    """
    import torch
    norms = [n.float() for n in torch._foreach_norm(grads)]
    norm = torch.linalg.vector_norm(torch.stack(norms))
    scale = clip_norm / torch.clamp(norm, min=clip_norm) + (norm - norm)
    return torch._foreach_mul(grads, scale)


class _DecayDecidedOnce(_Optimizer):
    """Decides which variables get weight decay once, when the optimizer is built, and only
    looks the decision up at each step: Keras matches its exclusion pattern against the name of
    every variable at every step (`_use_weight_decay`), which `torch.compile` cannot trace."""

    def build(self, variables: Sequence[keras.Variable]) -> None:
        super().build(variables)
        self._decays = tuple(super(_DecayDecidedOnce, self)._use_weight_decay(v)
                             for v in variables)

    def _use_weight_decay(self, variable: keras.Variable) -> bool:
        decays: tuple[bool, ...] | None = getattr(self, "_decays", None)
        index = (self._trainable_variables_indices.get(self._var_key(variable))
                 if decays is not None else None)
        if index is None or decays is None:   # not built yet, or not one of its variables
            return super()._use_weight_decay(variable)
        return decays[index]


@keras.saving.register_keras_serializable(package="kbert")
class AdamW(_DecayDecidedOnce, _ClipAcrossReplicas, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with Adam's update as written in Algorithm 1 of Kingma & Ba
    (and in PyTorch, so HF transformers), and global-norm clipping that is the same on any
    number of devices.

    Adam's ε goes to the bias-corrected second moment: θ ← θ − lr·m̂ / (√v̂ + ε). Keras adds ε
    before the correction, to √v, which is the same as adding ε/√(1 − β2^t) to √v̂: 32× the
    nominal 1e-6 at the first update, still 1.4× after 1,000. That damps the early updates of
    weights whose gradients are small (in fine-tuning, most of a pretrained encoder), so Keras'
    form does not train like the recipe it is given.

    Example (one step from a gradient of 1e-6: Adam moves by about lr, whatever the scale):
    >>> import numpy as np
    >>> w = keras.Variable(np.zeros(1, "float32"))
    >>> adam = AdamW(learning_rate=0.1, epsilon=1e-6, weight_decay=0.0)
    >>> adam.apply([np.full(1, 1e-6, "float32")], [w])
    >>> round(float(-w.numpy()[0]), 4)
    0.05
    """

    # `_tf_step_scalars`' [(learning_rate, dtype, scalars)], during a TensorFlow update only
    _tf_scalars: list[tuple[Tensor, Any, dict[str, Tensor]]] | None

    def update_step(self, gradient: Tensor, variable: keras.Variable,
                    learning_rate: Tensor) -> None:
        if keras.backend.backend() == "tensorflow" and not self.amsgrad:
            _tf_adam_update(self, gradient, variable, learning_rate)
        else:
            self.portable_update_step(gradient, variable, learning_rate)

    def _apply_weight_decay(self, variables: Sequence[keras.Variable]) -> None:
        if keras.backend.backend() == "tensorflow" and self.weight_decay:
            _tf_apply_weight_decay(self, variables)
        else:
            super()._apply_weight_decay(variables)

    def portable_update_step(self, gradient: Tensor, variable: keras.Variable,
                             learning_rate: Tensor) -> None:
        """The update in `keras.ops`, the reference of the fused ones.

        Twins: `_tf_adam_update` (one kernel per variable on TensorFlow) and
        `_torch_adam_update` (all variables at once on torch); a test holds them equal."""
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1_power = ops.power(ops.cast(self.beta_1, dtype), step)
        beta_2_power = ops.power(ops.cast(self.beta_2, dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        m_hat = ops.divide(m, 1 - beta_1_power)
        v_hat = ops.divide(v, 1 - beta_2_power)
        self.assign_sub(variable, ops.divide(ops.multiply(m_hat, lr),
                                             ops.add(ops.sqrt(v_hat), self.epsilon)))

    def _backend_update_step(self, grads: list[Tensor],
                             trainable_variables: list[keras.Variable],
                             learning_rate: Tensor) -> None:
        backend = keras.backend.backend()
        if backend == "torch" and not self.amsgrad:
            _torch_adam_update(self, grads, trainable_variables, learning_rate)
        elif backend == "tensorflow":
            self._tf_scalars = []        # `_tf_step_scalars`: made afresh for each update
            try:
                super()._backend_update_step(grads, trainable_variables, learning_rate)
            finally:
                self._tf_scalars = None
        else:
            super()._backend_update_step(grads, trainable_variables, learning_rate)


def _tf_adam_update(optimizer: AdamW, gradient: Tensor, variable: keras.Variable,
                    learning_rate: Tensor) -> None:
    """`AdamW.update_step` in TensorFlow's fused Adam kernel (`ResourceApplyAdam`, what
    `tf.compat.v1.train.AdamOptimizer` runs): one pass over the variable and its moments
    instead of a dozen ops, each a pass, and a dozen fewer ops per variable for the first trace
    to build (a `mini` pretraining step on 2 cores: -30 ms, 687 -> 654 in bfloat16 and 1,012 ->
    984 in float32; its first step -1 s). The kernel adds its ε to √v before the bias
    correction; ε·√(1 − β2^t) there is Algorithm 1's ε after it:
    lr·√(1 − β2^t)/(1 − β1^t) · m / (√v + ε·√(1 − β2^t)) = lr/(1 − β1^t) · m / (√v̂ + ε).
    Twin: `AdamW.portable_update_step`; a test holds them equal.
    """
    import tensorflow as tf
    o = optimizer
    index = o._get_variable_index(variable)
    var = variable.value if isinstance(variable, keras.Variable) else variable
    m, v = (s[index].value for s in (o._momentums, o._velocities))
    tf.raw_ops.ResourceApplyAdam(
        var=var.handle, m=m.handle, v=v.handle,
        **_tf_step_scalars(o, learning_rate, var.dtype),
        grad=tf.cast(tf.convert_to_tensor(gradient), var.dtype))


def _tf_step_scalars(optimizer: AdamW, learning_rate: Tensor, dtype: Any) -> dict[str, Tensor]:
    """`ResourceApplyAdam`'s scalar arguments for this update, made once per update and dtype
    and shared by all its variables (made per variable they were a third of a traced training
    step's ops: a MiniLM classifier has 81 variables). Kept only during an update
    (`AdamW._backend_update_step`); a strategy hands each device its own `learning_rate`."""
    import tensorflow as tf
    o = optimizer
    made = getattr(o, "_tf_scalars", None)        # [(learning_rate, dtype, scalars)] or None
    for rate, kind, scalars in made or ():
        if rate is learning_rate and kind == dtype:
            return scalars
    step = tf.cast(o.iterations + 1, dtype)
    beta_1_power = tf.pow(tf.cast(o.beta_1, dtype), step)
    beta_2_power = tf.pow(tf.cast(o.beta_2, dtype), step)
    scalars = dict(
        beta1_power=beta_1_power, beta2_power=beta_2_power, lr=tf.cast(learning_rate, dtype),
        beta1=tf.cast(o.beta_1, dtype), beta2=tf.cast(o.beta_2, dtype),
        epsilon=tf.cast(o.epsilon, dtype) * tf.sqrt(1 - beta_2_power))
    if made is not None:
        made.append((learning_rate, dtype, scalars))
    return scalars


def _tf_apply_weight_decay(optimizer: AdamW, variables: Sequence[keras.Variable]) -> None:
    """Keras' TensorFlow weight decay (keras/src/backend/tensorflow/optimizer.py) as one
    product per variable, θ ← θ·(1 − lr·wd), what Keras' torch optimizer and PyTorch's AdamW
    compute: Keras evaluates the learning-rate schedule for each variable and takes
    θ − (θ·wd)·lr in three passes over it."""
    import tensorflow as tf
    o = optimizer
    decayed = [v for v in variables if o._use_weight_decay(v)]
    if not decayed:
        return
    learning_rate, factors = o.learning_rate, {}
    for variable in decayed:
        if variable.dtype not in factors:
            factors[variable.dtype] = 1 - ops.cast(learning_rate, variable.dtype) * ops.cast(
                o.weight_decay, variable.dtype)

    def decay(distribution: Any, decayed: list[keras.Variable],
              factors: dict[Any, Tensor]) -> None:      # per device under a strategy
        for variable in decayed:
            var = variable.value if isinstance(variable, keras.Variable) else variable
            distribution.extended.update(var, lambda v, factor: v.assign(v * factor),
                                         args=(factors[variable.dtype],), group=False)

    tf.__internal__.distribute.interim.maybe_merge_call(decay, o._distribution_strategy,
                                                        decayed, factors)


def _torch_adam_update(optimizer: AdamW, grads: list[Tensor], variables: list[keras.Variable],
                       learning_rate: Tensor) -> None:
    """`AdamW.update_step` for all variables at once, in PyTorch's fused Adam kernel (what
    `torch.optim.AdamW(fused=True)` runs, on a CPU as on a GPU): one pass over each variable
    and its moments instead of the nine of `torch._foreach_*` ops (a `mini` pretraining step's
    update, 11M parameters on 2 cores: 56 -> 6 ms); under torch.compile, which cannot trace that
    kernel, `torch._foreach_*` ops. Its update is Algorithm 1's, as here:
    m ← β1·m + (1 − β1)·g, v ← β2·v + (1 − β2)·g²,
    θ ← θ − lr/(1 − β1^t) · m / (√(v/(1 − β2^t)) + ε).
    The weight decay is not here: Keras' torch optimizer applies it to the decayed variables,
    all at once too, before this update.
    Twin: `AdamW.portable_update_step`; a test holds them equal.
    """
    import torch
    o = optimizer
    params = [v.value for v in variables]
    indices = [o._get_variable_index(v) for v in variables]
    m = [o._momentums[i].value for i in indices]
    v = [o._velocities[i].value for i in indices]
    grads = [g.to(p.dtype) for g, p in zip(grads, params)]
    step = ops.cast(o.iterations + 1, "float32")
    lr = ops.cast(learning_rate, "float32")
    with torch.no_grad():
        if not torch.compiler.is_compiling():
            torch._fused_adam_(params, grads, m, v, [], [step] * len(params), lr=lr,
                               beta1=o.beta_1, beta2=o.beta_2, weight_decay=0.0,
                               eps=o.epsilon, amsgrad=False, maximize=False)
            return
        # torch.compile has no tracing rule for the fused kernel; it fuses these ops itself.
        step_size = lr / (1 - o.beta_1 ** step)                # lr / (1 − β1^t)
        torch._foreach_lerp_(m, grads, 1 - o.beta_1)           # m += (g − m)(1 − β1)
        torch._foreach_lerp_(v, torch._foreach_mul(grads, grads), 1 - o.beta_2)
        denominator = torch._foreach_div(v, 1 - o.beta_2 ** step)   # v̂
        torch._foreach_sqrt_(denominator)
        torch._foreach_add_(denominator, o.epsilon)            # √v̂ + ε
        update = torch._foreach_div(m, denominator)
        torch._foreach_mul_(update, step_size)                 # lr·m̂ / (√v̂ + ε)
        torch._foreach_sub_(params, update)


@keras.saving.register_keras_serializable(package="kbert")
class Lamb(_DecayDecidedOnce, _ClipAcrossReplicas, keras.optimizers.Lamb):
    """`keras.optimizers.Lamb` whose global-norm clipping is the same on any number of devices."""


def check_schedule(epochs: int, batch_size: int, learning_rate: float, warmup: float,
                   min_batch_size: int = 1) -> None:
    """A one-line ValueError naming the first training setting out of range (fine-tuning and
    the retrievers' training; a retriever needs `min_batch_size=2`: a batch of one pair has
    no in-batch negative).

    >>> check_schedule(3, 32, 0.0, 0.1)
    Traceback (most recent call last):
    ...
    ValueError: learning_rate must be > 0, got 0.0
    """
    for name, value, ok, need in (
            ("epochs", epochs, epochs >= 1, ">= 1"),
            ("batch_size", batch_size, batch_size >= min_batch_size, f">= {min_batch_size}"),
            ("learning_rate", learning_rate, learning_rate > 0, "> 0"),
            ("warmup", warmup, 0 <= warmup < 1, "in [0, 1)")):
        if not ok:
            raise ValueError(f"{name} must be {need}, got {value!r}")


def create_optimizer(name: str = "adamw", learning_rate: float = 1e-4,
                     total_steps: int = 1_000_000, warmup_steps: int = 10_000,
                     weight_decay: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.999,
                     epsilon: float = 1e-6, global_clipnorm: float | None = 1.0,
                     gradient_accumulation_steps: int | None = None,
                     loss_scale: bool = False) -> keras.optimizers.Optimizer:
    """AdamW (or LAMB) with the paper's defaults and the warmup/linear-decay schedule.

    Args:
        name: "adamw" or "lamb".
        learning_rate: the peak learning rate (the paper: 1e-4 for batch 256).
        total_steps, warmup_steps: optimizer updates (the paper: 1M and 10k).
        gradient_accumulation_steps: average the gradients of this many batches per update.
        loss_scale: wrap in a `LossScaleOptimizer` (for `mixed_float16`).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    if gradient_accumulation_steps is not None and gradient_accumulation_steps <= 1:
        gradient_accumulation_steps = None
    schedule = WarmupLinearDecay(learning_rate, total_steps, warmup_steps)
    cls = AdamW if name == "adamw" else Lamb
    optimizer = cls(learning_rate=schedule, weight_decay=weight_decay, beta_1=beta_1,
                    beta_2=beta_2, epsilon=epsilon, global_clipnorm=global_clipnorm,
                    gradient_accumulation_steps=gradient_accumulation_steps)
    optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    if loss_scale:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def inner_optimizer(optimizer: keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
    """The optimizer that owns the variables (unwraps a `LossScaleOptimizer`)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def decayed_variables(optimizer: keras.optimizers.Optimizer,
                      variables: Sequence[keras.Variable]) -> list[str]:
    """Paths of the variables this optimizer applies weight decay to (for inspection)."""
    inner = inner_optimizer(optimizer)
    return [v.path for v in variables if inner._use_weight_decay(v)]


def batches_seen(optimizer: keras.optimizers.Optimizer) -> int:
    """Batches consumed so far (optimizer updates × gradient accumulation steps, plus the
    batches accumulated towards the next update)."""
    inner = inner_optimizer(optimizer)
    if not inner.gradient_accumulation_steps:
        return int(ops.convert_to_numpy(inner.iterations))
    return int(ops.convert_to_numpy(inner._iterations))
