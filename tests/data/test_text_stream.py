"""Pretraining straight from text in tf.data, locally and from tf.data service workers."""

import collections
import glob
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from helpers import SHARED_DATA, WORDS, tiny_vocab, write_vocab
from kbert.data import sentences_graph, text
from kbert.data.sentences import read_documents, split_sentences
from kbert.tokenizer import Tokenizer

TRICKY = [
    'Mr. Smith paid $3.50 at 5 p.m. today. "Really?" she asked. Yes!',
    "J. F. Kennedy spoke. The U.S. Army came. It was 3 a.m. on Jan. 5. They left...",
    "Tim Smith , Jr . , won . He is c . 40 . Sullivan 's . By June it ended !",
    'He said "go." Then she went (quietly). wow. "',
    "Is it? yes it is! Really… Done",
]


def _words(rng, n):
    words = [w for w in WORDS if w.isalpha()]
    return " ".join(rng.choice(words) for _ in range(n)).capitalize() + rng.choice(".!?")


def _corpus(directory, documents=12, seed=0, paragraphs=2):
    """`documents` files of `paragraphs` paragraphs each, and one file of three google-format
    documents."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    files = []
    for i in range(documents):
        lines = [" ".join(_words(rng, rng.randint(2, 9)) for _ in range(rng.randint(2, 6)))
                 for _ in range(paragraphs)]
        files.append(os.path.join(directory, f"doc{i:02d}.txt"))
        with open(files[-1], "w") as f:
            f.write("\n\n".join(lines) + "\n")
    files.append(os.path.join(directory, "google.txt"))
    with open(files[-1], "w") as f:
        f.write("\n\n".join("\n".join(_words(rng, rng.randint(2, 9)) for _ in range(4))
                            for _ in range(3)) + "\n")
    return files


def _same_words(sentences):
    """Sentences with their whitespace made single spaces (the graph reader joins words)."""
    return [" ".join((s.decode() if isinstance(s, bytes) else s).split()) for s in sentences]


def test_graph_reader_is_the_twin_of_read_documents(tmp_path):
    graph = sentences_graph.split_sentences_graph(TRICKY).to_list()
    assert [_same_words(s) for s in graph] == [_same_words(split_sentences(p)) for p in TRICKY]
    files = _corpus(str(tmp_path))
    real = sorted(glob.glob(str(SHARED_DATA / "corpus" / "wikitext2" / "00*.txt")))[:3]
    files += real + sorted(glob.glob(str(SHARED_DATA / "corpus" / "brown" / "ca0*.txt")))[:3]
    sentences, document = sentences_graph.read_group(tf.constant(files))
    documents = collections.defaultdict(list)
    for s, d in zip(sentences.numpy(), document.numpy()):
        documents[d].append(s)
    expected = [_same_words(d) for d in read_documents(files)]
    assert [_same_words(documents[d]) for d in sorted(documents)] == expected
    assert len(expected) == len(files) + 2                 # google.txt holds three


def _sentences(lengths, documents, start=10):
    """Token ids counting up from `start`: sentences of the given lengths, documents' sizes."""
    ids, value = [], start
    for n in lengths:
        ids.append(list(range(value, value + n)))
        value += n
    first = np.zeros(len(lengths), bool)
    first[np.cumsum([0] + documents[:-1])] = True
    return tf.ragged.constant(ids, tf.int64), tf.constant(first)


def test_full_sentences_packs_in_order_across_documents():
    ids, first = _sentences([3, 4, 2, 9, 5, 1, 2], [3, 2, 2])
    tokens, segments = text.full_sentence_instances(ids, first, 10, sep_id=3, cls_id=2)
    assert tokens.to_list() == [
        [2, 10, 11, 12, 13, 14, 15, 16, 3],           # 3 + 4 tokens (2 more would be 9 > 8)
        [2, 17, 18, 3],                               # a [SEP] and 8 more would be 11
        [2, 19, 20, 21, 22, 23, 24, 25, 26, 3],       # a 9-token sentence is cut into 8 + 1
        [2, 27, 28, 29, 30, 31, 32, 3, 33, 3],        # a [SEP] between two documents
        [2, 34, 35, 3]]
    assert np.all(segments.flat_values.numpy() == 0)


def test_nsp_pairs_continue_or_come_from_another_document():
    rng = random.Random(0)
    lengths = [rng.randint(1, 8) for _ in range(600)]
    documents = [20] * 30
    ids, first = _sentences(lengths, documents)
    doc_of = {}
    value = 10
    for i, n in enumerate(lengths):
        for t in range(value, value + n):
            doc_of[t] = i // 20
        value += n
    labels, lengths_out = [], []
    pairs = tf.function(lambda seeds: text.nsp_instances(ids, first, 24, 3, 2, seeds))
    for s in range(3):
        tokens, segments, label = pairs(tf.random.experimental.stateless_split([7, s], 4))
        for row, seg, is_random in zip(tokens.to_list(), segments.to_list(), label.numpy()):
            a_end = row.index(3)
            a, b = row[1:a_end], row[a_end + 1:-1]
            assert row[0] == 2 and row[-1] == 3 and a and b and len(row) <= 24
            assert seg == [0] * (len(a) + 2) + [1] * (len(b) + 1)
            assert a == list(range(a[0], a[0] + len(a)))            # contiguous text
            assert b == list(range(b[0], b[0] + len(b)))
            if is_random:
                assert doc_of[b[0]] != doc_of[a[0]]
            else:
                assert doc_of[b[0]] == doc_of[a[0]] and b[0] > a[-1]
            labels.append(is_random)
            lengths_out.append(len(row))
    assert 0.45 < np.mean(labels) < 0.55, np.mean(labels)
    assert np.mean(lengths_out) > 16                    # chunks fill the 21-token budget


def _rows(ds):
    """Every row of a batched stream (a dict of numpy arrays each), and the batch count."""
    rows, batches = [], 0
    for batch in ds.as_numpy_iterator():
        batches += 1
        rows += [{k: v[i] for k, v in batch.items()} for i in range(len(batch["input_ids"]))]
    return rows, batches


def _key(row):
    return tuple(tuple(row[k].ravel().tolist()) for k in sorted(row))


def _statistics(rows, mask_id, specials):
    """(masked share of the maskable tokens, [MASK] share, unchanged share, NotNext share,
    masked tokens, the masked tokens the rule asks for)."""
    masked = eligible = as_mask = as_same = wanted = 0
    for row in rows:
        real = row["masked_lm_weights"] > 0
        positions, labels = row["masked_lm_positions"][real], row["masked_lm_ids"][real]
        shown = row["input_ids"][positions]
        masked += real.sum()
        as_mask += (shown == mask_id).sum()
        as_same += (shown == labels).sum()
        restored = row["input_ids"].copy()
        restored[positions] = labels
        n = ((row["input_mask"] > 0) & ~np.isin(restored, specials)).sum()
        eligible += n
        wanted += min(len(real), max(1, np.round(n * 0.15)))     # round half to even, as tf
    not_next = np.mean([row["next_sentence_labels"][0] for row in rows])
    return masked / eligible, as_mask / masked, as_same / masked, not_next, masked, wanted


@pytest.fixture(scope="module")
def service():
    """A tf.data service on localhost: a dispatcher and two workers, in this process (one for the
    module: starting and stopping them takes seconds)."""
    dispatcher = text.serve_dispatcher(0)
    # Stopping a worker once hung (its destructor joining its threads); a dispatcher timeout
    # bounds their calls' retries, TensorFlow's default being an hour.
    workers = [text.serve_worker(dispatcher.target, heartbeat_ms=50, dispatcher_timeout_ms=5000)
               for _ in range(2)]
    yield dispatcher.target
    for server in (*workers, dispatcher):     # workers first: they report to the dispatcher
        server.stop()


def test_data_service_gives_the_local_sequences_masks_and_batches(tmp_path, service):
    files = _corpus(str(tmp_path), documents=24, paragraphs=6)
    vocab = tiny_vocab()
    specials = [i for i, t in enumerate(vocab) if t.startswith("[")]
    options = dict(batch_size=8, max_seq_length=32, max_predictions_per_seq=8, epochs=3,
                   files_per_group=7, seed=3, drop_remainder=False)
    local_rows, local_batches = _rows(text.text_pretraining_dataset(files, vocab, **options))
    served_rows, served_batches = _rows(text.text_pretraining_dataset(
        files, vocab, data_service=service, **options))
    assert served_batches == local_batches == -(-len(local_rows) // 8)
    # The same sequences with the same masks (in another order).
    assert sorted(map(_key, served_rows)) == sorted(map(_key, local_rows))
    share, as_mask, as_same, not_next, masked, wanted = _statistics(local_rows, 4, specials)
    assert masked == wanted > 1200
    assert 0.135 < share < 0.16              # 15%, each row's count rounded (14% on short rows)
    assert abs(as_mask - 0.8) < 0.03 and abs(as_same - 0.1) < 0.025
    assert abs(not_next - 0.5) < 0.07


def test_full_sentences_masks_anew_each_epoch(tmp_path):
    files = _corpus(str(tmp_path))[-1:]                  # three documents in one file
    vocab = tiny_vocab()
    ds = text.text_pretraining_dataset(files, vocab, 1, max_seq_length=24, epochs=2,
                                       mode="full_sentences", shuffle_buffer=1)
    rows = list(ds.unbatch().as_numpy_iterator())
    first, second = rows[:len(rows) // 2], rows[len(rows) // 2:]
    stream = []
    for a, b in zip(first, second):
        ids = []
        for row in (a, b):
            assert row["next_sentence_weights"][0] == 0 and not row["segment_ids"].any()
            restored = row["input_ids"].copy()
            real = row["masked_lm_weights"] > 0
            restored[row["masked_lm_positions"][real]] = row["masked_lm_ids"][real]
            ids.append(restored[row["input_mask"] > 0].tolist())
        assert ids[0] == ids[1]                          # the same sequence ...
        stream += ids[0][1:-1]
    assert any((a["masked_lm_positions"] != b["masked_lm_positions"]).any()
               for a, b in zip(first, second))           # ... masked anew
    tokenizer = Tokenizer(vocab)
    expected = []
    for document in read_documents(files):
        if expected:
            expected.append(tokenizer.sep_id)
        expected += [t for s in tokenizer.encode_batch(document) for t in s]
    assert stream == expected


@pytest.fixture
def tiny_setup(tmp_path):
    from kbert import BertConfig
    vocab = write_vocab(str(tmp_path), tiny_vocab(100))
    config = BertConfig.preset("tiny", vocab_size=100, num_layers=1, hidden_size=32,
                               num_heads=2, intermediate_size=64, max_position_embeddings=32)
    path = str(tmp_path / "config.json")
    with open(path, "w") as f:
        f.write(config.to_json())
    return _corpus(str(tmp_path / "text")), vocab, path


def test_pretrain_from_text_via_the_api_and_the_cli_with_a_data_service(tmp_path, tiny_setup,
                                                                       capsys, service):
    from kbert import cli, training
    files, vocab, config = tiny_setup
    result = training.pretrain(text=files, output=str(tmp_path / "api"), config=config,
                               vocab=vocab, batch_size=4, steps=2, max_seq_length=32,
                               max_predictions_per_seq=5, jit_compile=False, verbose=0,
                               shuffle_buffer=16)
    assert result.steps == 2 and np.all(np.isfinite(result.history["loss"]))
    assert os.path.isfile(tmp_path / "api" / "model.safetensors")
    assert cli.main(["pretrain", "--text", *files, "--text-mode", "full_sentences",
                     "--data-service", service, "--config", config, "--vocab", vocab,
                     "--output", str(tmp_path / "cli"), "--batch-size", "4", "--steps", "2",
                     "--max-seq-length", "32", "--max-predictions-per-seq", "5",
                     "--jit-compile", "off", "--shuffle-buffer", "16"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert os.path.isfile(tmp_path / "cli" / "model.safetensors")
    assert cli.main(["pretrain", "--text", str(tmp_path / "nope.txt"), "--config", config,
                     "--vocab", vocab, "--output", str(tmp_path / "x")]) == 2
    assert "input file not found" in capsys.readouterr().err
