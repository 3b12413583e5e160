"""The playground's API contract: every endpoint called through gradio_client without `model`
runs on a checkpoint that has the endpoint's head, as the page does when a tab opens; a head
that no served checkpoint has is one message. Against the app served by tests/app_fixtures.py."""

import re

EIFFEL = "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France."

# One call per endpoint, none naming a model, and the head its answer must come from.
NO_MODEL = {
    "/fill_mask": ("mlm", {"text": "The capital of France is [MASK].", "top_k": 3}),
    "/next_sentence": ("nsp", {"sentence_a": "The man went to the store.",
                               "sentence_b": "He bought a gallon of milk."}),
    "/answer": ("span", {"question": "Where is the Eiffel Tower?", "context": EIFFEL,
                         "top_k": 3}),
    "/classify": ("classifier", {"text": "the dog sat on the mat .", "text_pair": ""}),
    "/entities": ("tagger", {"text": "the man went to paris ."}),
    "/attention": (None, {"text": "The cat sat on the mat.", "text_b": "", "layer": "1",
                          "head": "mean"}),
    "/search": ("embedding", {"question": "When was it built?", "document": EIFFEL}),
}


def _expected(model, endpoint, kwargs):
    """What the model with the head answers, as the endpoint shows it."""
    if endpoint == "/fill_mask":
        return [[r["token"] for r in m] for m in model.fill_mask(kwargs["text"], top_k=3)]
    if endpoint == "/next_sentence":
        return round(model.next_sentence(kwargs["sentence_a"], kwargs["sentence_b"])["is_next"], 4)
    if endpoint == "/answer":
        return model.answer(kwargs["question"], kwargs["context"])[0]["text"]
    if endpoint == "/classify":
        return max(model.classify(kwargs["text"]).items(), key=lambda kv: kv[1])[0]
    return [[e["text"], e["label"]] for e in model.tag(kwargs["text"])]


def test_every_endpoint_without_a_model_uses_one_with_its_head(served, client):
    _, names, registry = served
    api = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert set(api) == set(NO_MODEL)
    for endpoint, (head, kwargs) in NO_MODEL.items():
        model = api[endpoint]["parameters"][0]
        assert (model["parameter_name"], model["parameter_has_default"],
                model["parameter_default"]) == ("model", True, None), endpoint
        out = client.predict(**kwargs, api_name=endpoint)
        assert out[-1] == "", (endpoint, out[-1])                     # no warning
        got = {"/fill_mask": lambda: [[r["token"] for r in m] for m in out[0]],
               "/next_sentence": lambda: round(out[0], 4),
               "/answer": lambda: out[0], "/classify": lambda: out[0]["label"],
               "/entities": lambda: [row[:2] for row in out[1]["data"]],
               "/attention": lambda: out[1]["data"][0][1],
               "/search": lambda: re.search(r"by (\S+);", out[4]).group(1)}[endpoint]()
        if endpoint == "/attention":
            assert got == "[CLS]"
        elif endpoint == "/search":
            assert got == names["embedding"]
        else:
            assert got == _expected(registry.get(names[head]), endpoint, kwargs), endpoint


def test_an_endpoint_whose_head_no_checkpoint_has_says_so(tmp_path, tiny):
    from app import handlers
    from app.registry import Registry, discover
    tiny(tmp_path / "mlm", "mlm")
    registry = Registry(discover(tmp_path))
    for handler, args, head in ((handlers.classify, ("a text", ""), "classifier"),
                                (handlers.answer, ("who?", "a text", 3), "span"),
                                (handlers.search, ("who?", "a text"), "sentence-embedding")):
        out = handler(registry)(None, *args)
        out = list(out)[-1] if handler is handlers.search else out   # its last step
        assert out[0] is None and "None of the served checkpoints has a " + head in out[-1]
