"""`kbert index build|add|search` and `kbert evaluate retrieve|rerank`: what they print, and one
line `kbert COMMAND: error: ...` (exit status 2) on bad input."""

import json

import pytest

from helpers import PASSAGES
from kbert import cli


def _error(capsys, *argv, code=2):
    assert cli.main([str(a) for a in argv]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"body": p}) for p in PASSAGES[:3]))
    (tmp_path / "b.csv").write_text("id,body\n" + "\n".join(f'{i},"{p}"'
                                                            for i, p in enumerate(PASSAGES[3:])))
    (tmp_path / "long.txt").write_text(" ".join(PASSAGES))
    return tmp_path


def test_build_add_and_search(files, encoder, capsys):
    out = files / "idx"
    assert cli.main(["index", "build", str(files / "a.jsonl"), str(files / "b.csv"),
                     "--text-column", "body", "--model", encoder.checkpoint.path,
                     "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 6 passages from 6 texts, encoder tiny-encoder, exact" in printed
    assert cli.main(["index", "add", str(out), str(files / "long.txt")]) == 0
    printed = capsys.readouterr().out
    assert "kbert index: note: 1 of 1 text was longer than the encoder's 16 tokens and " \
           "split into overlapping passages" in printed
    assert "from 7 texts" in printed
    assert cli.main(["index", "search", str(out), "who bought milk ?", "--top-k", "3",
                     "--json"]) == 0
    hits = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    want = encoder.search("who bought milk ?", PASSAGES + [" ".join(PASSAGES)], top_k=50)
    assert len(hits) == 3 and hits[0]["file"] in ("a.jsonl", "b.csv", "long.txt")
    assert hits[0]["score"] == pytest.approx(want[0]["score"], abs=1e-5)
    assert cli.main(["index", "search", str(out), "milk", "--hybrid", "on"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.split()[0] == "1" and "he bought milk" in first and "a.jsonl:1" in first


def test_hybrid_as_a_bare_switch_and_as_on_off(files, encoder, capsys):
    pytest.importorskip("bm25s")
    out = files / "idx"
    assert cli.main(["index", "build", "--hybrid", str(files / "a.jsonl"), "--text-column",
                     "body", "--model", encoder.checkpoint.path, "--output", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith(", exact, hybrid")
    hits = {}
    for form in (["--hybrid", "off"], ["--hybrid=on"], ["--hybrid"], []):
        assert cli.main(["index", "search", str(out), "milk", "--json", *form]) == 0
        hits[" ".join(form)] = json.loads(capsys.readouterr().out)
    assert hits["--hybrid=on"] == hits["--hybrid"] == hits[""]          # the index's: on
    assert hits[""][0]["text"] == PASSAGES[0]
    dense = encoder.search("milk", PASSAGES[:3], top_k=3)               # a list: dense only
    assert [h["score"] for h in hits["--hybrid off"]] == pytest.approx(
        [h["score"] for h in dense], abs=1e-5)


def test_index_errors_are_one_line(files, encoder, other_encoder, capsys, tmp_path):
    err = _error(capsys, "index", "build", files / "b.csv", "--model", encoder.checkpoint.path,
                 "--output", tmp_path / "x")
    assert err == (f"kbert index: error: {files / 'b.csv'}: no column 'text' (columns: id, "
                   f"body); name it with --text-column")
    assert not (tmp_path / "x").exists()
    err = _error(capsys, "index", "search", tmp_path / "nothing", "q")
    assert err == f"kbert index: error: index directory not found: {tmp_path / 'nothing'}"
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "embeddings.npy").write_bytes(b"")
    err = _error(capsys, "index", "search", tmp_path / "half", "q")
    assert err.startswith(f"kbert index: error: {tmp_path / 'half'}: missing index.json")
    assert cli.main(["index", "build", str(files / "a.jsonl"), "--text-column", "body",
                     "--model", encoder.checkpoint.path, "--output", str(tmp_path / "i")]) == 0
    err = _error(capsys, "index", "search", tmp_path / "i", "q", "--model",
                 other_encoder.checkpoint.path)
    assert "was built with encoder tiny-encoder" in err and "not other-encoder" in err
    # an argument of bytes that are not UTF-8 reaches Python as lone surrogates
    err = _error(capsys, "index", "search", tmp_path / "i", "milk \udcff")
    assert err == ("kbert index: error: search: query 0 has a lone surrogate U+DCFF at "
                   "position 5 (not valid Unicode)")


@pytest.mark.parametrize("name, data, line", [
    ("latin1.txt", "caf\u00e9 au lait\nand more".encode("latin-1"), 1),
    ("latin1.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', 2),
    ("latin1.csv", b"text\nok\n\ncaf\xe9\n", 4),
])
def test_a_file_that_is_not_utf8_is_named_with_its_line(files, encoder, capsys, tmp_path,
                                                         name, data, line):
    bad = files / name
    bad.write_bytes(data)
    offset = data.index(b"\xe9")
    err = _error(capsys, "index", "build", bad, "--model", encoder.checkpoint.path,
                 "--output", tmp_path / "x")
    assert err == (f"kbert index: error: {bad}:{line}: not UTF-8 text (byte 0xe9 at offset "
                   f"{offset}: invalid continuation byte); save it as UTF-8")
    assert not (tmp_path / "x").exists()
    assert cli.main(["index", "build", str(files / "a.jsonl"), "--text-column", "body",
                     "--model", encoder.checkpoint.path, "--output", str(tmp_path / "i")]) == 0
    capsys.readouterr()
    assert _error(capsys, "index", "add", tmp_path / "i", bad) == err


def test_evaluate_retrieve_and_rerank_print_one_json_line(tmp_path, encoder, cross_encoders,
                                                         capsys):
    lines = [{"query": "who bought milk ?", "positive": PASSAGES[0]},
             {"query": "a cat on a mat", "positive": PASSAGES[1], "negatives": PASSAGES[2:]}]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(x) for x in lines))
    capsys.readouterr()
    assert cli.main(["evaluate", "retrieve", "--model", encoder.checkpoint.path,
                     "--data", str(data)]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(scores) == ["recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10"]
    assert scores["recall@20"] == 100.0 and 0 <= scores["recall@1"] <= 100
    assert cli.main(["evaluate", "rerank", "--model", cross_encoders["nsp"].checkpoint.path,
                     "--data", str(data), "--candidates", "3"]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(scores) == {"recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10"}
    assert cli.main(["evaluate", "rerank", "--model", cross_encoders["nsp"].checkpoint.path,
                     "--data", str(data), "--candidates", "3", "--fuse"]) == 0
    fused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(fused) == set(scores) and fused["recall@20"] == scores["recall@20"]
    err = _error(capsys, "evaluate", "rerank", "--model", encoder.checkpoint.path, "--data",
                 data)
    assert err.startswith("kbert evaluate: error: rerank needs a cross-encoder")


def test_index_commands_take_the_runtime_and_dtype(files, encoder, capsys, tmp_path,
                                                   monkeypatch):
    """`--runtime onnx` indexes through the exported graph: the same vectors as Keras', so an
    index built one way is searched the other; a combination not offered is one line."""
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "idx"
    assert cli.main(["index", "build", str(files / "a.jsonl"), "--text-column", "body",
                     "--model", encoder.checkpoint.path, "--output", str(out),
                     "--runtime", "onnx"]) == 0
    assert list((tmp_path / "cache" / "graphs").glob("*/onnx/embed.onnx"))
    capsys.readouterr()
    for runtime in ([], ["--runtime", "onnx"]):
        assert cli.main(["index", "search", str(out), "who bought milk ?", "--json",
                         *runtime]) == 0
        hits = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        want = encoder.search("who bought milk ?", PASSAGES[:3], top_k=3)
        assert [h["text"] for h in hits] == [w["text"] for w in want]
        assert [h["score"] for h in hits] == pytest.approx([w["score"] for w in want], abs=1e-4)
    err = _error(capsys, "index", "search", out, "q", "--runtime", "onnx", "--dtype", "bfloat16")
    assert err.startswith("kbert index: error: ONNX Runtime has no bfloat16")


def _progress_lines(err):
    """The progress lines of a command's stderr: 'DESC: N/N UNIT (100%), ... left, ...'."""
    return [line for line in err.splitlines() if " elapsed" in line]


def test_index_build_and_evaluate_show_progress_on_stderr_unless_quiet(files, encoder, capsys):
    """Encoding shows a count, a rate and the time left on stderr (where stderr is not a
    terminal: a line every 30 s and one at the end); --quiet none; stdout is the same either
    way."""
    build = ["index", "build", str(files / "a.jsonl"), str(files / "b.csv"), "--text-column",
             "body", "--model", encoder.checkpoint.path, "--output", str(files / "idx"),
             "--batch-size", "1", "--overwrite"]
    assert cli.main(build) == 0
    shown = capsys.readouterr()
    lines = _progress_lines(shown.err)
    assert len(lines) == 1, shown.err                      # a quick run: its last line only
    assert lines[-1].startswith("encoding passages: 6/6 passage (100%)") and " left" in lines[-1]
    assert cli.main(build + ["--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == shown.out
    assert cli.main(["index", "add", str(files / "idx"), str(files / "long.txt"),
                     "--batch-size", "1"]) == 0
    assert "encoding passages: 5/5 passage (100%)" in capsys.readouterr().err

    data = files / "d.jsonl"
    data.write_text("\n".join(json.dumps({"query": q, "positive": p}) for q, p in
                              [("who bought milk ?", PASSAGES[0]), ("a cat", PASSAGES[1])]))
    evaluate = ["evaluate", "retrieve", "--model", encoder.checkpoint.path, "--data", str(data),
                "--batch-size", "1"]
    assert cli.main(evaluate) == 0
    shown = capsys.readouterr()
    ends = [line.split(",")[0] for line in _progress_lines(shown.err) if "(100%)" in line]
    assert ends == ["encoding passages: 2/2 passage (100%)",
                    "encoding queries: 2/2 query (100%)"]
    assert cli.main(evaluate + ["--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == shown.out


def test_evaluate_rerank_shows_its_queries_on_stderr(tmp_path, cross_encoders, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"query": q, "positive": p}) for q, p in
                              [("who bought milk ?", PASSAGES[0]), ("a cat", PASSAGES[1])]))
    evaluate = ["evaluate", "rerank", "--model", cross_encoders["nsp"].checkpoint.path,
                "--data", str(data), "--candidates", "2"]
    assert cli.main(evaluate) == 0
    shown = capsys.readouterr()
    assert _progress_lines(shown.err)[-1].startswith("reranking: 2/2 query (100%)")
    assert cli.main(evaluate + ["--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == shown.out


def test_index_build_progress_moves_as_the_passages_are_encoded(files, encoder, capsys,
                                                                 monkeypatch):
    """The bar counts passages and moves after each call of the model (1, 2, 4 ... batches),
    not once for a small build, and reaches its total."""
    from kbert import progress
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)       # a line at every update
    assert cli.main(["index", "build", str(files / "a.jsonl"), str(files / "b.csv"),
                     "--text-column", "body", "--model", encoder.checkpoint.path,
                     "--output", str(files / "idx"), "--batch-size", "1"]) == 0
    counts = [line.split(",")[0] for line in _progress_lines(capsys.readouterr().err)]
    assert list(dict.fromkeys(counts)) == ["encoding passages: 1/6 passage (17%)",
                      "encoding passages: 3/6 passage (50%)",
                      "encoding passages: 6/6 passage (100%)"]


def test_an_error_while_encoding_leaves_no_progress_line(files, encoder, capsys, monkeypatch):
    """A model call that fails under the bar: stderr is the error's one line."""
    def fail(*args, **kwargs):
        raise ValueError("the model failed")
    monkeypatch.setattr(type(encoder), "embed", fail)
    err = _error(capsys, "index", "build", files / "a.jsonl", "--model", encoder.checkpoint.path,
                 "--text-column", "body", "--output", files / "idx", "--batch-size", "1")
    assert err == "kbert index: error: the model failed"
