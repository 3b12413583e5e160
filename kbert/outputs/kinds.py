"""What a directory holds (`.kbert-output.json`, else an output's own manifests) and what may
be written where (`check`): the decisions, no writing."""

from __future__ import annotations

import json
import os
import re
import struct

MARKER = ".kbert-output.json"

# kind -> how a message names it
KINDS = {
    "checkpoint": "a kbert checkpoint",
    "export": "a kbert export (ONNX/OpenVINO graphs)",
    "saved_model": "a kbert SavedModel",
    "saved_model_base": "kbert SavedModel versions (a TF Serving model base directory)",
    "index": "a kbert index",
    "pretraining_data": "kbert pretraining data",
    "experiments": "kbert experiment results",
    "hf": "a transformers checkpoint written by kbert",
    "keras_hub": "a keras-hub preset written by kbert",
    "google": "a google-research checkpoint written by kbert",
}
# An output is replaced by a writer of a compatible kind: an export is also a checkpoint
# directory, so `kbert finetune --output EXPORT --overwrite` may replace it (not the reverse).
_REPLACES = {"checkpoint": {"checkpoint", "export"}, "export": {"export", "checkpoint"}}
_SHARD = re.compile(r"shard-\d{5}\.tfrecord")
# A model base directory (TF Serving's `base/<version>/`) holds version folders and what a
# version's write leaves beside it while it runs, or after a kill (`lock.sibling`, `Output`).
_VERSION = re.compile(r"\d+")
_BESIDE_VERSION = re.compile(r"\.(\d+)\.kbert-(?:lock|old|new-.+)")


class OutputError(ValueError):
    """An output that cannot be written as asked; the message is one line for the user.
    `path`: the output the message begins with (the CLI names it `--output PATH`)."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple:
        return type(self), (self.args[0], self.path)     # the path too, across processes


OutputError.__module__ = "kbert.outputs"     # its public home (tracebacks, doctests)


# --- what a directory holds --------------------------------------------------------------------
def read_marker(path: str) -> dict | None:
    """The record of a kbert output directory, or None."""
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("kind") in KINDS else None


def kind_of(path: str | os.PathLike) -> str | None:
    """The kind of kbert output `path` holds (its record, else its own manifests), or None."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return None
    marker = read_marker(path)
    if marker is not None:
        return str(marker["kind"])
    return _recognise(path)


def _recognise(path: str) -> str | None:
    """The kind of an output written before records existed, from its own manifests."""
    names = set(os.listdir(path))
    if {"config.json", "model.safetensors"} <= names and _kbert_weights(
            os.path.join(path, "model.safetensors")):
        return "export" if "export.json" in names else "checkpoint"
    if "index.json" in names:
        try:
            with open(os.path.join(path, "index.json"), encoding="utf-8") as f:
                if json.load(f).get("format") == "kbert-index":
                    return "index"
        except (OSError, ValueError, AttributeError):
            return None
    if _old_saved_model(path, names):
        return "saved_model"
    if any(_SHARD.fullmatch(n) for n in names):
        return "pretraining_data"
    if "units" in names and os.path.isdir(os.path.join(path, "units")):
        return "experiments"
    if names and all(_of_versions(path, n) for n in names):
        return "saved_model_base"
    return None


def _old_saved_model(path: str, names: set[str]) -> bool:
    """Whether `path` is a SavedModel kbert wrote before records existed."""
    return "saved_model.pb" in names and os.path.isfile(
        os.path.join(path, "assets.extra", "export_options.json"))


def _of_versions(base: str, name: str) -> bool:
    """Whether the entry `name` of `base` is kbert's in a model base directory: a version
    folder holding a kbert SavedModel (recorded, or of the older layout), or what a version's
    write leaves beside it."""
    if _BESIDE_VERSION.fullmatch(name):
        return True
    path = os.path.join(base, name)
    if not _VERSION.fullmatch(name) or os.path.islink(path) or not os.path.isdir(path):
        return False
    marker = read_marker(path)
    if marker is not None:
        return bool(marker["kind"] == "saved_model")
    try:
        return _old_saved_model(path, set(os.listdir(path)))
    except OSError:
        return False


def beside_versions(base: str) -> list[str]:
    """The versions whose writes left files in the model base directory `base`, sorted."""
    found = {m[1] for m in map(_BESIDE_VERSION.fullmatch, os.listdir(base)) if m}
    return sorted(found, key=int)


def _kbert_weights(path: str) -> bool:
    """Whether a safetensors file was written by kbert (its header's metadata says so)."""
    try:
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            if size > 100_000_000:
                return False
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return False
    return isinstance(header, dict) and (header.get("__metadata__") or {}).get("format") == "kbert"


def own_files(path: str) -> set[str]:
    """The top-level names in the output `path` that kbert wrote (its record's list; for an
    output without one, the names its kind writes)."""
    marker = read_marker(path)
    if marker is not None and isinstance(marker.get("files"), list):
        return set(marker["files"]) | {MARKER}
    kind = _recognise(path)
    names = set(os.listdir(path))
    if kind in ("checkpoint", "export"):
        return names & {"config.json", "vocab.txt", "model.safetensors", "MODEL_CARD.md",
                        "export.json", "onnx", "openvino"}
    if kind == "index":
        return names & {"index.json", "embeddings.npy", "passages.jsonl", "faiss.index"}
    if kind == "pretraining_data":
        return {n for n in names if _SHARD.fullmatch(n)}
    if kind in ("saved_model", "experiments", "saved_model_base"):
        return names
    return set()


def foreign_entries(path: str) -> list[str]:
    """The entries of the output `path` that kbert did not write, sorted."""
    own = own_files(path)
    return sorted(n for n in os.listdir(path) if n not in own)


# --- what may be written where ------------------------------------------------------------------
def _protected(path: str) -> str | None:
    """Why `path` may never be an output directory, or None."""
    real = os.path.realpath(path)
    if real == os.path.sep:
        return "the root directory"
    if real == os.path.realpath(os.path.expanduser("~")):
        return "your home directory"
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        return None
    if real == cwd:
        return "the current directory"
    if cwd.startswith(real.rstrip(os.sep) + os.sep):
        return "a directory above the current one"
    return None


def _describe(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def check(path: str | os.PathLike, kind: str, overwrite: bool = False,
          resume: bool = False) -> None:
    """Raises `OutputError` (one line) unless `path` may be written as a `kind` output: it does
    not exist, or is an empty directory, or holds an output of this kind and `overwrite` (or
    `resume`, for writers that go on with what is there) is given.

    >>> check("/", "checkpoint")
    Traceback (most recent call last):
    ...
    kbert.outputs.OutputError: /: refusing to write over the root directory
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    path = os.fspath(path)
    why = _protected(path)
    if why:
        raise OutputError(f"{path}: refusing to write over {why}", path=path)
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise OutputError(f"{path} exists and is not a directory", path=path)
    if not os.listdir(path):
        return
    found = kind_of(path)
    if found is None or found not in _REPLACES.get(kind, {kind}):
        if found:
            what = KINDS[found]
        else:                                   # kbert's SavedModel versions beside them unnamed
            strangers = sorted(n for n in os.listdir(path) if not _of_versions(path, n))
            what = f"files kbert did not write ({_describe(strangers)})"
        raise OutputError(f"{path} holds {what}; choose a new or empty directory", path=path)
    if not (overwrite or resume):
        raise OutputError(f"{path} holds {KINDS[found]} already; pass --overwrite "
                          f"(overwrite=True) to replace it, or choose another directory",
                          path=path)
    folders = [n for n in foreign_entries(path) if os.path.isdir(os.path.join(path, n))
               and not os.path.islink(os.path.join(path, n))]
    if folders and not resume:
        raise OutputError(f"{path} holds folders kbert did not write "
                          f"({_describe(folders)}); move them out before replacing the output",
                          path=path)


def check_version(base: str | os.PathLike, version: int, overwrite: bool = False) -> None:
    """Raises `OutputError` (one line) unless version `version` of a SavedModel may be written
    into the model base directory `base` (TF Serving's layout, `base/<version>/`): `base` is
    missing, empty or holds only kbert's SavedModel versions (`check`); the version is new, or
    replaced with `overwrite`.

    >>> check_version("/", 1)
    Traceback (most recent call last):
    ...
    kbert.outputs.OutputError: /: refusing to write over the root directory
    """
    base = os.fspath(base)
    try:
        check(base, "saved_model_base", resume=True)
    except OutputError:
        if kind_of(base) == "saved_model":               # a version named for its base
            raise OutputError(f"{base} is a SavedModel version; give the model base "
                              f"directory above it (BASE of BASE/<version>/)",
                              path=base) from None
        raise
    path = os.path.join(base, str(version))
    if os.path.isdir(path) and not overwrite:
        raise OutputError(f"{base} holds version {version} already; pass --overwrite "
                          f"(overwrite=True) to replace it, or choose another version",
                          path=base)
    check(path, "saved_model", overwrite)


def check_file(path: str | os.PathLike, overwrite: bool = False) -> None:
    """Raises `OutputError` unless `path` may be written as a file output."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"{path} is a directory; give the file to write", path=path)
    if os.path.lexists(path) and not overwrite:
        raise OutputError(f"{path} exists; pass --overwrite to replace it", path=path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"{path}: the directory {parent} does not exist", path=path)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: the directory {parent} is not writable", path=path)
