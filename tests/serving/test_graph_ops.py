"""The in-graph twins in kbert.serving.graph_ops held equal to their Python references."""

import random

import tensorflow as tf

from kbert.serving import graph_ops
from kbert.tasks import metrics
from kbert.tokenizer import char_offsets

TEXTS = ["héllo wörld", "", "北京欢迎你 Tokyo東京", "I ❤️ emoji 👍🏽 :-)", "plain ascii text",
         "Ünïcödé e\u0301 café"]


def _boundaries(text):
    """Every byte offset that starts a character, and the end."""
    data = text.encode("utf-8")
    return [b for b in range(len(data)) if (data[b] & 0xC0) != 0x80] + [len(data)]


def test_char_offset_twins_agree():
    rng = random.Random(0)
    for text in TEXTS:
        offsets = _boundaries(text)
        starts = [rng.choice(offsets) for _ in range(12)]
        ends = [rng.choice(offsets) for _ in range(12)]
        want_starts, want_ends = char_offsets(text, starts, ends)
        got = graph_ops.char_offset(tf.constant([text] * 24),
                                    tf.constant(starts + ends, tf.int64)).numpy().tolist()
        assert got == want_starts + want_ends, text
        assert [text[s:e] for s, e in zip(want_starts, want_ends)] == [
            text.encode()[s:e].decode() for s, e in zip(starts, ends)]
    assert graph_ops.char_offset(tf.constant(["abc"]), tf.constant([-1], tf.int64)).numpy() == -1


def test_group_entities_matches_conlleval_entities():
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]
    tables = graph_ops.chunk_tables(labels)
    rng = random.Random(1)
    sentences = [[rng.randrange(len(labels)) for _ in range(rng.randint(1, 12))]
                 for _ in range(200)]
    flat = [i for s in sentences for i in s]
    rows = [r for r, s in enumerate(sentences) for _ in s]
    first, last, kinds = graph_ops.group_entities(
        tables, tf.constant(flat, tf.int64), tf.constant(rows, tf.int64))
    got = list(zip(first.numpy().tolist(), last.numpy().tolist(),
                   [k.decode() for k in kinds.numpy()]))
    want, offset = [], 0
    for s in sentences:
        want += [(offset + a, offset + b, kind)
                 for kind, a, b in metrics.entities([labels[i] for i in s])]
        offset += len(s)
    assert got == want and len(want) > 100
