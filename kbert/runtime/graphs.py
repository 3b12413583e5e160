"""The passes as ONNX files and OpenVINO IRs: written by `kbert export`, or made on first use.

A pass (`kbert.runtime.passes`) becomes a graph through Keras' own `model.export(format="onnx"
| "openvino")` on the TensorFlow backend, with every batch and length dynamic (one graph runs
any shape). Keras' exporters fix every size to 1 on PyTorch and export static shapes on JAX, and
the converters peak at gigabytes, so the graphs are made in a child process on TensorFlow (which
kbert's tokenizer needs anyway) from the checkpoint directory, whatever the caller's backend.

An export directory is a checkpoint directory (config.json, vocab.txt, weights) plus:

    export.json            {"format", "dtype", "kinds", "vocab_sha256", "heads", "kbert_version",
                            "graph_files", "graphs"}: "graphs" lists each pass's inputs and
                            outputs by name, dtype and shape (`kbert.runtime.graph_io`)
    openvino/<kind>.xml    (and .bin) one IR per pass; or
    onnx/<kind>.onnx       one ONNX file per pass

`kbert.load` reads it with the runtime named in export.json. Graphs made on first use for a
plain checkpoint go to a cache (`$KBERT_CACHE`, else ~/.cache/kbert) keyed by the checkpoint's
content, so each is made once per machine. Writes are atomic (a temporary name, then a rename).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert import outputs, progress
from kbert.checkpoint.files import WEIGHTS_FILE
from kbert.runtime import graph_io
from kbert.runtime.kinds import EMBED_KINDS, HEAD_KINDS, Kind, input_names, kind_name

if TYPE_CHECKING:
    from kbert.network.backbone import BertBackbone

MANIFEST = "export.json"
GRAPH_FORM = 4     # raised whenever the exported graphs change form (N-D MatMul, LayerNorm,
                   # GELU; named outputs and dimensions)
SUFFIX = {"onnx": ".onnx", "openvino": ".xml"}


class ExportError(ValueError):
    """An export directory that does not match its checkpoint, or a pass that cannot be made."""


def default_kinds(heads: Iterable[str]) -> list[Kind]:
    """The passes an export writes: the embeddings, and one per head `kbert.load` serves."""
    kinds: list[Kind] = list(EMBED_KINDS)
    for head in heads:
        kinds += HEAD_KINDS.get(head, ())
    return kinds


def parse_kind(name: str) -> Kind:
    """The kind a file name stands for (`kind_name`'s inverse)."""
    if name.startswith("hidden_"):
        return ("hidden", tuple(int(i) for i in name.split("_")[1:]))
    return name


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(directory: str) -> str:
    """The checkpoint's identity: a hash of its config, vocabulary and weights."""
    parts = [sha256_file(os.path.join(directory, name))
             for name in ("config.json", "vocab.txt", WEIGHTS_FILE)]
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:20]


def cache_dir(directory: str, fmt: str) -> str:
    """The cache folder of a checkpoint's graphs: its content hash, and the graph form (a
    graph made by an older kbert is made again)."""
    root = os.environ.get("KBERT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "kbert")
    return os.path.join(root, "graphs", f"{fingerprint(directory)}-{GRAPH_FORM}", fmt)


def graph_path(folder: str, kind: Kind, fmt: str) -> str:
    return os.path.join(folder, kind_name(kind) + SUFFIX[fmt])


def _sample_features(kind: Kind) -> dict[str, np.ndarray]:
    """A tiny batch to build the model before export ([2, 8] tokens, ids of any vocabulary)."""
    ids = np.array([[2, 5, 6, 7, 8, 3, 0, 0],
                    [2, 9, 10, 4, 3, 0, 0, 0]], "int32")
    features = {"input_ids": ids, "segment_ids": np.zeros_like(ids),
                "input_mask": (ids > 0).astype("int32")}
    if "masked_lm_positions" in input_names(kind):
        features["masked_lm_positions"] = np.array([[3], [3]], "int32")
    return features


def convert_pass(backbone: BertBackbone, heads: dict[str, Any], kind: Kind, fmt: str,
                 path: str) -> str:
    """Writes the `kind` pass as `path` (an ONNX file, or an OpenVINO .xml with its .bin)
    through Keras' `model.export`, with dynamic batch and length (TensorFlow backend), its
    output and dimensions named (`kbert.runtime.graph_io`)."""
    import keras
    import tensorflow as tf

    from kbert.network.layers import tracing_for_graphs
    from kbert.runtime.passes import PassModel
    if keras.backend.backend() != "tensorflow":
        raise ExportError("graphs are made on the TensorFlow backend (see convert_checkpoint)")
    model = PassModel(backbone, heads, kind)
    spec = {name: tf.TensorSpec([None, None], "int32", name=name) for name in input_names(kind)}
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp, tracing_for_graphs():
        out = os.path.join(tmp, os.path.basename(path))
        model(_sample_features(kind))                   # builds it; export needs a called model
        model.export(out, format=fmt, input_signature=[spec], verbose=False)
        if fmt == "openvino":
            _finish_openvino(out, kind)
        else:
            from kbert.runtime.onnx_rewrite import fuse_for_onnx_runtime
            fuse_for_onnx_runtime(out)
            graph_io.name_onnx(out, kind)
        for name in os.listdir(tmp):                    # the .xml last: readers look for it
            if not name.endswith(".xml"):
                os.replace(os.path.join(tmp, name), os.path.join(folder, name))
        if fmt == "openvino":
            os.replace(out, path)
    return path


@functools.cache
def openvino_core() -> Any:
    """The process's one `openvino.Core`, never destroyed.

    OpenVINO's CPU plugin gives the thread that compiles a model an alternate signal stack of
    its own and, when that Core's plugin is destroyed, puts back the stack it found and unmaps
    its own. Cores destroyed in another order than they were made leave the thread on an
    unmapped stack, and the next signal the thread handles (Ctrl-C, SIGTERM: CPython handles
    them on the alternate stack) ends the process with a segmentation fault. One Core makes one
    plugin."""
    import openvino as ov
    return ov.Core()


def _finish_openvino(path: str, kind: Kind) -> None:
    """Drops the results OpenVINO's TensorFlow reader adds for values the pass computes but
    does not return (shape scalars, the pooler of a pass that reads the sequence): the pass's
    own output is the first. Then names it (`graph_io.name_openvino`)."""
    import openvino as ov
    model = openvino_core().read_model(path)
    model = ov.Model([model.output(0)], model.get_parameters(), model.get_friendly_name())
    graph_io.name_openvino(model, kind)
    os.remove(path)
    os.remove(os.path.splitext(path)[0] + ".bin")
    ov.save_model(model, path, compress_to_fp16=False)


def describe_graph(path: str, fmt: str, kind: Kind) -> dict[str, list[dict[str, Any]]]:
    """The inputs and outputs of the graph file `path` (`graph_io.describe_onnx`)."""
    if fmt == "openvino":
        return graph_io.describe_openvino(openvino_core().read_model(path), kind)
    import onnx
    return graph_io.describe_onnx(onnx.load(path, load_external_data=False), kind)


def convert_checkpoint(directory: str, folder: str, kinds: Iterable[Kind], fmt: str) -> None:
    """Makes the passes of the checkpoint `directory` into `folder`, in a child process on
    TensorFlow whatever this process's backend.

    A process that made graphs keeps memory it no longer uses (TensorFlow's graph tools,
    the converters' garbage); a child gives all of it back, so a serving process stays at its
    model's size. The ONNX child runs tf2onnx without its two costs that scale with the
    weights (MiniLM with its MLM head and the embed pass: 10.0 -> 2.6 GB at the peak, 50 -> 25 s):
    tf2onnx rewrites every node's protobuf after each of its ~12 optimizers, 3 rounds, and
    upb (protobuf's default C implementation) frees a repeated field's old contents only with
    its message, so each rewrite kept another copy of the weights (~130 MB); the pure-Python
    protobuf frees them (the graphs are small, the time is the same). And tf2onnx deep-copies
    the graph before each optimizer, to go on without one that fails (TF2ONNX_CATCH_ERRORS:
    any value turns it off); a failing optimizer fails the conversion instead."""
    if importlib.util.find_spec("tensorflow") is None:
        raise ExportError(f"making the {fmt} graphs needs TensorFlow (pip install "
                          f"'kbert[tensorflow]'); without it, load an export directory made "
                          f"elsewhere (kbert export CKPT --format {fmt} --output DIR)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, KERAS_BACKEND="tensorflow", PYTHONPATH=path)   # this same kbert
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if fmt == "onnx":      # OpenVINO's converter keeps no copies (7.9 s, 1.2 GB for the two)
        env.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
        env.setdefault("TF2ONNX_CATCH_ERRORS", "FALSE")
    command = [sys.executable, "-m", "kbert.runtime.graphs", directory, folder, fmt,
               *[kind_name(k) for k in kinds]]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, preexec_fn=outputs.die_with_parent)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        if done.returncode < 0:             # SIGKILL: most often the kernel's out-of-memory killer
            last = (f"killed by signal {-done.returncode}"
                    + (" (out of memory? making a graph takes up to 3 GB)"
                       if done.returncode == -9 else ""))
        raise ExportError(f"making the {fmt} graphs on TensorFlow failed: {last}")


def _convert_here(directory: str, folder: str, kinds: Iterable[Kind], fmt: str) -> None:
    """The child process's work: each pass of the checkpoint through `convert_pass`."""
    import gc

    from kbert import checkpoint
    ckpt = checkpoint.load(directory)
    # TensorFlow's and Keras' objects out of the collector's sight: the converters' many
    # collections then walk only their own (~10% of the time).
    gc.freeze()
    for kind in kinds:
        convert_pass(ckpt.backbone, ckpt.heads, kind, fmt, graph_path(folder, kind, fmt))
        gc.collect()                # the last pass's converter garbage, before the next peak


def quantize(fmt: str, source: str, target: str) -> str:
    """An int8 copy of an OpenVINO graph: NNCF's int8 weight compression (asymmetric, per
    output channel). ONNX Runtime's dynamic quantization is not offered: it failed the
    accuracy bar (see `kbert.runtime.options`)."""
    if fmt != "openvino":
        raise ExportError(f"int8 graphs are made for openvino only, not {fmt}")
    import nncf
    import openvino as ov
    folder = os.path.dirname(target)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = os.path.join(tmp, os.path.basename(target))
        model = nncf.compress_weights(openvino_core().read_model(source),
                                      mode=nncf.CompressWeightsMode.INT8_ASYM)
        ov.save_model(model, out, compress_to_fp16=False)
        for name in sorted(os.listdir(tmp), key=lambda n: n.endswith(".xml")):
            os.replace(os.path.join(tmp, name), os.path.join(folder, name))
    return target


def read_manifest(directory: str) -> dict | None:
    """The export manifest of `directory`, checked against its vocabulary and heads, and each
    graph file it lists against its size and sampled hash (`check_graph_file`); None for a
    plain checkpoint."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        fmt, dtype = manifest["format"], manifest["dtype"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{path}: not a readable export manifest ({e})") from None
    if fmt not in SUFFIX or dtype not in ("float32", "bfloat16", "int8"):
        raise ExportError(f"{path}: unknown format {fmt!r} or dtype {dtype!r}")
    vocab = sha256_file(os.path.join(directory, "vocab.txt"))
    if vocab != manifest.get("vocab_sha256"):
        raise ExportError(f"{directory}: vocab.txt is not the vocabulary the {fmt} graphs were "
                          f"exported with; export the checkpoint again")
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        heads = sorted(json.load(f).get("heads", {}))
    if heads != sorted(manifest.get("heads", [])):
        raise ExportError(f"{directory}: config.json has heads {heads or 'none'} but the {fmt} "
                          f"graphs were exported with {manifest.get('heads') or 'none'}; export "
                          f"the checkpoint again")
    manifest["folder"] = folder = os.path.join(directory, fmt)
    for name in manifest.get("graph_files") or {}:   # there and whole: a damaged export is
        if name.startswith(fmt + "/"):                # refused at load, not at its first call
            check_graph_file(folder, os.path.join(folder, name.split("/", 1)[1]))
    return manifest


def export(checkpoint_dir: str, output: str, fmt: str = "openvino",
           dtype: str = "float32", kinds: Iterable[Kind] | None = None,
           overwrite: bool = False) -> str:
    """Writes an export directory (see the module docstring) for `kbert.load(output)`.
    `overwrite` replaces an export or checkpoint already at `output` (`kbert.outputs`). A
    progress bar counts the steps (copying, making the graphs, quantizing, describing them).

    The checkpoint's files are copied beside the graphs, so the directory is also a checkpoint
    (the Keras runtime, fine-tuning and new passes still work from it).
    """
    from importlib.metadata import version

    from kbert import hub
    from kbert.runtime.options import resolve

    runtime, dtype = resolve(fmt, dtype)
    source = hub.resolve(checkpoint_dir)
    with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
        heads = sorted(json.load(f).get("heads", {}))
    kinds = list(kinds or default_kinds(heads))
    steps = 3 + (len(kinds) if dtype == "int8" else 0)
    with outputs.writing(output, "export", overwrite=overwrite) as tmp, \
            progress.bar(total=steps, desc="export: copying the checkpoint",
                         unit="step") as shown:
        for name in sorted(outputs.own_files(source) - {MANIFEST, outputs.MARKER}):
            if os.path.isfile(os.path.join(source, name)):    # the checkpoint, not its graphs
                shutil.copy2(os.path.join(source, name), os.path.join(tmp, name))
        _step(shown, f"making the {fmt} graphs of {len(kinds)} passes")
        folder = os.path.join(tmp, fmt)
        _from_cache(source, folder, kinds, fmt)
        served = {kind: graph_path(folder, kind, fmt) for kind in kinds}
        if dtype == "int8":
            for kind, path in served.items():
                _step(shown, f"quantizing {kind_name(kind)}")
                served[kind] = quantize(fmt, path, int8_path(path))
        _step(shown, "describing the graph files")
        manifest = {"format": fmt, "dtype": dtype, "kinds": [kind_name(k) for k in kinds],
                    "vocab_sha256": sha256_file(os.path.join(tmp, "vocab.txt")),
                    "heads": heads, "kbert_version": version("kbert"),
                    "graph_files": _describe_files(tmp, fmt),
                    "graphs": {kind_name(kind): {"file": os.path.relpath(path, tmp),
                                                 **describe_graph(path, fmt, kind)}
                               for kind, path in served.items()}}
        outputs.write_json(os.path.join(tmp, MANIFEST), manifest)
        _step(shown, "done")
    return os.path.abspath(output)


def _step(shown: Any, what: str) -> None:
    """The last step done; `what` the next one (export's progress bar)."""
    shown.set_description_str(f"export: {what}", refresh=False)
    shown.update(1)


def _describe_files(directory: str, fmt: str) -> dict[str, dict[str, Any]]:
    """{path under `directory`: {"size", "sha256", "sampled_sha256"}} of every graph file."""
    described = {}
    for name in sorted(os.listdir(os.path.join(directory, fmt))):
        path = os.path.join(directory, fmt, name)
        described[f"{fmt}/{name}"] = {"size": os.path.getsize(path), "sha256": sha256_file(path),
                                      "sampled_sha256": sampled_sha256(path)}
    return described


def sampled_sha256(path: str, blocks: int = 16, block: int = 1 << 16) -> str:
    """A hash of `blocks` spaced blocks of a file (and its size): what a load checks, at ~1 ms
    where the whole file's sha256 takes ~70 ms a 90 MB graph. Another model's graph differs
    in its weights throughout, so it differs here too; the full sha256 is in export.json for
    tools that check whole files."""
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        for i in range(blocks):
            f.seek(max(0, size - block) * i // max(1, blocks - 1))
            digest.update(f.read(block))
    return digest.hexdigest()


def check_graph_file(folder: str, path: str) -> None:
    """Raises `ExportError` (one line naming the file and the fix) when the graph file `path`
    of the export whose graphs are in `folder` is missing, truncated or not the file exported
    (export.json's sizes and hashes); a file export.json does not list is not checked."""
    export_dir = os.path.dirname(os.path.abspath(folder))
    try:
        with open(os.path.join(export_dir, MANIFEST), encoding="utf-8") as f:
            listed = json.load(f).get("graph_files") or {}
    except (OSError, ValueError, AttributeError):
        return                                  # read_manifest has said what is wrong
    fmt = os.path.basename(os.path.normpath(folder))
    stem = os.path.splitext(os.path.basename(path))[0]
    fix = "run `kbert export` again"
    for name in (os.path.basename(path), stem + ".bin"):
        want = listed.get(f"{fmt}/{name}")
        if not isinstance(want, dict):
            continue
        file = os.path.join(folder, name)
        if not os.path.isfile(file):
            raise ExportError(f"{file} is missing from the export; {fix}")
        size = os.path.getsize(file)
        if size != want.get("size"):
            raise ExportError(f"{file} is damaged: {size} bytes where the export wrote "
                              f"{want.get('size')}; {fix}")
        if want.get("sampled_sha256") not in (None, sampled_sha256(file)):
            raise ExportError(f"{file} is not the graph this export wrote (its hash differs); "
                              f"{fix}")


def _from_cache(directory: str, folder: str, kinds: Sequence[Kind], fmt: str) -> None:
    """The passes of `directory` copied into `folder`, made into the cache first where missing
    (so a model already run with the runtime exports without converting again)."""
    cache = cache_dir(directory, fmt)
    missing = [k for k in kinds if not os.path.isfile(graph_path(cache, k, fmt))]
    if missing:
        convert_checkpoint(directory, cache, missing, fmt)
    os.makedirs(folder, exist_ok=True)
    for kind in kinds:
        path = graph_path(cache, kind, fmt)
        for name in (path, os.path.splitext(path)[0] + ".bin"):
            if os.path.isfile(name):
                shutil.copy2(name, os.path.join(folder, os.path.basename(name)))


def int8_path(path: str) -> str:
    stem, suffix = os.path.splitext(path)
    return stem + ".int8" + suffix


def _main(argv: list[str]) -> None:
    """`python -m kbert.runtime.graphs CKPT FOLDER FORMAT KIND...` (the child process of
    `convert_checkpoint`)."""
    directory, folder, fmt, *names = argv
    _convert_here(directory, folder, [parse_kind(n) for n in names], fmt)


if __name__ == "__main__":
    _main(sys.argv[1:])


__all__ = ["ExportError", "MANIFEST", "cache_dir", "convert_checkpoint", "convert_pass",
           "default_kinds", "describe_graph", "export", "fingerprint", "int8_path", "parse_kind",
           "quantize", "read_manifest"]
