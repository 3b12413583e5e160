"""The real all-MiniLM-L6-v2: converting it records its pooling and trained length (256 tokens),
which embed and the index use; the shipped `minilm-l6-v2` finds the right passage."""

import json
import pathlib

import numpy as np
import pytest

import kbert
from helpers import minilm_dir

REPO = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = REPO / "saved_models" / "minilm-l6-v2"
PASSAGES = ["The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
            "Photosynthesis converts light energy into chemical energy in plants.",
            "The Great Wall of China is a series of fortifications in northern China.",
            "Python is a high-level, general-purpose programming language."]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from kbert import convert
    path = tmp_path_factory.mktemp("minilm") / "all-minilm-l6-v2"
    convert.convert("hf", minilm_dir(), str(path))
    return path


def test_converting_records_the_trained_length_and_pooling(converted):
    config = json.loads((converted / "config.json").read_text())
    assert config["sentence_embedding"] == {"max_seq_length": 256, "pooling": "mean",
                                            "normalize": True}
    assert config["max_position_embeddings"] == 512


def test_embed_and_index_truncate_at_256_tokens_by_default(converted):
    m = kbert.load(str(converted))
    long = " ".join(PASSAGES * 12)                           # ~ 180 words, > 256 pieces
    ids = m.tokenizer.encode(long)
    assert len(ids) > 300
    head = m.tokenizer.convert_ids_to_tokens(ids[:254])
    truncated = " ".join(head).replace(" ##", "")
    default, full = m.embed([long, truncated]), m.embed([long], max_seq_length=512)
    np.testing.assert_allclose(default[0], default[1], atol=1e-4)    # mean pooling, 256
    assert np.abs(default[0] - full[0]).max() > 1e-3
    np.testing.assert_allclose(default[1], m.embed([truncated], pooling="mean")[0], atol=1e-5)
    index = kbert.retrieval.Index.build(m, PASSAGES)
    assert index.encoder["max_seq_length"] == 256 and index.encoder["pooling"] == "mean"


@pytest.mark.multibackend
def test_shipped_sentence_encoder_finds_the_passage():
    if not SHIPPED.is_dir():
        pytest.skip("saved_models/minilm-l6-v2 is absent")
    m = kbert.load("minilm-l6-v2")
    hits = m.search(["Where is the Eiffel Tower?", "How do plants make energy from light?",
                     "Which language is good for programming?"], PASSAGES, top_k=2)
    assert [h[0]["index"] for h in hits] == [0, 1, 3]
    assert all(0 < h[0]["score"] <= 1.0 for h in hits)
    hybrid = m.search("wrought-iron tower", PASSAGES, top_k=1, hybrid=True)
    assert hybrid[0]["index"] == 0
