"""OpenVINO and ONNX Runtime runners: the passes as exported graphs, same outputs as Keras'.

`GraphRunner(kind, features, padded)` answers like `ForwardPasses`: numpy features of one packed
batch in, the pass's numpy output out. Graphs have dynamic batch and length, so batches run at
their packed shape (no bucket padding). `fill_mask`'s ("mlm", k) pass runs the "mlm_logits"
graph (every logit at the mask positions) and takes the k best in numpy, so one graph serves
every k; both embeddings come from the one "embed" graph (`kinds.graph_kind`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from kbert import hardware
from kbert.runtime import graphs
from kbert.runtime.kinds import Kind, graph_kind, input_names, kind_name

# A loaded graph: numpy int32 features in, its one float32 output out.
Session = Callable[[dict[str, np.ndarray]], np.ndarray]
OPENVINO_PRECISION = {"float32": "f32", "bfloat16": "bf16", "int8": None}


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k best values, their ids, logsumexp) along the last axis, as `ops.top_k` orders them.

    >>> values, ids, lse = top_k(np.array([[[1.0, 3.0, 2.0]]], "float32"), 2)
    >>> ids.tolist(), values.tolist()
    ([[[1, 2]]], [[[3.0, 2.0]]])
    """
    k = min(k, logits.shape[-1])
    part = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    values = np.take_along_axis(logits, part, axis=-1)
    order = np.argsort(-values, axis=-1, kind="stable")
    ids = np.take_along_axis(part, order, axis=-1)
    high = logits.max(axis=-1, keepdims=True)
    lse = (high + np.log(np.exp(logits - high).sum(axis=-1, keepdims=True)))[..., 0]
    return np.take_along_axis(values, order, axis=-1), ids.astype("int32"), lse


class GraphRunner:
    """Runs the passes of a checkpoint as graphs of one runtime ("openvino" or "onnx").

    Graphs come from `folder` (an export directory's) when it has them, else they are made from
    `checkpoint_dir` into the cache on first use. `threads` caps the runtime's threads (None:
    the cores this process may use, `hardware.usable_cores`).
    """

    pads = False

    def __init__(self, runtime: str, dtype: str, checkpoint_dir: str, folder: str | None = None,
                 threads: int | None = None) -> None:
        self.runtime, self.dtype, self.threads = runtime, dtype, threads
        self.checkpoint_dir, self.folder = checkpoint_dir, folder
        self.traces = 0                       # graphs loaded (the Keras runner's traces)
        self.shapes: set[tuple] = set()
        self._sessions: dict[Kind, Session] = {}
        self._cache: str | None = None        # the cache folder: hashes the weights, once

    def _cache_folder(self) -> str:
        if self._cache is None:
            self._cache = graphs.cache_dir(self.checkpoint_dir, self.runtime)
        return self._cache

    def _made(self, kind: Kind) -> str | None:
        """The graph file of `kind` (float32) where one is made: the export's, else the cache's."""
        if self.folder:
            path = graphs.graph_path(self.folder, kind, self.runtime)
            graphs.check_graph_file(self.folder, path)   # listed: there and whole, or an error
            if os.path.isfile(path):
                return path
        path = graphs.graph_path(self._cache_folder(), kind, self.runtime)
        return path if os.path.isfile(path) else None

    def _graph_file(self, kind: Kind) -> str:
        """The graph of `kind` at this runner's dtype, made (and quantized) where missing."""
        path = self._made(kind)
        if path is None:
            folder = self._cache_folder()
            graphs.convert_checkpoint(self.checkpoint_dir, folder, [kind], self.runtime)
            path = graphs.graph_path(folder, kind, self.runtime)
        if self.dtype == "int8":
            quantized = graphs.int8_path(path)
            if not os.path.isfile(quantized):
                graphs.quantize(self.runtime, path, quantized)
            path = quantized
        return path

    def _load(self, kind: Kind) -> Session:
        path = self._graph_file(kind)
        self.traces += 1
        try:
            if self.runtime == "openvino":
                return _openvino_session(path, self.dtype, self.threads)
            return _onnx_session(path, self.threads)
        except Exception as e:          # the runtimes' own errors: one line naming the file
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            fix = ("run `kbert export` again" if self.folder and path.startswith(self.folder)
                   else f"delete {os.path.dirname(path)} to make it again")
            raise graphs.ExportError(f"{path}: {self.runtime} cannot read this graph "
                                     f"({first[:200]}); {fix}") from e

    def prepare(self, heads: Iterable[str]) -> None:
        """Makes and loads now every graph the `heads` (and the embeddings) need, the missing
        ones in one child process, so no first call waits for its graph (~10-25 s each)."""
        kinds = graphs.default_kinds(heads)           # graph names already (no k-best kinds)
        missing = [k for k in kinds if self._made(k) is None]
        if missing:
            graphs.convert_checkpoint(self.checkpoint_dir, self._cache_folder(), missing,
                                      self.runtime)
        for kind in kinds:
            if kind not in self._sessions:
                self._sessions[kind] = self._load(kind)

    def __call__(self, kind: Kind, features: dict[str, np.ndarray],
                 padded: dict[str, np.ndarray] | None = None) -> Any:
        graph = graph_kind(kind)
        if graph not in self._sessions:
            self._sessions[graph] = self._load(graph)
        inputs = {name: np.ascontiguousarray(features[name], "int32")
                  for name in input_names(graph)}
        self.shapes.add((kind_name(kind), tuple(sorted((k, v.shape) for k, v in inputs.items()))))
        out = self._sessions[graph](inputs)
        if graph == "mlm_logits" and kind != graph:
            assert isinstance(kind, tuple)          # ("mlm", k): no other kind reads it
            return top_k(out, kind[1])
        if graph == "embed" and kind != graph:
            return out[:, 0 if kind == "embed_cls" else 1]
        return out


def _openvino_session(path: str, dtype: str, threads: int | None) -> Session:
    core = graphs.openvino_core()
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
    if OPENVINO_PRECISION[dtype]:
        config["INFERENCE_PRECISION_HINT"] = OPENVINO_PRECISION[dtype]
    config["INFERENCE_NUM_THREADS"] = int(threads or hardware.usable_cores())
    compiled = core.compile_model(core.read_model(path), "CPU", config)
    request = compiled.create_infer_request()
    output = compiled.output(0)

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        # A copy: the request reuses its output buffer on the next call.
        return np.array(request.infer(inputs)[output], np.float32)
    return run


def _onnx_session(path: str, threads: int | None) -> Session:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = int(threads or hardware.usable_cores())
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_outputs()[0].name       # the one output (`kinds.output_of`)

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(session.run([name], inputs)[0], np.float32)
    return run


__all__ = ["GraphRunner", "top_k"]
