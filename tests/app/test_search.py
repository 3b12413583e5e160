"""The Search tab ("ask a document"): passages, the index kept per document, search and the
answer span, through gradio_client against the served app (tests/app_fixtures.py); bad input
is one message. The browser test is in test_app.py."""

import re

import pytest

from app import examples
from app import search as search_lib

DOCUMENT = examples.EIFFEL_DOCUMENT


def _ask(client, question, document="", files=None, **options):
    from gradio_client import handle_file
    files = [handle_file(str(f)) for f in files] if files else None
    return client.predict(question=question, document=document, files=files, **options,
                          api_name="/search")


def test_passages_pack_paragraphs_and_split_long_ones(served):
    _, names, registry = served
    tokenizer = registry.get(names["embedding"]).tokenizer
    long = " ".join(f"Sentence number {i} is about the river and its bridges." for i in range(60))
    text = "Title\n\nShort one.\n \nShort two.\n\n" + long + "\n\nThe end."
    passages = search_lib.split_document(tokenizer, text, max_tokens=32, overlap=8)
    pieces = [text[s:e] for s, e in passages]
    assert pieces[0] == "Title\n\nShort one.\n \nShort two."            # packed together
    assert pieces[-1] == "The end." and all(p == p.strip() and p for p in pieces)
    middle = pieces[1:-1]
    assert len(middle) > 5 and all(len(tokenizer.encode(p)) <= 32 for p in pieces)
    assert all(p in long for p in middle)                               # windows of the long one
    starts = [s for s, _ in passages[1:-1]]
    assert all(a < b < a_end for a, b, a_end in zip(starts, starts[1:],
                                                    [e for _, e in passages[1:-1]]))  # overlap
    assert middle[0].startswith("Sentence") and long.endswith(middle[-1])


def test_ask_a_document_through_the_api(served, client):
    _, names, registry = served
    document = DOCUMENT + "\n\nThis copy of the text is asked in the API test."   # not indexed yet
    answer, score, page, hits, info, notice = _ask(client, "How often is the tower painted?",
                                                   document, top_k=3)
    assert notice == "" and f"by {names['embedding']};" in info and "reused" not in info
    assert 1 <= len(hits) <= 3 and [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        assert hit["document"] == search_lib.PASTED
        assert document[hit["start"]:hit["end"]] == hit["text"]
        span = hit["answer"]
        if span:
            assert hit["text"][span["start"]:span["end"]] == span["text"]
    assert answer and 0 < score <= 1 and '<mark class="answer"' in page
    assert any(h["answer"] and h["answer"]["text"] == answer for h in hits)
    if "minilm-l6-squad" in names["span"]:
        assert "seven years" in answer
        assert "paint" in hits[0]["text"]

    # A second question on the same document: the index is reused, not rebuilt.
    again = _ask(client, "How tall is the tower?", document, top_k=3)
    assert "reused (indexed before)" in again[4] and again[-1] == ""
    if "minilm-l6-squad" in names["span"]:
        assert "330 metres" in again[0]


def test_uploaded_files_and_options(served, client, tmp_path):
    a, b = tmp_path / "rivers.txt", tmp_path / "mountains.md"
    a.write_text("The Danube flows through ten countries.\n\nThe Nile is the longest river in "
                 "Africa.", encoding="utf-8")
    b.write_bytes("\ufeffMount Everest is the highest mountain.\r\n\r\nK2 is the second "
                  "highest.".encode("utf-8"))                  # a BOM and Windows line ends
    answer, _, page, hits, info, notice = _ask(client, "Which is the highest mountain?",
                                          "Paris is in France.", [a, b], top_k=20,
                                          hybrid=False, reader=search_lib.NO_READER)
    assert notice == "" and "from 3 documents" in info and "read the top" not in info
    assert answer == "(passages only: no reader)"
    assert {h["document"] for h in hits} == {search_lib.PASTED, "rivers.txt", "mountains.md"}
    assert hits[0]["document"] == "mountains.md" and "Everest" in hits[0]["text"]
    assert all(h["answer"] is None for h in hits) and "cosine similarity" in page
    assert "\r" not in "".join(h["text"] for h in hits)
    hybrid = _ask(client, "Which is the highest mountain?", "Paris is in France.", [a, b],
                  hybrid=True)
    assert "reused" in hybrid[4] and "hybrid" in hybrid[4] and "fused" in hybrid[2]


def test_a_reranker_reorders_the_top_hits_fused_with_their_search_scores(served, client):
    _, names, registry = served
    question = "How often is the tower painted?"
    plain = _ask(client, question, DOCUMENT, top_k=search_lib.MAX_TOP_K, hybrid=False,
                 reader=search_lib.NO_READER)[3]
    answer, _, page, hits, info, notice = _ask(client, question, DOCUMENT, top_k=3,
                                               hybrid=False, reranker=names["reranker"])
    assert notice == "" and f"reranked by {names['reranker']} in" in info
    assert "reranked score" in page and len(hits) == min(3, len(plain))
    candidates = plain[:search_lib.RERANK_CANDIDATES]
    want = registry.get(names["reranker"]).rerank(
        question, [h["text"] for h in candidates], first_scores=[h["score"] for h in candidates])
    assert [h["text"] for h in hits] == [candidates[r["index"]]["text"] for r in want[:3]]
    for hit, r in zip(hits, want):
        assert hit["score"] == pytest.approx(r["score"], abs=1e-5)
        assert hit["rerank_score"] == pytest.approx(r["rerank_score"], abs=1e-4)
    with pytest.raises(search_lib.InputError, match="has no reranker \\(cross-encoder\\) head"):
        search_lib.ask(registry, names["embedding"], None, DOCUMENT, None, question,
                       reranker=names["embedding"])


@pytest.mark.parametrize("rerank", [False, True], ids=["searched", "reranked"])
def test_the_search_tab_answers_as_kbert_retrieval_ask_does(served, rerank):
    """One reading algorithm: on the same passages, question, retriever, reranker and reader,
    the Search tab's answer and score are `kbert.retrieval.ask`'s."""
    from kbert.retrieval import Index, ask
    _, names, registry = served
    question = "How often is the tower painted?"
    reranker = names["reranker"] if rerank else search_lib.NO_RERANKER
    out = search_lib.ask(registry, names["embedding"], names["span"], DOCUMENT, None, question,
                         top_k=search_lib.READ_PASSAGES, hybrid=False, reranker=reranker)
    encoder, reader = registry.get(names["embedding"]), registry.get(names["span"])
    (_, text), = search_lib.read_documents(DOCUMENT, None)[0]
    passages = [text[s:e] for s, e in search_lib.split_document(
        encoder.tokenizer, text, search_lib.passage_tokens(encoder))]
    want = ask(question, Index.build(encoder, passages), reader, encoder,
               registry.get(reranker) if rerank else None, passages=search_lib.READ_PASSAGES,
               candidates=search_lib.RERANK_CANDIDATES, hybrid=False)
    got = out["answer"]
    assert got is not None and got["text"] == want["text"]
    assert got["score"] == pytest.approx(want["score"], rel=1e-4)
    hit = out["hits"][got["rank"] - 1]
    assert hit["text"] == want["passage"]["text"]
    assert (got["start"] - hit["start"], got["end"] - hit["start"]) == (want["start"],
                                                                        want["end"])
    assert hit["answer"]["text"] == got["text"]                     # the span marked in it


@pytest.mark.parametrize("case, expected", [
    ("empty document", "The document is empty"),
    ("empty question", "The question is empty"),
    ("binary file", "is not a text file"),
    ("latin-1 file", "is not UTF-8 text"),
    ("large file", "the playground indexes text files of at most 2 MB"),
    ("too much text", "the playground indexes at most 300,000"),
    ("only an empty file", "The document is empty"),
    ("model without the head", "has no sentence-embedding (search) head"),
])
def test_bad_input_is_one_message(served, client, tmp_path, case, expected):
    _, names, _ = served
    question, document, files, options = "Where?", "Some text.", None, {}
    if case == "empty document":
        document = "  \n\n "
    elif case == "empty question":
        question = "   "
    elif case in ("binary file", "latin-1 file", "large file", "only an empty file"):
        path = tmp_path / "upload.txt"
        path.write_bytes({"binary file": b"%PDF-1.7\n\x00\x01",
                          "latin-1 file": "Café crème".encode("latin-1"),
                          "large file": b"word " * 500_000,
                          "only an empty file": b"\n \n"}[case])
        files, document = [path], ""
    elif case == "too much text":
        document = "A sentence about rivers. " * 12_001
    else:
        options["model"] = names["span"]
    out = _ask(client, question, document, files, **options)
    assert out[0] is None and out[3] is None
    assert out[-1].startswith("⚠️") and expected in out[-1] and "Traceback" not in out[-1]
    assert len(out[-1].splitlines()) == 1


def test_an_empty_file_beside_text_is_left_out_with_a_note(served, client, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = _ask(client, "Where is the tower?", DOCUMENT, [empty])
    assert out[3] and re.search(r"empty\.txt is empty and was left out", out[-1])


def test_the_index_cache_builds_once_and_keeps_the_latest():
    import threading
    cache, built = search_lib.IndexCache(size=2), []
    gate = threading.Event()

    def build(key):
        def run():
            gate.wait(5)
            built.append(key)
            return key.upper()
        return run
    threads = [threading.Thread(target=cache.get, args=("a", build("a"))) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert built == ["a"] and cache.get("a", build("a")) == ("A", True)
    cache.get("b", build("b"))
    cache.get("a", build("a"))                 # "a" is the most recently used now
    cache.get("c", build("c"))                 # ... so "b" goes
    assert cache.get("b", build("b")) == ("B", False) and built == ["a", "b", "c", "b"]


def test_a_search_says_which_checkpoint_it_waits_for(tmp_path, tiny):
    from app import handlers
    from app.registry import Registry, discover
    tiny(tmp_path / "enc", "embedding")
    tiny(tmp_path / "qa", "span")
    registry = Registry(discover(tmp_path))
    ask = handlers.search(registry)
    steps = list(ask(None, "Who went?", "The man went to the store.", None, 3, False))
    assert [s[-1] for s in steps[:-1]] == [handlers.loading_line("retriever", "enc"),
                                           handlers.loading_line("reader", "qa")]
    assert steps[0][-1].startswith("Loading the retriever enc")
    answer, _, _, hits, info, notice = steps[-1]
    assert hits and "by enc;" in info and not notice.startswith("⚠️")
    again = list(ask(None, "Who went?", "The man went to the store.", None, 3, False))
    assert len(again) == 1 and again[0][3] == hits                  # loaded: no waiting line
    fresh = Registry(discover(tmp_path))
    bad = list(handlers.search(fresh)(None, " ", "Some text."))
    assert len(bad) == 1 and "The question is empty" in bad[0][-1]  # at once, nothing loaded
    assert not any(fresh.loaded(name) for name in fresh.names)


def test_the_search_tabs_checkpoints_load_in_the_background_from_start_up(tmp_path, tiny):
    """A server started without --preload loads the retriever and the reader the first search
    runs, and nothing else, in a background thread; with no sentence encoder (no Search tab)
    nothing is loaded."""
    import threading

    from app_fixtures import free_port

    from app import server
    from app.registry import Registry, discover
    for kind in ("embedding", "span", "mlm", "reranker"):
        tiny(tmp_path / kind, kind)
    demo, registry = server.serve([], tmp_path, port=free_port(), block=False)
    try:
        for thread in threading.enumerate():
            if thread.name == "search-preload":
                thread.join(120)
        assert [n for n in registry.names if registry.loaded(n)] == ["embedding", "span"]
    finally:
        demo.close()
    (tmp_path / "embedding" / "config.json").unlink()
    assert search_lib.preload(Registry(discover(tmp_path))) is None


def test_an_answer_span_scoring_zero_at_the_shown_precision_is_not_highlighted():
    from app import plots
    hit = {"rank": 1, "score": 0.5, "document": "a.txt", "start": 0, "end": 17,
           "text": "Paris is in France", "answer": {"text": "Paris", "start": 0, "end": 5}}
    for score, marked in ((0.00004, False), (0.0, False), (0.00005, True), (0.8, True)):
        page = plots.search_html([{**hit, "answer": {**hit["answer"], "score": score}}])
        assert ('<mark class="answer"' in page) is marked, score
        assert ("answer score" in page) is marked, score
        assert "is in France" in page
