"""Where a training step's time goes, by kind of work, on each Keras backend.

`profile(step)` runs `step` a few times under the backend's own profiler and returns
{group: milliseconds per step}; `print_profile` prints it as `PROFILE` lines (what
`benchmarks/pretrain_step.py --profile` relays). Groups: matrix products, dropout, GELU,
LayerNorm, softmax and the rest of attention, the optimizer update, precision casts
(TensorFlow: `Cast` ops, what mixed precision adds), everything else.

- TensorFlow: `tf.profiler` (the graph's ops, named by the Keras layer that made them:
  `.../layer_3/dropout_7/...`, `gradient_tape/...` for the backward pass).
- PyTorch: `torch.profiler`, the self CPU time of each `aten::` op.
- JAX: `jax.profiler`; XLA fuses the elementwise work into its matrix products and fusions, so
  only matrix products (`dot`), fusions and the rest can be told apart.
TensorFlow and JAX write XSpace protobufs, read here with TensorFlow's own proto module.
"""

import collections
import glob
import os
import re
import tempfile

GROUPS = ("matmul", "dropout", "gelu", "layer norm", "softmax/attention", "optimizer", "cast",
          "fusion (XLA)", "other")


_OPTIMIZER_OPS = ("addcdiv_", "addcmul_", "lerp_", "sqrt", "_fused_adamw_")


def _tf_group(name):
    """An op 'scope/.../name:Type' of a Keras TensorFlow graph → (group, backward?)."""
    kind = name.rsplit(":", 1)[-1]
    backward = name.startswith("gradient_tape/")
    if "MatMul" in kind or kind in ("Einsum", "Conv2D"):
        return "matmul", backward
    if kind == "Cast":
        return "cast", backward
    if "dropout" in name:
        return "dropout", backward
    if "layer_norm" in name:
        return "layer norm", backward
    if "/intermediate" in name:                    # the activation after the FFN's first dense
        return "gelu", backward
    if "Assign" in kind or "ResourceApply" in kind or "/adam" in name.lower() or \
            "optimizer" in name.lower():
        return "optimizer", False
    if re.search(r"/layer_\d+[^/]*/[A-Za-z]+(_\d+)?:", name):   # the block's own ops
        return "softmax/attention", backward
    return "other", backward


def _is_tf_op(line, name):
    """An event of TensorFlow's executor that ran an op: on its compute lines, not the
    executor's own events nor `ParallelFor`, the thread pool's span inside an op (counted
    twice otherwise: ~25 ms a `mini` step, inside the dropout masks' random op)."""
    return (line.startswith("tf_Compute") and not name.startswith("ExecutorState")
            and name != "ParallelFor")


def _torch_group(key):
    op = key.removeprefix("aten::")
    if op in ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_weight_int8pack_mm"):
        return "matmul"
    if "dropout" in op or op.startswith("bernoulli"):
        return "dropout"
    if op.startswith("gelu"):
        return "gelu"
    if "layer_norm" in op:
        return "layer norm"
    if "softmax" in op or "scaled_dot_product" in op or "attention" in op:
        return "softmax/attention"
    if op.startswith("_foreach") or op in _OPTIMIZER_OPS:
        return "optimizer"
    return "other"


_XLA_BOOKKEEPING = ("ThreadpoolListener", "ThunkExecutor", "end: ")


def _is_xla_op(plane, line, name):
    """An event of XLA's CPU runtime that ran an op: its thunks, on one line per client thread
    pool ("XLA Ops" on older jaxlibs), not the runtime's bookkeeping events beside them."""
    return (plane.startswith("/host:CPU") and ("XLA Ops" in line or line.startswith("tf_XLA"))
            and not name.startswith(_XLA_BOOKKEEPING))


def _xla_group(name):
    name = name.split(":")[0].lower()
    if name.startswith(("dot", "convolution", "custom-call", "ynn_", "onednn")):
        return "matmul"                  # YNNPACK/oneDNN fusions: a matmul and what XLA fused
    if "fusion" in name or name.startswith(("loop_", "input_", "wrapped_")):
        return "fusion (XLA)"
    return "other"


def _xspace_events(directory):
    """(plane name, line name, event name, milliseconds) of every XSpace under `directory`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    for path in glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            names = {k: v.name for k, v in plane.event_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    yield plane.name, line.name, names.get(event.metadata_id, ""), \
                        event.duration_ps / 1e9


def profile(step, steps=3):
    """{group or "group (backward)": ms per step} of `steps` calls of `step` (after warm-up)."""
    import keras
    backend = keras.backend.backend()
    totals = collections.Counter()
    if backend == "torch":
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        for e in prof.key_averages():
            if e.key.startswith("aten::"):
                totals[_torch_group(e.key)] += e.self_cpu_time_total / 1e3
    else:
        with tempfile.TemporaryDirectory() as directory:
            if backend == "tensorflow":
                import tensorflow as tf
                tf.profiler.experimental.start(directory)
                for _ in range(steps):
                    step()
                tf.profiler.experimental.stop()
                for _, line, name, ms in _xspace_events(directory):
                    if _is_tf_op(line, name):
                        group, backward = _tf_group(name)
                        totals[group + (" (backward)" if backward else "")] += ms
            else:
                import jax
                jax.profiler.start_trace(directory)
                for _ in range(steps):
                    jax.block_until_ready(step())
                jax.profiler.stop_trace()
                for plane, line, name, ms in _xspace_events(directory):
                    if _is_xla_op(plane, line, name):
                        totals[_xla_group(name)] += ms
    return {k: v / steps for k, v in totals.items()}


def print_profile(times, step_ms=None):
    """`PROFILE` lines: each group's ms per step and share, largest first."""
    total = sum(times.values())
    print(f"PROFILE {total:.0f} ms of profiled op time per step"
          + (f" (step {step_ms:.0f} ms)" if step_ms else ""), flush=True)
    for group, ms in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"PROFILE {ms:9.1f} ms {100 * ms / total:5.1f}%  {group}", flush=True)
