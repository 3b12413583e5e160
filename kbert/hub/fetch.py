"""The files a conversion needs from a Hugging Face Hub repository, downloaded by
huggingface_hub (its cache, resuming, auth, offline mode), nothing more: the configs, the
tokenizer's files, a sentence-transformers model's module configs, and one set of weights
(`model.safetensors` or its shards, else `pytorch_model.bin` or its shards) — never the
repository's TensorFlow, Flax, ONNX or Rust weights. No code from a repository is run.

Every failure is one line (`HubError`) naming the repository and what to do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from kbert import progress
from kbert.convert.hf import WEIGHT_FILES
from kbert.hub.addresses import Address

# The small files read to know what a repository holds (each where it exists).
META_FILES = ("config.json", "tokenizer_config.json", "vocab.txt", "tokenizer.json",
              "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
              "config_sentence_transformers.json", "model.safetensors.index.json",
              "pytorch_model.bin.index.json")
# A sentence-transformers module's folder: "1_Pooling", "0_BERT", "2_Normalize".
_MODULE_FOLDER = re.compile(r"^\d+_[^/]+$")
# A keras-hub preset (keras-hub's own format, e.g. hf://keras/...): every file is read.
_KERAS_PRESET = "metadata.json"


class HubError(ValueError):
    """A model that cannot be had from its hub: one line naming it and what to do."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A repository's files on disk: `folder` (the model's folder: the snapshot, or its
    subfolder), the `commit` they are from, and the `format` they hold ("transformers" or
    "keras-hub")."""

    folder: str
    commit: str
    format: str = "transformers"


def offline() -> bool:
    """Whether the Hub must not be reached: `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) set
    now, or when huggingface_hub was imported."""
    from huggingface_hub import constants
    env = (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "")
    return env.strip().lower() in ("1", "on", "yes", "true") or bool(constants.HF_HUB_OFFLINE)


def endpoint() -> str:
    """The Hub's address: `HF_ENDPOINT` as it is now, else huggingface_hub's."""
    from huggingface_hub import constants
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def client() -> Any:
    """The huggingface_hub module, or one line saying how to install it."""
    try:
        import huggingface_hub
    except ImportError:
        raise HubError("loading from the Hugging Face Hub needs huggingface_hub: pip install "
                       "'kbert[hub]' (or pip install huggingface_hub)") from None
    return huggingface_hub


def fetch(address: Address, token: str | None = None, cache_dir: str | None = None,
          local_files_only: bool = False) -> Snapshot:
    """Downloads (or finds in huggingface_hub's cache) the files a conversion of `address`
    needs. `cache_dir`: huggingface_hub's cache folder (default its own, shared with
    transformers); `local_files_only` (or `offline()`): the cache only."""
    hub = client()
    common = dict(repo_id=address.repo, cache_dir=cache_dir, token=token, endpoint=endpoint())
    with errors(address):
        if local_files_only or offline():
            return _from_cache(hub, address, common, "HF_HUB_OFFLINE is set" if offline()
                               else "local_files_only was asked")
        try:
            info = hub.HfApi(endpoint=common["endpoint"], token=token).model_info(
                address.repo, revision=address.revision or None)
        except _unreachable() as e:
            return _from_cache(hub, address, common, f"{common['endpoint']} cannot be reached "
                               f"({_first_line(e)})")
        except hub.errors.HfHubHTTPError as e:
            status = getattr(getattr(e, "response", None), "status_code", 0) or 0
            if status < 500:
                raise
            return _from_cache(hub, address, common, f"{common['endpoint']} answered {status}")
        files = [s.rfilename for s in info.siblings or []]
        commit = str(info.sha)
        base = _base(address)
        if not any(f == base + "config.json" for f in files):
            raise HubError(f"{address}: no config.json{_at(address)}, so it is no transformers "
                           f"model (it holds {_shown(files)})")
        folder = _download(hub, common, commit, small_files(files, base))
        model = os.path.join(folder, address.subfolder)
        if os.path.isfile(os.path.join(model, _KERAS_PRESET)):
            _download(hub, common, commit, [f for f in files if f.startswith(base)])
            return Snapshot(model, commit, "keras-hub")
        weights = weight_files(files, model, base, str(address))
        _download(hub, common, commit, weights)
        return Snapshot(model, commit)


def small_files(files: Iterable[str], base: str = "") -> list[str]:
    """The small files of a repository's model folder `base` worth reading first: `META_FILES`
    there and in its sentence-transformers module folders, and a keras-hub preset's
    metadata."""
    out = []
    for f in files:
        if not f.startswith(base):
            continue
        rest = f[len(base):]
        folder, _, name = rest.rpartition("/")
        if name in META_FILES + (_KERAS_PRESET,) and (not folder or _MODULE_FOLDER.match(folder)):
            out.append(f)
    return sorted(out)


def weight_files(files: list[str], model: str, base: str = "", name: str = "") -> list[str]:
    """The one set of weights to download, as repository paths: the first of `WEIGHT_FILES`
    in the folder of the model's transformer (`model`: its small files on disk), with the
    shards its index names. Checks first that the config is a BERT's and that PyTorch is
    there for `.bin` weights; `name` (the address) starts the messages."""
    from kbert.convert import hf
    folder = os.path.relpath(hf.transformer_folder(model), model)
    prefix = base + ("" if folder == "." else folder + "/")
    name = name or model
    check_model_type(os.path.join(model, prefix[len(base):], "config.json"), name)
    present = set(files)
    for weights in WEIGHT_FILES:
        if prefix + weights not in present:
            continue
        if weights.endswith((".bin", ".bin.index.json")) and not _has_torch():
            raise HubError(f"{name}: its weights are PyTorch's only ({prefix}{weights}), which "
                           f"are read with torch: pip install torch")
        if not weights.endswith(".index.json"):
            return [prefix + weights]
        with open(os.path.join(model, prefix[len(base):], weights), encoding="utf-8") as f:
            shards = sorted(set((json.load(f).get("weight_map") or {}).values()))
        if not shards:
            raise HubError(f"{name}: {prefix}{weights} names no shards")
        return [prefix + shard for shard in shards]
    others = [f for f in files if f.startswith(prefix) and
              f.endswith((".h5", ".msgpack", ".onnx", ".ot", ".ckpt.index"))]
    raise HubError(f"{name}: no PyTorch weights ({' or '.join(WEIGHT_FILES[::2])}"
                   f"{' in ' + prefix if prefix else ''})"
                   + (f"; kbert does not read {_shown(others)}" if others else ""))


# What kbert converts (docs/checkpoints.md): BERT and the models that are BERT by another name.
SUPPORTED_TYPES = ("bert",)


def check_model_type(config_path: str, name: str) -> None:
    """A transformers config.json whose `model_type` is one kbert converts; anything else is
    one line naming it and what is supported."""
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise HubError(f"{name}: unreadable {config_path} ({_first_line(e)})") from None
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind is None and isinstance(config, dict) and any(
            "Bert" in a for a in config.get("architectures") or []):
        kind = "bert"                            # old BERT configs name no model_type
    if kind not in SUPPORTED_TYPES:
        raise HubError(f"{name} is a {kind or 'model without a model_type'} model; kbert "
                       f"converts BERT "
                       f"(model_type bert): the encoder, pretraining and masked-LM heads, "
                       f"sequence and token classification, question answering, multiple "
                       f"choice, sentence-transformers and cross-encoder models")


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401  (only to know it is there: `.bin` weights need it)
    except ImportError:
        return False
    return True


def _download(hub: Any, common: dict, commit: str, files: list[str]) -> str:
    """The snapshot folder of `commit` holding `files` (downloaded where missing)."""
    return str(hub.snapshot_download(revision=commit, allow_patterns=files or ["config.json"],
                                     tqdm_class=progress.bar, **common))


def _from_cache(hub: Any, address: Address, common: dict, why: str) -> Snapshot:
    """The files of `address` from huggingface_hub's cache alone (a model transformers or
    kbert downloaded before); `why` the Hub is not asked, for the message."""
    revision = address.revision or "main"
    base = _base(address)
    try:
        folder = hub.snapshot_download(revision=revision, local_files_only=True,
                                       allow_patterns=[base + "config.json"], **common)
    except Exception as e:
        if isinstance(e, hub.errors.EntryNotFoundError):
            raise HubError(f"{address} is not cached, and {why}; load it once with the Hub "
                           f"reachable") from None
        raise
    commit = os.path.basename(folder)
    model = os.path.join(folder, address.subfolder)
    files = [os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
             for root, _, names in os.walk(folder) for name in names]
    if os.path.isfile(os.path.join(model, _KERAS_PRESET)):
        return Snapshot(model, commit, "keras-hub")
    for name in weight_files(files, model, base, str(address)):
        if not os.path.isfile(os.path.join(folder, name)):
            raise HubError(f"{address}: its weights are not cached ({name}), and {why}; load "
                           f"it once with the Hub reachable")
    return Snapshot(model, commit)


def _unreachable() -> tuple[type[BaseException], ...]:
    """The errors that mean the Hub cannot be reached (no network, server down)."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub.errors import OfflineModeIsEnabled
    return (httpx2.ConnectError, httpx2.TimeoutException, httpx2.RemoteProtocolError,
            OfflineModeIsEnabled)


@contextlib.contextmanager
def errors(address: Address) -> Iterator[None]:
    """huggingface_hub's errors as one line each (`HubError`), naming `address`."""
    hub = client()
    e_ = hub.errors
    try:
        yield
    except e_.GatedRepoError:
        raise HubError(f"{address} is gated: accept its terms on {endpoint()}/{address.repo} and "
                       f"set HF_TOKEN (or pass token=) to a token of that account") from None
    except e_.RepositoryNotFoundError:
        raise HubError(f"{address}: no such repository on the Hub (a private one needs "
                       f"HF_TOKEN or token=)") from None
    except e_.RevisionNotFoundError:
        raise HubError(f"{address}: the repository has no revision {address.revision!r} (a "
                       f"branch, tag or commit)") from None
    except e_.LocalEntryNotFoundError as e:
        raise HubError(f"{address}: not all its files could be had ({_first_line(e)}); load "
                       f"it again online") from None
    except e_.RemoteEntryNotFoundError as e:
        raise HubError(f"{address}: a file is missing on the Hub ({_first_line(e)})") from None
    except e_.HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", "an error")
        raise HubError(f"{address}: the Hub answered {status} ({_first_line(e)})") from None
    except _unreachable() as e:
        raise HubError(f"{address}: the download was cut off ({_first_line(e)}); load it "
                       f"again: what was downloaded is kept") from None


def _base(address: Address) -> str:
    return address.subfolder + "/" if address.subfolder else ""


def _at(address: Address) -> str:
    return f" in {address.subfolder}/" if address.subfolder else ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _shown(names: list[str], limit: int = 8) -> str:
    if not names:
        return "no files"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
