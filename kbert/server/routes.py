"""The HTTP routes of `kbert serve`: a FastAPI app over the loaded servables. The serving
framework (Ray Serve, `kbert.server.deploy`) hosts it; tests call it in-process too.

TF Serving's REST API (`kbert.server.tfserving`):
    GET  /v1/models/NAME[/versions/N]             model status
    GET  /v1/models/NAME[/versions/N]/metadata    signatures
    POST /v1/models/NAME[/versions/N]:predict     {"signature_name"?, "instances" | "inputs"}
The methods of `kbert.load` (JSON in, {"model", "results"} out; "results" as the method
returns it; without "model", the first served model that has the method):
    POST /embed          {"inputs": text | [texts], "normalize"?: true, "pooling"?}
    POST /fill_mask      {"inputs", "top_k"?: 5}
    POST /next_sentence  {"sentence_a", "sentence_b"}            (texts or lists)
    POST /classify       {"inputs", "text_pair"?}
    POST /tag            {"inputs"}
    POST /answer         {"question", "context", "top_k"?: 1}    (texts or lists)
    POST /rerank         {"query", "passages": [texts], "top_k"?}
    POST /search         {"query": text | [texts], "top_k"?: 10, "hybrid"?}   (--index)
    POST /ask            {"question": text | [texts], "passages"?, "candidates"?, "hits"?}
    POST /v1/embeddings  OpenAI's: {"input", "model"?} → {"data": [{"embedding", "index"}], ...}
Operations: GET /health (alive), GET /ready (models loaded and not stopping), GET /v1/models
(what is served), GET /metrics (Prometheus).

Every error is {"error": "one line"}: 400 bad input, 404 unknown model/route/version, 413 a
request over a limit (naming it), 429 (JSON routes) / 503 (`:predict`, as TF Serving) when
the queue is full, 503 while stopping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from kbert.server.batcher import QueueFull
from kbert.server.inputs import json_object, option, positive, read_json, texts_field
from kbert.server.servables import ModelServable
from kbert.server.state import HTTPError, ServerState
from kbert.server.tfserving import (
    SavedModelServable,
    TFServingError,
    parse_predict,
    predict_response,
)


# --- the app ---------------------------------------------------------------------------------
def json_response(content: Any, status: int = 200) -> Response:
    """A JSON response (orjson: NumPy arrays written directly)."""
    import orjson
    body = orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY, default=_tolist)
    return Response(body, status_code=status, media_type="application/json")


def error_response(status: int, message: str) -> Response:
    """{"error": message} on one line."""
    return json_response({"error": " ".join(str(message).split())}, status)


def make_app(state: ServerState) -> FastAPI:
    """The FastAPI app of `state`'s servables."""
    app = FastAPI(title="kbert serve", docs_url=None, redoc_url=None, openapi_url=None)
    api = Api(state)

    @app.exception_handler(StarletteHTTPException)
    async def http_exception(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(404, f"no route {request.method} {request.url.path} (see GET "
                                       "/v1/models for the models; the routes are in kbert "
                                       "serve --help)")
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> Response:
        return error_response(400, str(exc))

    for path, handler in (("/health", api.health), ("/ready", api.ready),
                          ("/v1/models", api.models), ("/metrics", api.metrics),
                          ("/v1/models/{name}", api.model_status),
                          ("/v1/models/{name}/versions/{version}", api.model_version_status),
                          ("/v1/models/{name}/metadata", api.model_metadata),
                          ("/v1/models/{name}/versions/{version}/metadata",
                           api.model_version_metadata)):
        app.add_api_route(path, handler, methods=["GET"])
    app.add_api_route("/v1/models/{target:path}", api.model_verb, methods=["POST"])
    for method, run in (("embed", api.embed), ("fill_mask", api.fill_mask),
                        ("next_sentence", api.next_sentence), ("classify", api.classify),
                        ("tag", api.tag), ("answer", api.answer), ("rerank", api.rerank)):
        app.add_api_route(f"/{method}", api.method_route(method, run), methods=["POST"],
                          name=method)
    app.add_api_route("/v1/embeddings", api.openai_embeddings, methods=["POST"])
    app.add_api_route("/search", api.search, methods=["POST"])
    app.add_api_route("/ask", api.ask, methods=["POST"])
    return app


# the fields each method's route takes, and those it needs
FIELDS = {
    "embed": ({"inputs", "normalize", "pooling"}, ["inputs"]),
    "fill_mask": ({"inputs", "top_k"}, ["inputs"]),
    "next_sentence": ({"sentence_a", "sentence_b"}, ["sentence_a", "sentence_b"]),
    "classify": ({"inputs", "text_pair"}, ["inputs"]),
    "tag": ({"inputs"}, ["inputs"]),
    "answer": ({"question", "context", "top_k"}, ["question", "context"]),
    "rerank": ({"query", "passages", "top_k"}, ["query", "passages"]),
}


class Api:
    """The handlers of `make_app`'s routes, over one `ServerState`."""

    def __init__(self, state: ServerState) -> None:
        self.state, self.limits = state, state.limits

    async def timed(self, route: str, model: str | Callable[[], str],
                    handler: Callable[[], Any]) -> Response:
        """The handler's answer (or its error as one line), counted in the metrics under
        `model` (a name, or a function giving it once the handler has read the request)."""
        started = time.perf_counter()
        code = 200
        try:
            response = json_response(await handler())
        except (HTTPError, TFServingError) as e:
            code, response = e.status, error_response(e.status, str(e))
        except ValueError as e:          # the library's one-line errors for bad input
            code, response = 400, error_response(400, str(e))
        self.state.metrics.request(model() if callable(model) else model, route, code,
                                   time.perf_counter() - started)
        return response

    # --- operations ------------------------------------------------------------------------
    async def health(self) -> Response:
        return json_response({"status": "ok"})

    async def ready(self) -> Response:
        if self.state.stopping:
            return error_response(503, "the server is stopping")
        return json_response({"status": "ready", "models": list(self.state.servables)})

    async def models(self) -> Response:
        state = self.state
        return json_response({"models": [s.describe() for s in state.servables.values()],
                       "index": None if state.index is None else len(state.index)})

    async def metrics(self) -> Response:
        body, content_type = self.state.metrics.render(self.state.batcher.depth)
        return Response(body, media_type=content_type)

    # --- TF Serving ------------------------------------------------------------------------
    def servable(self, name: str, version: str | None) -> Any:
        found = self.state.servables.get(name)
        if found is None:
            request = f"Specific({name}, {version})" if version else f"Latest({name})"
            raise TFServingError(f"Servable not found for request: {request}", 404)
        if version is not None and not version.isdigit():
            raise TFServingError(f"the version must be a number, got {version!r}")
        return found

    def status_of(self, name: str, version: str | None) -> dict:
        found = self.servable(name, version)
        if isinstance(found, SavedModelServable):
            return found.status(version)
        if version is not None and version != "1":
            raise TFServingError(f"Servable not found for request: Specific({name}, {version})",
                                 404)
        return {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}]}

    def saved_model(self, name: str, version: str | None, what: str) -> SavedModelServable:
        found = self.servable(name, version)
        if not isinstance(found, SavedModelServable):
            raise TFServingError(f"{name} is served through its methods ({', '.join(found.methods)}"
                                 f": POST /METHOD with \"model\": \"{name}\"); {what} a "
                                 "SavedModel's (kbert export)", 400)
        found.check_version(version)
        return found

    async def model_status(self, name: str) -> Response:
        return await self.timed("status", name, lambda: _now(self.status_of(name, None)))

    async def model_version_status(self, name: str, version: str) -> Response:
        return await self.timed("status", name, lambda: _now(self.status_of(name, version)))

    async def model_metadata(self, name: str) -> Response:
        return await self.timed("metadata", name, lambda: _now(
            self.saved_model(name, None, "signature metadata is").metadata(None)))

    async def model_version_metadata(self, name: str, version: str) -> Response:
        return await self.timed("metadata", name, lambda: _now(
            self.saved_model(name, version, "signature metadata is").metadata(version)))

    async def model_verb(self, target: str, request: Request) -> Response:
        name, version, verb = _split_target(target)
        if verb != "predict":
            return error_response(404 if verb is None else 400,
                         f"POST /v1/models/{target}: the verb is :predict (TF Serving's "
                         ":classify and :regress take tf.Example, which kbert's signatures do "
                         "not)" if verb else f"no route POST /v1/models/{target}")
        return await self.timed("predict", name, lambda: self.predict(name, version, request))

    async def predict(self, name: str, version: str | None, request: Request) -> dict:
        found = self.saved_model(name, version, ":predict runs")
        limits = self.limits
        try:
            body = await read_json(request, limits)
        except HTTPError as e:
            raise TFServingError(str(e), e.status) from None
        signature = body.get("signature_name") if isinstance(body, dict) else None
        if signature is not None and not isinstance(signature, str):
            raise TFServingError("\"signature_name\" must be a string")
        inputs, form, rows = parse_predict(body, found.input_specs(signature))
        if self.state.stopping:
            raise TFServingError("the server is stopping", 503)
        if form == "row" and rows > limits.max_inputs:
            raise TFServingError(f"{rows} instances; at most {limits.max_inputs} a request "
                                 "(--max-inputs)", 413)
        signature_key = signature or "serving_default"
        try:
            if form == "row" and found.mergeable(signature):
                names = list(inputs)

                def call(rows_: list) -> list:
                    merged = {n: np.stack([np.asarray(r[i], dtype=inputs[n].dtype)
                                           for r in rows_]) for i, n in enumerate(names)}
                    out = found.run(signature, merged)
                    return [{k: v[j] for k, v in out.items()} for j in range(len(rows_))]
                items = [tuple(inputs[n][j] for n in names) for j in range(rows)]
                got = await self.state.batcher.submit((name, signature_key, ()), items, call,
                                                      sum(_cost(x) for x in items))
                outputs = {k: np.stack([g[k] for g in got]) for k in got[0]}
            else:
                key = (name, signature_key, ("alone", id(request)))
                got = await self.state.batcher.submit(
                    key, [inputs], lambda xs: [found.run(signature, xs[0])], rows)
                outputs = got[0]
        except QueueFull as e:
            raise TFServingError(str(e), 503) from None
        return predict_response(outputs, form, rows)

    # --- the methods ---------------------------------------------------------------------------
    def method_route(self, method: str, run: Callable[[dict, ModelServable], Any]
                     ) -> Callable[[Request], Any]:
        fields, required = FIELDS[method]

        async def handler(request: Request) -> Response:
            name = "-"

            async def go() -> Any:
                nonlocal name
                body = json_object(await read_json(request, self.limits), fields | {"model"},
                               required)
                servable = self.state.model(method, body.get("model"))
                name = servable.name
                return {"model": servable.name, "results": await run(body, servable)}
            return await self.timed(method, lambda: name, go)
        return handler

    async def embed(self, body: dict, s: ModelServable) -> Any:
        texts, single = texts_field(body, "inputs", self.limits)
        normalize = option(body, "normalize", bool, True)
        pooling = option(body, "pooling", str, None, lambda v: v in ("cls", "mean"),
                          "\"cls\" or \"mean\"")
        out = await self.state.run(s.name, "embed", (normalize, pooling), texts,
                                   lambda xs: list(s.model.embed(xs, pooling=pooling,
                                                                 normalize=normalize)),
                                   sum(s.cost(t) for t in texts))
        return np.stack(out)[0] if single else np.stack(out)

    async def fill_mask(self, body: dict, s: ModelServable) -> Any:
        texts, single = texts_field(body, "inputs", self.limits)
        top_k = positive(body, "top_k", 5)
        out = await self.state.run(s.name, "fill_mask", (top_k,), texts,
                                   lambda xs: s.model.fill_mask(xs, top_k=top_k),
                                   sum(s.cost(t) for t in texts))
        return out[0] if single else out

    def _pairs(self, body: dict, first: str, second: str, what: str = "text"
               ) -> tuple[list[tuple[str, str]], bool]:
        a, single = texts_field(body, first, self.limits, what)
        b, single_b = texts_field(body, second, self.limits, what)
        if len(a) != len(b) or single != single_b:
            raise HTTPError(400, f"\"{first}\" and \"{second}\" must both be texts or lists "
                                 "of the same length")
        return list(zip(a, b)), single

    async def next_sentence(self, body: dict, s: ModelServable) -> Any:
        pairs, single = self._pairs(body, "sentence_a", "sentence_b")
        out = await self.state.run(s.name, "next_sentence", (), pairs,
                                   lambda ps: s.model.next_sentence([p[0] for p in ps],
                                                                    [p[1] for p in ps]),
                                   sum(s.cost(*p) for p in pairs))
        return out[0] if single else out

    async def classify(self, body: dict, s: ModelServable) -> Any:
        if body.get("text_pair") is None:
            texts, single = texts_field(body, "inputs", self.limits)
            out = await self.state.run(s.name, "classify", (), texts,
                                       lambda xs: s.model.classify(xs),
                                       sum(s.cost(t) for t in texts))
            return out[0] if single else out
        pairs, single = self._pairs(body, "inputs", "text_pair")
        out = await self.state.run(s.name, "classify", ("pair",), pairs,
                                   lambda ps: s.model.classify([p[0] for p in ps],
                                                               [p[1] for p in ps]),
                                   sum(s.cost(*p) for p in pairs))
        return out[0] if single else out

    async def tag(self, body: dict, s: ModelServable) -> Any:
        texts, single = texts_field(body, "inputs", self.limits)
        out = await self.state.run(s.name, "tag", (), texts, lambda xs: s.model.tag(xs),
                                   sum(s.cost(t) for t in texts))
        return out[0] if single else out

    async def answer(self, body: dict, s: ModelServable) -> Any:
        pairs, single = self._pairs(body, "question", "context")
        top_k = positive(body, "top_k", 1)
        out = await self.state.run(s.name, "answer", (top_k,), pairs,
                                   lambda ps: s.model.answer([p[0] for p in ps],
                                                             [p[1] for p in ps], top_k=top_k),
                                   sum(s.cost(*p) for p in pairs))
        return out[0] if single else out

    async def rerank(self, body: dict, s: ModelServable) -> Any:
        if not isinstance(body["query"], str):
            raise HTTPError(400, "\"query\" must be one text")
        query, _ = texts_field(body, "query", self.limits, "query")
        passages, single = texts_field(body, "passages", self.limits, "passage")
        if single:
            raise HTTPError(400, "\"passages\" must be a list of texts")
        top_k = positive(body, "top_k", None)
        # one request's passages run as one call (a reranked list is sorted per query)
        out = await self.state.run(s.name, "rerank", ("alone", id(body)), [passages],
                                   lambda xs: [s.model.rerank(query[0], xs[0], top_k=top_k)],
                                   sum(s.cost(query[0], p) for p in passages))
        return out[0]

    # --- OpenAI's embeddings -----------------------------------------------------------------
    async def openai_embeddings(self, request: Request) -> Response:
        name = "-"

        async def go() -> Any:
            nonlocal name
            body = json_object(await read_json(request, self.limits),
                           {"input", "model", "encoding_format", "user", "dimensions"},
                           ["input"])
            fmt = option(body, "encoding_format", str, "float",
                          lambda v: v in ("float", "base64"), "\"float\" or \"base64\"")
            s = self.state.model("embed", body.get("model"))
            name = s.name
            if body.get("dimensions") is not None:
                raise HTTPError(400, "\"dimensions\": this model's vectors have one size, "
                                     f"{s.model.config.hidden_size}")
            texts, _ = texts_field(body, "input", self.limits)
            out = await self.state.run(s.name, "embed", (True, None, "usage"), texts,
                                       lambda xs: list(zip(s.model.embed(xs, normalize=True),
                                                           s.tokens(xs))),
                                       sum(s.cost(t) for t in texts))
            tokens = sum(n for _, n in out)
            return {"object": "list", "data": [
                {"object": "embedding", "index": i, "embedding": _vector(v, fmt)}
                for i, (v, _) in enumerate(out)], "model": s.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        return await self.timed("embeddings", lambda: name, go)

    # --- search ------------------------------------------------------------------------------
    def index(self) -> Any:
        if self.state.index is None:
            raise HTTPError(404, "no index is served: kbert serve ... --index DIR")
        return self.state.index

    async def search(self, request: Request) -> Response:
        async def go() -> Any:
            body = json_object(await read_json(request, self.limits), {"query", "top_k", "hybrid"},
                           ["query"])
            index = self.index()
            queries, single = texts_field(body, "query", self.limits, "query")
            top_k = positive(body, "top_k", 10)
            hybrid = option(body, "hybrid", bool, None)
            out = await self.state.run(
                "index", "search", (top_k, hybrid), queries,
                lambda qs: index.search(qs, self.state.encoder, top_k=top_k, hybrid=hybrid),
                sum(len(q) // 4 + 2 for q in queries))
            return {"results": out[0] if single else out}
        return await self.timed("search", "index", go)

    async def ask(self, request: Request) -> Response:
        async def go() -> Any:
            from kbert.retrieval import open_qa
            body = json_object(await read_json(request, self.limits),
                           {"question", "passages", "candidates", "hits", "hybrid", "reader",
                            "reranker"}, ["question"])
            index = self.index()
            questions, single = texts_field(body, "question", self.limits, "question")
            passages = positive(body, "passages", open_qa.PASSAGES)
            candidates = positive(body, "candidates", 20)
            hits = positive(body, "hits", None)
            hybrid = option(body, "hybrid", bool, None)
            reader = self.state.model("answer", body.get("reader", self.state.reader))
            reranker_name = body.get("reranker", self.state.reranker)
            reranker = (None if reranker_name is None
                        else self.state.model("rerank", reranker_name))

            def call(qs: list) -> list:
                return list(open_qa.ask(qs, index, reader.model, self.state.encoder,
                                        None if reranker is None else reranker.model,
                                        passages=passages, candidates=candidates,
                                        hybrid=hybrid, hits=hits))
            key = (passages, candidates, hits, hybrid, reader.name, reranker_name)
            out = await self.state.run("index", "ask", key, questions, call,
                                       len(questions) * passages * 200)
            return {"results": out[0] if single else out}
        return await self.timed("ask", "index", go)


def _vector(vector: Any, fmt: str) -> Any:
    """An embedding as OpenAI's API gives it: floats, or base64 of little-endian float32."""
    if fmt == "base64":
        import base64
        return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")
    return np.asarray(vector)


def _tolist(value: Any) -> Any:
    """What orjson cannot write itself (an array that is not C-contiguous): as a list."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


async def _now(value: Any) -> Any:
    return value


def _split_target(target: str) -> tuple[str, str | None, str | None]:
    """"NAME[/versions/N]:verb" → (name, version, verb).

    >>> _split_target("half:predict"), _split_target("half/versions/123:predict")
    (('half', None, 'predict'), ('half', '123', 'predict'))
    """
    path, _, verb = target.partition(":")
    name, _, version = path.partition("/versions/")
    return name, version or None, verb or None


def _cost(row: tuple) -> int:
    return sum(len(v) // 4 + 2 if isinstance(v, bytes) else 1 for v in
               (x.item() if isinstance(x, np.ndarray) and x.ndim == 0 else x for x in row))


__all__ = ["Api", "error_response", "json_response", "make_app"]
