"""The pretraining ablations' model side (paper, section 5.1): a causal encoder, the
left-to-right LM head and its next-token targets, and MLM without NSP."""

import numpy as np
import pytest
from keras import ops

import kbert
from helpers import random_inputs, tiny_vocab
from kbert import checkpoint
from kbert.models.task_models import task_model
from kbert.network.config import BertConfig
from kbert.network.heads import next_token_targets

pytestmark = pytest.mark.multibackend
TINY = dict(vocab_size=120, max_position_embeddings=64)


def _changed_after(inputs, i, vocab_size):
    """The same inputs with every real token after position i replaced."""
    ids = np.array(inputs["input_ids"])
    ids[:, i + 1:] = (ids[:, i + 1:] + 7) % (vocab_size - 5) + 5
    return dict(inputs, input_ids=ids)


def test_causal_encoder_ignores_later_tokens_and_default_stays_bidirectional():
    inputs = random_inputs(2, 12, TINY["vocab_size"], seed=3)
    inputs["input_mask"] = np.ones_like(inputs["input_mask"])
    causal = kbert.BertBackbone(BertConfig.preset("tiny", causal=True, **TINY))
    bidirectional = kbert.BertBackbone(BertConfig.preset("tiny", **TINY))
    bidirectional.set_weights(causal.get_weights())          # same weights, other mask
    changed = _changed_after(inputs, 5, TINY["vocab_size"])

    def seq(model, x, **kw):
        return ops.convert_to_numpy(model(x, **kw)["sequence_output"])

    a, b = seq(causal, inputs), seq(causal, changed)
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-5)        # positions 0..5: unchanged
    assert np.abs(a[:, 6:] - b[:, 6:]).max(-1).min() > 1e-2            # every later one changed
    c, d = seq(bidirectional, inputs), seq(bidirectional, changed)
    assert np.abs(c[:, :6] - d[:, :6]).max() > 1e-2                    # bidirectional: sees them
    assert np.abs(a - c).max() > 1e-2
    # The attention-probabilities path builds the same mask: zero above the diagonal.
    out = causal(inputs, output_attentions=True)
    probs = ops.convert_to_numpy(out["attentions"][0])                 # [B, N, T, T]
    assert np.triu(probs, k=1).max() == 0.0
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(out["sequence_output"]), a, atol=1e-5)
    # The pooled output of a causal encoder reads the last real token, not [CLS].
    pooled = ops.convert_to_numpy(causal(inputs)["pooled_output"])
    np.testing.assert_allclose(pooled, np.tanh(a[:, -1] @ ops.convert_to_numpy(
        causal.pooler.dense.kernel) + ops.convert_to_numpy(causal.pooler.dense.bias)), atol=1e-5)
    # Padding stays masked too: a padded key gets no weight.
    padded = dict(inputs, input_mask=np.concatenate(
        [np.ones((2, 9), "int32"), np.zeros((2, 3), "int32")], 1))
    probs = ops.convert_to_numpy(causal(padded, output_attentions=True)["attentions"][1])
    assert probs[..., 9:].max() == 0.0


def test_causal_config_field():
    assert BertConfig().causal is False
    c = BertConfig.preset("tiny", causal=True)
    assert BertConfig.from_json(c.to_json()).causal is True
    with pytest.raises(ValueError, match="causal must be true or false"):
        BertConfig(causal="yes")


def test_next_token_targets_and_left_to_right_lm():
    ids = np.array([[2, 17, 30, 41, 3, 0], [2, 50, 3, 0, 0, 0]], "int32")
    mask = (ids > 0).astype("int32")
    labels, weights = next_token_targets(ops.convert_to_tensor(ids), ops.convert_to_tensor(mask))
    assert ops.convert_to_numpy(labels).tolist() == [[17, 30, 41, 3, 0, 0], [50, 3, 0, 0, 0, 0]]
    assert ops.convert_to_numpy(weights).tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]]

    model = kbert.BertLeftToRightLM(BertConfig.preset("tiny", **TINY))
    assert model.config.causal
    x = {"input_ids": ids, "input_mask": mask}
    logits = ops.convert_to_numpy(model(x)["lm_logits"])
    assert logits.shape == (2, 6, TINY["vocab_size"])
    later = ops.convert_to_numpy(model(_changed_after(x, 2, TINY["vocab_size"]))["lm_logits"])
    np.testing.assert_allclose(logits[:, :3], later[:, :3], atol=1e-5)
    # The loss is the mean next-token cross-entropy over the weighted positions.
    model.compile(optimizer="adam")
    y, w = ops.convert_to_numpy(labels), ops.convert_to_numpy(weights)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(np.take_along_axis(logp, y[..., None], -1)[..., 0] * w).sum() / w.sum()
    loss = model.compute_loss(x, {"lm_logits": y}, {"lm_logits": logits}, {"lm_logits": w})
    assert abs(float(ops.convert_to_numpy(loss)) - expected) < 1e-4 * expected
    with pytest.raises(ValueError, match="needs a causal encoder"):
        kbert.BertLeftToRightLM(kbert.BertBackbone(BertConfig.preset("tiny", **TINY)))


def test_ablation_models_train_and_round_trip_through_checkpoints(tmp_path):
    ids = np.tile(np.array([[2, 10, 11, 12, 13, 10, 11, 12, 13, 3]], "int32"), (4, 1))
    mask = np.ones_like(ids)
    ltr = kbert.BertLeftToRightLM(BertConfig.preset("tiny", **TINY))
    ltr.compile(optimizer="adam", jit_compile=False)
    labels, weights = (ops.convert_to_numpy(t) for t in next_token_targets(ids, mask))
    history = ltr.fit({"input_ids": ids, "input_mask": mask}, {"lm_logits": labels},
                      sample_weight={"lm_logits": weights}, epochs=5, verbose=0).history
    assert history["loss"][-1] < 0.8 * history["loss"][0]

    no_nsp = kbert.BertPretrainer(BertConfig.preset("tiny", **TINY), next_sentence=False)
    x = {"input_ids": ids, "input_mask": mask, "masked_lm_positions": np.array([[2, 5]] * 4)}
    assert sorted(no_nsp(x)) == ["mlm_logits"]
    no_nsp.compile(optimizer="adam")
    assert no_nsp.get_config()["next_sentence"] is False

    vocab = tiny_vocab(TINY["vocab_size"])
    for model, task, key in ((ltr, "ltr", "lm_logits"), (no_nsp, "pretraining", "mlm_logits")):
        path = checkpoint.save(tmp_path / task, model, vocab=vocab)
        loaded = checkpoint.load(path)
        assert sorted(loaded.heads) == (["ltr"] if task == "ltr" else ["mlm"])
        again = task_model(loaded, task)
        np.testing.assert_allclose(ops.convert_to_numpy(again(x)[key]),
                                   ops.convert_to_numpy(model(x)[key]), atol=1e-5)
    assert checkpoint.load(tmp_path / "ltr").config.causal is True
