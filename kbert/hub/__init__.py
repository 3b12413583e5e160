"""Where a model comes from: a local directory, a shipped name, or a hub — downloaded once,
converted once, kept, and loaded offline after that.

    addresses.py  `hf://ORG/NAME[@REVISION][/SUBFOLDER]`, `kaggle://...`, the bare-name table
    fetch.py      huggingface_hub: the files a conversion needs, nothing more; its errors as
                  one line each (`HubError`)
    cache.py      the converted checkpoints, keyed by (repository, commit, converter version),
                  written through kbert.outputs; `kbert cache list|remove`

`resolve` is the one resolver: `kbert.load`, the task models' `from_checkpoint`, the exports,
training's `--init` and every command taking a checkpoint call it, so an address works
wherever a checkpoint directory does.

>>> resolve("minilm-l6-v2").endswith("minilm-l6-v2")     # a shipped name: no hub  # doctest: +SKIP
True
>>> kbert.load("hf://sentence-transformers/all-MiniLM-L6-v2")            # doctest: +SKIP
"""

from __future__ import annotations

import os
import re

from kbert.checkpoint import files as checkpoint_files
from kbert.hub import addresses, cache, fetch
from kbert.hub.addresses import NAMES, Address, is_address, parse
from kbert.hub.fetch import HubError


def resolve(name_or_path: str | os.PathLike, *, revision: str | None = None,
            token: str | None = None, cache_dir: str | os.PathLike | None = None,
            local_files_only: bool = False) -> str:
    """A kbert checkpoint directory for `name_or_path`: an existing directory, a shipped
    checkpoint's name (`kbert.checkpoint.resolve`; both win over the hub), or a hub address
    (`kbert.hub.addresses`) — converted on first use and kept (`kbert.hub.cache`); after
    that, loading it asks neither the hub nor the converter.

    revision: a branch, tag or commit of a `hf://` repository (or `@REVISION` in it); a
        branch or tag is pinned to the commit it gave when first loaded (to move on:
        `kbert cache remove NAME`, or ask for a commit).
    token: for gated and private repositories (default: `HF_TOKEN`, or huggingface_hub's
        login).
    cache_dir: one folder for the downloads and the converted checkpoints (default:
        huggingface_hub's cache for the downloads, `$KBERT_CACHE/hub` for the checkpoints).
    local_files_only: never ask the hub (as `HF_HUB_OFFLINE=1`): what is kept, or one line
        saying it is not.
    """
    name = os.fspath(name_or_path)
    if not name.startswith((addresses.HF, addresses.KAGGLE)):
        try:
            return checkpoint_files.resolve(name)       # a folder or a shipped name wins
        except checkpoint_files.CheckpointError as e:
            if not is_address(name):
                hint = ("; a Hugging Face Hub repository is written hf://ORG/NAME"
                        if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not os.path.exists(name)
                        else "")
                raise checkpoint_files.CheckpointError(f"{e}{hint}") from None
    address = parse(name, revision)
    assert address is not None               # `is_address` said it is one
    top = cache.root(cache_dir)
    found = cache.cached(address, top)
    if found is not None:
        return found
    if address.scheme == "kaggle":
        folder, commit, source = _kaggle(address)
    else:
        snapshot = fetch.fetch(address, token=token, cache_dir=_downloads(cache_dir),
                               local_files_only=local_files_only)
        folder, commit = snapshot.folder, snapshot.commit
        source = "hf" if snapshot.format == "transformers" else "keras-hub"
    try:
        path = cache.convert(folder, source, address, commit, top, address.revision)
    except ValueError as e:
        if "unreadable" not in str(e):
            raise
        raise HubError(f"{address}: a downloaded file is damaged ({e}); remove it with `kbert "
                       f"cache remove {address} --downloads` and load again") from None
    cache.remember(address, commit, top)
    return path


def download(name: str, *, revision: str | None = None, token: str | None = None,
             cache_dir: str | os.PathLike | None = None,
             local_files_only: bool = False) -> fetch.Snapshot:
    """The files of a `hf://` address (or a bare Hub name) a conversion needs, downloaded
    into huggingface_hub's cache (`kbert convert --from hf hf://...` converts them)."""
    address = parse(name, revision)
    if address is None or address.scheme != "hf":
        raise HubError(f"{name}: not a Hugging Face Hub address (hf://ORG/NAME)")
    return fetch.fetch(address, token=token, cache_dir=_downloads(cache_dir),
                       local_files_only=local_files_only)


def cached_models(cache_dir: str | os.PathLike | None = None) -> list[dict]:
    """What is kept (`kbert cache list`): one dict per converted checkpoint, {"repo",
    "commit", "revisions", "subfolder", "path", "bytes"} (see `kbert.hub.cache.entries`)."""
    return cache.entries(cache.root(cache_dir))


def remove(name: str, *, cache_dir: str | os.PathLike | None = None,
           downloads: bool = False) -> list[str]:
    """Frees what is kept of a hub model (`kbert cache remove NAME`): its converted
    checkpoints (all of them, or the one commit an address pinned to a commit names), and with
    `downloads` the files huggingface_hub downloaded of the repository (of that commit only,
    for a pinned address). Returns what was removed; a model of which nothing is kept is one
    line saying so."""
    address = parse(name) if is_address(name) else parse(addresses.HF + name)
    assert address is not None
    top = cache.root(cache_dir)
    removed = cache.remove(address, top)
    if downloads and address.scheme == "hf":
        removed += _remove_downloads(address, cache_dir)
    if not removed:
        raise HubError(f"{name}: nothing of it is kept in {top}")
    return removed


def _remove_downloads(address: Address, cache_dir: str | os.PathLike | None) -> list[str]:
    """huggingface_hub's cached revisions of `address`'s repository (the pinned commit's
    only, for a pinned address), removed through huggingface_hub's own cache API."""
    hub = fetch.client()
    try:
        info = hub.scan_cache_dir(_downloads(cache_dir))
    except hub.errors.CacheNotFound:
        return []
    hashes = [r.commit_hash for repo in info.repos if repo.repo_id == address.repo
              for r in repo.revisions if not address.pinned or r.commit_hash == address.revision]
    if not hashes:
        return []
    strategy = info.delete_revisions(*hashes)
    strategy.execute()
    return sorted(str(p) for p in strategy.repos | strategy.snapshots)


def _downloads(cache_dir: str | os.PathLike | None) -> str | None:
    """huggingface_hub's cache folder for `cache_dir` (None: its own default)."""
    return os.path.join(os.fspath(cache_dir), "downloads") if cache_dir else None


def _kaggle(address: Address) -> tuple[str, str, str]:
    """(folder, version, "keras-hub") of a Kaggle model, through kagglehub (its cache first,
    for a versioned handle)."""
    try:
        import kagglehub
    except ImportError:
        raise HubError(f"{address}: Kaggle models are downloaded with kagglehub: pip install "
                       f"kagglehub") from None
    handle = address.repo + (f"/{address.revision}" if address.revision else "")
    try:
        folder = kagglehub.model_download(handle)
    except Exception as e:   # kagglehub's errors have no common base but Exception
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HubError(f"{address}: kagglehub could not get it ({text})") from None
    version = address.revision or os.path.basename(os.path.normpath(folder))
    if not os.path.isfile(os.path.join(folder, "metadata.json")):
        raise HubError(f"{address}: not a keras-hub preset (no metadata.json in {folder})")
    return folder, version, "keras-hub"


__all__ = ["NAMES", "Address", "HubError", "cache", "cached_models", "download", "fetch",
           "is_address", "parse", "remove", "resolve"]
