"""A checkpoint directory's files: where a checkpoint is found by name, how `config.json`,
`vocab.txt` and `model.safetensors` are checked, read and written, and the encoder and heads they
hold (`read`, `write`). `kbert.checkpoint` adds the task models on top; this module knows none,
so the task models' own `from_checkpoint`/`save_checkpoint` read and write through it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from kbert import outputs
from kbert.network.config import BertConfig, read_vocab, shown, write_vocab

if TYPE_CHECKING:
    import keras

    from kbert.network.backbone import BertBackbone

WEIGHTS_FILE = "model.safetensors"
HEAD_NAMES = ("mlm", "nsp", "ltr", "classifier", "tagger", "span", "choice")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be read: names the file and the problem."""


class MissingHeadError(ValueError):
    """The checkpoint lacks the head a method needs."""


@dataclasses.dataclass
class Contents:
    """What a checkpoint directory holds: the encoder, its heads (Keras layers) and the
    vocabulary (`kbert.checkpoint.Checkpoint` adds the task models)."""

    config: BertConfig
    vocab: list
    do_lower_case: bool
    backbone: BertBackbone
    heads: dict            # name -> Keras layer
    head_options: dict     # name -> dict from config.json (labels, version, ...)
    path: str | None = None
    # config.json's `sentence_embedding` (None: read from `path` on first use)
    sentence_embedding: dict | None = None

    @property
    def embedding(self) -> dict:
        """A sentence encoder's {"pooling", "normalize", "max_seq_length"} (e.g. converted
        from sentence-transformers); empty for other checkpoints."""
        if self.sentence_embedding is None:
            raw = read_config(self.path)[0] if self.path else {}
            self.sentence_embedding = dict(raw.get("sentence_embedding") or {})
        return self.sentence_embedding

    @property
    def embedding_defaults(self) -> dict:
        """{"pooling", "max_seq_length"} a sentence vector is made with when not told: a
        sentence encoder's recorded ones (`embedding`), else `[CLS]` and the longest input
        (what `Bert.embed`, `kbert.retrieval` and the SavedModel's `embed` use)."""
        longest = self.config.max_position_embeddings
        recorded = self.embedding
        return {"pooling": recorded.get("pooling", "cls"),
                "max_seq_length": min(int(recorded.get("max_seq_length", longest)), longest)}

    def summary(self) -> str:
        c = self.config
        return (f"{c.num_layers} layers, hidden {c.hidden_size}, {c.num_heads} heads, "
                f"vocab {c.vocab_size}, heads: {', '.join(self.heads) or 'none'}")


CheckpointT = TypeVar("CheckpointT", bound=Contents)


def head_options_for(head: str | None, labels: Sequence[str] | None = None,
                     num_labels: int | None = None, version_2: bool = False) -> dict:
    """The options a new head of kind `head` stores in config.json."""
    if head == "classifier":
        if labels:
            return {"problem": "classification", "labels": list(labels)}
        if num_labels == 1:
            return {"problem": "regression", "num_labels": 1}
        return {"problem": "classification", "num_labels": int(num_labels or 2)}
    if head == "tagger":
        if not labels:
            raise ValueError("a token classifier needs `labels` (the tag names, 'O' first)")
        return {"labels": list(labels)}
    if head == "span":
        return {"version": "2.0" if version_2 else "1.1", "null_score_diff_threshold": 0.0}
    return {}


def make_head(name: str, backbone: BertBackbone, options: dict | None = None,
              dtype: Any = None) -> keras.layers.Layer:
    """A freshly built head layer of kind `name` for `backbone` (in the backbone's dtype
    policy unless `dtype` names another)."""
    # Imported here, as `BertBackbone` in `read`: a checkpoint's description (what a graph
    # runtime reads) needs no Keras, so such a process never imports Keras or TensorFlow.
    from kbert.network import heads as h

    options = options or {}
    c = backbone.config
    common = dict(initializer_range=c.initializer_range, name=name,
                  dtype=dtype or backbone.dtype_policy)
    if name == "mlm":
        # Some sources (keras-hub) give the MLM transform its own activation and LayerNorm epsilon.
        head = h.MaskedLMHead(backbone.word_embeddings, options.get("hidden_act", c.hidden_act),
                              options.get("layer_norm_epsilon", c.layer_norm_epsilon), **common)
        head.build((None, None, c.hidden_size))
    elif name == "ltr":
        head = h.LeftToRightLMHead(backbone.word_embeddings, c.hidden_act, c.layer_norm_epsilon,
                                   **common)
        head.build((None, None, c.hidden_size))
    elif name == "nsp":
        head = h.NextSentenceHead(**common)
        head.build((None, c.hidden_size))
    elif name == "span":
        head = h.SpanHead(**common)
        head.build((None, None, c.hidden_size))
    elif name == "choice":
        head = h.MultipleChoiceHead(dropout=c.dropout, **common)
        head.build((None, c.hidden_size))
    elif name in ("classifier", "tagger"):
        labels = options.get("labels")
        units = options.get("num_labels") or (len(labels) if labels else None)
        if not units:
            raise CheckpointError(f"the {name} head needs 'labels' or 'num_labels' in config.json")
        cls = h.ClassificationHead if name == "classifier" else h.TokenClassificationHead
        head = cls(units, dropout=c.dropout, **common)
        head.build((None, c.hidden_size))
    else:
        raise CheckpointError(f"unknown head {name!r}; known heads: {', '.join(HEAD_NAMES)}")
    return head


def _own_variables(layer: keras.layers.Layer, exclude: Sequence = ()) -> dict[str, Any]:
    """{relative path: variable} for a component, skipping variables it shares with another."""
    excluded = {id(v) for v in exclude}
    out = {}
    for v in layer.weights:
        if id(v) in excluded:
            continue
        key = v.path.split("/", 1)[1] if "/" in v.path else v.path
        if key in out:
            raise RuntimeError(f"two variables share the path {v.path}")
        out[key] = v
    return out


def named_variables(backbone: BertBackbone, heads: dict) -> dict[str, Any]:
    """{checkpoint key: variable} for a backbone and its heads."""
    out = {f"backbone/{k}": v for k, v in _own_variables(backbone).items()}
    for name, head in heads.items():
        out.update({f"{name}/{k}": v
                    for k, v in _own_variables(head, exclude=backbone.weights).items()})
    return out


def write(directory: str | os.PathLike, backbone: BertBackbone, heads: dict | None,
          vocab: str | Sequence[str], do_lower_case: bool = True,
          head_options: dict | None = None, dtype: str = "float32",
          model_card: str | None = None, embedding: dict | None = None,
          overwrite: bool = True) -> str:
    """Writes a checkpoint directory of an encoder and its heads atomically (a temporary
    directory, then a rename: `kbert.outputs`); `kbert.checkpoint.save` takes a whole model.

    Args:
        heads: {head name: layer}.
        vocab: a list of tokens or a `vocab.txt` path.
        head_options: {head name: options} stored in config.json (e.g. classifier labels).
        dtype: storage dtype of the weights, "float32" or "float16".
        embedding: a sentence encoder's {"pooling", "normalize", "max_seq_length"}, stored as
            config.json's `sentence_embedding`.
        overwrite: replace a checkpoint already at `directory` (the user's other files in it
            are kept); False refuses it. A directory holding anything else is always refused
            (`kbert.outputs.OutputError`).
    """
    from safetensors.numpy import save_file

    heads = heads or {}
    vocab = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
    if len(vocab) != backbone.config.vocab_size:
        raise CheckpointError(f"vocabulary has {len(vocab)} tokens but the model's embeddings "
                              f"have {backbone.config.vocab_size}")
    head_options = head_options or {}
    config = backbone.config.to_dict()
    config["do_lower_case"] = bool(do_lower_case)
    config["heads"] = {name: dict(head_options.get(name, {})) for name in heads}
    if embedding:
        config["sentence_embedding"] = _check_embedding(dict(embedding), "sentence_embedding")
    tensors = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v).astype(dtype)
               for k, v in named_variables(backbone, heads).items()}

    directory = os.path.abspath(directory)
    with outputs.writing(directory, "checkpoint", overwrite=overwrite) as tmp:
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        write_vocab(vocab, os.path.join(tmp, "vocab.txt"))
        save_file(tensors, os.path.join(tmp, WEIGHTS_FILE), metadata={"format": "kbert"})
        card = model_card
        if card is None and os.path.isfile(os.path.join(directory, "MODEL_CARD.md")):
            with open(os.path.join(directory, "MODEL_CARD.md"), encoding="utf-8") as f:
                card = f.read()
        if card:
            with open(os.path.join(tmp, "MODEL_CARD.md"), "w", encoding="utf-8") as f:
                f.write(card)
    return directory


def read_config(directory: str | os.PathLike) -> tuple[dict, BertConfig]:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{directory}: missing config.json (not a kbert checkpoint)")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object of hyper-parameters, found "
                              f"{_json_type(raw)}")
    if "architectures" in raw or "model_type" in raw:
        raise CheckpointError(f"{path} is a Hugging Face config; convert it first with "
                              f"`kbert convert --from hf {directory} --output DIR`")
    try:
        config = BertConfig.from_dict(raw)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    _check_heads(raw.get("heads", {}), path)
    if "sentence_embedding" in raw:
        _check_embedding(raw["sentence_embedding"], f"{path}: sentence_embedding")
    if not isinstance(raw.get("do_lower_case", True), bool):
        raise CheckpointError(f"{path}: 'do_lower_case' should be true or false, found "
                              f"{_json_type(raw['do_lower_case'])}")
    return raw, config


def _check_heads(heads: object, path: str) -> None:
    """config.json's `heads`: an object {head name: object of options}."""
    if not isinstance(heads, dict):
        raise CheckpointError(f"{path}: 'heads' should be an object {{name: options}}, found "
                              f"{_json_type(heads)}")
    for name, options in heads.items():
        if name not in HEAD_NAMES:
            raise CheckpointError(f"{path}: heads: unknown head {name!r}; known heads: "
                                  f"{', '.join(HEAD_NAMES)}")
        if not isinstance(options, dict):
            raise CheckpointError(f"{path}: heads.{name} should be an object of options, found "
                                  f"{_json_type(options)}")
        labels = options.get("labels")
        if labels is not None and not isinstance(labels, list):
            raise CheckpointError(f"{path}: heads.{name}.labels should be a list, found "
                                  f"{_json_type(labels)}")


def _check_embedding(options: object, where: str) -> dict:
    """config.json's `sentence_embedding`: {"pooling": "cls"|"mean", "normalize": bool,
    "max_seq_length": int}, each optional."""
    if not isinstance(options, dict):
        raise CheckpointError(f"{where} should be an object, found {_json_type(options)}")
    if options.get("pooling", "cls") not in ("cls", "mean"):
        raise CheckpointError(f"{where}.pooling should be 'cls' or 'mean', found "
                              f"{options['pooling']!r}")
    if not isinstance(options.get("normalize", False), bool):
        raise CheckpointError(f"{where}.normalize should be true or false")
    length = options.get("max_seq_length", 2)
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise CheckpointError(f"{where}.max_seq_length should be an integer >= 2, found "
                              f"{length!r}")
    return options


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type (for messages)."""
    if value is None:
        return "null"
    return {bool: "a boolean", dict: "an object", list: "a list", str: "a string",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def search_path() -> list[str]:
    """Where a checkpoint is looked up by name: each directory of `$KBERT_MODELS`
    (os.pathsep-separated), then the `saved_models/` of the source tree kbert is imported from
    (a checkout or an editable install), where the shipped checkpoints are."""
    dirs = [d for d in os.environ.get("KBERT_MODELS", "").split(os.pathsep) if d]
    source_tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shipped = os.path.join(source_tree, "saved_models")
    return [d for d in dirs + [shipped] if os.path.isdir(d)]


def resolve(name_or_path: str | os.PathLike) -> str:
    """A checkpoint directory from a path or a name: an existing directory wins; else a bare
    name (no path separator) is looked up in `search_path()`, the first match winning.

    >>> os.path.basename(resolve("minilm-l6-mlm-nsp"))  # doctest: +SKIP
    'minilm-l6-mlm-nsp'
    """
    path = os.fspath(name_or_path)
    if not path.strip():
        blank = f" ({path!r})" if path else ""
        raise CheckpointError(f"the checkpoint name is empty{blank}: give a checkpoint "
                              f"directory or a name such as minilm-l6-v2")
    if os.path.isdir(path) or (path and outputs.recover_missing(path)):
        return path                                     # (a write cut short is put right)
    is_name = path and os.sep not in path and (os.altsep is None or os.altsep not in path)
    if not is_name or path.startswith("."):
        raise CheckpointError(f"checkpoint directory not found: {path}")
    dirs = search_path()
    for d in dirs:
        if os.path.isfile(os.path.join(d, path, "config.json")):
            return os.path.join(d, path)
    names = sorted({n for d in dirs for n in os.listdir(d)
                    if os.path.isfile(os.path.join(d, n, "config.json"))})
    raise CheckpointError(
        f"checkpoint directory not found: {path} (not a directory, nor a checkpoint name in "
        f"{os.pathsep.join(dirs) or 'no directory: set KBERT_MODELS'}; names found: "
        f"{shown(names) or 'none'})")


def read(directory: str | os.PathLike, dtype: str | None = None, head_dtype: str | None = None,
         into: type[CheckpointT] = Contents,  # type: ignore[assignment]
         weights: bool = True) -> CheckpointT:
    """Reads a checkpoint directory (or a checkpoint name, see `resolve`), checking every file
    and every weight's shape, into `into` (`Contents` or a subclass: `kbert.checkpoint.load`
    reads into its `Checkpoint`).

    dtype: the encoder's Keras dtype policy (default float32); head_dtype: the heads' (default
    the encoder's) — inference in bfloat16 keeps the heads, and so the logits, in float32.
    weights: False reads the description only (config, vocabulary, heads' options): no Keras
    layers are built (`backbone` is None, `heads` maps each head's name to None), for the
    graph runtimes, which run their own copy of the weights.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    directory = resolve(directory)
    raw, config = read_config(directory)
    vocab_path = os.path.join(directory, "vocab.txt")
    if not os.path.isfile(vocab_path):
        raise CheckpointError(f"{directory}: missing vocab.txt")
    vocab = read_vocab(vocab_path)
    if len(vocab) != config.vocab_size:
        raise CheckpointError(f"{vocab_path} has {len(vocab)} tokens but config.json says "
                              f"vocab_size {config.vocab_size}")
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    if not os.path.isfile(weights_path):
        raise CheckpointError(f"{directory}: missing {WEIGHTS_FILE}")
    head_options = raw.get("heads", {})
    lower_case = bool(raw.get("do_lower_case", True))
    if not weights:
        return into(config, vocab, lower_case, None,  # type: ignore[arg-type]
                    dict.fromkeys(head_options), head_options, path=directory)
    try:
        tensors = load_file(weights_path)
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights_path}: unreadable weights ({e})") from None

    from kbert.network.backbone import BertBackbone  # see `make_head`: no Keras for a description
    from kbert.network.layers import weights_to_be_read

    with weights_to_be_read():          # every weight is assigned below: no random draws
        backbone = BertBackbone(config, dtype=dtype)
        heads = {name: make_head(name, backbone, opts, head_dtype)
                 for name, opts in head_options.items()}
    assign(named_variables(backbone, heads), tensors, source=weights_path)
    return into(config, vocab, lower_case, backbone, heads, head_options, path=directory)


def assign(variables: dict[str, Any], tensors: dict[str, Any], source: str = "weights",
           allow_extra: bool = False) -> list[str]:
    """Assigns {key: array} to {key: variable}; a missing key or a shape mismatch is an error."""
    missing = sorted(set(variables) - set(tensors))
    extra = sorted(set(tensors) - set(variables))
    if missing:
        raise CheckpointError(f"{source}: missing weights {shown(missing)}")
    if extra and not allow_extra:
        raise CheckpointError(f"{source}: unexpected weights {shown(extra)}")
    for key, variable in variables.items():
        value = np.asarray(tensors[key])
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(f"{source}: weight {key} has shape {tuple(value.shape)}, the "
                                  f"model expects {tuple(variable.shape)} (config mismatch?)")
        variable.assign(value.astype(variable.dtype))
    return extra
