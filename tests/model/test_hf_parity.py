"""Converted HF transformers checkpoints give transformers' own numbers (fp32, 1e-4)."""

import numpy as np
import pytest
import torch
import transformers
from keras import ops

import kbert
from helpers import max_abs_diff, minilm_dir, random_inputs, tiny_vocab, torch_inputs, write_vocab
from kbert.convert import convert
from kbert.models.task_models import task_model

pytestmark = pytest.mark.multibackend
TOL = 1e-4


def _hf_model(cls, tmp_path, **config_kwargs):
    vocab = tiny_vocab(size=120)
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, **config_kwargs)
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # move every weight off its init so each mapping is exercised
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    src = tmp_path / "hf"
    model.save_pretrained(src)
    write_vocab(src, vocab)
    return model, str(src)


def test_pretraining_parity(tmp_path):
    hf, src = _hf_model(transformers.BertForPreTraining, tmp_path)
    ckpt = convert("hf", src, str(tmp_path / "kbert"))
    assert set(ckpt.heads) == {"mlm", "nsp"}
    x = random_inputs(3, 16, 120)
    positions = np.array([[1, 4, 7], [2, 3, 5], [1, 2, 6]], "int32")
    with torch.no_grad():
        ref = hf(**torch_inputs(x), output_hidden_states=True)
        ref_base = hf.bert(**torch_inputs(x))
    model = kbert.load(str(tmp_path / "kbert")).task_model("pretraining")
    out = model({**x, "masked_lm_positions": positions})
    seq = model.backbone(x)
    assert max_abs_diff(seq["sequence_output"], ref_base.last_hidden_state, x["input_mask"]) < TOL
    assert max_abs_diff(seq["pooled_output"], ref_base.pooler_output) < TOL
    ref_mlm = torch.stack([ref.prediction_logits[i, positions[i]] for i in range(3)])
    assert max_abs_diff(out["mlm_logits"], ref_mlm) < TOL
    assert max_abs_diff(out["nsp_logits"], ref.seq_relationship_logits) < TOL


def test_attention_probabilities_and_hidden_states_match(tmp_path):
    hf, src = _hf_model(transformers.BertModel, tmp_path, attn_implementation="eager")
    convert("hf", src, str(tmp_path / "kbert"))
    backbone = kbert.load(str(tmp_path / "kbert")).backbone
    x = random_inputs(2, 12, 120)
    with torch.no_grad():
        ref = hf(**torch_inputs(x), output_attentions=True, output_hidden_states=True)
    out = backbone(x, output_attentions=True, output_hidden_states=True)
    assert len(out["attentions"]) == 2 and len(out["hidden_states"]) == 3
    for ours, theirs in zip(out["attentions"], ref.attentions):
        assert max_abs_diff(ours, theirs) < TOL
    for ours, theirs in zip(out["hidden_states"], ref.hidden_states):
        assert max_abs_diff(ours, theirs, x["input_mask"]) < TOL


@pytest.mark.parametrize("cls,head", [
    (transformers.BertForQuestionAnswering, "span"),
    (transformers.BertForSequenceClassification, "classifier"),
    (transformers.BertForTokenClassification, "tagger"),
    (transformers.BertForMaskedLM, "mlm"),
])
def test_task_head_parity(tmp_path, cls, head):
    kwargs = {"num_labels": 5} if head in ("classifier", "tagger") else {}
    hf, src = _hf_model(cls, tmp_path, **kwargs)
    ckpt = convert("hf", src, str(tmp_path / "kbert"))
    assert list(ckpt.heads) == [head]
    x = random_inputs(3, 16, 120)
    with torch.no_grad():
        ref = hf(**torch_inputs(x))
    if head == "mlm":
        backbone = ckpt.backbone
        logits = ckpt.heads["mlm"](backbone(x)["sequence_output"])
        assert max_abs_diff(logits, ref.logits, x["input_mask"]) < TOL
        return
    model = task_model(ckpt, head)
    out = model(x)
    if head == "span":
        assert max_abs_diff(out["start_logits"], ref.start_logits) < TOL
        assert max_abs_diff(out["end_logits"], ref.end_logits) < TOL
    elif head == "tagger":
        assert ckpt.head_options["tagger"]["labels"] == [f"LABEL_{i}" for i in range(5)]
        assert max_abs_diff(out, ref.logits, x["input_mask"]) < TOL
    else:
        assert max_abs_diff(out, ref.logits) < TOL


def test_bin_weights_read_with_weights_only(tmp_path):
    hf, src = _hf_model(transformers.BertForPreTraining, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torch.save(hf.state_dict(), bin_dir / "pytorch_model.bin")
    for name in ("config.json", "vocab.txt"):
        (bin_dir / name).write_text((tmp_path / "hf" / name).read_text())
    a = convert("hf", src, str(tmp_path / "a"))
    b = convert("hf", str(bin_dir), str(tmp_path / "b"))
    x = random_inputs(2, 8, 120)
    assert np.array_equal(ops.convert_to_numpy(a.backbone(x)["pooled_output"]),
                          ops.convert_to_numpy(b.backbone(x)["pooled_output"]))


def test_minilm_real_weights_mean_pooling(tmp_path):
    src = minilm_dir()
    convert("hf", src, str(tmp_path / "minilm"))
    m = kbert.load(str(tmp_path / "minilm"))
    texts = ["A man is playing a guitar.", "The new movie is awesome!",
             "Résumé of a naïve café owner — 東京 🙂", "x", "BERT " * 60]
    ours = m.embed(texts, pooling="mean")
    tok = transformers.AutoTokenizer.from_pretrained(src)
    hf = transformers.BertModel.from_pretrained(src).eval()
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = hf(**enc).last_hidden_state
    mask = enc["attention_mask"][..., None].float()
    ref = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.99999, cos
