"""benchmarks/step_profile.py: each backend's profiler read back into kinds of work."""

import sys

import keras
import numpy as np

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import step_profile as sp  # noqa: E402


def test_op_names_fall_into_their_groups():
    assert sp._tf_group("bert/layer_3/attention/query/MatMul:MatMul") == ("matmul", False)
    assert sp._tf_group("gradient_tape/bert/layer_3/dropout_7/Mul:Mul") == ("dropout", True)
    assert sp._tf_group("bert/layer_0/output_layer_norm/add:AddV2")[0] == "layer norm"
    assert sp._tf_group("gradient_tape/bert/layer_0/output_layer_norm/Cast/Cast:Cast") == \
        ("cast", True)
    assert sp._is_tf_op("tf_Compute/123", "bert/layer_0/dropout/Mul:Mul")
    assert not sp._is_tf_op("tf_Compute/123", "ParallelFor")          # inside an op
    assert not sp._is_tf_op("tf_Compute/123", "ExecutorState::Process")
    assert sp._torch_group("aten::addmm") == "matmul"
    assert sp._torch_group("aten::native_dropout") == "dropout"
    assert sp._torch_group("aten::_fused_adamw_") == "optimizer"
    assert sp._xla_group("ynn_fusion.3") == "matmul"
    assert sp._xla_group("negate_exponential_fusion.2") == "fusion (XLA)"
    assert sp._xla_group("copy.1") == "other"


def test_a_training_step_is_profiled_on_this_backend(capsys):
    """A small model's `train_on_batch` under the backend's own profiler: its matrix products
    are found and take time; the printed lines add up to 100%."""
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="gelu"),
                              keras.layers.LayerNormalization(), keras.layers.Dropout(0.1),
                              keras.layers.Dense(8)])
    model.compile("adamw", "mse")
    x, y = np.ones((32, 64), "float32"), np.zeros((32, 8), "float32")

    def step():
        return model.train_on_batch(x, y, return_dict=False)

    step()
    times = sp.profile(step, steps=2)
    assert times.get("matmul", 0) > 0, times
    assert set(k.removesuffix(" (backward)") for k in times) <= set(sp.GROUPS), times
    sp.print_profile(times, step_ms=1.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("PROFILE") and len(lines) == len(times) + 1
    shares = [float(line.split("%")[0].split()[-1]) for line in lines[1:]]
    assert abs(sum(shares) - 100) < 0.5
