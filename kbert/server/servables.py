"""What `kbert serve` serves: each MODEL_OR_EXPORT argument becomes a named servable.

- a SavedModel (a base folder of numbered versions, as `kbert export` writes and TF Serving
  reads, or one version folder): `tfserving.SavedModelServable`, TF Serving's `:predict`;
- anything `kbert.load` takes (a shipped name, a checkpoint folder, an ONNX/OpenVINO export,
  `hf://ORG/NAME`, a bare Hub name): `ModelServable`, the JSON routes of its methods, at the
  runtime and dtype given (default "auto": the fastest measured on this CPU; an export's own).

`NAME=PATH` names a servable; otherwise its name is the path's last part (`out/sst2` → "sst2",
`hf://google-bert/bert-base-uncased@main` → "bert-base-uncased").
"""

from __future__ import annotations

import os
import re
from typing import Any

from kbert.server.tfserving import SavedModelServable, saved_model_versions

# method → the head it needs (None: every checkpoint has it)
METHOD_HEADS: dict[str, tuple[str, ...] | None] = {
    "embed": None, "fill_mask": ("mlm",), "next_sentence": ("nsp",),
    "classify": ("classifier",), "rerank": ("classifier", "nsp"), "answer": ("span",),
    "tag": ("tagger",),
}


class ServeError(ValueError):
    """A bad `kbert serve` argument: one line."""


def parse_spec(spec: str) -> tuple[str, str]:
    """"NAME=PATH" or "PATH" → (name, path).

    >>> parse_spec("sst2=out/sst2"), parse_spec("out/sst2/"), parse_spec("minilm-l6-v2")
    (('sst2', 'out/sst2'), ('sst2', 'out/sst2/'), ('minilm-l6-v2', 'minilm-l6-v2'))
    >>> parse_spec("hf://google-bert/bert-base-uncased@main")
    ('bert-base-uncased', 'hf://google-bert/bert-base-uncased@main')
    """
    name, sep, path = spec.partition("=")
    if sep and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) and path:
        return name, path
    path = spec
    tail = path.rstrip("/\\").split("@")[0]
    name = re.split(r"[/\\]", tail)[-1] if tail else ""
    if re.fullmatch(r"\d+", name) and saved_model_versions(path):   # a version folder
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise ServeError(f"{spec}: cannot make a model name of it; give one as NAME={spec}")
    return name, path


class ModelServable:
    """A model `kbert.load` loaded, served through its methods."""

    kind = "model"
    version = 1

    def __init__(self, name: str, path: str, runtime: str | None = "auto",
                 dtype: str | None = "auto", threads: int | None = None) -> None:
        from kbert import pipeline
        self.name, self.path = name, path
        self.model = pipeline.load(path, runtime=runtime, dtype=dtype, threads=threads)
        heads = self.model.checkpoint.heads
        self.heads = list(heads)
        self.methods = [m for m, need in METHOD_HEADS.items()
                        if need is None or any(h in heads for h in need)]
        self.max_seq_length = self.model.max_seq_length
        options = self.model.checkpoint.head_options.get("classifier", {})
        self.labels = options.get("labels")

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "path": self.path,
                "runtime": self.model.runtime, "dtype": self.model.dtype,
                "heads": self.heads, "methods": self.methods}

    def cost(self, *texts: str) -> int:
        """A cheap estimate of the tokens of one input (its texts together): ~4 characters a
        token, cut at the model's longest input; the batcher's budget is counted in it."""
        return min(self.max_seq_length, sum(len(t) // 4 + 1 for t in texts) + 2)

    def tokens(self, texts: list[str]) -> list[int]:
        """The tokens `embed` reads of each text ([CLS] and [SEP] included, cut where it cuts):
        OpenAI's `usage`."""
        limit = self.model.embedding_defaults["max_seq_length"]
        return [min(limit, len(ids) + 2)
                for ids in self.model.tokenizer.encode_batch(texts, mask_literal=False)]

    def prepare(self) -> None:
        self.model.prepare()


def load_servables(specs: list[str], runtime: str | None = "auto", dtype: str | None = "auto",
                   threads: int | None = None, prepare: bool = True) -> dict[str, Any]:
    """{name: servable} of `kbert serve`'s arguments, loaded (and made ready: the first
    request does not wait for graphs or traces)."""
    named = resolve_specs(specs)
    servables: dict[str, Any] = {}
    for name, path in named.items():
        if saved_model_versions(path):
            servables[name] = SavedModelServable(name, path)
        else:
            servables[name] = ModelServable(name, path, runtime, dtype, threads)
            if prepare:
                servables[name].prepare()
    return servables


def resolve_specs(specs: list[str]) -> dict[str, str]:
    """{name: local path} of the arguments: names checked unique, Hub models downloaded and
    converted (`kbert.hub.resolve`) before the server starts, so a bad argument is one line
    at once rather than a replica that fails to start."""
    from kbert import hub
    if not specs:
        raise ServeError("name at least one model or export to serve")
    named: dict[str, str] = {}
    for spec in specs:
        name, path = parse_spec(spec)
        if name in named:
            raise ServeError(f"two models are named {name!r}; name them: NAME=PATH")
        named[name] = path if saved_model_versions(path) else hub.resolve(path)
    return named


__all__ = ["METHOD_HEADS", "ModelServable", "ServeError",
           "load_servables", "parse_spec", "resolve_specs"]
