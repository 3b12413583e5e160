"""A running playground for the tests in tests/app: served in this process on a free
loopback port, over the shipped checkpoints in saved_models/ that have the heads each tab needs,
and tiny random ones for the heads none has. One app per test process, shared by those files."""

import socket

import pytest

from helpers import REPO, tiny_vocab

CLASSES = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
HEADS = ("mlm", "nsp", "span", "classifier", "tagger", "embedding", "reranker")
RELEVANCE = ["irrelevant", "relevant"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_checkpoint(path, kind, **head_options):
    """A tiny random checkpoint with one kind of head ("mlm" also has "nsp"; "embedding" is a
    sentence encoder with mean pooling; "reranker" a classifier of RELEVANCE)."""
    import kbert
    from kbert import BertConfig, checkpoint
    max_len = 64 if kind == "mlm" else 128   # short enough to test truncation cheaply
    config = BertConfig.preset("tiny", vocab_size=120, max_position_embeddings=max_len)
    model = {"mlm": lambda: kbert.BertPretrainer(config),
             "span": lambda: kbert.BertQuestionAnswerer(config),
             "classifier": lambda: kbert.BertClassifier(config, num_labels=len(CLASSES)),
             "reranker": lambda: kbert.BertClassifier(config, num_labels=len(RELEVANCE)),
             "tagger": lambda: kbert.BertTokenClassifier(config, num_labels=len(TAGS)),
             "embedding": lambda: kbert.BertBackbone(config)}[kind]()
    options = {"classifier": {"classifier": {"labels": CLASSES}},
               "tagger": {"tagger": {"labels": TAGS}},
               "reranker": {"classifier": {"labels": RELEVANCE}}}.get(kind, head_options)
    embedding = {"pooling": "mean", "normalize": True, "max_seq_length": 64} \
        if kind == "embedding" else None
    checkpoint.save(path, model, vocab=tiny_vocab(size=120), head_options=options,
                    embedding=embedding)
    return str(path)


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """(url, {head: model name}, registry) of a running app."""
    from app import registry as registry_lib
    from app import server
    shipped = registry_lib.discover(REPO / "saved_models")
    tmp = tmp_path_factory.mktemp("app")
    extra = []
    if not any({"mlm", "nsp"} <= set(i["heads"]) for i in shipped.values()):
        extra.append(tiny_checkpoint(tmp / "tiny-mlm-nsp", "mlm"))
    if not any("span" in i["heads"] for i in shipped.values()):
        extra.append(tiny_checkpoint(tmp / "tiny-squad2", "span", span={"version": "2.0"}))
    for head in ("classifier", "tagger", "embedding", "reranker"):
        # a cross-encoder is a classifier too, but not the Classify tab's
        skip = "reranker" if head == "classifier" else None
        if not any(head in i["heads"] and skip not in i["heads"] for i in shipped.values()):
            extra.append(tiny_checkpoint(tmp / f"tiny-{head}", head))
    port = free_port()
    demo, registry = server.serve(extra, REPO / "saved_models", port=port, preload=True,
                                  block=False)
    names = {head: registry.default(head, skip="reranker" if head == "classifier" else None)
             for head in HEADS}
    yield f"http://127.0.0.1:{port}/", names, registry
    demo.close()


@pytest.fixture
def tiny():
    """`tiny_checkpoint`: a tiny random checkpoint with one kind of head, written to a path."""
    return tiny_checkpoint


@pytest.fixture(scope="session")
def client(served):
    from gradio_client import Client
    return Client(served[0], verbose=False)
