"""kbert → transformers `save_pretrained` directories: each reloads with `from_pretrained` into
the class that holds its heads and gives kbert's numbers (fp32, 1e-4)."""

import json

import numpy as np
import pytest
import torch
import transformers
from keras import ops

from helpers import max_abs_diff, random_inputs, tiny_vocab, torch_inputs
from kbert import checkpoint
from kbert.convert import convert, export
from kbert.models import BertBackbone
from kbert.models.task_models import task_model
from kbert.network.config import BertConfig

pytestmark = pytest.mark.multibackend
TOL = 1e-4
VOCAB = 120
POSITIONS = np.array([[1, 4, 7], [2, 3, 5], [1, 2, 6]], "int32")


def _perturb(layer, rng):
    for v in layer.weights:
        v.assign(ops.convert_to_numpy(v) + rng.normal(scale=0.2, size=v.shape).astype("float32"))


def _checkpoint(path, head_options, hidden_act="gelu"):
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4,
                        intermediate_size=64, max_position_embeddings=64, hidden_act=hidden_act)
    backbone = BertBackbone(config)
    heads = {name: checkpoint.make_head(name, backbone, o) for name, o in head_options.items()}
    rng = np.random.default_rng(0)
    for layer in [backbone, *heads.values()]:
        _perturb(layer, rng)
    checkpoint.save(path, vocab=tiny_vocab(VOCAB), head_options=head_options, backbone=backbone,
                    heads=heads)
    return checkpoint.load(path)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_approximate"])
def test_pretraining_export(tmp_path, hidden_act):
    ckpt = _checkpoint(str(tmp_path / "kbert"), {"mlm": {}, "nsp": {}}, hidden_act)
    export("hf", str(tmp_path / "kbert"), str(tmp_path / "hf"))
    hf = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "hf")).eval()
    x = random_inputs(3, 16, VOCAB)
    with torch.no_grad():
        ref = hf(**torch_inputs(x))
        base = hf.bert(**torch_inputs(x))
    seq = ckpt.backbone(x)
    out = task_model(ckpt, "pretraining")({**x, "masked_lm_positions": POSITIONS})
    ref_mlm = torch.stack([ref.prediction_logits[i, POSITIONS[i]] for i in range(3)])
    mask = x["input_mask"]
    diffs = {"sequence": max_abs_diff(seq["sequence_output"], base.last_hidden_state, mask),
             "pooled": max_abs_diff(seq["pooled_output"], base.pooler_output),
             "mlm": max_abs_diff(out["mlm_logits"], ref_mlm),
             "nsp": max_abs_diff(out["nsp_logits"], ref.seq_relationship_logits)}
    print(f"export to HF BertForPreTraining ({hidden_act}) max abs diff", diffs)
    assert max(diffs.values()) < TOL, diffs
    # the tied decoder is re-tied on load
    assert hf.cls.predictions.decoder.weight.data_ptr() == \
        hf.bert.embeddings.word_embeddings.weight.data_ptr()
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    vocab = tiny_vocab(VOCAB)
    assert tok("The dog sat")["input_ids"] == [2, vocab.index("the"), vocab.index("dog"),
                                               vocab.index("sat"), 3]


@pytest.mark.parametrize("head,cls", [
    ("span", transformers.BertForQuestionAnswering),
    ("classifier", transformers.BertForSequenceClassification),
    ("tagger", transformers.BertForTokenClassification),
    (None, transformers.BertModel),
])
def test_task_exports(tmp_path, head, cls):
    options = {head: {"labels": ["neg", "neu", "pos"]} if head in ("classifier", "tagger")
               else {}} if head else {}
    ckpt = _checkpoint(str(tmp_path / "kbert"), options)
    export("hf", ckpt, str(tmp_path / "hf"))
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == [cls.__name__]
    hf = cls.from_pretrained(str(tmp_path / "hf")).eval()
    x = random_inputs(3, 16, VOCAB)
    with torch.no_grad():
        ref = hf(**torch_inputs(x))
    if head is None:
        out = ckpt.backbone(x)
        diff = max(max_abs_diff(out["sequence_output"], ref.last_hidden_state, x["input_mask"]),
                   max_abs_diff(out["pooled_output"], ref.pooler_output))
    elif head == "span":
        out = task_model(ckpt, "span")(x)
        diff = max(max_abs_diff(out["start_logits"], ref.start_logits),
                   max_abs_diff(out["end_logits"], ref.end_logits))
    else:
        assert hf.config.id2label == {0: "neg", 1: "neu", 2: "pos"}
        mask = x["input_mask"] if head == "tagger" else None
        diff = max_abs_diff(task_model(ckpt, head)(x), ref.logits, mask)
    print(f"export to HF {cls.__name__} max abs diff", diff)
    assert diff < TOL


def test_round_trip_from_hf_is_exact(tmp_path):
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64)
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(config).eval()
    hf.save_pretrained(str(tmp_path / "hf"))
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(tiny_vocab(VOCAB)) + "\n")
    convert("hf", str(tmp_path / "hf"), str(tmp_path / "kbert"))
    export("hf", str(tmp_path / "kbert"), str(tmp_path / "back"))
    again = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "back"))
    theirs, ours = hf.state_dict(), again.state_dict()
    assert set(theirs) == set(ours)
    assert all(torch.equal(theirs[k], ours[k]) for k in theirs)


def test_unsupported_head_combination(tmp_path):
    ckpt = _checkpoint(str(tmp_path / "kbert"), {"mlm": {}, "span": {}})
    with pytest.raises(ValueError, match="no BERT class with the heads mlm, span"):
        export("hf", ckpt, str(tmp_path / "hf"))


def test_cli_export_and_direction_flags(tmp_path, capsys):
    from kbert.cli import main

    _checkpoint(str(tmp_path / "kbert"), {"mlm": {}, "nsp": {}})
    assert main(["convert", "--to", "hf", str(tmp_path / "kbert"),
                 "--output", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    assert main(["convert", "--to", "onnx", str(tmp_path / "kbert"),
                 "--output", str(tmp_path / "x")]) == 2
    assert "unknown export format 'onnx'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --from and --to are mutually exclusive
        main(["convert", "--from", "hf", "--to", "hf", "a", "--output", "b"])
