"""Hugging Face transformers BERT checkpoints (`save_pretrained` directories) ↔ kbert.

Reads `config.json`, `model.safetensors` (or its shards, named in
`model.safetensors.index.json`; or `pytorch_model.bin` and its shards, loaded with
`weights_only=True`), `vocab.txt` (or the vocabulary inside `tokenizer.json`) and
`tokenizer_config.json`. Handles BertModel, BertForPreTraining, BertForMaskedLM,
BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification and
BertForMultipleChoice, with or without the `bert.` prefix, and old `gamma`/`beta` LayerNorm names.

A sentence-transformers directory (`modules.json`, `sentence_bert_config.json`,
`1_Pooling/config.json`) also gives how it embeds: `sentence_embedding(src)`; its transformer may
sit in a module folder of its own (`0_BERT/`), which `load` reads. A cross-encoder's score
activation (config.json's `sentence_transformers.activation_fn`, as `CrossEncoder.predict`
applies it) is kept as the classifier head's `activation`.

`export_hf` writes the reverse: a directory `from_pretrained` loads into the class that holds
the checkpoint's heads.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors.numpy import load_file, save_file

from kbert.checkpoint import named_variables
from kbert.convert import Loaded, Tensors, guess_lower_case, read_json
from kbert.network.config import BertConfig, read_vocab, shown, write_vocab

if TYPE_CHECKING:   # type-only
    from kbert.checkpoint import Checkpoint

# The weights, in the order they are looked for: one file, or the index of its shards.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# What a conversion writes changes with this number: checkpoints converted (and cached, see
# `kbert.hub`) by another number are converted again.
CONVERTER_VERSION = 1
# sentence-transformers' modules a kbert checkpoint holds (the rest are refused by name).
_ST_MODULES = ("Transformer", "Pooling", "Normalize")


def config_from_hf(hf: Mapping[str, Any]) -> BertConfig:
    """BertConfig from a transformers `BertConfig` dict."""
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"not a BERT checkpoint: model_type is {hf.get('model_type')!r}")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported, got "
                         f"{hf['position_embedding_type']!r}")
    return BertConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"], hidden_act=hf.get("hidden_act", "gelu"),
        max_position_embeddings=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2),
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_epsilon=hf.get("layer_norm_eps", 1e-12),
        initializer_range=hf.get("initializer_range", 0.02))


def read_state_dict(path: str) -> Tensors:
    """{name: numpy array} from a safetensors or torch `.bin` file, or from the shards an index
    (`*.index.json`, its `weight_map`) names beside it."""
    if path.endswith(".index.json"):
        weight_map = read_json(path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{path}: no 'weight_map' of the shards")
        state: Tensors = {}
        for shard in sorted(set(weight_map.values())):
            state.update(read_state_dict(os.path.join(os.path.dirname(path), shard)))
        return state
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: missing weights file")
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        try:
            return load_file(path)
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{path}: unreadable safetensors weights ({e})") from None
    import pickle
    import warnings

    try:
        import torch  # only for `.bin` weights: torch is an optional dependency
    except ImportError:
        raise ValueError(f"{path}: PyTorch weights (.bin) are read with torch, which is not "
                         f"installed: pip install torch (safetensors weights need nothing "
                         f"more)") from None
    try:
        with warnings.catch_warnings():     # torch's note on the pickle protocol, not ours
            warnings.simplefilter("ignore", UserWarning)
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ValueError(f"{path}: refused: the pickle holds more than tensors (it could run "
                         "code when loaded); get safetensors weights instead") from None
    except (RuntimeError, EOFError) as e:
        raise ValueError(f"{path}: unreadable PyTorch weights ({str(e).splitlines()[0]})") \
            from None
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in loaded.items()}


def _vocab(directory: str) -> list[str]:
    path = os.path.join(directory, "vocab.txt")
    if os.path.isfile(path):
        return read_vocab(path)
    path = os.path.join(directory, "tokenizer.json")
    if os.path.isfile(path):
        table = read_json(path)["model"]["vocab"]
        return [t for t, _ in sorted(table.items(), key=lambda item: item[1])]
    raise FileNotFoundError(f"{directory}: no vocab.txt or tokenizer.json")


def _lower_case(directory: str, vocab: list[str]) -> bool:
    """tokenizer_config.json's `do_lower_case`, else `guess_lower_case`."""
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(path):
        value = read_json(path).get("do_lower_case")
        if value is not None:
            return bool(value)
    return guess_lower_case(vocab, directory)


def _head_kind(hf: Mapping[str, Any], state: Mapping[str, Any],
               directory: str = "") -> dict[str, dict[str, Any]]:
    """The task head(s) in the state dict: {kbert head name: options}."""
    heads: dict[str, dict[str, Any]] = {}
    if "cls.predictions.transform.dense.weight" in state:
        heads["mlm"] = {}
    if "cls.seq_relationship.weight" in state:
        heads["nsp"] = {}
    if "qa_outputs.weight" in state:
        heads["span"] = {"version": "1.1"}
    if "classifier.weight" in state:
        arch = " ".join(hf.get("architectures") or [])
        units = state["classifier.weight"].shape[0]
        id2label = hf.get("id2label") or {}
        labels = [id2label.get(str(i), id2label.get(i, f"LABEL_{i}")) for i in range(units)]
        if "MultipleChoice" in arch:
            heads["choice"] = {}
        elif "TokenClassification" in arch:
            heads["tagger"] = {"labels": labels}
        elif "SequenceClassification" in arch:
            problem = "regression" if units == 1 else "classification"
            heads["classifier"] = {"labels": labels, "problem": problem}
            activation = cross_encoder_activation(hf, directory)
            if activation and problem == "regression":
                heads["classifier"]["activation"] = activation
        else:
            raise ValueError("config.json's 'architectures' does not say which task the "
                             "'classifier' weights belong to")
    return heads


def cross_encoder_activation(hf: Mapping[str, Any], directory: str = "") -> str | None:
    """"sigmoid" or "identity": what sentence-transformers' `CrossEncoder.predict` applies to a
    one-output cross-encoder's logit, as the model records it (`config_sentence_transformers.json`
    of a CrossEncoder, sentence-transformers >= 5; config.json's
    `sentence_transformers.activation_fn`, or the older `sbert_ce_default_activation_function`),
    and the sigmoid, `CrossEncoder`'s default, for a cross-encoder that records none. None for
    a plain transformers regressor (the raw score)."""
    st_path = os.path.join(directory, "config_sentence_transformers.json")
    st = read_json(st_path) if directory and os.path.isfile(st_path) else {}
    recorded = (st.get("activation_fn")
                or (hf.get("sentence_transformers") or {}).get("activation_fn")
                or hf.get("sbert_ce_default_activation_function"))
    if not recorded:
        return "sigmoid" if st.get("model_type") == "CrossEncoder" else None
    name = str(recorded).rsplit(".", 1)[-1]
    if name not in ("Sigmoid", "Identity"):
        raise ValueError(f"the cross-encoder's activation {recorded} is not supported (kbert "
                         f"applies Sigmoid or Identity)")
    return name.lower()


# One name table, read in both directions (import: HF → kbert, export: kbert → HF):
# (kbert key, HF key, kind); "dense" is kernel/bias ↔ weight.T/bias, "norm" gamma/beta ↔
# weight/bias. The fused query/key/value, the embeddings, the pooler and the MLM output bias
# are mapped by hand beside it.
_LAYER_NAMES = (("attention_output", "attention.output.dense", "dense"),
                ("attention_layer_norm", "attention.output.LayerNorm", "norm"),
                ("intermediate", "intermediate.dense", "dense"),
                ("output", "output.dense", "dense"),
                ("output_layer_norm", "output.LayerNorm", "norm"))
_HEAD_NAMES = {"mlm": (("mlm/transform", "cls.predictions.transform.dense", "dense"),
                       ("mlm/layer_norm", "cls.predictions.transform.LayerNorm", "norm")),
               "nsp": (("nsp/dense", "cls.seq_relationship", "dense"),),
               "span": (("span/dense", "qa_outputs", "dense"),),
               "classifier": (("classifier/dense", "classifier", "dense"),),
               "tagger": (("tagger/dense", "classifier", "dense"),),
               "choice": (("choice/dense", "classifier", "dense"),)}


def convert_state_dict(state: Tensors, config: BertConfig,
                       heads: Mapping[str, dict]) -> tuple[Tensors, list[str]]:
    """Renames/transposes a transformers state dict into kbert checkpoint keys."""
    state = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                      "LayerNorm.bias"): v
             for k, v in state.items()}
    prefix = "bert." if any(k.startswith("bert.") for k in state) else ""
    used: set[str] = set()

    def get(name: str) -> np.ndarray:
        key = name if name.startswith(("cls.", "qa_outputs", "classifier")) else prefix + name
        if key not in state:
            raise ValueError(f"missing variable {key} in the source checkpoint")
        used.add(key)
        return np.asarray(state[key], dtype=np.float32)

    def dense(dst: str, src: str) -> None:
        out[f"{dst}/kernel"] = get(f"{src}.weight").T               # torch [out, in] → [in, out]
        out[f"{dst}/bias"] = get(f"{src}.bias")

    def norm(dst: str, src: str) -> None:
        out[f"{dst}/gamma"] = get(f"{src}.weight")
        out[f"{dst}/beta"] = get(f"{src}.bias")

    out: Tensors = {}
    b = "backbone/"
    out[b + "embeddings/word_embeddings/embeddings"] = get("embeddings.word_embeddings.weight")
    out[b + "embeddings/position_embeddings"] = get("embeddings.position_embeddings.weight")
    out[b + "embeddings/token_type_embeddings/embeddings"] = get(
        "embeddings.token_type_embeddings.weight")
    norm(b + "embeddings/layer_norm", "embeddings.LayerNorm")
    for i in range(config.num_layers):
        src, dst = f"encoder.layer.{i}.", f"{b}layer_{i}/"
        q, k, v = (f"{src}attention.self.{n}" for n in ("query", "key", "value"))
        out[dst + "qkv/kernel"] = np.concatenate(
            [get(q + ".weight").T, get(k + ".weight").T, get(v + ".weight").T], axis=1)
        out[dst + "qkv/bias"] = np.concatenate([get(q + ".bias"), get(k + ".bias"),
                                                get(v + ".bias")])
        for ours, theirs, kind in _LAYER_NAMES:
            (dense if kind == "dense" else norm)(dst + ours, src + theirs)
    if prefix + "pooler.dense.weight" in state:
        dense(b + "pooler/dense", "pooler.dense")
    else:  # BertForMaskedLM and token classifiers have no pooler: pooled = tanh(h_[CLS]).
        out[b + "pooler/dense/kernel"] = np.eye(config.hidden_size, dtype=np.float32)
        out[b + "pooler/dense/bias"] = np.zeros(config.hidden_size, np.float32)
    for ours, theirs, kind in (n for head in heads for n in _HEAD_NAMES.get(head, ())):
        (dense if kind == "dense" else norm)(ours, theirs)
    if "mlm" in heads:
        bias_key = ("cls.predictions.bias" if "cls.predictions.bias" in state
                    else "cls.predictions.decoder.bias")
        out["mlm/output_bias"] = get(bias_key)
        used.update(k for k in state if k.startswith("cls.predictions.decoder"))
    ignored = {k for k in state if k.endswith("position_ids")}
    unused = sorted(set(state) - used - ignored)
    return out, unused


def transformer_folder(directory: str) -> str:
    """Where a model directory's transformers files are: the directory itself, or for a
    sentence-transformers model whose Transformer module has a folder of its own (`0_BERT/`),
    that folder."""
    modules = _modules(directory)
    path = next((m.get("path", "") for m in modules
                 if str(m.get("type", "")).endswith("Transformer")), "")
    return os.path.join(directory, path) if path else directory


def weights_file(directory: str) -> str:
    """The first of `WEIGHT_FILES` in `directory` (one line naming them when none is)."""
    found = [f for f in WEIGHT_FILES if os.path.isfile(os.path.join(directory, f))]
    if not found:
        raise FileNotFoundError(f"{directory}: no {', '.join(WEIGHT_FILES[:-1])} or "
                                f"{WEIGHT_FILES[-1]}")
    return os.path.join(directory, found[0])


def load(src: str) -> Loaded:
    """(config, tensors, head_options, vocab, lower_case) from a transformers directory (or a
    sentence-transformers one, or a weights file in such a directory)."""
    directory = transformer_folder(src) if os.path.isdir(src) else os.path.dirname(src)
    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{directory}: missing config.json")
    hf = read_json(config_path)
    config = config_from_hf(hf)
    weights = weights_file(directory) if os.path.isdir(src) else src
    state = read_state_dict(weights)
    heads = _head_kind(hf, state, directory)
    tensors, unused = convert_state_dict(state, config, heads)
    if unused:
        raise ValueError(f"{weights}: unexpected variables {shown(unused)}")
    vocab = _vocab(directory)
    return config, tensors, heads, vocab, _lower_case(directory, vocab)


def _pooling(config: Mapping[str, Any], path: str) -> str:
    """"mean" or "cls" from a Pooling module's config: `pooling_mode` (sentence-transformers
    >= 5) or the older `pooling_mode_*_tokens` switches (none on means mean)."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v]
        mode = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}.get(
            modes[0], modes[0]) if len(modes) == 1 else (modes or "mean")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if mode not in ("mean", "cls"):
        raise ValueError(f"{path}: only mean or [CLS] pooling is supported, found {mode}")
    return str(mode)


def _modules(directory: str) -> list[dict[str, Any]]:
    """A sentence-transformers model's `modules.json` ([] where there is none); a module kbert
    cannot hold (a Dense projection, a custom module) is refused by name."""
    path = os.path.join(directory, "modules.json")
    if not os.path.isfile(path):
        return []
    modules = read_json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{path}: expected a list of modules")
    for m in modules:
        kind = str(m.get("type", "")).rsplit(".", 1)[-1]
        if kind not in _ST_MODULES:
            raise ValueError(f"{path}: the sentence-transformers module {m.get('type')!r} is not "
                             f"supported (kbert holds {', '.join(_ST_MODULES)})")
    return modules


def sentence_embedding(src: str) -> dict[str, Any] | None:
    """{"pooling", "normalize", "max_seq_length"} of a sentence-transformers model directory,
    or None for a plain transformers one: the pooling from the Pooling module's
    `config.json` (`1_Pooling/`), whether `modules.json` has a Normalize module, and the
    longest input it was trained on (`sentence_bert_config.json`'s `max_seq_length`, e.g. 256
    for all-MiniLM-L6-v2)."""
    directory = src if os.path.isdir(src) else os.path.dirname(src)
    modules = _modules(directory)
    path = os.path.join(transformer_folder(directory), "sentence_bert_config.json")
    if not os.path.isfile(path):
        path = os.path.join(directory, "sentence_bert_config.json")
    pooling_dir = next((m.get("path", "") for m in modules
                        if str(m.get("type", "")).endswith("Pooling")), None)
    if not os.path.isfile(path) or (modules and pooling_dir is None):
        return None                 # a transformers model, or a cross-encoder (no pooling)
    options: dict[str, Any] = {}
    length = read_json(path).get("max_seq_length")
    tokenizer_config = os.path.join(transformer_folder(directory), "tokenizer_config.json")
    if length is None and os.path.isfile(tokenizer_config):   # sentence-transformers >= 5
        length = read_json(tokenizer_config).get("model_max_length")
    if isinstance(length, int) and not isinstance(length, bool) and 2 <= length <= 1 << 20:
        options["max_seq_length"] = length
    pooling_path = os.path.join(directory, pooling_dir or "1_Pooling", "config.json")
    if os.path.isfile(pooling_path):
        options["pooling"] = _pooling(read_json(pooling_path), pooling_path)
    options["normalize"] = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    return options


# --- export: kbert → transformers `save_pretrained` layout ---------------------------------------
# The transformers class that holds exactly a checkpoint's heads.
_ARCHITECTURES = {
    frozenset(): "BertModel",
    frozenset({"mlm", "nsp"}): "BertForPreTraining",
    frozenset({"mlm"}): "BertForMaskedLM",
    frozenset({"nsp"}): "BertForNextSentencePrediction",
    frozenset({"span"}): "BertForQuestionAnswering",
    frozenset({"classifier"}): "BertForSequenceClassification",
    frozenset({"tagger"}): "BertForTokenClassification",
    frozenset({"choice"}): "BertForMultipleChoice",
}
# transformers builds these without a pooler (add_pooling_layer=False).
_NO_POOLER = ("BertForMaskedLM", "BertForQuestionAnswering", "BertForTokenClassification")
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "gelu_new": "gelu_new",
                   "relu": "relu", "tanh": "tanh", "silu": "silu"}
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}


def config_to_hf(config: BertConfig, architecture: str,
                 head_options: Mapping[str, dict]) -> dict[str, Any]:
    """A transformers `BertConfig` dict for a kbert config and its heads."""
    if config.causal:
        raise ValueError("a causal (left-to-right) encoder has no transformers BERT equivalent; "
                         "only bidirectional checkpoints export")
    hf = {"architectures": [architecture], "model_type": "bert",
          "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
          "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
          "intermediate_size": config.intermediate_size,
          "hidden_act": _HF_ACTIVATIONS[config.hidden_act],
          "hidden_dropout_prob": config.dropout,
          "attention_probs_dropout_prob": config.attention_dropout,
          "max_position_embeddings": config.max_position_embeddings,
          "type_vocab_size": config.type_vocab_size,
          "initializer_range": config.initializer_range,
          "layer_norm_eps": config.layer_norm_epsilon, "pad_token_id": 0,
          "position_embedding_type": "absolute", "tie_word_embeddings": True}
    for name in ("classifier", "tagger"):
        labels = head_options.get(name, {}).get("labels")
        if labels:
            hf["id2label"] = {str(i): label for i, label in enumerate(labels)}
            hf["label2id"] = {label: i for i, label in enumerate(labels)}
        if head_options.get(name, {}).get("problem") == "regression":
            hf["problem_type"] = "regression"
    return hf


def to_state_dict(tensors: Mapping[str, np.ndarray], config: BertConfig,
                  heads: Collection[str], prefix: str = "bert.",
                  pooler: bool = True) -> Tensors:
    """{transformers name: array} from kbert checkpoint keys (the inverse of
    `convert_state_dict`); the tied MLM decoder is left to transformers to re-tie."""
    out: Tensors = {}

    def dense(dst: str, src: str) -> None:
        out[f"{dst}.weight"] = tensors[f"{src}/kernel"].T              # [in, out] → [out, in]
        out[f"{dst}.bias"] = tensors[f"{src}/bias"]

    def norm(dst: str, src: str) -> None:
        out[f"{dst}.weight"] = tensors[f"{src}/gamma"]
        out[f"{dst}.bias"] = tensors[f"{src}/beta"]

    b, p = "backbone/", prefix
    out[p + "embeddings.word_embeddings.weight"] = tensors[
        b + "embeddings/word_embeddings/embeddings"]
    out[p + "embeddings.position_embeddings.weight"] = tensors[
        b + "embeddings/position_embeddings"]
    out[p + "embeddings.token_type_embeddings.weight"] = tensors[
        b + "embeddings/token_type_embeddings/embeddings"]
    norm(p + "embeddings.LayerNorm", b + "embeddings/layer_norm")
    for i in range(config.num_layers):
        src, dst = f"{b}layer_{i}/", f"{p}encoder.layer.{i}."
        kernels = np.split(tensors[src + "qkv/kernel"], 3, axis=1)      # [H, 3H] → 3 × [H, H]
        biases = np.split(tensors[src + "qkv/bias"], 3)
        for name, kernel, bias in zip(("query", "key", "value"), kernels, biases):
            out[f"{dst}attention.self.{name}.weight"] = kernel.T
            out[f"{dst}attention.self.{name}.bias"] = bias
        for ours, theirs, kind in _LAYER_NAMES:
            (dense if kind == "dense" else norm)(dst + theirs, src + ours)
    if pooler:
        dense(p + "pooler.dense", b + "pooler/dense")
    for ours, theirs, kind in (n for head in heads for n in _HEAD_NAMES.get(head, ())):
        (dense if kind == "dense" else norm)(theirs, ours)
    if "mlm" in heads:
        out["cls.predictions.bias"] = tensors["mlm/output_bias"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def export_hf(ckpt: Checkpoint, output: str) -> str:
    """Writes a loaded kbert `Checkpoint` as a transformers `save_pretrained` directory.

    The class (in config.json's `architectures`) follows the heads: BertForPreTraining for
    mlm + nsp, BertForMaskedLM, BertForNextSentencePrediction, BertForQuestionAnswering,
    BertForSequenceClassification, BertForTokenClassification, BertForMultipleChoice, or
    BertModel without heads. Writes `config.json`, `model.safetensors`, `vocab.txt`,
    `tokenizer_config.json` and `special_tokens_map.json`.
    """
    heads = frozenset(ckpt.heads)
    if heads not in _ARCHITECTURES:
        raise ValueError(f"transformers has no BERT class with the heads {', '.join(sorted(heads))}"
                         f" together; export a checkpoint with one task head (or mlm + nsp)")
    architecture = _ARCHITECTURES[heads]
    c = ckpt.config
    if c.hidden_act not in _HF_ACTIVATIONS:
        raise ValueError(f"hidden_act {c.hidden_act!r} has no transformers equivalent")
    mlm = ckpt.head_options.get("mlm", {})
    if "mlm" in heads and (mlm.get("hidden_act", c.hidden_act) != c.hidden_act
                           or mlm.get("layer_norm_epsilon", c.layer_norm_epsilon)
                           != c.layer_norm_epsilon):
        warnings.warn("transformers' MLM transform uses the encoder's activation and LayerNorm "
                      f"epsilon; this checkpoint's MLM head has its own ({mlm}), so the exported "
                      "MLM logits differ slightly")
    tensors = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=np.float32)
               for k, v in named_variables(ckpt.backbone, ckpt.heads).items()}
    state = to_state_dict(tensors, c, heads, prefix="" if architecture == "BertModel" else "bert.",
                          pooler=architecture not in _NO_POOLER)
    os.makedirs(output, exist_ok=True)
    save_file(state, os.path.join(output, "model.safetensors"), metadata={"format": "pt"})
    files = {
        "config.json": config_to_hf(c, architecture, ckpt.head_options),
        "tokenizer_config.json": {"tokenizer_class": "BertTokenizer",
                                  "do_lower_case": bool(ckpt.do_lower_case),
                                  "strip_accents": None, "tokenize_chinese_chars": True,
                                  "model_max_length": c.max_position_embeddings,
                                  **_SPECIAL_TOKENS},
        "special_tokens_map.json": _SPECIAL_TOKENS}
    for name, content in files.items():
        with open(os.path.join(output, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)
            f.write("\n")
    write_vocab(ckpt.vocab, os.path.join(output, "vocab.txt"))
    return output
