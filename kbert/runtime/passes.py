"""The model's pass for each `kbert.load` method ("kind"): one function for every runtime.

The Keras runner compiles `run_pass` per backend; the exporters trace the same function (as a
`PassModel`) into ONNX or OpenVINO graphs, so every runtime computes the same thing.

Kinds, on features `input_ids`, `segment_ids`, `input_mask` ([B, T] int32):
    "nsp", "classifier"    head logits on the pooled output           [B, labels]
    "tagger"               head logits per token                      [B, T, labels]
    "span"                 start/end logits stacked                   [B, T, 2]
    "embed_cls"            the [CLS] hidden state                     [B, H]
    "embed_mean"           the masked mean of the last layer          [B, H] float32
    "embed"                both, stacked (one exported graph serves both) [B, 2, H] float32
    ("mlm", k)             the k best logits at `masked_lm_positions`, their ids, logsumexp
    "mlm_logits"           every logit at `masked_lm_positions`       [B, P, V] float32
    ("hidden", layers)     chosen hidden layers                       [B, T, len(layers), H]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras
from keras import ops

from kbert.network.heads import sentence_embedding
from kbert.runtime.kinds import POOLED_KINDS, Kind, needed_head

if TYPE_CHECKING:
    from kbert.network.backbone import BertBackbone


def _mask_logits(backbone: BertBackbone, heads: dict[str, Any],
                 features: dict[str, Any]) -> Any:
    """The MLM head's float32 logits [B, P, V] at `masked_lm_positions` only."""
    positions = ops.cast(features.pop("masked_lm_positions"), "int32")
    sequence = backbone(features, training=False)["sequence_output"]
    x = ops.take_along_axis(sequence, positions[:, :, None], axis=1)        # [B, P, H]
    # The head runs the B*P vectors as one GEMM over the [V, H] word embeddings.
    return ops.cast(heads["mlm"](x), "float32")                             # [B, P, V]


def run_pass(backbone: BertBackbone, heads: dict[str, Any], kind: Kind,
             features: dict[str, Any]) -> Any:
    """The `kind` pass of `backbone` and `heads` on a dict of [B, T] features."""
    features = dict(features)
    if kind == "mlm_logits":
        return _mask_logits(backbone, heads, features)
    if isinstance(kind, tuple) and kind[0] == "mlm":     # ("mlm", k): the k best per mask
        logits = _mask_logits(backbone, heads, features)
        values, ids = ops.top_k(logits, kind[1])
        return values, ids, ops.logsumexp(logits, axis=-1)
    if isinstance(kind, tuple):                           # ("hidden", layers): [B, T, n, H]
        states = backbone(features, training=False, output_hidden_states=True)["hidden_states"]
        return ops.stack([ops.cast(states[i], "float32") for i in kind[1]], axis=2)
    out = backbone(features, training=False, pooled_only=kind in POOLED_KINDS)
    if kind in ("nsp", "classifier"):
        return ops.cast(heads[kind](out["pooled_output"]), "float32")
    if kind == "tagger":
        return ops.cast(heads["tagger"](out["sequence_output"]), "float32")
    if kind == "span":
        return ops.cast(ops.stack(heads["span"](out["sequence_output"]), axis=-1), "float32")
    if kind == "embed_cls":
        return sentence_embedding(out["sequence_output"], features["input_mask"], "cls")
    if kind in ("embed_mean", "embed"):
        mean = sentence_embedding(out["sequence_output"], features["input_mask"], "mean")
        if kind == "embed_mean":
            return mean
        return ops.stack([ops.cast(out["sequence_output"][:, 0], "float32"), mean], axis=1)
    raise ValueError(f"unknown kind {kind!r}")


class PassModel(keras.Model):
    """One pass as a Keras model (dict of features in, the pass's output out), for
    `model.export(format="onnx" | "openvino")`. Shares the checkpoint's layers."""

    def __init__(self, backbone: BertBackbone, heads: dict[str, Any], kind: Kind,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        self.backbone = backbone
        head = needed_head(kind)
        self.head_layers = {head: heads[head]} if head else {}

    def call(self, features: dict[str, Any]) -> Any:
        return run_pass(self.backbone, self.head_layers, self.kind, features)


__all__ = ["PassModel", "run_pass"]
