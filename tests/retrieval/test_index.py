"""kbert.retrieval.Index: exact search equals brute force, save/load, adding, splitting, hybrid,
the approximate index, and the one-line refusals (a foreign encoder, a half-written directory)."""

import gc
import json
import os
import warnings

import numpy as np
import pytest

from helpers import PASSAGES
from kbert.outputs import OutputError
from kbert.retrieval import EncoderMismatchError, Index, IndexDirectoryError
from kbert.retrieval import encoder as encoder_lib

pytestmark = pytest.mark.multibackend
QUERIES = ["who bought milk ?", "a cat on a mat", "the capital of france"]


def _unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _brute_force(m, queries, texts, k):
    p = _unit(m.embed(texts, pooling="mean"))
    q = _unit(m.embed(queries, pooling="mean"))
    scores = q @ p.T
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return rows, np.take_along_axis(scores, rows, 1)


def test_exact_search_equals_brute_force_numpy(encoder):
    index = Index.build(encoder, PASSAGES, batch_size=4)
    hits = index.search(QUERIES, encoder, top_k=4)
    rows, scores = _brute_force(encoder, QUERIES, PASSAGES, 4)
    assert [[h["index"] for h in row] for row in hits] == rows.tolist()
    np.testing.assert_allclose([[h["score"] for h in row] for row in hits], scores, atol=1e-5)
    for row in hits:
        assert all(h["text"] == PASSAGES[h["index"]] for h in row)
        assert [h["score"] for h in row] == sorted((h["score"] for h in row), reverse=True)
    np.testing.assert_allclose(np.linalg.norm(index.vectors, axis=1), 1.0, atol=1e-5)


def test_bert_search_on_a_list_and_on_an_index(encoder):
    one = encoder.search("who bought milk ?", PASSAGES, top_k=2)
    assert len(one) == 2 and set(one[0]) == {"index", "text", "score"}
    many = encoder.search(QUERIES, Index.build(encoder, PASSAGES), top_k=2)
    assert [h["index"] for h in many[0]] == [h["index"] for h in one]
    assert encoder.search(QUERIES, PASSAGES, top_k=50)[0][-1]["index"] in range(len(PASSAGES))
    assert len(encoder.search(QUERIES, PASSAGES, top_k=50)[0]) == len(PASSAGES)


def test_save_load_round_trip_and_add_later(encoder, tmp_path):
    index = Index.build(encoder, PASSAGES[:4], metadata=[{"id": f"p{i}"} for i in range(4)])
    before = index.search(QUERIES, encoder, top_k=3)
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx")
    assert loaded.search(QUERIES, encoder, top_k=3) == before
    assert before[0][0]["id"] == f"p{before[0][0]['index']}"
    manifest = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert manifest["encoder"]["name"] == "tiny-encoder"
    assert manifest["encoder"]["max_seq_length"] == 16 and manifest["passages"] == 4
    assert len(manifest["encoder"]["weights_sha256"]) == 64
    loaded.add(encoder, PASSAGES[4:])                 # texts added later
    loaded.save(tmp_path / "idx")
    again = Index.load(tmp_path / "idx")
    full = Index.build(encoder, PASSAGES)
    assert len(again) == len(PASSAGES) and again.sources == len(PASSAGES)
    np.testing.assert_allclose(again.vectors, full.vectors, atol=1e-5)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


def test_search_without_a_model_loads_the_recorded_encoder(encoder, tmp_path):
    Index.build(encoder, PASSAGES).save(tmp_path / "idx")
    hits = Index.load(tmp_path / "idx").search("who bought milk ?", top_k=2)
    assert [h["index"] for h in hits] == [h["index"] for h in
                                           encoder.search("who bought milk ?", PASSAGES, 2)]


def test_the_runtime_that_built_an_index_loads_its_encoder(encoder, tmp_path, monkeypatch):
    """`load_encoder` (search or add without a model) defaults to the runtime recorded at build
    time where its package is installed (ONNX Runtime: a search without TensorFlow), else
    Keras; a runtime asked for wins."""
    import importlib.util

    from kbert.inference import protocol
    index = Index.build(encoder, PASSAGES[:2])
    assert index.runtime == encoder.runtime == "keras"
    index.runtime = "onnx"                         # as if built by kbert.load(..., runtime="onnx")
    index.save(tmp_path / "idx")
    assert json.loads((tmp_path / "idx" / "index.json").read_text())["runtime"] == "onnx"
    loaded, asked = Index.load(tmp_path / "idx"), []
    monkeypatch.setattr(protocol, "_default_loader",
                        lambda where, dtype=None, runtime=None: asked.append(runtime) or encoder)
    real = importlib.util.find_spec
    for installed in (True, False):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: real(name, *a)
                            if installed or name != "onnxruntime" else None)
        loaded.load_encoder()
    loaded.load_encoder(runtime="keras", loader=lambda where, dtype=None, runtime=None:
                        asked.append(("loader", runtime)) or encoder)
    assert asked == ["onnx", None, ("loader", "keras")]


def test_long_texts_are_split_with_overlap_and_said_so(encoder):
    long = " ".join(PASSAGES)                     # ~50 tokens; the encoder reads 16
    with pytest.warns(UserWarning, match="1 of 2 texts was longer than the encoder's 16 "
                                         "tokens and split"):
        index = Index.build(encoder, [PASSAGES[0], long])
    parts = [p for p in index.passages if p["source"] == 1]
    assert len(parts) >= 4 and index.sources == 2
    for p in parts:
        assert long[p["start"]:p["end"]] == p["text"]
        assert len(encoder.tokenizer.encode(p["text"])) <= 14
    assert all(a["end"] > b["start"] for a, b in zip(parts, parts[1:]))        # overlap
    assert parts[0]["start"] == 0 and parts[-1]["end"] == len(long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hits = encoder.search("the lazy dog", [PASSAGES[0], long], top_k=5)
    assert sorted(h["index"] for h in hits) == [0, 1]        # one hit per text, its best part
    assert {h["text"] for h in hits} == {PASSAGES[0], long}


def _split_in_one_call(tokenizer, texts, max_tokens, overlap):
    """The reference: each long text tokenized in one call, then cut into windows."""
    from kbert.retrieval.passages import Passage, windows
    lengths = [len(ids) for ids in tokenizer.encode_batch(texts)]
    out = []
    for i, text in enumerate(texts):
        if lengths[i] <= max_tokens:
            out.append(Passage(text, i, 0, len(text)))
            continue
        ids, starts, ends = tokenizer.tokenize_with_char_offsets(text)
        word_start = [not t.startswith("##") for t in tokenizer.convert_ids_to_tokens(ids)]
        out += [Passage(text[starts[a]:ends[b - 1]], i, starts[a], ends[b - 1])
                for a, b in windows(starts, word_start, 14, 4)]
    return out


def test_splitting_in_chunks_gives_the_passages_of_one_call(encoder, monkeypatch):
    from kbert.retrieval import passages
    monkeypatch.setattr(passages, "CHUNK_CHARS", 40)      # many chunks on a small text
    texts = [" ".join(PASSAGES), "Café, naïve: the quick fox. " + "x" * 300 + " jumps over",
             "a dog", "\n\n".join(PASSAGES[::-1]) + " [MASK] dog"]
    got, split = passages.split_passages(encoder.tokenizer, texts, 14, 4)
    assert got == _split_in_one_call(encoder.tokenizer, texts, 14, 4) and split == 3


def test_a_2mb_single_line_text_is_split_whole(encoder):
    from kbert.retrieval.passages import split_passages
    line = " ".join(PASSAGES) + " data:image/png;base64," + "A" * 2000 + " "
    text = line * (2_000_000 // len(line))
    got, split = split_passages(encoder.tokenizer, [text], 254, 32)
    assert split == 1 and got[0].start == 0 and got[-1].end == len(text.rstrip())
    assert all(text[p.start:p.end] == p.text for p in got)
    assert all(a.end > b.start for a, b in zip(got, got[1:]))     # no gap: the text is covered


def test_hybrid_ranks_a_lexical_only_match_first(encoder):
    # Passage 0 is the only one with "milk"; a random encoder's dense scores know nothing.
    dense = encoder.search("milk", PASSAGES, top_k=len(PASSAGES))
    hybrid = encoder.search("milk", PASSAGES, top_k=3, hybrid=True)
    assert hybrid[0]["index"] == 0 and hybrid[0]["text"] == PASSAGES[0]
    assert [h["score"] for h in hybrid] == sorted((h["score"] for h in hybrid), reverse=True)
    assert dense[0]["index"] != 0 or dense[1]["score"] < dense[0]["score"]
    index = Index.build(encoder, PASSAGES, hybrid=True)          # the index option
    assert index.search("milk", encoder, top_k=1)[0]["index"] == 0
    assert index.search("milk", encoder, top_k=1, hybrid=False)[0]["index"] == dense[0]["index"]
    assert encoder.search("milk", index, top_k=1)[0]["index"] == 0            # the index's option
    assert encoder.search("milk", index, top_k=1, hybrid=False)[0]["index"] == dense[0]["index"]


def test_a_foreign_encoder_is_refused_naming_both(encoder, other_encoder, tmp_path):
    Index.build(encoder, PASSAGES).save(tmp_path / "idx")
    index = Index.load(tmp_path / "idx")
    with pytest.raises(EncoderMismatchError) as e:
        index.search("milk", other_encoder)
    message = str(e.value)
    assert "\n" not in message and "tiny-encoder" in message and "other-encoder" in message
    with pytest.raises(EncoderMismatchError):
        index.add(other_encoder, ["the dog sat ."])
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("damage, message", [
    (lambda d: os.remove(d / "index.json"), "missing index.json"),
    (lambda d: os.remove(d / "embeddings.npy"), "missing embeddings.npy"),
    (lambda d: (d / "embeddings.npy").write_bytes(b"\x93NUMPY garbage"), "unreadable"),
    (lambda d: (d / "passages.jsonl").write_text('{"text": "a"}\n{"te'), "passages.jsonl:2"),
    (lambda d: (d / "index.json").write_text("{"), "not valid JSON"),
    (lambda d: (d / "passages.jsonl").write_text('{"text": "a"}\n'), "manifest says 6"),
])
def test_a_half_written_or_damaged_index_says_what_is_wrong(encoder, tmp_path, damage,
                                                            message):
    Index.build(encoder, PASSAGES).save(tmp_path / "idx")
    damage(tmp_path / "idx")
    with pytest.raises(IndexDirectoryError, match=message) as e:
        Index.load(tmp_path / "idx")
    assert "\n" not in str(e.value)


def test_an_interrupted_save_leaves_the_old_index_whole(encoder, tmp_path, monkeypatch):
    Index.build(encoder, PASSAGES[:2]).save(tmp_path / "idx")
    bigger = Index.build(encoder, PASSAGES)

    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr("kbert.retrieval.index.json.dump", fail)
    with pytest.raises(OSError, match="disk full"):
        bigger.save(tmp_path / "idx")
    assert len(Index.load(tmp_path / "idx")) == 2
    assert sorted(os.listdir(tmp_path)) == ["idx"]
    with pytest.raises(OutputError, match=r"holds files kbert did not write \(a.txt\)"):
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "a.txt").write_text("mine")
        bigger.save(tmp_path / "notes")


@pytest.mark.parametrize("call, message", [
    (lambda m: Index.build(m, []), "collection is empty"),
    (lambda m: Index.build(m, ["ok", "  "]), "text 1 is empty"),
    (lambda m: m.search([], PASSAGES), "list of queries is empty"),
    (lambda m: m.search(["ok", ""], PASSAGES), "query 1 is empty"),
    (lambda m: m.search("ok", PASSAGES, top_k=0), "top_k"),
    (lambda m: m.search("ok", []), "collection is empty"),
    (lambda m: m.rerank("ok", PASSAGES), "needs a cross-encoder"),
])
def test_bad_input_is_one_clear_line(encoder, call, message):
    with pytest.raises(ValueError, match=message) as e:
        call(encoder)
    assert "\n" not in str(e.value)


def test_approximate_index_finds_the_exact_neighbours(encoder, tmp_path):
    pytest.importorskip("faiss")
    exact = Index.build(encoder, PASSAGES)
    approx = Index.build(encoder, PASSAGES, approximate=True)
    want = exact.search(QUERIES, encoder, top_k=3)
    got = approx.search(QUERIES, encoder, top_k=3)
    assert [[h["index"] for h in r] for r in got] == [[h["index"] for h in r] for r in want]
    approx.save(tmp_path / "ann")
    assert (tmp_path / "ann" / "faiss.index").is_file()
    loaded = Index.load(tmp_path / "ann")
    assert loaded.approximate and loaded.search(QUERIES, encoder, top_k=3) == got
    loaded.add(encoder, ["he bought milk ."])
    assert loaded.search("he bought milk .", encoder, top_k=1)[0]["index"] == len(PASSAGES)


def test_split_false_truncates_as_sentence_transformers_does(encoder):
    long = " ".join(PASSAGES)
    index = Index.build(encoder, [PASSAGES[0], long], split=False)
    assert len(index) == 2 and index.notes == [
        "1 of 2 texts was longer than the encoder's 16 tokens and truncated"]
    np.testing.assert_allclose(index.vectors[1], encoder.embed([long], normalize=True)[0],
                               atol=1e-5)


def test_non_finite_vectors_are_refused(encoder, tmp_path, monkeypatch):
    index = Index.build(encoder, PASSAGES[:2])
    index.save(tmp_path / "idx")
    vectors = np.load(tmp_path / "idx" / "embeddings.npy")
    vectors[1, 3] = np.nan
    np.save(tmp_path / "idx" / "embeddings.npy", vectors)
    with pytest.raises(IndexDirectoryError, match="embeddings.npy has 1 rows that are not finite "
                                                  "numbers \\(the first: row 1\\)"):
        Index.load(tmp_path / "idx")
    real = encoder_lib.embed

    def broken(model, texts, batch_size, **options):
        out = real(model, texts, batch_size, **options)
        out[-1] = np.inf
        return out
    monkeypatch.setattr(encoder_lib, "embed", broken)
    with pytest.raises(ValueError, match="NaN or infinite vectors for 1 of 1 passages .* "
                                         "Nothing was added"):
        index.add(encoder, PASSAGES[2:3])
    assert len(index) == 2


def test_an_error_under_a_bar_leaves_no_progress_line(encoder, capsys, monkeypatch):
    """`ask` over several questions and `finetuning.predict` clear their bar as an error
    leaves it: nothing is left on stderr for the error's line to follow."""
    from kbert import progress
    from kbert.retrieval import open_qa, rerank
    from kbert.training import finetuning

    def fail(*args, **kwargs):
        raise ValueError("the model failed")
    index = Index.build(encoder, PASSAGES)
    monkeypatch.setattr(rerank, "rerank", fail)
    progress.show(True)
    try:
        with pytest.raises(ValueError, match="the model failed"):
            open_qa.ask(["a cat", "milk"], index, None, encoder, reranker=encoder)
        gc.collect()                # a bar left open draws its line as it goes
        assert capsys.readouterr().err == ""

        class Failing:
            predict_on_batch = staticmethod(fail)
        with pytest.raises(ValueError, match="the model failed"):
            features = {k: np.ones((3, 4), "int32") for k in finetuning.INPUT_KEYS}
            finetuning.predict(Failing(), features, desc="scoring")
        gc.collect()
        assert capsys.readouterr().err == ""
    finally:
        progress.show(None)
