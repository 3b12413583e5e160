"""The converted checkpoints kbert keeps of hub models, so that a second load touches neither
the network nor the converter.

    ROOT/models--ORG--NAME/
        refs/REVISION                 the commit a branch or tag gave when first loaded
        COMMIT.cN/                    the kbert checkpoint converted from COMMIT by converter N
        COMMIT.SUB--FOLDER.cN/        ... from a subfolder of the repository

ROOT is `cache_dir/checkpoints` when a `cache_dir` is given, else `$KBERT_CACHE/hub` (default
`~/.cache/kbert/hub`). Each checkpoint is written through `kbert.outputs` (locked, swapped in
whole, the user's umask): two processes converting one commit convert it once, and a reader
never sees half of one. A Kaggle model's folder is `kaggle--OWNER--MODEL--FRAMEWORK--VARIATION`,
one checkpoint per version.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import time
from typing import Any
from urllib.parse import quote, unquote

from kbert import outputs, progress
from kbert.convert.hf import CONVERTER_VERSION
from kbert.hub.addresses import Address


def root(cache_dir: str | os.PathLike | None = None) -> str:
    """Where converted checkpoints are kept (see the module's note)."""
    if cache_dir is not None:
        return os.path.join(os.path.abspath(os.fspath(cache_dir)), "checkpoints")
    base = os.environ.get("KBERT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "kbert")
    return os.path.join(base, "hub")


def repo_folder(address: Address, top: str) -> str:
    """The cache folder of `address`'s repository under `top`."""
    kind = "models" if address.scheme == "hf" else "kaggle"
    return os.path.join(top, f"{kind}--{address.repo.replace('/', '--')}")


def entry(address: Address, commit: str, top: str) -> str:
    """The converted checkpoint of `commit` (a Kaggle version) of `address` under `top`."""
    sub = f".{address.subfolder.replace('/', '--')}" if address.subfolder else ""
    return os.path.join(repo_folder(address, top), f"{commit}{sub}.c{CONVERTER_VERSION}")


def pinned_commit(address: Address, top: str) -> str | None:
    """The commit `address` stands for without asking the hub: its own revision when that is
    a commit, else the one its branch or tag gave when first loaded (None if never)."""
    if address.pinned:
        return address.revision
    ref = os.path.join(repo_folder(address, top), "refs", _ref_name(address))
    try:
        with open(ref, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def remember(address: Address, commit: str, top: str) -> None:
    """Records the commit a branch or tag (or the default revision) gave."""
    if address.pinned:
        return
    refs = os.path.join(repo_folder(address, top), "refs")
    os.makedirs(refs, exist_ok=True)
    outputs.write_text(os.path.join(refs, _ref_name(address)), commit)


def _ref_name(address: Address) -> str:
    return quote(address.revision or "main", safe="")


def cached(address: Address, top: str) -> str | None:
    """The converted checkpoint of `address` if it is kept and whole, without asking the hub;
    a damaged one (its weights file cut short) is removed, with a line on stderr, so that the
    caller converts it again."""
    commit = pinned_commit(address, top)
    if commit is None:
        return None
    path = entry(address, commit, top)
    outputs.recover_missing(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        return None
    problem = damage(path)
    if problem is None:
        return path
    with outputs.locked(path, wait=True):
        if damage(path) and _discard(path):
            print(f"kbert: {path}: {problem}; converting {address} again", file=sys.stderr)
    return None


def _discard(path: str) -> bool:
    """Removes a damaged converted checkpoint of kbert's (the caller holds its lock); whether
    there was one."""
    if outputs.kind_of(path) != "checkpoint":
        return False
    shutil.rmtree(path)
    return True


def damage(path: str) -> str | None:
    """What is wrong with a cached checkpoint's weights file, cheaply (its safetensors
    header and size, not its bytes): None where it looks whole."""
    weights = os.path.join(path, "model.safetensors")
    try:
        size = os.path.getsize(weights)
        with open(weights, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > size:
                return "the weights file is cut short"
            header = json.loads(f.read(length))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
                  default=0)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        return f"the weights file is unreadable ({e})"
    return None if size == 8 + length + end else "the weights file is cut short"


def convert(snapshot_folder: str, source: str, address: Address, commit: str, top: str,
            revision: str = "") -> str:
    """Converts the files in `snapshot_folder` (format `source`: "hf" or "keras-hub") into
    the cache entry of `commit`, unless another process did meanwhile; returns its path."""
    from kbert import convert as convert_lib
    path = entry(address, commit, top)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with outputs.locked(path, wait=True, on_wait=lambda line: progress.echo(
            f"kbert: {address}: waiting for the process converting it", file=sys.stderr)):
        outputs.recover(path)
        if os.path.isfile(os.path.join(path, "config.json")) and damage(path) is None:
            return path
        _discard(path)                            # a damaged one of ours
        with progress.bar(total=1, desc=f"converting {address}", unit="model") as bar:
            convert_lib.convert(source, snapshot_folder, path, overwrite=False,
                                model_card=_model_card(address, commit, revision))
            bar.update(1)
    return path


def _model_card(address: Address, commit: str, revision: str) -> str:
    where = f"{address.repo} at commit {commit}" if address.scheme == "hf" else \
        f"{address.repo}, version {commit}"
    asked = f" (asked for as {address})" if str(address) else ""
    return (f"# {address.repo}\n\nConverted by kbert (converter {CONVERTER_VERSION}) from "
            f"{where}{asked} on {time.strftime('%Y-%m-%d', time.gmtime())}.\n\n"
            f"The weights, their training and their license are the original repository's: "
            f"read its model card there.\n")


# --- what is kept: `kbert cache list|remove` --------------------------------------------------
def entries(top: str) -> list[dict[str, Any]]:
    """One dict per converted checkpoint kept under `top`: {"repo", "commit", "revisions"
    (the branches and tags that gave it), "subfolder", "path", "bytes"}, by repository."""
    out = []
    for folder in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        kind, _, name = folder.partition("--")
        if kind not in ("models", "kaggle") or not os.path.isdir(os.path.join(top, folder)):
            continue
        repo = name.replace("--", "/")
        refs = _refs(os.path.join(top, folder, "refs"))
        for item in sorted(os.listdir(os.path.join(top, folder))):
            path = os.path.join(top, folder, item)
            if item == "refs" or item.startswith(".") or outputs.kind_of(path) != "checkpoint":
                continue
            commit, _, rest = item.partition(".")
            subfolder = rest.rpartition(".")[0].replace("--", "/")
            out.append({"repo": ("kaggle://" if kind == "kaggle" else "") + repo,
                        "commit": commit, "subfolder": subfolder,
                        "revisions": sorted(r for r, c in refs.items() if c == commit),
                        "path": path, "bytes": _size(path)})
    return out


def _refs(folder: str) -> dict[str, str]:
    out = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if not name.startswith("."):
            with open(os.path.join(folder, name), encoding="ascii") as f:
                out[unquote(name)] = f.read().strip()
    return out


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(path)
               for f in files)


def remove(address: Address, top: str) -> list[str]:
    """Removes the converted checkpoints and refs kept of `address`'s repository (every
    commit; only one when the address is pinned to a commit). Returns what was removed."""
    folder = repo_folder(address, top)
    removed = []
    for item in entries(top):
        if os.path.dirname(item["path"]) != folder or (
                address.pinned and item["commit"] != address.revision):
            continue
        with outputs.locked(item["path"], wait=True):
            shutil.rmtree(item["path"])
        removed.append(item["path"])
    refs = os.path.join(folder, "refs")
    for ref, commit in _refs(refs).items():
        if not address.pinned or commit == address.revision:
            os.remove(os.path.join(refs, quote(ref, safe="")))
    for empty in (refs, folder):
        if os.path.isdir(empty) and not os.listdir(empty):
            os.rmdir(empty)
    return removed
