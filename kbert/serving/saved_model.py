"""`kbert export`: a TensorFlow SavedModel for TF Serving — raw UTF-8 strings in, answers out.

    DIR/<version>/saved_model.pb, variables/, assets/vocab.txt,
                  assets.extra/export_options.json (the `ExportOptions` the graph was built with)

Tokenization (`kbert.tokenizer`, tf-text ops), packing and post-processing run in the graph,
with ops TF Serving 2.20 ships (TF core + TF Text 2.20), and give `kbert.load(CKPT)`'s answers.
Inputs are [B] string tensors; outputs (each signature only where the checkpoint has the head):

    fill_mask(text)            tokens, token_ids, scores [B, M, K]: the top-K fillers of the first
                               M [MASK]s ("", -1, 0.0 past the masks); num_masks [B]: all found
    next_sentence(sentence_a, sentence_b)     is_next [B], logits [B, 2]
    answer(question, context)  text, score, start, end [B]: the best answer (character offsets,
                               end exclusive); top_text, top_score, top_start, top_end [B, K]
    classify(text), classify_pair(text, text_pair)
                               probabilities [B, L], labels [B, L], label [B] (regression: score)
    tag(text)                  entity_text, entity_label, entity_start, entity_end,
                               entity_score [B, E] (padded with "", -1, 0.0), num_entities [B]
    embed(text)                embedding [B, H]: `Bert.embed(text)` with its defaults (a sentence
                               encoder's pooling, cut at its recorded length) at unit length;
                               cls, mean [B, H]: both poolings, unnormalized
    <name>_ids(input_ids, segment_ids, input_mask)   int32 [B, T] → the head's logits
    serving_default            the checkpoint's main task (answer, classify, tag, fill_mask,
                               next_sentence or embed, the first present)

Asked for `<name>_ids` signatures only (`signatures=["fill_mask_ids"]`), the SavedModel has no
tokenizer and uses TF core ops only: for a model server without TF Text's ops, whose clients
tokenize themselves (`assets/vocab.txt`).

Keras variables of any backend load from the checkpoint's safetensors; the graph is traced with
the TensorFlow backend. A TensorFlow-backend process exports in-process; another backend's
process runs this same `export` (every argument, every option, as JSON) in a Python subprocess
with KERAS_BACKEND=tensorflow.

Example:
>>> options = ExportOptions(top_k=3)
>>> export("minilm-l6-squad", "/tmp/sm", options=options)  # doctest: +SKIP
'/tmp/sm/1'
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Collection, Sequence
from typing import Any

import keras

from kbert import checkpoint as checkpoint_lib
from kbert import hub, outputs, progress
from kbert.serving.options import ExportOptions

MAIN_ORDER = ("answer", "classify", "tag", "fill_mask", "next_sentence", "embed")
HEAD_OF = {"fill_mask": "mlm", "next_sentence": "nsp", "answer": "span", "classify": "classifier",
           "classify_pair": "classifier", "tag": "tagger", "embed": None}


class ExportError(ValueError):
    """A checkpoint that cannot be exported as asked."""


def signatures_for(heads: Collection[str]) -> list[str]:
    """The string signatures a checkpoint with these heads gets, in MAIN_ORDER first."""
    names = [n for n in HEAD_OF if HEAD_OF[n] is None or HEAD_OF[n] in heads]
    return sorted(names, key=lambda n: MAIN_ORDER.index(n) if n in MAIN_ORDER else 99)


def export(checkpoint_dir: str | os.PathLike, output: str | os.PathLike, version: int = 1,
           signatures: Sequence[str] | None = None,
           options: ExportOptions | None = None, dtype: str = "float32",
           overwrite: bool = False) -> str:
    """Writes the SavedModel of checkpoint `checkpoint_dir` (a directory, or a name that
    `kbert.checkpoint.resolve` finds) to `output/<version>/` (other versions in `output` are
    left as they are; an existing `<version>` is replaced only with `overwrite`).

    signatures: the string signatures to write (default: every one the heads allow), each
        with its `<name>_ids` twin; `<name>_ids` names alone write those only (TF core ops).
    options: the post-processing settings (`ExportOptions`; default: its defaults).
    dtype: the encoder's precision, "float32" (default), "bfloat16" or "auto" (bfloat16 where
        the CPU runs it natively); the heads and post-processing stay float32.
    Returns the version directory. A progress bar counts the steps (each signature traced,
    the saving).
    """
    from kbert.runtime import resolve
    if dtype == "int8":
        raise ExportError("a SavedModel is exported in float32 or bfloat16; for int8 export "
                          "--format openvino")
    _, dtype = resolve("keras", dtype)
    checkpoint_dir = hub.resolve(checkpoint_dir)   # a directory, a shipped name, a hub address
    output = os.fspath(output)
    options = options or ExportOptions()
    if int(version) < 1:
        raise ExportError(f"version must be a positive integer, got {version}")
    outputs.check_version(output, int(version), overwrite)     # before any work
    if keras.backend.backend() != "tensorflow":
        with progress.bar(total=1, desc="export: in a TensorFlow process", unit="step") as shown:
            path = _export_in_subprocess(checkpoint_dir, output, version, signatures, options,
                                         dtype, overwrite)
            shown.update(1)
        return path

    ckpt = checkpoint_lib.load(checkpoint_dir, dtype=dtype, head_dtype="float32")
    available = signatures_for(ckpt.heads)
    names = list(signatures or available)
    for name in names:
        task = name.removesuffix("_ids") if name != "classify_pair" else name
        if task not in HEAD_OF or name == "classify_pair_ids":
            ids = ", ".join(n + "_ids" for n in MAIN_ORDER)
            raise ExportError(f"unknown signature {name!r}; choose from {', '.join(HEAD_OF)}, "
                              f"or a task's ids-only one ({ids})")
        if task not in available:
            raise ExportError(f"checkpoint {checkpoint_dir} has no '{HEAD_OF[task]}' head for "
                              f"the {name} signature (it has: {', '.join(ckpt.heads) or 'none'})")
    if not names:
        raise ExportError(f"checkpoint {checkpoint_dir}: no exportable head")
    return _write(ckpt, names, output, int(version), options, overwrite)


def _write(ckpt: checkpoint_lib.Checkpoint, names: Sequence[str], output: str, version: int,
           options: ExportOptions, overwrite: bool) -> str:
    # Imported here, not above: a JAX or PyTorch process calls `export` without TensorFlow.
    import tensorflow as tf

    from kbert.serving.signatures import Signatures

    assert ckpt.path is not None        # loaded from a directory (`checkpoint_lib.load`)
    with outputs.claim_version(output, version, overwrite=overwrite) as out:   # base locked
        sig = Signatures(ckpt, options)
        root = tf.Module()
        root.weights = sig.variables
        traced = list(dict.fromkeys(n for name in names for n in (
            [name] if name == "classify_pair" or name.endswith("_ids") else [name, f"{name}_ids"])))
        if not all(n.endswith("_ids") for n in traced):    # ids only: TF core ops only
            root.wordpiece = sig.tokenizer.graph.wordpiece         # its vocabulary table
        root.vocab = tf.saved_model.Asset(os.path.join(ckpt.path, "vocab.txt"))
        functions = {}
        with progress.bar(total=len(traced) + 1, desc=f"export: tracing {traced[0]}",
                          unit="step") as shown:
            for name in traced:
                shown.set_description_str(f"export: tracing {name}", refresh=False)
                functions[name] = sig.concrete(name)
                shown.update(1)
            functions["serving_default"] = functions[
                next(n for n in MAIN_ORDER + tuple(m + "_ids" for m in MAIN_ORDER)
                     if n in functions)]

            shown.set_description_str("export: saving", refresh=False)
            tmp = out.staging()         # `.<version>.kbert-new-*`: not numeric, Serving skips it
            tf.saved_model.save(root, tmp, signatures=functions)
            os.makedirs(os.path.join(tmp, "assets.extra"))
            with open(os.path.join(tmp, "assets.extra", "export_options.json"), "w") as f:
                json.dump(dataclasses.asdict(options), f, indent=2)
            path = out.commit(tmp)
            shown.update(1)
    return path


# Runs `export` in a TensorFlow-backend interpreter: arguments as JSON in, the path or
# "error: <one line>" out.
_CHILD = """
import json, sys
from kbert.serving.saved_model import ExportOptions, export
request = json.loads(sys.argv[1])
request["options"] = ExportOptions(**request["options"])
try:
    print(export(**request))
except (ValueError, OSError) as e:
    sys.exit(f"error: {e}")
"""


def _export_in_subprocess(checkpoint_dir: str, output: str, version: int,
                          signatures: Sequence[str] | None, options: ExportOptions, dtype: str,
                          overwrite: bool) -> str:
    """`export` again with KERAS_BACKEND=tensorflow (the graph needs TF's backend), with every
    argument and option; the child imports the same kbert as this process."""
    request = {"checkpoint_dir": checkpoint_dir, "output": output, "version": int(version),
               "signatures": list(signatures) if signatures else None,
               "options": dataclasses.asdict(options), "dtype": dtype, "overwrite": overwrite}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, KERAS_BACKEND="tensorflow", PYTHONPATH=path)
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(request)], env=env,
                          capture_output=True, text=True, preexec_fn=outputs.die_with_parent)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["failed"]
        raise ExportError(lines[-1].split("error: ", 1)[-1])
    return done.stdout.strip().splitlines()[-1]


def saved_model_ops(saved_model_dir: str | os.PathLike) -> set[str]:
    """{op name} used anywhere in a SavedModel: its graph and every function in its library."""
    ops: set[str] = set()
    for meta in _saved_model_proto(saved_model_dir).meta_graphs:
        ops.update(node.op for node in meta.graph_def.node)
        for function in meta.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def _saved_model_proto(saved_model_dir: str | os.PathLike) -> Any:
    from tensorflow.core.protobuf import saved_model_pb2  # TensorFlow only when asked

    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        return saved_model_pb2.SavedModel.FromString(f.read())


def list_signatures(saved_model_dir: str | os.PathLike) -> list[str]:
    """The signature names of a written SavedModel."""
    names = _saved_model_proto(saved_model_dir).meta_graphs[0].signature_def
    return sorted(n for n in names if not n.startswith("__"))
