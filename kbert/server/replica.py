"""The Ray Serve deployment of `kbert serve`: one replica holds every served model, the
batcher and the metrics, and answers HTTP through the FastAPI app of `kbert.server.routes`.

Imported by Ray's worker processes (and by `kbert.server.deploy` once the environment Ray
reads is set); it imports Ray.
"""

from __future__ import annotations

from typing import Any

from ray import serve

from kbert.server.state import Limits, ServeConfig, build_state


@serve.ingress()
class KbertReplica:
    """A replica: loads the models of `config` (each made ready: no request waits for a
    graph or a trace), then serves the app."""

    def __init__(self, config: ServeConfig) -> None:
        self.state = build_state(config)

    def __serve_build_asgi_app__(self) -> Any:
        from kbert.server.routes import make_app
        return make_app(self.state)

    def check_health(self) -> None:
        """Ray Serve's health check: the batcher's worker is alive or not yet started."""
        if not self.state.batcher.alive:
            raise RuntimeError("the batcher stopped")

    async def __del__(self) -> None:
        self.state.stopping = True
        self.state.batcher.close()


def app_builder(args: dict) -> Any:
    """The application Ray Serve's config files and `serve run` name
    (`import_path: kbert.server.replica:app_builder`), for a Ray cluster (a RayService on
    Kubernetes: deploy/rayservice.yaml). `args` are `ServeConfig`'s fields: {"models": [...],
    "index": ..., "max_batch_tokens": ...}; `num_replicas` sets the replicas."""
    args = dict(args)
    replicas = int(args.pop("num_replicas", 1))
    limits = Limits(**{k: args.pop(k) for k in ("max_body", "max_inputs") if k in args})
    models = args.pop("models")
    config = ServeConfig(models=[models] if isinstance(models, str) else list(models),
                         limits=limits, **args)
    return serve.deployment(KbertReplica, name="kbert", num_replicas=replicas,
                            max_ongoing_requests=100_000,
                            ray_actor_options={"num_cpus": 0}).bind(config)


__all__ = ["KbertReplica", "app_builder"]
