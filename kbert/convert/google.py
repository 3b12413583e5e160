"""google-research/bert checkpoints (`bert_config.json`, `vocab.txt`, `bert_model.ckpt.*`) → kbert.

SRC is the release directory or a checkpoint prefix inside it (e.g. `model.ckpt-88000` written
by run_pretraining.py, run_squad.py or run_classifier.py). Variables, in modeling.py's names:

    bert/embeddings/{word,token_type,position}_embeddings, bert/embeddings/LayerNorm/{gamma,beta}
    bert/encoder/layer_N/attention/self/{query,key,value}/{kernel,bias}
    bert/encoder/layer_N/attention/output/{dense/*,LayerNorm/*}
    bert/encoder/layer_N/intermediate/dense/*, bert/encoder/layer_N/output/{dense/*,LayerNorm/*}
    bert/pooler/dense/*
    cls/predictions/transform/{dense/*,LayerNorm/*}, cls/predictions/output_bias     → mlm
    cls/seq_relationship/{output_weights [2, H], output_bias}                         → nsp
    cls/squad/{output_weights [2, H], output_bias}          (run_squad.py)            → span
    output_weights [num_labels, H], output_bias             (run_classifier.py)       → classifier

Optimizer state (`*/adam_m`, `*/adam_v`, `global_step`) is skipped; any other variable is an
error that lists it. modeling.py's `gelu` is the tanh approximation, so a `"gelu"` config
becomes kbert's `gelu_approximate`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from kbert.convert import Loaded, Tensors, guess_lower_case, read_json
from kbert.convert.hf import config_from_hf
from kbert.convert.tf_checkpoint import CheckpointReader, find_checkpoint
from kbert.network.config import BertConfig, read_vocab, shown

CONFIG_FILE = "bert_config.json"
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size")
_NOT_BERT = ("embedding_size", "num_hidden_groups", "inner_group_num", "model_type")
# modeling.py's activation names → kbert's (its "gelu" is 0.5x(1 + tanh(...))).
_ACTIVATIONS = {"gelu": "gelu_approximate", "relu": "relu", "tanh": "tanh"}


def _is_optimizer_state(name: str) -> bool:
    return (name in ("global_step", "beta1_power", "beta2_power")
            or name.endswith(("/adam_m", "/adam_v")))


def read_config(path: str) -> BertConfig:
    """BertConfig from a google-research `bert_config.json`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{os.path.dirname(path) or '.'}: missing {CONFIG_FILE}")
    raw = read_json(path)
    foreign = [k for k in _NOT_BERT if k in raw and raw.get(k) != "bert"]
    if foreign:
        raise ValueError(f"{path}: not a BERT config (it has {', '.join(foreign)})")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise ValueError(f"{path}: not a BERT config (missing {', '.join(missing)})")
    act = raw.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise ValueError(f"{path}: hidden_act {act!r} is not supported; "
                         f"expected one of {', '.join(_ACTIVATIONS)}")
    try:  # HF's config keys are google-research's; only two defaults and the GELU differ
        return config_from_hf({**raw, "hidden_act": _ACTIVATIONS[act], "layer_norm_eps": 1e-12,
                               "type_vocab_size": raw.get("type_vocab_size", 16)})
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _heads(ckpt: CheckpointReader) -> dict[str, dict[str, Any]]:
    """{kbert head name: options} for the heads whose variables the checkpoint holds."""
    heads: dict[str, dict[str, Any]] = {}
    if "cls/predictions/output_bias" in ckpt:
        heads["mlm"] = {}
    if "cls/seq_relationship/output_weights" in ckpt:
        heads["nsp"] = {}
    if "cls/squad/output_weights" in ckpt:
        heads["span"] = {"version": "1.1"}
    if "output_weights" in ckpt:
        units = ckpt.shapes["output_weights"][0]
        heads["classifier"] = {"labels": [f"LABEL_{i}" for i in range(units)]}
    return heads


def convert_variables(ckpt: CheckpointReader, config: BertConfig,
                      heads: Mapping[str, dict]) -> tuple[Tensors, list[str]]:
    """{kbert key: array} from a reader holding google-research names; and the unused names."""
    used: set[str] = set()

    def get(name: str) -> np.ndarray:
        used.add(name)
        return ckpt.get(name)

    def dense(dst: str, src: str) -> None:
        out[f"{dst}/kernel"] = get(f"{src}/kernel")                    # already [in, out]
        out[f"{dst}/bias"] = get(f"{src}/bias")

    def norm(dst: str, src: str) -> None:
        out[f"{dst}/gamma"] = get(f"{src}/gamma")
        out[f"{dst}/beta"] = get(f"{src}/beta")

    def output_layer(dst: str, src: str) -> None:                      # [units, H] → [H, units]
        out[f"{dst}/kernel"] = get(f"{src}output_weights").T
        out[f"{dst}/bias"] = get(f"{src}output_bias")

    out: Tensors = {}
    b, e = "backbone/", "bert/embeddings/"
    out[b + "embeddings/word_embeddings/embeddings"] = get(e + "word_embeddings")
    out[b + "embeddings/position_embeddings"] = get(e + "position_embeddings")
    out[b + "embeddings/token_type_embeddings/embeddings"] = get(e + "token_type_embeddings")
    norm(b + "embeddings/layer_norm", e + "LayerNorm")
    for i in range(config.num_layers):
        src, dst = f"bert/encoder/layer_{i}/", f"{b}layer_{i}/"
        qkv = [f"{src}attention/self/{n}" for n in ("query", "key", "value")]
        out[dst + "qkv/kernel"] = np.concatenate([get(n + "/kernel") for n in qkv], axis=1)
        out[dst + "qkv/bias"] = np.concatenate([get(n + "/bias") for n in qkv])
        dense(dst + "attention_output", src + "attention/output/dense")
        norm(dst + "attention_layer_norm", src + "attention/output/LayerNorm")
        dense(dst + "intermediate", src + "intermediate/dense")
        dense(dst + "output", src + "output/dense")
        norm(dst + "output_layer_norm", src + "output/LayerNorm")
    dense(b + "pooler/dense", "bert/pooler/dense")
    if "mlm" in heads:
        dense("mlm/transform", "cls/predictions/transform/dense")
        norm("mlm/layer_norm", "cls/predictions/transform/LayerNorm")
        out["mlm/output_bias"] = get("cls/predictions/output_bias")
    if "nsp" in heads:
        output_layer("nsp/dense", "cls/seq_relationship/")
    if "span" in heads:
        output_layer("span/dense", "cls/squad/")
    if "classifier" in heads:
        output_layer("classifier/dense", "")
    unused = sorted(n for n in set(ckpt.shapes) - used if not _is_optimizer_state(n))
    return out, unused


def load(src: str) -> Loaded:
    """(config, tensors, head_options, vocab, lower_case) from a google-research checkpoint."""
    prefix = find_checkpoint(src, preferred=("bert_model.ckpt",))
    directory = src if os.path.isdir(src) else os.path.dirname(prefix)
    config = read_config(os.path.join(directory, CONFIG_FILE))
    ckpt = CheckpointReader(prefix)
    if "bert/embeddings/word_embeddings" not in ckpt:
        sample = shown(sorted(n for n in ckpt.shapes if not _is_optimizer_state(n)), 3)
        raise ValueError(f"{prefix}: not a google-research BERT checkpoint (no "
                         f"bert/embeddings/word_embeddings; it holds {sample or 'nothing'})")
    rows = ckpt.shapes["bert/embeddings/word_embeddings"][0]
    if rows != config.vocab_size:
        raise ValueError(f"{prefix}: word_embeddings have {rows} rows but {CONFIG_FILE} says "
                         f"vocab_size {config.vocab_size}")
    vocab_path = os.path.join(directory, "vocab.txt")
    vocab = read_vocab(vocab_path)
    if len(vocab) != config.vocab_size:
        raise ValueError(f"{vocab_path} has {len(vocab)} tokens but the checkpoint's "
                         f"word_embeddings have {config.vocab_size} rows")
    heads = _heads(ckpt)
    tensors, unused = convert_variables(ckpt, config, heads)
    if unused:
        raise ValueError(f"{prefix}: unexpected variables {shown(unused)}")
    return config, tensors, heads, vocab, guess_lower_case(vocab, directory)
