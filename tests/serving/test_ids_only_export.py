"""An export of `<name>_ids` signatures only has no tokenizer and TF core ops only: it loads and
runs in a process that never imports TF Text (a model server without its ops), with kbert's
logits."""

import json
import subprocess
import sys

import numpy as np
import pytest

import kbert
from kbert import serving

pytest.importorskip("tensorflow")

TEXTS = ["the man went to the [MASK] .", "paris is the capital of [MASK] ."]
RUN = r"""
import json, sys
import numpy as np
import tensorflow as tf
loaded = tf.saved_model.load(sys.argv[1])
x = {k: tf.constant(v, tf.int32) for k, v in json.loads(sys.argv[2]).items()}
out = loaded.signatures["fill_mask_ids"](**x)
assert "tensorflow_text" not in sys.modules
print(json.dumps({"logits": out["logits"].numpy().tolist(),
                  "default": sorted(loaded.signatures["serving_default"](**x))}))
"""


def test_an_ids_only_export_needs_no_tf_text(tmp_path):
    path = serving.export("minilm-l6-mlm-nsp", str(tmp_path / "sm"), signatures=["fill_mask_ids"])
    assert serving.list_signatures(path) == ["fill_mask_ids", "serving_default"]
    ops = serving.saved_model_ops(path)
    assert not ops & {"RegexSplitWithOffsets", "NormalizeUTF8", "WordpieceTokenizeWithOffsets"}
    m = kbert.load("minilm-l6-mlm-nsp")
    ids = m.tokenizer.encode_batch(TEXTS)
    longest = max(len(i) for i in ids) + 2
    x = {name: np.zeros((2, longest), "int32")
         for name in ("input_ids", "segment_ids", "input_mask")}
    for row, piece in enumerate(ids):
        full = [m.tokenizer.cls_id, *piece, m.tokenizer.sep_id]
        x["input_ids"][row, :len(full)] = full
        x["input_mask"][row, :len(full)] = 1
    done = subprocess.run([sys.executable, "-c", RUN, path,
                           json.dumps({k: v.tolist() for k, v in x.items()})],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["default"] == ["logits"]
    ckpt = m.checkpoint
    ref = ckpt.heads["mlm"](ckpt.backbone(x)["sequence_output"])
    ref = np.asarray(ref)
    mask = x["input_mask"].astype(bool)
    assert np.abs(np.asarray(out["logits"])[mask] - ref[mask]).max() < 1e-4


def test_an_unknown_ids_signature_is_one_line(tmp_path):
    with pytest.raises(serving.ExportError, match="unknown signature 'classify_pair_ids'"):
        serving.export("minilm-l6-mlm-nsp", str(tmp_path / "sm"),
                       signatures=["classify_pair_ids"])
    with pytest.raises(serving.ExportError, match="no 'span' head for the answer_ids signature"):
        serving.export("minilm-l6-mlm-nsp", str(tmp_path / "sm"), signatures=["answer_ids"])
