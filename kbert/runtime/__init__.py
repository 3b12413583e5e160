"""Where precision and runtime are chosen, once, for every `kbert.load` method.

    options.py       the runtimes ("keras", "openvino", "onnx") and dtypes ("auto", "float32",
                     "bfloat16", "int8"): `resolve` checks a pair and resolves "auto"
    passes.py        the model's pass per method ("kind"): one function every runtime runs
    keras_runner.py  `ForwardPasses`: the passes compiled per Keras backend
    graphs.py        the passes as ONNX files / OpenVINO IRs (Keras' `model.export`), export
                     directories and the cache of graphs made on first use
    graph_io.py      the graphs' inputs and outputs named for other servers (`logits`,
                     `embeddings`, dimensions `batch`, `sequence`), listed in export.json
    engines.py       `GraphRunner`: OpenVINO or ONNX Runtime over those graphs

`make_runner` picks one; `kbert.pipeline.Bert` calls it and never branches on either choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbert.runtime.options import DTYPES, RUNTIMES, RuntimeOptionError, resolve

if TYPE_CHECKING:
    from kbert.checkpoint.files import Contents
    from kbert.runtime.engines import GraphRunner
    from kbert.runtime.keras_runner import ForwardPasses


def make_runner(ckpt: Contents, runtime: str, dtype: str, folder: str | None = None,
                threads: int | None = None) -> ForwardPasses | GraphRunner:
    """The runner of `ckpt`'s passes for a resolved (runtime, dtype); `folder` holds exported
    graphs (an export directory's), `threads` caps the runtime's threads."""
    if runtime == "keras":
        from kbert.runtime.keras_runner import ForwardPasses
        return ForwardPasses(ckpt.backbone, ckpt.heads, dtype)
    from kbert.runtime.engines import GraphRunner
    if ckpt.path is None:
        raise RuntimeOptionError(f"runtime {runtime!r} makes its graphs from a checkpoint "
                                 f"directory: save the checkpoint, then load it from there")
    return GraphRunner(runtime, dtype, ckpt.path, folder=folder, threads=threads)


__all__ = ["DTYPES", "RUNTIMES", "RuntimeOptionError", "make_runner", "resolve"]
