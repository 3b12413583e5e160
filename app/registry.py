"""The checkpoints the playground serves: found on disk, described from config.json, loaded once.

Reading `config.json` is enough to list a checkpoint and its heads, so the model picker is ready
before any weights are loaded; `Registry.get` loads a checkpoint with `kbert.load` on first use and
keeps it.
"""

import json
import os
import threading
from collections.abc import Callable
from typing import Any

from kbert import hub  # light: no Keras, no TensorFlow
from kbert.network.config import RELEVANCE_LABELS

# What each tab needs, and how to say it to a user.
HEAD_NAMES = {"mlm": "masked-LM (fill-mask)", "nsp": "next-sentence",
              "span": "span (question answering)", "classifier": "classifier",
              "tagger": "tagger (entities)", "embedding": "sentence-embedding (search)",
              "reranker": "reranker (cross-encoder)"}
# A sentence encoder (config.json's `sentence_embedding`, e.g. minilm-l6-v2) is listed as having
# the "embedding" head: the one the Search tab needs.
EMBEDDING = "embedding"
# A cross-encoder (a classifier labelled `kbert.network.config.RELEVANCE_LABELS`, e.g.
# minilm-l6-squad-reranker) is listed as having the "reranker" head too: the Search tab's.
RERANKER = "reranker"


class InputError(ValueError):
    """A problem with the user's input or model choice, shown as a message (never a traceback)."""


def describe(path):
    """{"path", "heads", "num_layers", "num_heads", "max_len", "span"} from a checkpoint's
    config.json, or None if `path` is not a kbert checkpoint. A sentence encoder's heads include
    "embedding"."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or "hidden_size" not in raw:
        return None
    heads = raw.get("heads") or {}
    try:
        encoder = [EMBEDDING] if raw.get("sentence_embedding") else []
        classifier = heads.get("classifier") or {}
        # a cross-encoder: labelled relevant/irrelevant, or converted from sentence-transformers
        # (one output scored through its activation)
        reranker = [RERANKER] if (classifier.get("labels") == RELEVANCE_LABELS
                                  or "activation" in classifier) else []
        return {"path": os.path.abspath(path), "heads": sorted([*heads, *encoder, *reranker]),
                "num_layers": int(raw.get("num_layers", 1)),
                "num_heads": int(raw.get("num_heads", 1)),
                "max_len": int(raw.get("max_position_embeddings", 512)),
                "span": dict(heads.get("span") or {})}
    except (TypeError, ValueError, AttributeError):
        return None


def discover(models_dir="saved_models", extra=()):
    """{name: description} for each checkpoint under `models_dir` plus each of `extra`: a
    checkpoint directory, a shipped name or a hub model (`hf://ORG/NAME`, a bare Hub name such
    as bert-base-uncased), which is downloaded and converted once (kbert.hub) and named as
    given."""
    paths = []
    if models_dir and os.path.isdir(models_dir):
        paths += [os.path.join(models_dir, d) for d in sorted(os.listdir(models_dir))
                  if not d.startswith(".")]
    paths += list(extra)
    found = {}
    for path in paths:
        given = path
        if path in extra and not os.path.isdir(path):
            try:
                path = hub.resolve(path)
            except ValueError as e:             # a hub's one line (HubError, CheckpointError)
                raise InputError(str(e)) from None
        info = describe(path)
        if info is None:
            if given in extra:
                raise InputError(f"{path} is not a kbert checkpoint directory (no config.json)")
            continue
        if info["path"] in {v["path"] for v in found.values()}:
            continue
        name, n = (given if given != path else os.path.basename(os.path.normpath(path))), 2
        base = name
        while name in found:
            name, n = f"{base}-{n}", n + 1
        found[name] = info
    return found


class Registry:
    """Checkpoints by name; each loaded once, on first use, by one thread."""

    def __init__(self, models, runtime="keras", dtype="auto"):
        from kbert.runtime import RuntimeOptionError, resolve  # light: no Keras, no TensorFlow
        try:
            self.runtime, self.dtype = resolve(runtime, dtype)
        except RuntimeOptionError as e:
            raise InputError(str(e)) from None
        self.models = dict(models)
        self._loaded = {}
        self._locks = {name: threading.Lock() for name in self.models}
        self._adding = threading.Lock()

    @property
    def names(self):
        return list(self.models)

    def info(self, name):
        if name and name not in self.models and hub.is_address(name):
            self.add(name)
        if not self.models:
            raise InputError("No checkpoints found: put one in saved_models/ or pass --model DIR")
        if name not in self.models:
            raise InputError(f"Unknown model {name!r}; choose one of: {', '.join(self.models)}")
        return self.models[name]

    def add(self, name):
        """Serves the hub model `name` too (`hf://ORG/NAME`, a bare Hub name typed in the
        model box or passed to the API): downloaded and converted once (kbert.hub), one line
        when it cannot be had (offline and not kept, no such repository, not a BERT)."""
        with self._adding:
            if name in self.models:
                return
            try:
                path = hub.resolve(name)
            except ValueError as e:             # kbert's one line (HubError, CheckpointError)
                raise InputError(f"Could not get the model '{name}': {e}") from None
            info = describe(path)
            if info is None:
                raise InputError(f"{name} is not a kbert checkpoint")
            self._locks[name] = threading.Lock()
            self.models[name] = info

    def with_head(self, head, skip=None):
        """The models with `head`, less those that also have `skip`."""
        return [n for n, info in self.models.items()
                if head in info["heads"] and (skip is None or skip not in info["heads"])]

    def default(self, head=None, current=None, skip=None):
        """The model a tab starts on: `current` if it has `head` (and not `skip`), else the
        first that has it (those with `skip` only when no other has it; else `current`, or the
        first model)."""
        having = (self.with_head(head, skip) or self.with_head(head)) if head else []
        if current in self.models and (head is None or current in having):
            return current
        if having:
            return having[0]
        return current if current in self.models else (self.names or [None])[0]

    def resolve(self, name, head=None, skip=None):
        """The model a call runs on: `name`, or when none is named (an API call that leaves
        `model` out) the first checkpoint that has `head` (preferring one without `skip`)."""
        if name:
            return name
        if head is not None and self.models and not self.with_head(head):
            raise InputError(f"None of the served checkpoints has a {HEAD_NAMES[head]} head; "
                             f"serve one with --model DIR.")
        return self.default(head, skip=skip)

    def check(self, name, head=None):
        """Raises InputError saying plainly that model `name` is unknown or lacks `head`."""
        info = self.info(name)
        if head is not None and head not in info["heads"]:
            others = self.with_head(head)
            hint = (f"Pick one that has it: {', '.join(others)}." if others
                    else "None of the loaded checkpoints has one.")
            raise InputError(f"The model '{name}' has no {HEAD_NAMES[head]} head. {hint}")

    def require(self, name, head, skip=None):
        """The loaded model `name` (none named: the first with `head`, preferring one without
        `skip`), after `check`."""
        name = self.resolve(name, head, skip)
        self.check(name, head)
        return self.get(name)

    def loaded(self, name: str) -> bool:
        """Whether `get(name)` returns at once (no load to do or to wait for)."""
        return name in self._loaded

    def get(self, name, warm: Callable[[Any], object] | None = None):
        """The model `name`, loaded on first use; a model loaded now is passed to `warm` (e.g. a
        first small call, to trace it) before any `get` of it returns."""
        self.info(name)
        with self._locks[name]:
            if name not in self._loaded:
                import kbert  # heavy (Keras, TensorFlow): imported on first use only
                try:
                    model = kbert.load(self.models[name]["path"], dtype=self.dtype,
                                       runtime=self.runtime)
                except (OSError, ValueError) as e:   # kbert's CheckpointError is a ValueError
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    raise InputError(f"Could not load the model '{name}': {first}") from None
                if warm is not None:
                    warm(model)
                self._loaded[name] = model
            return self._loaded[name]
