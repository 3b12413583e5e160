"""TF Serving's REST API on a SavedModel: `:predict`, model status and metadata, as
`tensorflow_serving/g3doc/api_rest.md` defines them, so TF Serving's clients work unchanged.

A `SavedModelServable` is a base folder of numbered versions (`NAME/1/saved_model.pb`, the
layout `kbert export` writes and TF Serving reads) or one SavedModel folder (version 1). As TF
Serving's default version policy, the latest version is served; another version is "not found".
Each signature runs as `tf.saved_model.load` runs it: the outputs are the SavedModel's own.

Request bodies (`parse_predict`): `{"signature_name"?, "instances": [...]}` (row format: one
value per instance for a single input, else one object of named inputs per instance) or
`{"inputs": value | {name: value}}` (columnar). A string is UTF-8 text or `{"b64": "..."}`.
Responses (`predict_response`): `{"predictions": ...}` (row; a list of objects for several
outputs) or `{"outputs": ...}` (columnar); string outputs whose name ends in `_bytes` as
`{"b64": ...}`, other strings as text. Errors are `{"error": "..."}` (`TFServingError` carries
the status: 400 bad request, 404 not found, 503 unavailable).
"""

from __future__ import annotations

import base64
import os
import re
from typing import Any

import numpy as np


class TFServingError(Exception):
    """An error TF Serving answers with `{"error": message}` and `status`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


DEFAULT_SIGNATURE = "serving_default"


def saved_model_versions(path: str) -> dict[int, str]:
    """{version: folder} of the SavedModels at `path`: its numbered subfolders that hold a
    `saved_model.pb`, or {1: path} where `path` is one; {} where it is neither."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return {1: path}
    if not os.path.isdir(path):
        return {}
    found = {}
    for name in os.listdir(path):
        folder = os.path.join(path, name)
        if re.fullmatch(r"\d+", name) and os.path.isfile(os.path.join(folder, "saved_model.pb")):
            found[int(name)] = folder
    return found


class SavedModelServable:
    """The latest version of a SavedModel, loaded, with its signatures."""

    kind = "savedmodel"

    def __init__(self, name: str, path: str) -> None:
        versions = saved_model_versions(path)
        if not versions:
            raise ValueError(f"{path}: no SavedModel (saved_model.pb) in it or in a numbered "
                             "version folder")
        import tensorflow as tf
        try:       # a kbert export tokenizes in the graph: its ops must be registered first
            import tensorflow_text  # noqa: F401
        except ImportError:
            pass
        self.name, self.path = name, path
        self.version = max(versions)
        self.folder = versions[self.version]
        self._tf = tf
        self.loaded = tf.saved_model.load(self.folder)
        self.signatures = dict(self.loaded.signatures)
        self._signature_defs = _signature_defs(self.folder)
        # per signature, read once: its input specs, and whether requests to it may be merged
        self._inputs = {name: dict(fn.structured_input_signature[1])
                        for name, fn in self.signatures.items()}
        self._mergeable = {name: _row_wise(fn.structured_outputs)
                           for name, fn in self.signatures.items()}

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "path": self.path,
                "version": self.version, "signatures": sorted(self.signatures)}

    # --- GET -----------------------------------------------------------------------------------
    def check_version(self, version: str | None) -> None:
        if version is not None and version != str(self.version):
            raise TFServingError(f"Servable not found for request: Specific({self.name}, "
                                 f"{version})", 404)

    def status(self, version: str | None = None) -> dict:
        self.check_version(version)
        return {"model_version_status": [{
            "version": str(self.version), "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""}}]}

    def metadata(self, version: str | None = None) -> dict:
        self.check_version(version)
        return {"model_spec": {"name": self.name, "signature_name": "",
                               "version": str(self.version)},
                "metadata": {"signature_def": {"signature_def": self._signature_defs}}}

    # --- :predict ------------------------------------------------------------------------------
    def signature(self, name: str | None) -> Any:
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise TFServingError(f"Serving signature name: \"{name}\" not found in signature "
                                 f"def (this model has: {', '.join(sorted(self.signatures))})")
        return self.signatures[name]

    def input_specs(self, signature: str | None) -> dict:
        self.signature(signature)                       # a name it has, or the error
        return self._inputs[signature or DEFAULT_SIGNATURE]

    def mergeable(self, signature: str | None) -> bool:
        """Whether requests to `signature` may run as one batch and be split by rows: every
        output's shape is known beyond the first (batch) dimension, so no request's outputs
        depend on another's (a padded dimension would)."""
        self.signature(signature)
        return self._mergeable[signature or DEFAULT_SIGNATURE]

    def run(self, signature: str | None, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The signature's outputs {name: array} for `inputs` {name: array}."""
        fn = self.signature(signature)
        tf = self._tf
        specs = self._inputs[signature or DEFAULT_SIGNATURE]
        tensors = {k: tf.constant(v, dtype=specs[k].dtype) for k, v in inputs.items()}
        try:
            out = fn(**tensors)
        except (tf.errors.InvalidArgumentError, TypeError, ValueError) as e:
            raise TFServingError(_first_line(e)) from None
        return {k: v.numpy() for k, v in out.items()}


def _row_wise(outputs: dict) -> bool:
    return all(spec.shape.rank is not None and spec.shape.rank >= 1
               and None not in spec.shape.as_list()[1:] for spec in outputs.values())


def _signature_defs(folder: str) -> dict:
    """The SignatureDefs of the "serve" MetaGraph, as TF Serving's metadata gives them (the
    protobuf's JSON form, field names as in the .proto)."""
    from google.protobuf import json_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(folder, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = next((g for g in saved.meta_graphs if "serve" in g.meta_info_def.tags),
                 saved.meta_graphs[0])
    return {name: json_format.MessageToDict(sig, preserving_proto_field_name=True)
            for name, sig in graph.signature_def.items()
            if not name.startswith("__")}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- JSON <-> arrays --------------------------------------------------------------------------
def _decode(value: Any) -> Any:
    """JSON values to what numpy takes: {"b64": ...} to bytes, lists walked."""
    if isinstance(value, dict):
        if set(value) == {"b64"} and isinstance(value["b64"], str):
            try:
                return base64.b64decode(value["b64"], validate=True)
            except ValueError:
                raise TFServingError("a \"b64\" value is not valid base64") from None
        raise TFServingError("a value is a JSON object other than {\"b64\": ...}")
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _array(name: str, value: Any, spec: Any) -> np.ndarray:
    dtype = spec.dtype.as_numpy_dtype
    decoded = _decode(value)
    try:
        array = np.array(decoded, dtype=object if spec.dtype.name == "string" else dtype)
    except (ValueError, TypeError, OverflowError):
        raise TFServingError(f"input \"{name}\": the values do not make a {spec.dtype.name} "
                             "tensor (ragged lists, or values of the wrong type)") from None
    if array.dtype == object and spec.dtype.name == "string":
        if any(not isinstance(v, bytes) for v in array.reshape(-1)):
            raise TFServingError(f"input \"{name}\" takes strings, got other values")
    elif spec.dtype.name != "string" and array.dtype == object:
        raise TFServingError(f"input \"{name}\": ragged lists")
    shape = spec.shape
    if shape.rank is not None and array.ndim != shape.rank:
        raise TFServingError(f"input \"{name}\" has rank {array.ndim}, the signature takes "
                             f"rank {shape.rank} (shape {shape.as_list()})")
    return array


def parse_predict(body: Any, specs: dict) -> tuple[dict[str, np.ndarray], str, int]:
    """`:predict`'s JSON body → ({input name: array}, "row" | "columnar", rows)."""
    if not isinstance(body, dict):
        raise TFServingError("the request body must be a JSON object")
    unknown = set(body) - {"signature_name", "instances", "inputs"}
    if unknown:
        raise TFServingError(f"unknown field(s) {', '.join(sorted(unknown))}: a predict request "
                             "has \"instances\" or \"inputs\" (and \"signature_name\")")
    if ("instances" in body) == ("inputs" in body):
        raise TFServingError("the request needs exactly one of \"instances\" (row format) or "
                             "\"inputs\" (columnar format)")
    names = list(specs)
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise TFServingError("\"instances\" must be a non-empty list")
        if len(names) == 1 and not all(isinstance(i, dict) and set(i) == set(names)
                                       and "b64" not in i for i in instances):
            columns = {names[0]: instances}
        else:
            if not all(isinstance(i, dict) for i in instances):
                raise TFServingError(f"with several inputs ({', '.join(names)}) each instance "
                                     "is an object of named inputs")
            columns = {}
            for name in names:
                if any(name not in i for i in instances):
                    raise TFServingError(f"an instance lacks input \"{name}\"")
                columns[name] = [i[name] for i in instances]
            extra = {k for i in instances for k in i} - set(names)
            if extra:
                raise TFServingError(f"unknown input(s) {', '.join(sorted(extra))}; the "
                                     f"signature takes {', '.join(names)}")
        arrays = {n: _array(n, v, specs[n]) for n, v in columns.items()}
        return arrays, "row", len(instances)
    inputs = body["inputs"]
    if isinstance(inputs, dict) and not (len(names) == 1 and set(inputs) == {"b64"}):
        missing = set(names) - set(inputs)
        extra = set(inputs) - set(names)
        if missing or extra:
            raise TFServingError(f"the signature takes {', '.join(names)}; got "
                                 f"{', '.join(sorted(inputs)) or 'nothing'}")
        columns = inputs
    elif len(names) == 1:
        columns = {names[0]: inputs}
    else:
        raise TFServingError(f"with several inputs ({', '.join(names)}) \"inputs\" is an "
                             "object of named inputs")
    arrays = {n: _array(n, v, specs[n]) for n, v in columns.items()}
    rows = {a.shape[0] for a in arrays.values() if a.ndim}
    return arrays, "columnar", rows.pop() if len(rows) == 1 else 0


def _jsonable(name: str, array: np.ndarray) -> Any:
    if array.dtype == object or array.dtype.kind == "S":
        binary = name.endswith("_bytes")

        def text(v: bytes) -> Any:
            if binary:
                return {"b64": base64.b64encode(v).decode("ascii")}
            return v.decode("utf-8", errors="replace")
        return np.vectorize(text, otypes=[object])(array).tolist() if array.size else \
            array.tolist()
    return array.tolist()


def predict_response(outputs: dict[str, np.ndarray], form: str, rows: int) -> dict:
    """The JSON body of a `:predict` answer (see the module docstring)."""
    if form == "columnar":
        if len(outputs) == 1:
            ((name, value),) = outputs.items()
            return {"outputs": _jsonable(name, value)}
        return {"outputs": {n: _jsonable(n, v) for n, v in outputs.items()}}
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != rows:
            raise TFServingError(f"output \"{name}\" does not have the instances' {rows} rows; "
                                 "ask in the columnar format (\"inputs\")")
    if len(outputs) == 1:
        ((name, value),) = outputs.items()
        return {"predictions": _jsonable(name, value)}
    columns = {n: _jsonable(n, v) for n, v in outputs.items()}
    return {"predictions": [{n: columns[n][i] for n in columns} for i in range(rows)]}


__all__ = ["DEFAULT_SIGNATURE", "SavedModelServable", "TFServingError", "parse_predict",
           "predict_response", "saved_model_versions"]
