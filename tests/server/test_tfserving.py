"""`kbert serve` speaks TF Serving's REST API: the request/response examples of TF Serving's own
docs (`api_rest.md`, on its half_plus_three model), and a kbert SavedModel export served with the
outputs `tf.saved_model.load` gives for the same inputs (row and columnar formats, b64, several
inputs, metadata, versions, concurrent requests batched)."""

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO
from kbert.server.state import ServeConfig, build_state


def half_plus_three(base):
    """TF Serving's test model: y = 0.5 x + 3, at version 00000123."""
    class HalfPlusThree(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 0.5 * x + 3.0}
    module = HalfPlusThree()
    tf.saved_model.save(module, str(base / "00000123"),
                        signatures={"serving_default": module.serve})
    return base


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfserving")
    half = half_plus_three(root / "saved_model_half_plus_three")
    from kbert import serving
    serving.export(str(REPO / "saved_models" / "minilm-l6-mlm-nsp"), str(root / "bert"), version=2,
                   signatures=["embed", "fill_mask", "next_sentence"])
    state = build_state(ServeConfig(models=[f"half_plus_three={half}", str(root / "bert")],
                                    prepare=False))
    from kbert.server.routes import make_app
    return make_app(state), tf.saved_model.load(str(root / "bert" / "2"))


def request(app, method, path, body=None):
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8501") as c:
            if method == "GET":
                return await c.get(path)
            return await c.post(path, content=body if isinstance(body, bytes)
                                else json.dumps(body).encode())
    r = asyncio.run(go())
    return r.status_code, r.json()


def test_the_examples_of_tf_servings_docs(served):
    app, _ = served
    assert request(app, "GET", "/v1/models/half_plus_three") == (200, {
        "model_version_status": [{"version": "123", "state": "AVAILABLE",
                                  "status": {"error_code": "OK", "error_message": ""}}]})
    assert request(app, "POST", "/v1/models/half_plus_three:predict",
                   {"instances": [1.0, 2.0, 5.0]}) == (200, {"predictions": [3.5, 4.0, 5.5]})
    assert request(app, "POST", "/v1/models/half:predict", {"instances": [1.0, 5.0]}) == (
        404, {"error": "Servable not found for request: Latest(half)"})
    # the columnar format, a version named, a version not served
    assert request(app, "POST", "/v1/models/half_plus_three/versions/123:predict",
                   {"inputs": {"x": [1.0, 5.0]}}) == (200, {"outputs": [3.5, 5.5]})
    assert request(app, "POST", "/v1/models/half_plus_three/versions/7:predict",
                   {"instances": [1.0]}) == (
        404, {"error": "Servable not found for request: Specific(half_plus_three, 7)"})
    status, meta = request(app, "GET", "/v1/models/half_plus_three/metadata")
    assert meta["model_spec"] == {"name": "half_plus_three", "signature_name": "",
                                  "version": "123"}
    signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert signature["method_name"] == "tensorflow/serving/predict"


@pytest.mark.parametrize("body, words", [
    ({"instances": ["a"]}, "float"),
    ({"instances": [[1.0, 2.0]]}, "rank 2"),
    ({"instances": [1.0], "inputs": [1.0]}, "exactly one"),
    ({"instances": []}, "non-empty"),
    ({"instances": [1.0], "signature_name": "nope"}, "\"nope\" not found"),
    ({"examples": [1.0]}, "unknown field"),
    (b"{oops", "not valid JSON"),
])
def test_bad_predict_requests(served, body, words):
    app, _ = served
    status, got = request(app, "POST", "/v1/models/half_plus_three:predict", body)
    assert status == 400 and words in got["error"], got


def test_a_kbert_export_gives_the_saved_models_outputs(served):
    app, loaded = served
    texts = ["The capital of France is [MASK].", "A [MASK] sat on the mat."]

    def direct(signature, **inputs):
        out = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
        return {k: v.numpy() for k, v in out.items()}

    status, got = request(app, "POST", "/v1/models/bert:predict",
                          {"signature_name": "embed", "instances": texts})
    want = direct("embed", text=texts)
    assert status == 200 and set(got["predictions"][0]) == set(want)
    np.testing.assert_allclose([p["embedding"] for p in got["predictions"]], want["embedding"],
                               atol=1e-6)

    status, got = request(app, "POST", "/v1/models/bert:predict",
                          {"signature_name": "fill_mask", "inputs": {"text": texts}})
    want = direct("fill_mask", text=texts)
    assert got["outputs"]["tokens"] == [[[t.decode() for t in k] for k in m]
                                        for m in want["tokens"]]
    np.testing.assert_allclose(got["outputs"]["scores"], want["scores"], atol=1e-6)

    # several inputs, one of them base64
    pairs = [{"sentence_a": "I am hungry.", "sentence_b": {"b64": base64.b64encode(
        b"Let us eat.").decode()}}, {"sentence_a": "I am hungry.", "sentence_b": "Rain fell."}]
    status, got = request(app, "POST", "/v1/models/bert/versions/2:predict",
                          {"signature_name": "next_sentence", "instances": pairs})
    want = direct("next_sentence", sentence_a=["I am hungry.", "I am hungry."],
                  sentence_b=["Let us eat.", "Rain fell."])
    np.testing.assert_allclose([p["is_next"] for p in got["predictions"]], want["is_next"],
                               atol=1e-6)

    # the main signature (serving_default) is the first of the export's
    status, meta = request(app, "GET", "/v1/models/bert/metadata")
    assert {"embed", "fill_mask", "next_sentence", "serving_default"} <= set(
        meta["metadata"]["signature_def"]["signature_def"])


def test_concurrent_predicts_are_batched_with_the_same_outputs(served):
    app, loaded = served
    texts = [f"text number {i}" for i in range(16)]

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await asyncio.gather(*(c.post("/v1/models/bert:predict", json={
                "signature_name": "embed", "instances": [t]}) for t in texts))
    got = [r.json()["predictions"][0]["embedding"] for r in asyncio.run(go())]
    want = loaded.signatures["embed"](text=tf.constant(texts))["embedding"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
