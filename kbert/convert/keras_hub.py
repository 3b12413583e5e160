"""keras-hub BERT presets ↔ kbert.

Import (`load`): SRC is a preset directory as `save_to_preset` writes it (`config.json`,
`model.weights.h5`, `tokenizer.json`, `assets/tokenizer/vocabulary.txt`, and for a task
`task.json` + `task.weights.h5`) or one of its weight files: `model.weights.h5` gives the
backbone alone, `task.weights.h5` or the directory the task too. A `BertMaskedLM` task becomes
the `mlm` head, a `BertTextClassifier` the `classifier` head.

keras-hub's BERT differs from the paper's in two fixed choices, which the converted config
records: the encoder's GELU is the tanh approximation (`hidden_act="gelu_approximate"`), and the
MLM transform uses exact GELU with LayerNorm epsilon 1e-5 (kept as the `mlm` head's options).

Export (`export_keras_hub`): the reverse, loadable with `keras_hub.models.BertBackbone.from_preset`
(and `BertMaskedLM` / `BertTextClassifier.from_preset` when the checkpoint has that head). A
checkpoint with exact GELU (as HF's BERT) is exported with keras-hub's tanh GELU, which changes
outputs slightly (~1e-3); a warning says so. Heads keras-hub has no class for are left out, with a
warning.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
from keras import ops

from kbert.checkpoint import named_variables
from kbert.convert import Loaded, guess_lower_case, read_json
from kbert.network.config import BertConfig, read_vocab

if TYPE_CHECKING:   # type-only
    from kbert.checkpoint import Checkpoint

# (kbert key, keras-hub variable, the kbert shape when it differs, else None)
VariablePair = tuple[str, Any, Any]

_TASKS = {"BertMaskedLM": "mlm", "BertTextClassifier": "classifier"}
_KH_LAYER_NORM_EPSILON = 1e-12
_KH_ACTIVATION = "gelu_approximate"


def _to_numpy(variable: Any) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(variable), dtype=np.float32)


def _dense(key: str, layer: Any,
           kbert_shape: tuple[int, ...] | None = None) -> list[VariablePair]:
    return [(f"{key}/kernel", layer.kernel, kbert_shape), (f"{key}/bias", layer.bias, None)]


def _norm(key: str, layer: Any) -> list[VariablePair]:
    return [(f"{key}/gamma", layer.gamma, None), (f"{key}/beta", layer.beta, None)]


def backbone_pairs(backbone: Any) -> list[VariablePair]:
    """[(kbert key, keras-hub variable, kbert shape or None)] for a keras-hub BertBackbone.

    The query/key/value projections are not in the list: see `qkv_layers`.
    """
    h, b = backbone.hidden_dim, "backbone/"
    pairs = [(b + "embeddings/word_embeddings/embeddings", backbone.token_embedding.embeddings,
              None),
             (b + "embeddings/position_embeddings",
              backbone.position_embedding.position_embeddings, None),
             (b + "embeddings/token_type_embeddings/embeddings",
              backbone.segment_embedding.embeddings, None),
             *_norm(b + "embeddings/layer_norm", backbone.embeddings_layer_norm)]
    for i, block in enumerate(backbone.transformer_layers):
        p = f"{b}layer_{i}/"
        pairs += [*_dense(p + "attention_output", block._self_attention_layer.output_dense,
                          (h, h)),                                         # [N, D, H] ↔ [H, H]
                  *_norm(p + "attention_layer_norm", block._self_attention_layer_norm),
                  *_dense(p + "intermediate", block._feedforward_intermediate_dense),
                  *_dense(p + "output", block._feedforward_output_dense),
                  *_norm(p + "output_layer_norm", block._feedforward_layer_norm)]
    pairs += _dense(b + "pooler/dense", backbone.pooled_dense)
    return pairs


def qkv_layers(backbone: Any) -> dict[str, tuple[Any, Any, Any]]:
    """{kbert layer prefix: (query, key, value) EinsumDense layers} ([H, N, D] kernels)."""
    return {f"backbone/layer_{i}/": (a.query_dense, a.key_dense, a.value_dense)
            for i, a in ((i, blk._self_attention_layer)
                         for i, blk in enumerate(backbone.transformer_layers))}


def head_pairs(task: Any) -> tuple[str, list[VariablePair]]:
    """(head name, [(kbert key, variable, kbert shape)]) for a BertMaskedLM/BertTextClassifier."""
    if hasattr(task, "masked_lm_head"):
        head = task.masked_lm_head
        return "mlm", [*_dense("mlm/transform", head._intermediate_dense),
                       *_norm("mlm/layer_norm", head._intermediate_layer_norm),
                       ("mlm/output_bias", head._bias, None)]
    return "classifier", _dense("classifier/dense", task.output_dense)


def _mlm_options(task: Any) -> dict[str, Any]:
    head = task.masked_lm_head
    act = head.get_config().get("intermediate_activation")
    names = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "silu": "silu"}
    if act not in names:
        raise ValueError(f"the keras-hub MLM head's activation {act!r} is not supported")
    return {"hidden_act": names[act], "layer_norm_epsilon": float(head.layer_norm_epsilon)}


def _load_model(directory: str, src: str) -> tuple[Any, Any]:
    """(backbone, task or None) from a preset directory with keras-hub."""
    import keras_hub  # optional (kbert[convert]); it imports TensorFlow

    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{directory}: missing config.json (not a keras-hub preset)")
    cls = read_json(config_path).get("class_name")
    if cls != "BertBackbone":
        raise ValueError(f"{config_path}: not a keras-hub BERT preset (its backbone is {cls!r})")
    task_path = os.path.join(directory, "task.json")
    want_task = os.path.basename(src) != "model.weights.h5" and os.path.isfile(task_path)
    if want_task:
        task_cls = read_json(task_path).get("class_name")
        if task_cls not in _TASKS:
            raise ValueError(f"{task_path}: task {task_cls!r} is not supported; expected one of "
                             f"{', '.join(_TASKS)}")
        task = getattr(keras_hub.models, task_cls).from_preset(directory)
        return task.backbone, task
    return keras_hub.models.BertBackbone.from_preset(directory), None


def load(src: str) -> Loaded:
    """(config, tensors, head_options, vocab, lower_case) from a keras-hub preset."""
    directory = src if os.path.isdir(src) else os.path.dirname(src)
    backbone, task = _load_model(directory, src)
    config = BertConfig(
        vocab_size=backbone.vocabulary_size, hidden_size=backbone.hidden_dim,
        num_layers=backbone.num_layers, num_heads=backbone.num_heads,
        intermediate_size=backbone.intermediate_dim, hidden_act=_KH_ACTIVATION,
        max_position_embeddings=backbone.max_sequence_length,
        type_vocab_size=backbone.num_segments, dropout=backbone.dropout,
        attention_dropout=backbone.dropout, layer_norm_epsilon=_KH_LAYER_NORM_EPSILON)
    pairs = backbone_pairs(backbone)
    heads = {}
    if task is not None:
        name, more = head_pairs(task)
        pairs += more
        heads[name] = (_mlm_options(task) if name == "mlm" else
                       {"labels": [f"LABEL_{i}" for i in range(task.num_classes)]})
    tensors = {key: _to_numpy(v).reshape(shape) if shape else _to_numpy(v)
               for key, v, shape in pairs}
    for prefix, layers in qkv_layers(backbone).items():
        h = config.hidden_size                                   # [H, N, D] → [H, N·D] each
        tensors[prefix + "qkv/kernel"] = np.concatenate(
            [_to_numpy(d.kernel).reshape(h, h) for d in layers], axis=1)
        tensors[prefix + "qkv/bias"] = np.concatenate([_to_numpy(d.bias).reshape(h)
                                                      for d in layers])
    vocab = read_vocab(os.path.join(directory, "assets", "tokenizer", "vocabulary.txt"))
    tokenizer_path = os.path.join(directory, "tokenizer.json")
    lower = (read_json(tokenizer_path).get("config", {}).get("lowercase")
             if os.path.isfile(tokenizer_path) else None)
    if lower is None:
        lower = guess_lower_case(vocab, directory)
    return config, tensors, heads, vocab, bool(lower)


def export_keras_hub(ckpt: Checkpoint, output: str) -> str:
    """Writes a loaded kbert `Checkpoint` as a keras-hub preset directory at `output`."""
    import keras_hub  # optional (kbert[convert]); it imports TensorFlow

    c = ckpt.config
    if c.hidden_act != _KH_ACTIVATION or c.layer_norm_epsilon != _KH_LAYER_NORM_EPSILON:
        warnings.warn(f"keras-hub's BertBackbone always uses tanh-approximate GELU and LayerNorm "
                      f"epsilon 1e-12; this checkpoint has hidden_act={c.hidden_act!r}, epsilon "
                      f"{c.layer_norm_epsilon:g}, so the exported model's outputs differ slightly")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=c.vocab_size, num_layers=c.num_layers, num_heads=c.num_heads,
        hidden_dim=c.hidden_size, intermediate_dim=c.intermediate_size, dropout=c.dropout,
        max_sequence_length=c.max_position_embeddings, num_segments=c.type_vocab_size)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=list(ckpt.vocab),
                                               lowercase=ckpt.do_lower_case,
                                               strip_accents=ckpt.do_lower_case)
    length = min(512, c.max_position_embeddings)
    task = None
    if "mlm" in ckpt.heads:
        pre = keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=length)
        task = keras_hub.models.BertMaskedLM(backbone, preprocessor=pre)
        options = ckpt.head_options.get("mlm", {})
        if (options.get("hidden_act", c.hidden_act), options.get("layer_norm_epsilon",
                                                                 c.layer_norm_epsilon)) != (
                "gelu", task.masked_lm_head.layer_norm_epsilon):
            warnings.warn("keras-hub's MLM head always uses exact GELU and LayerNorm epsilon "
                          "1e-5; the exported MLM logits differ slightly from this checkpoint's")
    elif "classifier" in ckpt.heads:
        pre = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=length)
        task = keras_hub.models.BertTextClassifier(
            backbone, num_classes=ckpt.heads["classifier"].units, preprocessor=pre,
            dropout=c.dropout)
    kept = {head_pairs(task)[0]} if task is not None else set()
    dropped = [h for h in ckpt.heads if h not in kept]
    if dropped:
        warnings.warn(f"keras-hub has no BERT task for the {', '.join(dropped)} "
                      f"head{'s' * (len(dropped) > 1)}; left out of the preset")

    tensors = {k: _to_numpy(v) for k, v in
               named_variables(ckpt.backbone, {h: ckpt.heads[h] for h in kept}).items()}
    pairs = backbone_pairs(backbone) + (head_pairs(task)[1] if task is not None else [])
    for key, variable, _ in pairs:
        variable.assign(tensors[key].reshape(tuple(variable.shape)))
    for prefix, layers in qkv_layers(backbone).items():
        kernels = np.split(tensors[prefix + "qkv/kernel"], 3, axis=1)   # [H, 3H] → 3 × [H, H]
        biases = np.split(tensors[prefix + "qkv/bias"], 3)
        for dense, kernel, bias in zip(layers, kernels, biases):
            dense.kernel.assign(kernel.reshape(tuple(dense.kernel.shape)))   # → [H, N, D]
            dense.bias.assign(bias.reshape(tuple(dense.bias.shape)))
    os.makedirs(output, exist_ok=True)
    if task is not None:
        task.save_to_preset(output)
    else:
        backbone.save_to_preset(output)
        tokenizer.save_to_preset(output)
    return output
