"""Every kind of BERT repository, loaded with `kbert.load("hf://...")` from a Hub on 127.0.0.1
through the real huggingface_hub client, gives what transformers and sentence-transformers give
on the same files (1e-5), on every backend."""

import numpy as np
import pytest
import torch
import transformers
from hub_repos import HEADS, make_repos
from hub_server import hub_server_fixture, online_hub_fixture  # noqa: F401  (fixtures)

import kbert
from helpers import max_abs_diff

pytestmark = pytest.mark.multibackend
TOL = 1e-5
TEXT = "the man went to the [MASK] ."
PAIR = ("the dog sat on the mat .", "it was good .")


@pytest.fixture(scope="module")
def repos(tmp_path_factory, hub_server):
    """{name: local folder}, each also served as kbert-test/NAME."""
    folders = make_repos(str(tmp_path_factory.mktemp("repos")))
    for name, folder in folders.items():
        hub_server.add_repo(f"kbert-test/{name}", folder)
    return folders


@pytest.fixture
def hub(online_hub, repos, tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "kbert-cache"))
    return online_hub


def _hf_inputs(folder, *texts):
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    return tok, tok(*texts, return_tensors="pt")


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_every_head_kind_converts_with_its_heads(hub, repos, name):
    m = kbert.load(f"hf://kbert-test/{name}")
    assert set(m.checkpoint.heads) == HEADS[name][1]


def test_pretraining_repo_fills_masks_and_predicts_next_sentence_as_transformers(hub, repos):
    folder = repos["bert-pretraining"]
    m = kbert.load("hf://kbert-test/bert-pretraining")
    hf = transformers.BertForPreTraining.from_pretrained(folder).eval()
    tok, enc = _hf_inputs(folder, TEXT)
    with torch.no_grad():
        out = hf(**enc)
    position = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0])
    probs = _softmax(out.prediction_logits[0, position].numpy().astype(np.float64))
    best = np.argsort(-probs)[:5]
    ours = m.fill_mask(TEXT, top_k=5)[0]
    assert [r["token"] for r in ours] == tok.convert_ids_to_tokens(best.tolist())
    assert np.allclose([r["score"] for r in ours], probs[best], atol=TOL)
    _, enc = _hf_inputs(folder, *PAIR)
    with torch.no_grad():
        nsp = _softmax(hf(**enc).seq_relationship_logits[0].numpy().astype(np.float64))
    assert abs(m.next_sentence(*PAIR)["is_next"] - nsp[0]) < TOL


def test_classifier_repo_classifies_with_its_id2label(hub, repos):
    folder = repos["bert-classifier"]
    m = kbert.load("hf://kbert-test/bert-classifier")
    hf = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    _, enc = _hf_inputs(folder, *PAIR)
    with torch.no_grad():
        probs = _softmax(hf(**enc).logits[0].numpy().astype(np.float64))
    ours = m.classify(*PAIR)
    assert list(ours) == ["negative", "neutral", "positive"]
    assert np.allclose(list(ours.values()), probs, atol=TOL)


@pytest.mark.parametrize("name,cls", [
    ("bert-ner", transformers.BertForTokenClassification),
    ("bert-qa", transformers.BertForQuestionAnswering)])
def test_token_and_span_repos_give_transformers_logits(hub, repos, name, cls):
    folder = repos[name]
    m = kbert.load(f"hf://kbert-test/{name}")
    hf = cls.from_pretrained(folder).eval()
    _, enc = _hf_inputs(folder, *PAIR)
    with torch.no_grad():
        ref = hf(**enc)
    x = {"input_ids": enc["input_ids"].numpy().astype("int32"),
         "segment_ids": enc["token_type_ids"].numpy().astype("int32"),
         "input_mask": enc["attention_mask"].numpy().astype("int32")}
    out = m.task_model("tagger" if name == "bert-ner" else "span")(x)
    if name == "bert-ner":
        assert m.checkpoint.head_options["tagger"]["labels"][:2] == ["O", "B-PER"]
        assert max_abs_diff(out, ref.logits) < TOL
    else:
        assert max_abs_diff(out["start_logits"], ref.start_logits) < TOL
        assert max_abs_diff(out["end_logits"], ref.end_logits) < TOL


@pytest.mark.parametrize("name", ["bert-sharded", "bert-bin"])
def test_sharded_and_bin_only_repos_hold_the_same_weights(hub, repos, name):
    same = kbert.load("hf://kbert-test/bert-mlm").fill_mask(TEXT, top_k=3)
    ours = kbert.load(f"hf://kbert-test/{name}").fill_mask(TEXT, top_k=3)
    assert [r["token"] for r in ours[0]] == [r["token"] for r in same[0]]
    assert np.allclose([r["score"] for r in ours[0]], [r["score"] for r in same[0]], atol=TOL)


def test_cased_repo_keeps_case_as_its_tokenizer_config_says(hub, repos):
    folder = repos["bert-cased"]
    m = kbert.load("hf://kbert-test/bert-cased")
    assert m.checkpoint.do_lower_case is False
    text = "Anna went to Paris ."
    tok, enc = _hf_inputs(folder, text)
    assert m.tokenizer.convert_ids_to_tokens(m.tokenizer.encode(text)) == tok.tokenize(text)
    assert "Anna" in tok.tokenize(text)
    hf = transformers.BertModel.from_pretrained(folder).eval()
    with torch.no_grad():
        ref = hf(**enc).last_hidden_state[:, 0].numpy()
    assert max_abs_diff(m.embed(text, pooling="cls"), ref) < TOL


def test_sentence_encoder_embeds_as_sentence_transformers(hub, repos):
    from sentence_transformers import SentenceTransformer
    texts = ["the quick brown fox jumps over the lazy dog .", "a cat sat .",
             "the man " * 40]
    m = kbert.load("hf://kbert-test/sentence-encoder")
    assert m.embedding_defaults == {"pooling": "mean", "max_seq_length": 32}
    ref = SentenceTransformer(repos["sentence-encoder"], device="cpu").encode(texts)
    assert max_abs_diff(m.embed(texts, normalize=True), ref) < TOL


def test_cross_encoder_reranks_and_classifies_as_cross_encoder_predict(hub, repos):
    from sentence_transformers import CrossEncoder
    query, passages = "who went to the store ?", ["he bought milk .", "the cat sat .",
                                                  "a man went to the store ."]
    m = kbert.load("hf://kbert-test/cross-encoder")
    ref = CrossEncoder(repos["cross-encoder"], device="cpu").predict(
        [(query, p) for p in passages])
    ranked = m.rerank(query, passages)
    scores = {r["index"]: r["score"] for r in ranked}
    assert np.allclose([scores[i] for i in range(3)], ref, atol=TOL)
    assert abs(m.classify(query, passages[0])["score"] - ref[0]) < TOL
