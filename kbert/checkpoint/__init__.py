"""The checkpoint directory: one layout for every command that reads or writes a model.

    config.json        encoder hyper-parameters + `do_lower_case` + `heads` (each with its options)
    vocab.txt          WordPiece vocabulary
    model.safetensors  weights keyed `<component>/<path>`: `backbone/...`, `mlm/...`, `nsp/...`,
                       `ltr/...` (a left-to-right LM on a causal encoder), `classifier/...`,
                       `tagger/...`, `span/...`, `choice/...`
    MODEL_CARD.md      provenance and measured results (optional for a freshly converted model)

A sentence encoder's config.json also says how it embeds (`sentence_embedding`: the pooling,
whether vectors are normalized, and the longest input it was trained on), which
`Bert.embed` and `kbert.retrieval` use as their defaults.

Safetensors keeps the weights framework-neutral (readable without Keras, by any backend) and
lets a checkpoint be stored in float16 while loading into float32 variables.

The files themselves (finding, checking, reading, writing) are `kbert.checkpoint.files`'s,
re-exported here with `load` and `save` (of a backbone or any kbert task model). The task
models are above the checkpoint — they read and write theirs through it — so the task model of
a loaded checkpoint is `kbert.models.task_model(ckpt, task)`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbert.checkpoint.files import (
    HEAD_NAMES,
    WEIGHTS_FILE,
    CheckpointError,
    Contents,
    MissingHeadError,
    assign,
    head_options_for,
    make_head,
    named_variables,
    read,
    read_config,
    resolve,
    search_path,
    write,
)

if TYPE_CHECKING:   # Keras, with the layers only
    from kbert.network.backbone import BertBackbone


class Checkpoint(Contents):
    """A loaded checkpoint: the encoder, its heads (Keras layers) and the vocabulary
    (`kbert.models.task_model(ckpt)` makes a task model on them)."""


def components_of(model: Any) -> tuple[BertBackbone, dict]:
    """(backbone, {head name: layer}) of a BertBackbone or any kbert task model (its
    `checkpoint_components()`)."""
    from kbert.network.backbone import BertBackbone  # Keras: a model was passed
    if isinstance(model, BertBackbone):
        return model, {}
    components = getattr(model, "checkpoint_components", None)
    if components is None:
        raise TypeError(f"cannot save a {type(model).__name__}; pass a kbert model")
    return components()


def save(directory: str | os.PathLike, model: Any = None,
         vocab: str | Sequence[str] | None = None, do_lower_case: bool = True,
         head_options: dict | None = None, dtype: str = "float32", *,
         backbone: BertBackbone | None = None, heads: dict | None = None,
         model_card: str | None = None, embedding: dict | None = None,
         overwrite: bool = True) -> str:
    """Writes a checkpoint directory atomically (a temporary directory, then a rename).

    Args:
        model: a BertBackbone or task model (or pass `backbone=` and `heads=` explicitly).
        vocab: a list of tokens or a `vocab.txt` path.
        head_options: {head name: options} stored in config.json (e.g. classifier labels).
        dtype: storage dtype of the weights, "float32" or "float16".
        embedding: a sentence encoder's {"pooling", "normalize", "max_seq_length"}, stored as
            config.json's `sentence_embedding`.
        overwrite: replace a checkpoint already there (as Keras' `model.save`); False refuses
            it. Anything but a kbert checkpoint is always refused (`kbert.outputs`).
    """
    if model is not None:
        backbone, heads = components_of(model)
    if backbone is None or vocab is None:
        raise TypeError("save needs a model (or backbone=) and a vocabulary")
    return write(directory, backbone, heads, vocab, do_lower_case, head_options, dtype,
                 model_card, embedding, overwrite)


def load(directory: str | os.PathLike, dtype: str | None = None,
         head_dtype: str | None = None) -> Checkpoint:
    """Reads a checkpoint directory (or a checkpoint name, see `resolve`), checking every file
    and every weight's shape.

    dtype: the encoder's Keras dtype policy (default float32); head_dtype: the heads' (default
    the encoder's) — inference in bfloat16 keeps the heads, and so the logits, in float32.
    """
    return read(directory, dtype, head_dtype, into=Checkpoint)


__all__ = ["HEAD_NAMES", "WEIGHTS_FILE", "Checkpoint", "CheckpointError",
           "MissingHeadError", "assign", "components_of", "head_options_for", "load",
           "make_head", "named_variables", "read_config", "resolve", "save",
           "search_path"]
