"""Property-based fuzzing (hypothesis) of what reads user input: the tokenizer's two routes,
the pairs reader, the CSV/TSV/JSONL table reader, the index's file reader and the index
loader. Whatever comes in, the answer is a result or one line naming the problem (a
`ValueError`, as the CLI prints it), never another exception from inside.

Derandomized (the same examples every run): a failure here is a bug to fix, not a flake."""

import json
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers import uncased_tokenizer

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# Text the way files bring it: any character, blank lines, quotes, separators, BOMs, NULs.
TEXT = st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["", " ", "\n", "\ufeff", "\x00", '"', "a,b", "a\tb", "[MASK]", "null", "{}", "[]"])


def _one_line(error: BaseException) -> None:
    message = str(error)
    assert message and "\n" not in message.strip(), repr(message)


def _file(content: str | bytes, suffix: str) -> str:
    folder = tempfile.mkdtemp(prefix="kbert-fuzz-")
    path = os.path.join(folder, "input" + suffix)
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode("utf-8",
                                                                           "surrogatepass"))
    return path


@pytest.fixture(scope="module")
def tokenizer():
    return uncased_tokenizer()


# --- the tokenizer -------------------------------------------------------------------------------
@FUZZ
@given(texts=st.lists(st.text(max_size=40), min_size=1, max_size=3))
@example(texts=["0\U0002B820"])     # a CJK character `tokenizers` did not split off (found here)
def test_the_tokenizers_two_routes_agree_or_refuse_in_one_line(tokenizer, texts):
    """The Rust route (small requests) and the TensorFlow graph route (large ones) are twins:
    the same ids for any text; a text that is not valid Unicode is one line from both."""
    try:
        rust = tokenizer.encode_batch(texts)
    except ValueError as e:
        _one_line(e)
        assert "lone surrogate" in str(e)
        return
    graph = tokenizer.graph.encode_batch(texts, True)
    assert rust == graph
    assert all(0 <= i < tokenizer.vocab_size for ids in rust for i in ids)


# --- the readers ---------------------------------------------------------------------------------
ROWS = st.lists(st.dictionaries(st.sampled_from(["query", "positive", "negative", "text",
                                                 "label", "other"]),
                                st.none() | st.integers() | TEXT | st.lists(TEXT, max_size=2),
                                max_size=5), max_size=6)


def _jsonl(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _csv(rows) -> str:
    columns = sorted({k for r in rows for k in r}) or ["text"]
    lines = [",".join(columns)] + [",".join(json.dumps(r.get(c, ""), ensure_ascii=False)
                                            for c in columns) for r in rows]
    return "\n".join(lines) + "\n"


@FUZZ
@given(rows=ROWS, as_csv=st.booleans(), raw=st.none() | st.binary(max_size=80))
def test_the_pairs_reader_reads_or_names_the_line(rows, as_csv, raw):
    from kbert.training.retrievers import read_pairs
    suffix = ".csv" if as_csv else ".jsonl"
    path = _file(raw if raw is not None else (_csv(rows) if as_csv else _jsonl(rows)), suffix)
    try:
        pairs = read_pairs(path, negative_column="negative")
    except ValueError as e:
        _one_line(e)
        assert path in str(e) or "input" in str(e), str(e)
    else:
        assert len(pairs.queries) == len(pairs.positives) > 0
        assert all(isinstance(t, str) and t.strip() for t in pairs.queries + pairs.positives)
    finally:
        shutil.rmtree(os.path.dirname(path))


@FUZZ
@given(rows=ROWS, suffix=st.sampled_from([".csv", ".tsv", ".jsonl"]),
       raw=st.none() | st.binary(max_size=80))
def test_the_table_reader_reads_or_names_the_line(rows, suffix, raw):
    from kbert.tasks.userdata import read_table
    content = raw if raw is not None else (_jsonl(rows) if suffix == ".jsonl" else
                                           _csv(rows).replace(",", "\t") if suffix == ".tsv"
                                           else _csv(rows))
    path = _file(content, suffix)
    try:
        examples = read_table(path)
    except ValueError as e:
        _one_line(e)
    else:
        assert all(isinstance(x.text_a, str) and x.text_a.strip() for x in examples)
    finally:
        shutil.rmtree(os.path.dirname(path))


@FUZZ
@given(rows=ROWS, suffix=st.sampled_from([".csv", ".jsonl", ".txt"]),
       raw=st.none() | st.binary(max_size=80))
def test_the_index_file_reader_reads_or_names_the_file(rows, suffix, raw):
    from kbert.retrieval.passages import read_texts
    content = raw if raw is not None else (_jsonl(rows) if suffix == ".jsonl" else _csv(rows))
    path = _file(content, suffix)
    try:
        texts, meta = read_texts([path])
    except ValueError as e:
        _one_line(e)
        assert path in str(e), str(e)
    else:
        assert len(texts) == len(meta) and all(isinstance(t, str) for t in texts)
    finally:
        shutil.rmtree(os.path.dirname(path))


# --- the index loader ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved_index(tmp_path_factory):
    from kbert.retrieval import Index
    vectors = np.eye(3, 4, dtype=np.float32)
    passages = [{"text": t, "source": i, "start": 0, "end": len(t)}
                for i, t in enumerate(["a cat", "a dog", "milk"])]
    encoder = {"name": "tiny", "path": None, "weights_sha256": "0", "vocab_sha256": "0",
               "pooling": "mean", "max_seq_length": 16, "hidden_size": 4}
    path = tmp_path_factory.mktemp("index") / "idx"
    Index(vectors, passages, encoder).save(path)
    return path


FILES = st.sampled_from(["index.json", "embeddings.npy", "passages.jsonl"])


@FUZZ
@given(name=FILES, cut=st.integers(0, 400), junk=st.binary(max_size=40),
       flip=st.integers(0, 10_000))
def test_a_damaged_index_is_one_line(saved_index, name, cut, junk, flip):
    """Any file of a saved index truncated, extended with junk or with a byte changed: the
    index loads (the change was harmless) or `Index.load` says what is wrong in one line."""
    from kbert.retrieval import Index
    copy = tempfile.mkdtemp(prefix="kbert-fuzz-")
    try:
        target = os.path.join(copy, "idx")
        shutil.copytree(saved_index, target)
        path = os.path.join(target, name)
        data = bytearray(open(path, "rb").read())
        if data:
            data[flip % len(data)] ^= 0x5A
        with open(path, "wb") as f:
            f.write(bytes(data[:cut]) + junk if cut < len(data) else bytes(data) + junk)
        try:
            index = Index.load(target)
        except ValueError as e:
            _one_line(e)
        else:
            assert np.isfinite(index.vectors).all()
            assert len(index.vectors) == len(index.passages)
    finally:
        shutil.rmtree(copy)
