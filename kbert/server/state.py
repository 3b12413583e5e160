"""What a `kbert serve` replica is made of, from its `ServeConfig`: the servables, the index,
the batcher and the metrics (`build_state`). The serving framework calls it in each replica;
the tests call it in-process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbert.server.batcher import Batcher
from kbert.server.metrics import Metrics
from kbert.server.routes import Limits, ServerState
from kbert.server.servables import ModelServable, ServeError, load_servables


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


__all__ = ["ServeConfig", "build_state"]
