"""`kbert serve`'s routes, in-process (the FastAPI app the Ray Serve replica hosts): each method's
route gives what the Python API gives; concurrent requests are merged into batches with the same
results; bad requests get one line and the right status; a full queue refuses at once."""

import asyncio
import json

import httpx
import numpy as np
import pytest

from kbert.server.state import Limits, ServeConfig, ServerState, build_state

pytestmark = pytest.mark.multibackend

MODELS = ["minilm-l6-v2", "minilm-l6-mlm-nsp", "minilm-l6-squad", "minilm-l6-squad-reranker"]


@pytest.fixture(scope="module")
def state():
    config = ServeConfig(models=list(MODELS), runtime="keras", dtype="float32", prepare=False,
                         limits=Limits(max_body=64 * 1024, max_inputs=64), max_queued=256)
    return build_state(config)


@pytest.fixture(scope="module")
def app(state):
    from kbert.server.routes import make_app
    return make_app(state)


def call(app, method, path, body=None, raw=None):
    """One request through the app (in-process ASGI): (status, parsed body)."""
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            if method == "GET":
                return await client.get(path)
            return await client.post(path, content=raw if raw is not None
                                     else json.dumps(body).encode())
    response = asyncio.run(go())
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


def concurrently(app, requests):
    """[(path, body)] sent at once: their (status, body) in order."""
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            got = await asyncio.gather(*(client.post(p, json=b) for p, b in requests))
        return [(r.status_code, r.json()) for r in got]
    return asyncio.run(go())


@pytest.fixture(scope="module")
def models(state):
    return {name: state.servables[name].model for name in MODELS}


def test_methods_answer_as_the_python_api(app, models):
    status, got = call(app, "POST", "/embed", {"inputs": ["A man plays a guitar.", "Rain."],
                                               "model": "minilm-l6-v2"})
    assert status == 200 and got["model"] == "minilm-l6-v2"
    want = models["minilm-l6-v2"].embed(["A man plays a guitar.", "Rain."], normalize=True)
    np.testing.assert_allclose(got["results"], want, atol=1e-5)
    # one text in, one vector out; no model named: the first served that embeds
    status, got = call(app, "POST", "/embed", {"inputs": "Rain.", "normalize": False})
    assert status == 200 and got["model"] == "minilm-l6-v2"
    np.testing.assert_allclose(got["results"], models["minilm-l6-v2"].embed("Rain.")[0],
                               atol=1e-5)

    status, got = call(app, "POST", "/fill_mask", {"inputs": "The capital of France is [MASK].",
                                                   "top_k": 3})
    assert status == 200 and got["model"] == "minilm-l6-mlm-nsp"
    want = models["minilm-l6-mlm-nsp"].fill_mask("The capital of France is [MASK].", top_k=3)
    assert [t["token"] for t in got["results"][0]] == [t["token"] for t in want[0]]

    status, got = call(app, "POST", "/next_sentence", {"sentence_a": "I am hungry.",
                                                       "sentence_b": "Let us eat."})
    want = models["minilm-l6-mlm-nsp"].next_sentence("I am hungry.", "Let us eat.")
    assert status == 200 and got["results"]["is_next"] == pytest.approx(want["is_next"], abs=1e-5)

    context = "The book was written by Jane Austen in 1813 in England."
    status, got = call(app, "POST", "/answer", {"question": "Who wrote the book?",
                                                "context": context})
    want = models["minilm-l6-squad"].answer("Who wrote the book?", context)
    assert status == 200 and got["results"][0]["text"] == want[0]["text"] == "Jane Austen"

    passages = ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."]
    status, got = call(app, "POST", "/rerank", {"query": "What is the capital of France?",
                                                "passages": passages, "top_k": 2,
                                                "model": "minilm-l6-squad-reranker"})
    want = models["minilm-l6-squad-reranker"].rerank("What is the capital of France?", passages,
                                                      top_k=2)
    assert status == 200 and [r["index"] for r in got["results"]] == [r["index"] for r in want]

    status, got = call(app, "POST", "/classify", {"inputs": "What is the capital of France?",
                                                  "text_pair": passages[0]})
    assert status == 200 and got["model"] == "minilm-l6-squad-reranker"
    want = models["minilm-l6-squad-reranker"].classify("What is the capital of France?",
                                                        passages[0])
    assert got["results"] == pytest.approx(want, abs=1e-5)


def test_openai_embeddings(app, models):
    status, got = call(app, "POST", "/v1/embeddings", {"input": ["hello", "world"],
                                                       "model": "minilm-l6-v2"})
    assert status == 200 and got["object"] == "list" and got["model"] == "minilm-l6-v2"
    assert [d["index"] for d in got["data"]] == [0, 1]
    want = models["minilm-l6-v2"].embed(["hello", "world"], normalize=True)
    np.testing.assert_allclose([d["embedding"] for d in got["data"]], want, atol=1e-5)
    assert got["usage"]["prompt_tokens"] == 6        # [CLS] hello [SEP] [CLS] world [SEP]
    status, got = call(app, "POST", "/v1/embeddings", {"input": "hello",
                                                       "encoding_format": "base64"})
    import base64
    vector = np.frombuffer(base64.b64decode(got["data"][0]["embedding"]), np.float32)
    np.testing.assert_allclose(vector, want[0], atol=1e-5)


def test_concurrent_requests_are_batched_with_the_same_results(app, state, models):
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'the weather'}" for i in range(24)]
    before = _metric(state, "kbert_batch_requests_count", 'method="embed",model="minilm-l6-v2"')
    got = concurrently(app, [("/embed", {"inputs": [t], "model": "minilm-l6-v2"})
                             for t in texts])
    after = _metric(state, "kbert_batch_requests_count", 'method="embed",model="minilm-l6-v2"')
    assert all(s == 200 for s, _ in got)
    want = models["minilm-l6-v2"].embed(texts, normalize=True)
    np.testing.assert_allclose([b["results"][0] for _, b in got], want, atol=1e-5)
    assert after - before < len(texts), "24 concurrent requests ran as 24 batches"


def _metric(state, name, labels):
    body, _ = state.metrics.render(0)
    for line in body.decode().splitlines():
        if line.startswith(f"{name}{{{labels}}}"):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize("path, body, status, words", [
    ("/embed", None, 400, "not valid JSON"),
    ("/embed", [1, 2], 400, "JSON object"),
    ("/embed", {"texts": ["a"]}, 400, "unknown field"),
    ("/embed", {}, 400, "needs \"inputs\""),
    ("/embed", {"inputs": []}, 400, "empty"),
    ("/embed", {"inputs": [""]}, 400, "empty"),
    ("/embed", {"inputs": [1, 2]}, 400, "string"),
    ("/embed", {"inputs": "a", "normalize": "yes"}, 400, "\"normalize\" must be bool"),
    ("/embed", {"inputs": "a", "model": "nope"}, 404, "no model named 'nope'"),
    ("/embed", {"inputs": ["a"] * 65}, 413, "at most 64"),
    ("/embed", {"inputs": "a" * 70000}, 413, "bytes"),
    ("/fill_mask", {"inputs": "a [MASK]", "top_k": 0}, 400, "integer >= 1"),
    ("/fill_mask", {"inputs": "a [MASK]", "model": "minilm-l6-v2"}, 400, "no 'mlm' head"),
    ("/answer", {"question": ["a", "b"], "context": "c"}, 400, "same length"),
    ("/rerank", {"query": ["a"], "passages": ["b"]}, 400, "one text"),
    ("/search", {"query": "a"}, 404, "no index"),
    ("/tag", {"inputs": "a"}, 404, "no served model can"),
    ("/nope", {"inputs": "a"}, 404, "no route"),
    ("/v1/models/minilm-l6-v2:predict", {"instances": ["a"]}, 400, "through its methods"),
    ("/v1/models/nope:predict", {"instances": ["a"]}, 404, "Servable not found"),
])
def test_bad_requests_get_one_line(app, path, body, status, words):
    raw = b"{not json" if body is None else None
    got_status, got = call(app, "POST", path, body, raw=raw)
    assert got_status == status, got
    assert set(got) == {"error"} and words in got["error"] and "\n" not in got["error"]
    assert call(app, "GET", "/health") == (200, {"status": "ok"})      # still serving


def test_operations(app, state):
    assert call(app, "GET", "/ready")[0] == 200
    status, got = call(app, "GET", "/v1/models")
    assert [m["name"] for m in got["models"]] == MODELS
    assert got["models"][2]["methods"] == ["embed", "answer"]
    status, got = call(app, "GET", "/v1/models/minilm-l6-v2")
    assert got["model_version_status"][0]["state"] == "AVAILABLE"
    call(app, "POST", "/embed", {"inputs": "a"})
    status, text = call(app, "GET", "/metrics")
    assert status == 200
    for name in ("kbert_requests_total", "kbert_request_duration_seconds_bucket",
                 "kbert_batch_inputs_bucket", "kbert_queue_inputs"):
        assert name in text


def test_a_full_queue_refuses_at_once(state):
    """With the one inference thread busy, requests beyond max_queued inputs are refused with
    429 at once, the ones queued are answered, and the server serves after."""
    import threading

    from kbert.server.batcher import Batcher
    from kbert.server.routes import make_app
    release = threading.Event()
    busy = Batcher(max_queued=4)
    small = ServerState(state.servables, busy, state.metrics)
    app = make_app(small)
    model = state.servables["minilm-l6-v2"]
    original = model.model.embed

    def slow_embed(*args, **kwargs):
        release.wait(30)
        return original(*args, **kwargs)

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            first = asyncio.ensure_future(client.post("/embed", json={"inputs": ["a"]}))
            await asyncio.sleep(0.2)                   # running, holding the thread
            queued = [asyncio.ensure_future(client.post("/embed", json={"inputs": ["b", "c"]}))
                      for _ in range(2)]
            await asyncio.sleep(0.2)
            refused = await client.post("/embed", json={"inputs": ["d"]})
            release.set()
            return refused, await first, await asyncio.gather(*queued)
    model.model.embed = slow_embed
    try:
        refused, first, queued = asyncio.run(go())
    finally:
        model.model.embed = original
    assert refused.status_code == 429 and "queue is full" in refused.json()["error"]
    assert first.status_code == 200 and all(q.status_code == 200 for q in queued)


PASSAGES = ["Paris is the capital and largest city of France.",
            "The Amazon is the largest rainforest on Earth, mostly in Brazil.",
            "Jane Austen wrote Pride and Prejudice, published in 1813.",
            "Mount Everest is the highest mountain above sea level."]


def test_search_and_ask_over_an_index(state, tmp_path):
    """--index: /search gives `Index.search`'s hits and /ask `kbert.retrieval.ask`'s answer,
    read by the served reader and reranked by the reranker named."""
    from kbert.retrieval import Index, ask
    from kbert.server.routes import make_app
    encoder = state.servables["minilm-l6-v2"].model
    Index.build(encoder, PASSAGES).save(str(tmp_path / "index"))
    config = ServeConfig(models=["minilm-l6-v2", "minilm-l6-squad", "minilm-l6-squad-reranker"],
                         index=str(tmp_path / "index"), reranker="minilm-l6-squad-reranker",
                         runtime="keras", dtype="float32", prepare=False)
    with_index = build_state(config)
    app = make_app(with_index)
    assert with_index.reader == "minilm-l6-squad"
    assert with_index.encoder is with_index.servables["minilm-l6-v2"].model   # not loaded twice

    status, got = call(app, "POST", "/search", {"query": "Who wrote Pride and Prejudice?",
                                                "top_k": 2})
    want = with_index.index.search("Who wrote Pride and Prejudice?", with_index.encoder, top_k=2)
    assert status == 200 and [h["index"] for h in got["results"]] == [h["index"] for h in want]
    assert got["results"][0]["text"] == PASSAGES[2]

    status, got = call(app, "POST", "/ask", {"question": ["Who wrote Pride and Prejudice?",
                                                          "What is the capital of France?"]})
    want = ask(["Who wrote Pride and Prejudice?", "What is the capital of France?"],
               with_index.index, with_index.servables["minilm-l6-squad"].model,
               with_index.encoder, with_index.servables["minilm-l6-squad-reranker"].model)
    assert status == 200, got
    assert [a["text"] for a in got["results"]] == [a["text"] for a in want]
    assert got["results"][0]["text"] == "Jane Austen"
    status, got = call(app, "POST", "/ask", {"question": "Where?", "reader": "minilm-l6-v2"})
    assert status == 400 and "no 'span' head" in got["error"]
