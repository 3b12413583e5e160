"""The exported graphs' inputs and outputs, named for a server that knows nothing of kbert
(Triton, OpenVINO Model Server): what each graph reads and gives, and its dynamic dimensions.

Keras' exporters name a graph's inputs after the features (`input_ids`, `segment_ids`,
`input_mask`, int32 [batch, sequence]; the MLM graph also `masked_lm_positions` [batch, masks])
but its output after TensorFlow's last op (`Identity:0`) and, in ONNX, every dynamic dimension
`unk__N`. Here each graph's one output gets the name of what it is (`kinds.OUTPUT_OF`):

    embed          embeddings      [batch, 2, hidden]   [:, 0] the [CLS] state, [:, 1] the
                                                        masked mean of the last layer
    classifier     logits          [batch, labels]
    nsp            logits          [batch, 2]           index 0: B follows A
    tagger         logits          [batch, sequence, labels]
    span           span_logits     [batch, sequence, 2] [..., 0] start, [..., 1] end
    mlm_logits     logits          [batch, masks, vocab] at `masked_lm_positions`
    hidden_<i>_<j> hidden_states   [batch, sequence, layers, hidden]

ONNX names the dynamic dimensions (`dim_param`: batch, sequence, masks); OpenVINO's IR has no
names for dimensions, so its graphs name their tensors only. `describe` lists both for
export.json, read back from the graph written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from kbert.runtime.kinds import INPUT_DIMS, Kind, output_of


def name_onnx(path: str, kind: Kind) -> None:
    """Renames the output of the ONNX graph at `path` (in place, atomically) and names its
    dynamic dimensions, for the pass `kind`."""
    import onnx

    model = onnx.load(path)
    graph = model.graph
    name, dims = output_of(kind)
    old = graph.output[0].name
    for node in graph.node:                    # the producer, and any node reading it
        node.output[:] = [name if o == old else o for o in node.output]
        node.input[:] = [name if i == old else i for i in node.input]
    for value in graph.value_info:
        if value.name == old:
            value.name = name
    graph.output[0].name = name
    for value in graph.input:
        _name_dims(value, INPUT_DIMS[value.name])
    _name_dims(graph.output[0], dims)
    onnx.checker.check_model(model)
    tmp = path + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, path)


def _name_dims(value: Any, names: Sequence[str | None]) -> None:
    """`dim_param` for each dimension `names` names (a size the graph fixes is left)."""
    for dim, name in zip(value.type.tensor_type.shape.dim, names):
        if name and not dim.HasField("dim_value"):
            dim.dim_param = name


def name_openvino(model: Any, kind: Kind) -> Any:
    """The `openvino.Model` with its output tensor (and result) named for the pass `kind`, and
    its parameters named as their input tensors (they are already)."""
    name, _ = output_of(kind)
    model.output(0).get_tensor().set_names({name})
    model.get_results()[0].set_friendly_name(name)
    for parameter in model.get_parameters():
        parameter.set_friendly_name(parameter.output(0).get_any_name())
    return model


def describe_onnx(model: Any, kind: Kind) -> dict[str, list[dict[str, Any]]]:
    """{"inputs", "outputs": [{"name", "dtype", "shape"}]} of an ONNX `ModelProto`: a size
    where the graph fixes one, else the dimension's name."""
    from onnx import helper

    def entry(value: Any, names: Sequence[str | None]) -> dict[str, Any]:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or names[i])
                 for i, d in enumerate(tensor.shape.dim)]
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        return {"name": value.name, "dtype": dtype, "shape": shape}
    return {"inputs": [entry(v, INPUT_DIMS[v.name]) for v in model.graph.input],
            "outputs": [entry(model.graph.output[0], output_of(kind)[1])]}


def describe_openvino(model: Any, kind: Kind) -> dict[str, list[dict[str, Any]]]:
    """`describe_onnx` of an `openvino.Model`: its dynamic dimensions are named as in ONNX."""
    def entry(port: Any, names: Sequence[str | None]) -> dict[str, Any]:
        shape = [d.get_length() if d.is_static else names[i]
                 for i, d in enumerate(port.get_partial_shape())]
        return {"name": port.get_any_name(), "dtype": port.get_element_type().to_dtype().name,
                "shape": shape}
    return {"inputs": [entry(p, INPUT_DIMS[p.get_any_name()]) for p in model.inputs],
            "outputs": [entry(model.output(0), output_of(kind)[1])]}


__all__ = ["describe_onnx", "describe_openvino", "name_onnx", "name_openvino"]
