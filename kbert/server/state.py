"""What a `kbert serve` replica is made of: `ServerState` (the servables, the index, the batcher,
the metrics, the limits), built from its `ServeConfig` by `build_state`. The serving framework
calls it in each replica; the tests call it in-process. `HTTPError` is a request's refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbert.server.batcher import Batcher, QueueFull
from kbert.server.metrics import Metrics
from kbert.server.servables import METHOD_HEADS, ModelServable, ServeError, load_servables


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Limits:
    """What one request may ask: `max_body` bytes, `max_inputs` texts (or pairs)."""
    max_body: int = 8 * 1024 * 1024
    max_inputs: int = 1024


@dataclass
class ServerState:
    servables: dict[str, Any]
    batcher: Batcher
    metrics: Metrics
    limits: Limits = field(default_factory=Limits)
    index: Any = None                  # a kbert.retrieval.Index (--index)
    encoder: Any = None                # the model the index was built with
    reader: str | None = None          # the served model /ask reads with
    reranker: str | None = None        # the served model /ask reranks with
    stopping: bool = False

    def model(self, method: str, name: Any) -> ModelServable:
        """The served model that runs `method`: the one named, else the first served (in the
        command line's order) that can."""
        if name is not None and not isinstance(name, str):
            raise HTTPError(400, "\"model\" must be a string (a served model's name)")
        if name is not None:
            servable = self.servables.get(name)
            if servable is None:
                raise HTTPError(404, f"no model named {name!r} is served (served: "
                                     f"{', '.join(self.servables)})")
            if not isinstance(servable, ModelServable):
                raise HTTPError(400, f"{name} is a SavedModel: POST /v1/models/{name}:predict")
            if method not in servable.methods:
                need = " or ".join(repr(h) for h in METHOD_HEADS[method] or ())
                raise HTTPError(400, f"{method}: model {name} has no {need} head (it has: "
                                     f"{', '.join(servable.heads) or 'no heads'})")
            return servable
        able = [s for s in self.servables.values()
                if isinstance(s, ModelServable) and method in s.methods]
        if not able:
            raise HTTPError(404, f"{method}: no served model can ({_served(self)})")
        return able[0]

    async def run(self, servable_name: str, method: str, options: tuple, items: list,
                  call: Callable[[list], Any], cost: int) -> list:
        if self.stopping:
            raise HTTPError(503, "the server is stopping")
        try:
            return await self.batcher.submit((servable_name, method, options), items, call, cost)
        except QueueFull as e:
            raise HTTPError(429, str(e)) from None


def _served(state: ServerState) -> str:
    return "served: " + ", ".join(f"{n} ({s.kind})" for n, s in state.servables.items())


@dataclass
class ServeConfig:
    """`kbert serve`'s options (see its --help)."""
    models: list[str]
    index: str | None = None
    reader: str | None = None
    reranker: str | None = None
    runtime: str | None = "auto"
    dtype: str | None = "auto"
    threads: int | None = None
    max_batch_tokens: int = 16384
    batch_timeout_ms: float = 2.0
    max_queued: int = 4096
    limits: Limits = field(default_factory=Limits)
    prepare: bool = True


def build_state(config: ServeConfig) -> ServerState:
    """Loads what `config` names and returns the state the routes serve."""
    servables = load_servables(config.models, config.runtime, config.dtype, config.threads,
                               config.prepare)
    metrics = Metrics()
    batcher = Batcher(config.max_batch_tokens, config.batch_timeout_ms / 1000.0,
                      config.max_queued, on_batch=metrics.batch)
    state = ServerState(servables, batcher, metrics, config.limits)
    for role in ("reader", "reranker"):
        name = getattr(config, role)
        if name is not None and not isinstance(servables.get(name), ModelServable):
            raise ServeError(f"--{role} {name}: not one of the served models "
                             f"({', '.join(servables)})")
        setattr(state, role, name)
    if config.index is not None:
        from kbert.retrieval import Index
        state.index = Index.load(config.index)
        state.encoder = _served_encoder(state) or state.index.load_encoder(
            runtime=config.runtime if config.runtime != "auto" else None)
    if state.reader is None:
        readers = [s.name for s in servables.values()
                   if isinstance(s, ModelServable) and "answer" in s.methods]
        state.reader = readers[0] if readers else None
    return state


def _served_encoder(state: ServerState) -> object | None:
    """A served model that is the index's encoder (the same checkpoint folder), if any."""
    import os
    wanted = state.index.encoder.get("path")
    if not wanted:
        return None
    for s in state.servables.values():
        if (isinstance(s, ModelServable)
                and os.path.realpath(str(s.model.checkpoint.path)) == os.path.realpath(wanted)):
            return s.model
    return None


__all__ = ["HTTPError", "Limits", "ServeConfig", "ServerState", "build_state"]
