"""`kbert serve`: models, exports and an index behind an HTTP API, on Ray Serve.

    servables.py  what is served: a SavedModel (TF Serving's :predict) or anything `kbert.load`
                  takes (the JSON routes of its methods); names, loading
    tfserving.py  TF Serving's REST API on a SavedModel: :predict, status, metadata, b64
    batcher.py    the dynamic batcher: concurrent requests of one method become one call, one
                  call at a time per replica, a bounded queue
    inputs.py     a request's JSON body read within the limits, its fields checked
    routes.py     the FastAPI app: TF Serving's routes, the methods, search, OpenAI's
                  /v1/embeddings, /health, /ready, /metrics
    metrics.py    the Prometheus metrics
    state.py      `ServeConfig` → `ServerState`, what a replica serves; `Limits`, `HTTPError`
    replica.py    the Ray Serve deployment (imports Ray)
    deploy.py     `serve`: a local Ray cluster, the ingress on HOST:PORT, a graceful stop

The routes call `kbert.pipeline` and `kbert.retrieval`; nothing here repeats their logic.
Ray Serve, FastAPI and prometheus_client come with the optional extra: pip install
"kbert[serve]".
"""

from kbert._lazy import lazy_attributes

_LAZY = {
    "serve": "kbert.server.deploy",
    "ServeConfig": "kbert.server.state",
    "build_state": "kbert.server.state",
    "make_app": "kbert.server.routes",
    "Limits": "kbert.server.state",
    "ServeError": "kbert.server.servables",
}
__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
