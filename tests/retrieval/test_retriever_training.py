"""Training retrievers: the bi-encoder's in-batch loss, the reranker's start from the NSP head,
fit on every backend, the checkpoints `kbert.load` serves, training files, hard-negative mining,
`kbert finetune retrieve|rerank`, and retrieve-then-read (`ask`, `kbert evaluate open-qa`)."""

import json

import keras
import numpy as np
import pytest

import kbert
from helpers import tiny_vocab
from kbert import BertConfig, checkpoint, cli
from kbert.retrieval.open_qa import ask
from kbert.training import retrievers as training

VOCAB = tiny_vocab(size=120)
PAIRS = [("man", "the man went to the store"), ("milk", "he bought milk"),
         ("paris", "paris is the capital of france"), ("dog", "the dog sat on the mat"),
         ("cat", "a cat was good"), ("fox", "the quick brown fox jumps"),
         ("lazy", "over the lazy dog"), ("store", "a store and a mat")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{"encoder": a tiny sentence-encoder checkpoint, "nsp": one with MLM + NSP heads,
    "reader": one with a span head} (paths)."""
    root = tmp_path_factory.mktemp("train")
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB))
    keras.utils.set_random_seed(3)
    checkpoint.save(root / "encoder", kbert.BertBackbone(config), vocab=VOCAB,
                    embedding={"pooling": "mean", "normalize": True, "max_seq_length": 32})
    checkpoint.save(root / "nsp", kbert.BertPretrainer(config), vocab=VOCAB)
    checkpoint.save(root / "reader", kbert.BertQuestionAnswerer(config), vocab=VOCAB)
    return {k: str(root / k) for k in ("encoder", "nsp", "reader")}


def _rows(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.mark.multibackend
def test_bi_encoder_scores_are_cosine_over_temperature_and_skip_copies_of_the_positive(tiny):
    enc = kbert.BertBiEncoder.from_checkpoint(tiny["encoder"], temperature=0.1)
    queries, positives = ["man", "dog", "cat"], ["he bought milk", "the dog sat", "he bought milk"]
    negatives = [["a cat"], ["paris is"], ["the fox"]]
    features, labels = enc.preprocessor((queries, positives, negatives))
    scores = keras.ops.convert_to_numpy(enc(features))
    assert labels.numpy().tolist() == [0, 1, 2]
    q = enc.predict(queries, verbose=0)
    d = enc.predict(positives + [n[0] for n in negatives], verbose=0)
    assert np.allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
    want = q @ d.T / 0.1
    want[0, 2] = want[2, 0] = -1e4       # the same passage is query 0's and query 2's positive
    assert scores.shape == (3, 6)
    np.testing.assert_allclose(scores, want, atol=2e-4)
    enc.compile()
    loss = keras.ops.convert_to_numpy(enc.compute_loss(x=features, y=labels, y_pred=scores))
    logp = want - np.log(np.exp(want - want.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - want.max(1, keepdims=True)
    assert float(loss) == pytest.approx(-np.mean(logp[np.arange(3), np.arange(3)]), rel=1e-4)


@pytest.mark.multibackend
def test_bi_encoder_fit_learns_and_its_checkpoint_is_what_search_serves(tiny, tmp_path):
    enc = kbert.BertBiEncoder.from_checkpoint(tiny["encoder"])
    queries, positives = [q for q, _ in PAIRS], [p for _, p in PAIRS]
    enc.compile(learning_rate=1e-3, warmup=0.0)
    history = enc.fit(x=(queries, positives), batch_size=4, epochs=6, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    out = enc.save_checkpoint(str(tmp_path / "retriever"))
    with open(f"{out}/config.json", encoding="utf-8") as f:
        config = json.load(f)
    assert config["heads"] == {} and config["sentence_embedding"] == {
        "pooling": "mean", "normalize": True, "max_seq_length": 32}
    m = kbert.load(out)
    np.testing.assert_allclose(training.embed(enc, positives),          # the twins agree
                               m.embed(positives, normalize=True), atol=1e-5)
    hits = m.search(queries, positives, top_k=1)
    assert sum(h[0]["index"] == i for i, h in enumerate(hits)) >= 6


@pytest.mark.multibackend
def test_reranker_starts_from_the_nsp_head_and_trains(tiny, tmp_path):
    rr = kbert.BertReranker.from_checkpoint(tiny["nsp"])
    pairs_q, pairs_p = ["who bought milk ?"] * 3, ["he bought milk", "the dog sat", "a cat"]
    rr.save_checkpoint(str(tmp_path / "start"))
    nsp = kbert.load(tiny["nsp"]).rerank(pairs_q[0], pairs_p)
    start = kbert.load(str(tmp_path / "start"))
    assert start.heads.keys() == {"classifier"}
    assert [(h["index"], round(h["score"], 5)) for h in start.rerank(pairs_q[0], pairs_p)] == \
        [(h["index"], round(h["score"], 5)) for h in nsp]
    rr.compile(learning_rate=1e-3, warmup=0.0)
    history = rr.fit(x=(pairs_q * 4, pairs_p * 4), y=["relevant", "irrelevant", "irrelevant"] * 4,
                     batch_size=4, epochs=4, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    rr.save_checkpoint(str(tmp_path / "trained"))
    ranked = kbert.load(str(tmp_path / "trained")).rerank(pairs_q[0], pairs_p)
    assert ranked[0]["index"] == 0
    with pytest.raises(ValueError, match="a reranker's labels are"):
        kbert.BertReranker.from_checkpoint(tiny["nsp"], num_labels=3)


def test_one_positive_passage_is_refused_and_a_lone_last_pair_joins_a_batch(tiny, tmp_path,
                                                                          capsys):
    one = _rows(tmp_path / "one.jsonl", [{"query": "man", "positive": "the man went"}])
    assert cli.main(["finetune", "retrieve", "--init", tiny["encoder"], "--train", one,
                     "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"kbert finetune: error: {one}: 1 pair with 1 distinct positive passage: in-batch "
        "negatives need at least 2 (each query's negatives are the other positives of its "
        "batch); add pairs, or negatives (--negative-column, --mine-negatives N)"]
    same = training.Pairs(["man", "who went", "where"], ["the man went"] * 3)
    with pytest.raises(training.PairsError, match=r"^\(in memory\): 3 pairs with 1 distinct "):
        training.train_retriever(tiny["encoder"], same, str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()
    # 5 pairs in batches of 2: the fifth joins a batch (alone its loss is 0); with
    # negatives it has some, and stays alone
    preprocessor = kbert.BertBiEncoder.from_checkpoint(tiny["encoder"]).preprocessor
    queries, positives = [q for q, _ in PAIRS[:5]], [p for _, p in PAIRS[:5]]
    for x, sizes in (((queries, positives), [2, 3]),
                     ((queries, positives, positives[1:] + positives[:1]), [1, 2, 2])):
        data = preprocessor.dataset(x, batch_size=2, shuffle=True, seed=1)
        assert int(data.cardinality()) == len(sizes)
        for _ in range(2):                                  # each epoch
            assert sorted(int(y.shape[0]) for _, y in data) == sizes


def test_read_pairs_columns_and_one_line_errors(tmp_path):
    path = _rows(tmp_path / "t.jsonl", [{"id": 1, "q": "a", "p": "b", "n": ["c", "d"]},
                                        {"id": 2, "q": "e", "p": "f", "n": ["g", "h"]}])
    pairs = training.read_pairs(path, "q", "p", "n")
    assert (pairs.queries, pairs.positives, pairs.negatives) == (
        ["a", "e"], ["b", "f"], [["c", "d"], ["g", "h"]])
    assert pairs.passages() == ["b", "f", "c", "d", "g", "h"]
    csv = tmp_path / "t.csv"
    csv.write_text("question,answer\nwho,him\nwhat,that\n")
    assert training.read_pairs(str(csv), "question", "answer").positives == ["him", "that"]
    cases = [
        ([{"q": "a", "p": "b"}, {"q": "c", "x": "d"}],
         ":2: column 'p' is missing (columns: q, x)"),
        ([{"q": "a", "p": " "}], ":1: column 'p' is empty (columns: q, p)"),
        ([{"q": "a", "p": "b"}, {"q": None, "p": "d"}], ":2: column 'q' is null (columns: q, p)"),
        ([{"q": 3, "p": "b"}], ":1: column 'q' is a int, not a string (columns: q, p)"),
        ([{"q": "a", "p": "b", "n": ["c", None]}], ":1: column 'n' is null (columns: q, p, n)"),
        ([{"id": 7, "q": "a", "p": "b"}, {"id": 7, "q": "c", "p": "d"}],
         ":2: id '7' repeats "),
        ([{"q": "a", "p": "b", "n": ["c"]}, {"q": "c", "p": "d", "n": ["e", "f"]}],
         ":2: 2 negatives where the first row has 1"),
    ]
    for rows, message in cases:
        with pytest.raises(training.PairsError) as e:
            training.read_pairs(_rows(tmp_path / "bad.jsonl", rows), "q", "p",
                                "n" if "n" in rows[0] else None)
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(training.PairsError, match="no such file"):
        training.read_pairs(str(tmp_path / "none.jsonl"))


def test_mined_negatives_are_the_best_ranked_passages_that_are_not_positives():
    pairs = training.Pairs(["milk", "milk", "paris"],
                           ["he bought milk", "milk and milk", "paris is the capital"],
                           where=["a:1", "a:2", "a:3"])
    corpus = ["he bought milk", "milk and milk", "paris is the capital", "more milk here",
              "the capital of france is paris", "dog"]
    mined = training.mine_negatives(pairs, 1, "bm25", corpus=corpus)
    assert mined.negatives == [["more milk here"], ["more milk here"],
                               ["the capital of france is paris"]]
    with pytest.raises(training.PairsError, match="a:1: only 1 passages to mine 3"):
        training.mine_negatives(pairs, 3, "bm25", corpus=corpus[:3])


def test_finetune_retrieve_and_rerank_from_the_command_line(tiny, tmp_path, capsys):
    train = _rows(tmp_path / "train.jsonl", [{"query": q, "positive": p} for q, p in PAIRS])
    dev = _rows(tmp_path / "dev.jsonl", [{"query": q, "positive": p} for q, p in PAIRS[:4]])
    out = tmp_path / "retriever"
    assert cli.main(["finetune", "retrieve", "--init", tiny["encoder"], "--train", train,
                     "--dev", dev, "--output", str(out), "--batch-size", "4", "--epochs", "2",
                     "--mine-negatives", "1"]) == 0
    printed = capsys.readouterr().out
    assert "epoch 2/2" in printed and f"wrote {out}: best epoch" in printed
    scores = json.loads(printed.strip().splitlines()[-1])
    assert set(scores) == {"recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10"}
    assert "sentence_embedding" in json.loads((out / "config.json").read_text())
    assert "Per epoch" in (out / "MODEL_CARD.md").read_text()
    doc = json.loads((out / "history.json").read_text())       # the curves, dev scores in them
    assert (doc["command"], doc["dev_metric"]) == ("kbert finetune retrieve", "dev_mrr@10")
    assert [p["epoch"] for p in doc["points"]] == [1, 2]
    assert doc["points"][doc["best_epoch"] - 1]["dev_mrr@10"] == pytest.approx(scores["mrr@10"])
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["finetune", "rerank", "--init", tiny["nsp"], "--train", train,
                     "--output", str(tmp_path / "rr"), "--batch-size", "4",
                     "--mine-negatives", "2", "--save-dtype", "float16"]) == 0
    assert "best epoch 1 of 1 (24 training rows" in capsys.readouterr().out
    doc = json.loads((tmp_path / "rr" / "history.json").read_text())    # no dev file
    assert doc["dev_metric"] is None and "learning_rate" in doc["points"][0]
    assert not [k for k in doc["points"][0] if k.startswith("dev_")]
    from safetensors import safe_open
    with safe_open(str(tmp_path / "rr" / "model.safetensors"), "np") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"float16"}
    assert kbert.load(str(tmp_path / "rr")).heads.keys() == {"classifier"}

    def error(*argv):
        assert cli.main([str(a) for a in argv]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]
    assert error("finetune", "rerank", "--init", tiny["nsp"], "--train", train, "--output",
                 tmp_path / "x") == ("kbert finetune: error: a reranker needs negatives: give a "
                                     "negative column (--negative-column) or mine them "
                                     "(--mine-negatives N)")
    assert error("finetune", "retrieve", "--init", tiny["encoder"], "--train", train,
                 "--query-column", "question", "--output", tmp_path / "x") == (
        f"kbert finetune: error: {train}:1: column 'question' is missing (columns: query, "
        f"positive)")
    assert error("finetune", "sst2", "--init", tiny["encoder"], "--train", train, "--output",
                 tmp_path / "x") == "kbert finetune: error: sst2 needs --dev (the file scored " \
                                    "after each epoch)"
    assert not (tmp_path / "x").exists()


def test_ask_reads_the_best_passages_and_open_qa_scores_it(tiny, tmp_path, capsys):
    encoder, reader = kbert.load(tiny["encoder"]), kbert.load(tiny["reader"])
    passages = [p for _, p in PAIRS]
    index = kbert.retrieval.Index.build(encoder, passages)
    got = ask(["who bought milk ?", "where is paris ?"], index, reader, encoder, passages=3)
    for answer in got:
        assert answer["passage"]["text"] in passages
        assert answer["text"] == answer["passage"]["text"][answer["start"]:answer["end"]]
        assert 0 <= answer["score"] <= answer["reader_score"] <= 1
    one = ask("who bought milk ?", index, reader, encoder, passages=1)
    hit = index.search("who bought milk ?", encoder, top_k=1)[0]
    assert one["passage"]["index"] == hit["index"]
    assert one["text"] == reader.answer("who bought milk ?", hit["text"])[0]["text"]
    reranker = kbert.load(tiny["nsp"])
    ranked = ask("who bought milk ?", index, reader, encoder, reranker=reranker, passages=1,
                 candidates=8)
    hits = index.search("who bought milk ?", encoder, top_k=8)      # fused with their scores
    best = reranker.rerank("who bought milk ?", [h["text"] for h in hits],
                           first_scores=[h["score"] for h in hits])[0]
    assert ranked["passage"]["index"] == hits[best["index"]]["index"]
    assert ranked["passage"]["rerank_score"] == pytest.approx(best["rerank_score"])
    by_path = ask("who bought milk ?", index, tiny["reader"], tiny["encoder"],
                  reranker=tiny["nsp"], passages=1, candidates=8)  # paths load as kbert.load
    assert by_path["passage"]["index"] == ranked["passage"]["index"]
    assert by_path["text"] == ranked["text"]
    with pytest.raises(ValueError, match="checkpoint directory not found: no-such-reranker") \
            as bad:
        ask("who bought milk ?", index, reader, encoder, reranker="no-such-reranker")
    assert "\n" not in str(bad.value)
    squad = {"data": [{"title": "t", "paragraphs": [
        {"context": p, "qas": [{"id": str(i), "question": q,
                                "answers": [{"text": q, "answer_start": p.find(q)}]}]}
        for i, (q, p) in enumerate(PAIRS)]}]}
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    assert cli.main(["evaluate", "open-qa", "--model", tiny["reader"], "--retriever",
                     tiny["encoder"], "--data", str(tmp_path / "squad.json")]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(scores) == {"exact_match", "f1", "oracle_exact_match", "oracle_f1",
                           "passage_recall"}
    assert cli.main(["evaluate", "open-qa", "--model", tiny["reader"], "--data",
                     str(tmp_path / "squad.json")]) == 2
    assert "open-qa needs --retriever" in capsys.readouterr().err


@pytest.mark.multibackend
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_retriever_and_reranker_train_in_mixed_precision(tiny, tmp_path, policy):
    """The encoder computes in the policy's dtype on float32 weights; scores, logits and the
    loss stay float32 (float16: scaled); the checkpoints are float32 and the cards say so."""
    pairs = training.Pairs([q for q, _ in PAIRS], [p for _, p in PAIRS])
    enc = kbert.BertBiEncoder.from_checkpoint(tiny["encoder"], dtype=policy)
    assert enc.backbone.compute_dtype == policy.split("_")[1]
    assert keras.backend.standardize_dtype(
        enc.encode(enc.preprocessor(["a man"])).dtype) == "float32"
    result = training.train_retriever(tiny["encoder"], pairs, str(tmp_path / "ret"),
                                      batch_size=4, learning_rate=1e-3, verbose=False,
                                      mixed_precision=policy)
    assert np.isfinite(result.history[0]["loss"])
    assert f"precision {policy}" in (tmp_path / "ret" / "MODEL_CARD.md").read_text()
    served = kbert.load(result.output)
    assert {keras.backend.standardize_dtype(w.dtype) for w in served.backbone.weights} == {
        "float32"}
    pairs = training.mine_negatives(pairs, 1, "bm25")
    result = training.train_reranker(tiny["nsp"], pairs, str(tmp_path / "rr"), batch_size=4,
                                     verbose=False, mixed_precision=policy)
    assert np.isfinite(result.history[0]["loss"])
    assert kbert.load(result.output).rerank("milk", ["he bought milk", "a cat"])
