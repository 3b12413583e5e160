"""google-research/bert checkpoints: written here under modeling.py's exact variable names from
a random HF model (tanh GELU, as modeling.py's), converted, and compared with HF's outputs."""

import json
import os

import numpy as np
import pytest
import torch
import transformers

from helpers import max_abs_diff, random_inputs, tiny_vocab, torch_inputs, write_vocab
from kbert.convert import convert
from kbert.models.task_models import task_model

pytestmark = pytest.mark.multibackend
TOL = 1e-4
VOCAB = 120


def _hf_model(cls, **kwargs):
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, hidden_act="gelu_new", **kwargs)
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # move every weight off its init so each mapping is exercised
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


def google_names(state, num_layers):
    """{google-research name: array} from a transformers BERT state dict."""
    s = {k.removeprefix("bert."): v.detach().numpy() for k, v in state.items()}
    out = {f"bert/embeddings/{n}": s[f"embeddings.{n}.weight"]
           for n in ("word_embeddings", "token_type_embeddings", "position_embeddings")}

    def dense(dst, src):
        out[f"{dst}/kernel"], out[f"{dst}/bias"] = s[f"{src}.weight"].T, s[f"{src}.bias"]

    def norm(dst, src):
        out[f"{dst}/gamma"], out[f"{dst}/beta"] = s[f"{src}.weight"], s[f"{src}.bias"]

    norm("bert/embeddings/LayerNorm", "embeddings.LayerNorm")
    for i in range(num_layers):
        g, h = f"bert/encoder/layer_{i}/", f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            dense(f"{g}attention/self/{n}", f"{h}attention.self.{n}")
        dense(g + "attention/output/dense", h + "attention.output.dense")
        norm(g + "attention/output/LayerNorm", h + "attention.output.LayerNorm")
        dense(g + "intermediate/dense", h + "intermediate.dense")
        dense(g + "output/dense", h + "output.dense")
        norm(g + "output/LayerNorm", h + "output.LayerNorm")
    rng = np.random.default_rng(0)
    if "pooler.dense.weight" in s:
        dense("bert/pooler/dense", "pooler.dense")
    else:  # run_squad.py checkpoints keep the (unused) pooler
        out["bert/pooler/dense/kernel"] = rng.normal(size=(32, 32)).astype("float32")
        out["bert/pooler/dense/bias"] = np.zeros(32, "float32")
    if "cls.predictions.bias" in s:
        dense("cls/predictions/transform/dense", "cls.predictions.transform.dense")
        norm("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm")
        out["cls/predictions/output_bias"] = s["cls.predictions.bias"]
    if "cls.seq_relationship.weight" in s:
        out["cls/seq_relationship/output_weights"] = s["cls.seq_relationship.weight"]  # [2, H]
        out["cls/seq_relationship/output_bias"] = s["cls.seq_relationship.bias"]
    if "qa_outputs.weight" in s:
        out["cls/squad/output_weights"] = s["qa_outputs.weight"]                       # [2, H]
        out["cls/squad/output_bias"] = s["qa_outputs.bias"]
    if "classifier.weight" in s:
        out["output_weights"] = s["classifier.weight"]                                 # [n, H]
        out["output_bias"] = s["classifier.bias"]
    return out


def write_google_checkpoint(directory, variables, config, vocab, with_adam=True):
    """A name-based TF checkpoint `bert_model.ckpt` plus bert_config.json and vocab.txt."""
    import tensorflow as tf

    os.makedirs(directory, exist_ok=True)
    variables = dict(variables)
    if with_adam:
        for name in list(variables):
            variables[name + "/adam_m"] = np.zeros_like(variables[name])
            variables[name + "/adam_v"] = np.ones_like(variables[name])
        variables["global_step"] = np.array(1000, np.int64)
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=os.path.join(str(directory), "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[n]) for n in names])
    with open(os.path.join(directory, "bert_config.json"), "w") as f:
        json.dump(config, f)
    write_vocab(str(directory), vocab)
    return str(directory)


def _google_config(hf):
    c = hf.config
    return {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "hidden_size": c.hidden_size, "initializer_range": 0.02,
            "intermediate_size": c.intermediate_size, "max_position_embeddings": 64,
            "num_attention_heads": c.num_attention_heads,
            "num_hidden_layers": c.num_hidden_layers, "type_vocab_size": 2,
            "vocab_size": c.vocab_size}


def _write(hf, directory, **kwargs):
    return write_google_checkpoint(directory, google_names(hf.state_dict(), 2),
                                   _google_config(hf), tiny_vocab(VOCAB), **kwargs)


def test_pretraining_checkpoint_matches(tmp_path):
    hf = _hf_model(transformers.BertForPreTraining)
    src = _write(hf, tmp_path / "uncased_L-2_H-32_A-4")
    ckpt = convert("google", src, str(tmp_path / "kbert"))
    assert set(ckpt.heads) == {"mlm", "nsp"} and ckpt.do_lower_case
    assert ckpt.config.hidden_act == "gelu_approximate"
    x = random_inputs(3, 16, VOCAB)
    positions = np.array([[1, 4, 7], [2, 3, 5], [1, 2, 6]], "int32")
    with torch.no_grad():
        ref = hf(**torch_inputs(x))
        base = hf.bert(**torch_inputs(x))
    out = task_model(ckpt, "pretraining")({**x, "masked_lm_positions": positions})
    seq = ckpt.backbone(x)
    ref_mlm = torch.stack([ref.prediction_logits[i, positions[i]] for i in range(3)])
    mask = x["input_mask"]
    diffs = {"sequence": max_abs_diff(seq["sequence_output"], base.last_hidden_state, mask),
             "pooled": max_abs_diff(seq["pooled_output"], base.pooler_output),
             "mlm": max_abs_diff(out["mlm_logits"], ref_mlm),
             "nsp": max_abs_diff(out["nsp_logits"], ref.seq_relationship_logits)}
    print("google pretraining max abs diff", diffs)
    assert max(diffs.values()) < TOL, diffs


def test_squad_and_classifier_checkpoints(tmp_path):
    qa = _hf_model(transformers.BertForQuestionAnswering)
    src = _write(qa, tmp_path / "squad")
    ckpt = convert("google", src + "/bert_model.ckpt", str(tmp_path / "k1"))
    assert list(ckpt.heads) == ["span"]
    x = random_inputs(2, 12, VOCAB)
    with torch.no_grad():
        ref = qa(**torch_inputs(x))
    out = task_model(ckpt, "span")(x)
    assert max(max_abs_diff(out["start_logits"], ref.start_logits),
               max_abs_diff(out["end_logits"], ref.end_logits)) < TOL

    cls = _hf_model(transformers.BertForSequenceClassification, num_labels=3)
    src = _write(cls, tmp_path / "mnli", with_adam=False)
    ckpt = convert("google", src, str(tmp_path / "k2"))
    assert list(ckpt.heads) == ["classifier"]
    with torch.no_grad():
        ref = cls(**torch_inputs(x))
    assert max_abs_diff(task_model(ckpt, "classifier")(x), ref.logits) < TOL


def _variables(tmp_path):
    hf = _hf_model(transformers.BertForPreTraining)
    return hf, google_names(hf.state_dict(), 2)


def test_unexpected_and_missing_variables(tmp_path):
    hf, variables = _variables(tmp_path)
    extra = dict(variables, **{"bert/encoder/layer_0/extra/kernel": np.zeros((2, 2), "float32")})
    src = write_google_checkpoint(tmp_path / "extra", extra, _google_config(hf), tiny_vocab(VOCAB))
    with pytest.raises(ValueError, match="unexpected variables bert/encoder/layer_0/extra/kernel"):
        convert("google", src, str(tmp_path / "out"))
    missing = {k: v for k, v in variables.items() if k != "bert/encoder/layer_1/output/dense/bias"}
    src = write_google_checkpoint(tmp_path / "miss", missing, _google_config(hf), tiny_vocab(VOCAB))
    with pytest.raises(ValueError, match="missing variable bert/encoder/layer_1/output/dense/bias"):
        convert("google", src, str(tmp_path / "out"))


def test_vocab_config_and_architecture_mismatches(tmp_path):
    hf, variables = _variables(tmp_path)
    src = write_google_checkpoint(tmp_path / "v", variables, _google_config(hf), tiny_vocab(100))
    with pytest.raises(ValueError, match="vocab.txt has 100 tokens but .* have 120 rows"):
        convert("google", src, str(tmp_path / "out"))
    albert = dict(_google_config(hf), embedding_size=16, num_hidden_groups=1)
    src = write_google_checkpoint(tmp_path / "a", variables, albert, tiny_vocab(VOCAB))
    with pytest.raises(ValueError, match="not a BERT config"):
        convert("google", src, str(tmp_path / "out"))
    gpt = {"model/wte": np.zeros((VOCAB, 32), "float32"), "model/h0/attn/c_attn/w":
           np.zeros((1, 32, 96), "float32")}
    src = write_google_checkpoint(tmp_path / "g", gpt, _google_config(hf), tiny_vocab(VOCAB))
    with pytest.raises(ValueError, match="not a google-research BERT checkpoint"):
        convert("google", src, str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="no TensorFlow checkpoint"):
        convert("google", str(tmp_path), str(tmp_path / "out"))


def test_cli_reports_one_line(tmp_path, capsys):
    from kbert.cli import main

    hf, variables = _variables(tmp_path)
    variables["cls/unknown_head/w"] = np.zeros(3, "float32")
    src = write_google_checkpoint(tmp_path / "x", variables, _google_config(hf), tiny_vocab(VOCAB))
    assert main(["convert", "--from", "google", src, "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cls/unknown_head/w" in err
