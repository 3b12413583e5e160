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

The files themselves (finding, checking, reading, writing) are `kbert.checkpoint_format`'s,
re-exported here; this module adds what needs the task models: `Checkpoint.task_model`, and
`save` of a whole task model.
"""

import os
from collections.abc import Sequence

import keras

from kbert.checkpoint_format import (
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
from kbert.models import (
    BertClassifier,
    BertLeftToRightLM,
    BertMultipleChoice,
    BertPretrainer,
    BertQuestionAnswerer,
    BertTokenClassifier,
)
from kbert.models.finetuned import FineTunedModel
from kbert.network.backbone import BertBackbone

# the fine-tuning task model of each head
TASK_MODELS: dict[str, type[FineTunedModel]] = {
    "classifier": BertClassifier, "tagger": BertTokenClassifier, "span": BertQuestionAnswerer,
    "choice": BertMultipleChoice}


class Checkpoint(Contents):
    """A loaded checkpoint: the encoder, its heads (Keras layers) and the vocabulary."""

    def task_model(self, task: str | None = None) -> keras.Model:
        """A Keras model for `fit`/`predict` built from these weights (shared, not copied).

        task: "pretraining" (MLM, with NSP where the checkpoint has that head), "ltr",
            "classifier", "tagger", "span" or "choice"; by default the most specific one the
            checkpoint has heads for.
        """
        task = task or next((t for t in ("span", "classifier", "tagger", "choice", "ltr")
                             if t in self.heads), "pretraining")
        # Pretraining needs the MLM head; NSP is optional (the "No NSP" ablation has none).
        need = {"pretraining": ("mlm",) if "mlm" in self.heads else ("mlm", "nsp")}.get(
            task, (task,))
        missing = [h for h in need if h not in self.heads]
        if missing:
            raise CheckpointError(f"checkpoint {self.path or ''} has no {' or '.join(missing)} "
                                  f"head (it has: {', '.join(self.heads) or 'none'})")
        if task == "pretraining":
            return BertPretrainer(self.backbone, self.heads["mlm"], self.heads.get("nsp"),
                                  next_sentence="nsp" in self.heads)
        if task == "ltr":
            return BertLeftToRightLM(self.backbone, self.heads["ltr"])
        return TASK_MODELS[task].with_head(self.backbone, self.heads[task])


def components_of(model: keras.Model) -> tuple[BertBackbone, dict]:
    """(backbone, {head name: layer}) of a BertBackbone or any kbert task model."""
    if isinstance(model, BertBackbone):
        return model, {}
    if isinstance(model, BertPretrainer):
        heads = {"mlm": model.mlm_head, "nsp": model.nsp_head}
        return model.backbone, {k: v for k, v in heads.items() if v is not None}
    if isinstance(model, BertLeftToRightLM):
        return model.backbone, {"ltr": model.lm_head}
    kind = {cls: name for name, cls in TASK_MODELS.items()}.get(type(model))
    if kind is None:
        raise TypeError(f"cannot save a {type(model).__name__}; pass a kbert model")
    return model.backbone, {kind: model.head}


def save(directory: str | os.PathLike, model: keras.Model | None = None,
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


__all__ = ["HEAD_NAMES", "TASK_MODELS", "WEIGHTS_FILE", "Checkpoint", "CheckpointError",
           "MissingHeadError", "assign", "components_of", "head_options_for", "load",
           "make_head", "named_variables", "read_config", "resolve", "save",
           "search_path"]
