"""kbert.data.arrays (NumPy twins of kbert.data.inputs) and kbert.training.pretraining_arrays."""

import warnings

import keras
import numpy as np
import pytest

from helpers import tiny_vocab
from kbert.data import arrays
from kbert.data.pretraining import Options

VOCAB = tiny_vocab()


def _documents(n_docs=10, sentences=8, seed=0):
    rng = np.random.default_rng(seed)
    words = [i for i, t in enumerate(VOCAB) if not t.startswith("[")]
    tokens, sentence_lengths = [], []
    for _ in range(n_docs * sentences):
        n = int(rng.integers(3, 12))
        tokens += rng.choice(words, n).tolist()
        sentence_lengths.append(n)
    return {"tokens": np.asarray(tokens, np.uint16),
            "sentence_lengths": np.asarray(sentence_lengths, np.int32),
            "document_lengths": np.full(n_docs, sentences, np.int32),
            "vocab": np.asarray(VOCAB)}


@pytest.fixture(scope="module")
def pairs():
    return arrays.segment_pairs(_documents(), Options(32, 5, dupe_factor=2, seed=3), workers=1)


def test_segment_pairs_are_bert_instances(pairs):
    cls, sep, mask = (VOCAB.index(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    ids, real = pairs["input_ids"], pairs["input_mask"] > 0
    assert (ids[:, 0] == cls).all() and ((ids == sep) & real).sum(1).min() == 2
    assert 0.35 < pairs["next_sentence_labels"].mean() < 0.65        # 50% NotNext
    picked = pairs["masked_lm_weights"] > 0
    assert picked.sum(1).min() >= 1
    rows, cols = np.nonzero(picked)
    at = ids[rows, pairs["masked_lm_positions"][rows, cols]]
    assert 0.6 < (at == mask).mean() <= 1.0                          # 80% [MASK] (few rows)
    again = arrays.segment_pairs(_documents(), Options(32, 5, dupe_factor=2, seed=3), workers=2)
    assert all((again[k] == pairs[k]).all() for k in pairs)        # workers change nothing


def test_unmask_and_targets_match_the_tf_data_twins(pairs):
    tf = pytest.importorskip("tensorflow")
    from kbert.data import inputs
    batch = {k: v[:16] for k, v in pairs.items()}
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    assert (arrays.unmask(batch)["input_ids"] == inputs.unmask(tensors)["input_ids"].numpy()
            ).all()
    for objective in arrays.OBJECTIVES:
        ours = arrays.targets(batch, objective)
        theirs = inputs.targets_for(objective)(tensors)
        for mine, other in zip(ours, theirs):
            assert sorted(mine) == sorted(other), objective
            for k in mine:
                np.testing.assert_array_equal(np.reshape(mine[k], -1),
                                              np.reshape(other[k].numpy(), -1))


def test_dynamic_masking_follows_the_rule_of_the_tf_twin(pairs):
    rows = arrays.unmask(pairs)
    masking = arrays.DynamicMasking(VOCAB, 5)
    out = masking(rows, np.random.default_rng(0))
    special = np.array([t.startswith("[") for t in VOCAB])
    n = ((rows["input_mask"] > 0) & ~special[rows["input_ids"]]).sum(1)
    expected = np.minimum(np.minimum(5, np.maximum(1, np.round(n * 0.15))), n)
    np.testing.assert_array_equal(out["masked_lm_weights"].sum(1), expected)
    r, c = np.nonzero(out["masked_lm_weights"] > 0)
    positions = out["masked_lm_positions"][r, c]
    assert not special[rows["input_ids"][r, positions]].any()       # never a special token
    assert (out["masked_lm_ids"][r, c] == rows["input_ids"][r, positions]).all()
    changed = out["input_ids"] != rows["input_ids"]
    assert changed.sum() <= len(r) and not changed[out["masked_lm_weights"].sum(1) == 0].any()
    again = masking(rows, np.random.default_rng(1))
    assert (again["masked_lm_positions"] != out["masked_lm_positions"]).any()  # new masks
    big = {k: np.tile(v, (40, 1)) for k, v in rows.items()}
    out = masking(big, np.random.default_rng(2))
    r, c = np.nonzero(out["masked_lm_weights"] > 0)
    now = out["input_ids"][r, out["masked_lm_positions"][r, c]]
    share = [(now == VOCAB.index("[MASK]")).mean(), (now == out["masked_lm_ids"][r, c]).mean()]
    assert abs(share[0] - 0.8) < 0.03 and abs(share[1] - 0.1) < 0.03, share
    tf = pytest.importorskip("tensorflow")
    from kbert.data.inputs import DynamicMasking
    theirs = DynamicMasking(VOCAB, 5)({k: tf.constant(v) for k, v in rows.items()},
                                      tf.constant([1, 2], tf.int64))
    np.testing.assert_array_equal(theirs["masked_lm_weights"].numpy().sum(1), expected)


def test_batches_cover_every_row_once_a_pass_and_repeat(pairs):
    feed = arrays.PretrainingBatches(pairs, 8, "mlm_nsp", steps_per_epoch=3, seed=5)
    n = len(pairs["input_ids"])
    seen = []
    for epoch in range(2 * -(-(n // 8) // 3)):
        seen += [tuple(map(tuple, feed[i][0]["input_ids"])) for i in range(len(feed))]
        feed.on_epoch_end()
    first_pass = seen[:n // 8]
    rows = [r for batch in first_pass for r in batch]
    assert len({tuple(r) for r in pairs["input_ids"]}) == n          # rows tell apart
    assert len(rows) == (n // 8) * 8 and len(set(rows)) == len(rows)   # no row twice a pass
    assert rows != [tuple(r) for r in pairs["input_ids"][:len(rows)]]  # shuffled
    second = [r for batch in seen[n // 8:2 * (n // 8)] for r in batch]
    assert second and second[:8] != rows[:8]                          # a new order a pass
    fresh = arrays.PretrainingBatches(pairs, 8, "mlm_nsp", steps_per_epoch=3, seed=5)
    assert tuple(map(tuple, fresh[1][0]["input_ids"])) == seen[1]     # seeded: repeats
    evaluation = arrays.PretrainingBatches(pairs, 8, "ltr", shuffle=False)
    assert len(evaluation) == -(-n // 8)
    assert sum(len(evaluation[i][0]["input_ids"]) for i in range(len(evaluation))) == n
    with pytest.raises(ValueError, match="^3 rows: too few for a batch of 8$"):
        arrays.PretrainingBatches({k: v[:3] for k, v in pairs.items()}, 8)
    with pytest.raises(ValueError, match="^1 row: too few for a batch of 8$"):
        arrays.PretrainingBatches({k: v[:1] for k, v in pairs.items()}, 8)


@pytest.mark.multibackend
@pytest.mark.parametrize("objective,dynamic", [("mlm_nsp", False), ("mlm", True),
                                               ("ltr", False)])
def test_pretrain_arrays_trains_each_objective(pairs, tmp_path, objective, dynamic):
    from kbert import checkpoint
    from kbert.training import evaluate_pretraining
    from kbert.training.pretraining_arrays import pretrain_arrays
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = pretrain_arrays(pairs, str(tmp_path / "ckpt"), config="tiny", vocab=VOCAB,
                                 objective=objective, batch_size=8, steps=24, log_every=8,
                                 learning_rate=5e-3, dynamic_masking=dynamic,
                                 max_predictions_per_seq=5, verbose=0)
    # without NSP the pooler gets no gradient: the task models' fit keeps that quiet
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
    assert result.steps == 24 and len(result.history["loss"]) == 3
    assert result.history["loss"][-1] < result.history["loss"][0]
    scores = evaluate_pretraining(result.model, {k: v[:20] for k, v in pairs.items()}, 8)
    name = "lm" if objective == "ltr" else "mlm"
    assert 0 <= scores[f"{name}_accuracy"] <= 1 and scores["examples"] == 20
    assert ("nsp_accuracy" in scores) == (objective == "mlm_nsp")
    heads = {"mlm_nsp": ["mlm", "nsp"], "mlm": ["mlm"], "ltr": ["ltr"]}[objective]
    assert sorted(checkpoint.load(str(tmp_path / "ckpt")).heads) == heads
    keras.backend.clear_session()
