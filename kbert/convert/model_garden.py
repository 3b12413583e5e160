"""TF Model Garden checkpoints (`official.nlp.modeling`) → kbert.

Reads object-based checkpoints of `networks.BertEncoder` (Keras functional: layers named
`layer_with_weights-N`) and `networks.BertEncoderV2` (layers named by attribute:
`_embedding_layer`, `_transformer_layers/N/...`, `_pooler_layer`), saved on their own
(`tf.train.Checkpoint(encoder=encoder)`), as `BertPretrainerV2.checkpoint_items`, or inside a
whole model (`tf.train.Checkpoint(model=pretrainer)`) — the encoder is found wherever it sits.
With a `BertPretrainerV2`, its `MaskedLM` becomes the `mlm` head and a 2-class
`ClassificationHead` the `nsp` head (only when its inner dense equals the encoder's pooler, as
in converted checkpoints: kbert's NSP head reads the encoder's pooled output).

SRC: a checkpoint prefix, or a directory holding one (its `checkpoint` file decides, else the
only `*.index`), plus `vocab.txt` beside it. The shapes are read from the checkpoint (vocabulary,
hidden size, layers, heads — from the [H, N, D] attention kernels —, intermediate size,
positions, segment types). What shapes cannot tell comes from an optional config file beside the
checkpoint, the first of `CONFIG_FILES`: a Model Garden experiment `params.yaml`
(`task.model.encoder.bert.*`, `task.model.mlm_activation`), an `EncoderConfig`/`BertEncoder`
keyword file, or a google-style `bert_config.json`. Without one: Model Garden's defaults
(`gelu` — which Model Garden computes with the tanh approximation — for the encoder and the MLM
transform, dropout 0.1, LayerNorm epsilon 1e-12).

Optimizer slots and step counters are skipped; any other variable is an error that lists it.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any

import numpy as np

from kbert.convert import Loaded, Tensors, guess_lower_case
from kbert.convert.tf_checkpoint import CheckpointReader, find_checkpoint
from kbert.network.config import BertConfig, read_vocab, shown

CONFIG_FILES = ("params.yaml", "params.json", "encoder_config.yaml", "encoder_config.json",
                "bert_config.json")
# Model Garden's activation names → kbert's (its "gelu" is the tanh approximation).
_ACTIVATIONS = {"gelu": "gelu_approximate", "relu": "relu", "tanh": "tanh", "swish": "silu",
                "silu": "silu", "linear": "linear", None: "linear"}
_V2_BLOCK = re.compile(r"^(.*?)_transformer_layers/(\d+)/_attention_layer/_query_dense/kernel$")
_V1_BLOCK = re.compile(r"^(.*?)layer_with_weights-(\d+)/_attention_layer/_query_dense/kernel$")


def _is_bookkeeping(name: str) -> bool:
    """Optimizer slots, step counters and the object graph: never weights of the model."""
    return (name.startswith("optimizer/") or "/.OPTIMIZER_SLOT/" in name
            or name.split("/")[-1] in ("save_counter", "global_step", "iter", "step")
            or name.startswith(("save_counter", "global_step", "_CHECKPOINTABLE_OBJECT_GRAPH"))
            or re.search(r"\.pooler_dense/(kernel|bias)$", name) is not None)


def read_options(directory: str) -> tuple[dict[str, Any], str, str | None]:
    """(encoder options dict, MLM activation or "" when unsaid, path) from a config file."""
    for name in CONFIG_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            break
    else:
        return {}, "", None
    with open(path, encoding="utf-8") as f:
        try:
            if path.endswith(".yaml"):
                import yaml
                raw = yaml.safe_load(f)
            else:
                raw = json.load(f)
        except Exception as e:  # yaml and json raise their own error types
            raise ValueError(f"{path}: unreadable config ({str(e).splitlines()[0]})") from None
    node = raw if isinstance(raw, dict) else {}
    node = node.get("task", node)
    node = node.get("model", node)
    mlm_activation = node.get("mlm_activation", "")  # "" unsaid; None (YAML null) linear
    node = node.get("encoder", node)
    if "type" in node:
        if node["type"] != "bert":
            raise ValueError(f"{path}: encoder type {node['type']!r} is not BERT")
        node = node.get("bert") or {}
    return node, mlm_activation, path


def _activation(value: str | None, path: str | None) -> str:
    if value not in _ACTIVATIONS:
        raise ValueError(f"{path}: activation {value!r} is not supported; expected one of "
                         f"{', '.join(str(k) for k in _ACTIVATIONS if k)}")
    return _ACTIVATIONS[value]


class _Layout:
    """Where the encoder's variables sit in a Model Garden checkpoint."""

    def __init__(self, ckpt: CheckpointReader) -> None:
        v2 = [m for m in map(_V2_BLOCK.match, ckpt.shapes) if m]
        v1 = [m for m in map(_V1_BLOCK.match, ckpt.shapes) if m]
        if not (v1 or v2):
            sample = shown(sorted(n for n in ckpt.shapes if not _is_bookkeeping(n)), 3)
            raise ValueError(f"{ckpt.prefix}: not a Model Garden BERT encoder checkpoint (no "
                             f"transformer layers found; it holds {sample or 'nothing'})")
        matches = v2 or v1
        roots = {m.group(1) for m in matches}
        if len(roots) > 1:
            raise ValueError(f"{ckpt.prefix}: several encoders ({', '.join(sorted(roots))})")
        self.root = root = roots.pop()
        indices = sorted(int(m.group(2)) for m in matches)
        self.num_layers = len(indices)
        if v2:
            self.word = root + "_embedding_layer/embeddings"
            self.position = root + "_position_embedding_layer/embeddings"
            self.type = root + "_type_embedding_layer/embeddings"
            self.norm = root + "_embedding_norm_layer"
            self.blocks = [f"{root}_transformer_layers/{i}/" for i in range(self.num_layers)]
            self.pooler = root + "_pooler_layer"
            factorized = root + "_embedding_projection/kernel" in ckpt
        else:
            first = indices[0]
            layer = [f"{root}layer_with_weights-{i}" for i in range(first + self.num_layers + 1)]
            self.word, self.position, self.type = (layer[i] + "/embeddings" for i in range(3))
            self.norm = layer[3]
            self.blocks = [layer[first + i] + "/" for i in range(self.num_layers)]
            self.pooler = layer[first + self.num_layers]
            factorized = first != 4
        if indices != list(range(indices[0], indices[0] + self.num_layers)):
            raise ValueError(f"{ckpt.prefix}: transformer layers {indices} are not contiguous")
        if factorized:
            raise ValueError(f"{ckpt.prefix}: factorized embeddings (embedding_width != "
                             "hidden_size) are not supported by kbert's BERT")
        bias = [n for n in ckpt.shapes if n.endswith("output_bias.Sbias")]
        self.mlm = bias[0][:-len("output_bias.Sbias")] if bias else None
        self.classifiers = sorted(n[:-len("out_proj/kernel")] for n in ckpt.shapes
                                  if n.endswith("out_proj/kernel"))


def read_config(ckpt: CheckpointReader, layout: _Layout, options: dict[str, Any],
                path: str | None) -> BertConfig:
    """BertConfig from the checkpoint's shapes and the config file's options."""
    vocab, hidden = (ckpt.shapes.get(layout.word)   # without word embeddings, the MLM's table
                     or ckpt.shapes[layout.mlm + "embedding_table"])  # type: ignore[operator]
    q = ckpt.shapes[layout.blocks[0] + "_attention_layer/_query_dense/kernel"]     # [H, N, D]
    heads = options.get("num_attention_heads", q[1])
    if heads != q[1]:
        raise ValueError(f"{path}: num_attention_heads {heads} but the checkpoint's attention "
                         f"kernels have {q[1]} heads")
    if options.get("norm_first"):
        raise ValueError(f"{path}: norm_first (pre-LN) encoders are not supported")
    act = options.get("hidden_activation", options.get("hidden_act",
                      options.get("inner_activation", options.get("activation", "gelu"))))
    return BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_layers=layout.num_layers, num_heads=q[1],
        intermediate_size=ckpt.shapes[layout.blocks[0] + "_intermediate_dense/kernel"][1],
        hidden_act=_activation(act, path or ckpt.prefix),
        max_position_embeddings=ckpt.shapes[layout.position][0],
        type_vocab_size=ckpt.shapes[layout.type][0],
        dropout=options.get("dropout_rate", options.get("hidden_dropout_prob", 0.1)),
        attention_dropout=options.get("attention_dropout_rate",
                                      options.get("attention_probs_dropout_prob", 0.1)),
        layer_norm_epsilon=1e-12,
        initializer_range=options.get("initializer_range", 0.02))


def convert_variables(ckpt: CheckpointReader, layout: _Layout,
                      config: BertConfig) -> tuple[Tensors, dict[str, dict], list[str]]:
    """({kbert key: array}, head options, unused names) for an encoder and its heads."""
    heads: dict[str, dict] = {}
    used: set[str] = set()
    out: Tensors = {}

    def get(name: str) -> np.ndarray:
        used.add(name)
        return ckpt.get(name)

    def dense(dst: str, src: str,
              in_shape: int | None = None) -> None:            # EinsumDense kernels flattened
        out[f"{dst}/kernel"] = get(f"{src}/kernel").reshape(in_shape or -1, -1)
        out[f"{dst}/bias"] = get(f"{src}/bias").reshape(-1)

    def norm(dst: str, src: str) -> None:
        out[f"{dst}/gamma"] = get(f"{src}/gamma")
        out[f"{dst}/beta"] = get(f"{src}/beta")

    h, b = config.hidden_size, "backbone/"
    word = get(layout.word) if layout.word in ckpt else None
    if layout.mlm and layout.mlm + "embedding_table" in ckpt:
        table = get(layout.mlm + "embedding_table")
        if word is not None and not np.array_equal(word, table):
            raise ValueError(f"{ckpt.prefix}: the masked LM's embedding_table differs from the "
                             "encoder's word embeddings (kbert ties them)")
        word = table
    if word is None:
        get(layout.word)  # raises: missing variable
    out[b + "embeddings/word_embeddings/embeddings"] = word  # type: ignore[assignment]  # not None
    out[b + "embeddings/position_embeddings"] = get(layout.position)
    out[b + "embeddings/token_type_embeddings/embeddings"] = get(layout.type)
    norm(b + "embeddings/layer_norm", layout.norm)
    for i, src in enumerate(layout.blocks):
        dst, attn = f"{b}layer_{i}/", src + "_attention_layer/"
        # [H, N, D] → [H, N·D], head-major like kbert's fused [H, 3H] (q | k | v).
        qkv = [attn + f"_{n}_dense/" for n in ("query", "key", "value")]
        out[dst + "qkv/kernel"] = np.concatenate([get(n + "kernel").reshape(h, h) for n in qkv],
                                                 axis=1)
        out[dst + "qkv/bias"] = np.concatenate([get(n + "bias").reshape(h) for n in qkv])
        dense(dst + "attention_output", attn + "_output_dense", in_shape=h)  # [N, D, H] → [H, H]
        norm(dst + "attention_layer_norm", src + "_attention_layer_norm")
        dense(dst + "intermediate", src + "_intermediate_dense", in_shape=h)
        dense(dst + "output", src + "_output_dense", in_shape=config.intermediate_size)
        norm(dst + "output_layer_norm", src + "_output_layer_norm")
    dense(b + "pooler/dense", layout.pooler, in_shape=h)
    if layout.mlm:
        heads["mlm"] = {}
        dense("mlm/transform", layout.mlm + "dense", in_shape=h)
        norm("mlm/layer_norm", layout.mlm + "layer_norm")
        out["mlm/output_bias"] = get(layout.mlm + "output_bias.Sbias")
    nsp = [c for c in layout.classifiers if ckpt.shapes[c + "out_proj/kernel"][1] == 2]
    if layout.mlm and len(nsp) == 1:
        head = nsp[0]
        inner = head + "dense/kernel" in ckpt
        same = inner and all(np.array_equal(get(f"{head}dense/{v}"), out[f"{b}pooler/dense/{v}"])
                             for v in ("kernel", "bias"))
        if same:
            heads["nsp"] = {}
            dense("nsp/dense", head + "out_proj", in_shape=h)
        else:
            used.update(n for n in ckpt.shapes if n.startswith(head))
            warnings.warn(f"{ckpt.prefix}: the next-sentence head {head!r} has its own pooler "
                          "(not the encoder's, which kbert's NSP head reads); it is left out")
    unused = sorted(n for n in set(ckpt.shapes) - used if not _is_bookkeeping(n))
    return out, heads, unused


def load(src: str) -> Loaded:
    """(config, tensors, head_options, vocab, lower_case) from a Model Garden checkpoint."""
    prefix = find_checkpoint(src)
    directory = src if os.path.isdir(src) else os.path.dirname(prefix)
    ckpt = CheckpointReader(prefix)
    layout = _Layout(ckpt)
    options, mlm_activation, config_path = read_options(directory)
    config = read_config(ckpt, layout, options, config_path)
    vocab_path = os.path.join(directory, "vocab.txt")
    vocab = read_vocab(vocab_path)
    if len(vocab) != config.vocab_size:
        raise ValueError(f"{vocab_path} has {len(vocab)} tokens but the checkpoint's word "
                         f"embeddings have {config.vocab_size} rows")
    tensors, heads, unused = convert_variables(ckpt, layout, config)
    if unused:
        raise ValueError(f"{prefix}: unexpected variables {shown(unused)}")
    if "mlm" in heads and mlm_activation != "":
        act = _activation(mlm_activation, config_path)
        if act != config.hidden_act:
            heads["mlm"]["hidden_act"] = act
    return config, tensors, heads, vocab, guess_lower_case(vocab, directory)
