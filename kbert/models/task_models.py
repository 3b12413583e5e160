"""The task model of a loaded checkpoint: `task_model(ckpt, task)` picks the model for the heads
it has and builds it on them (weights shared, not copied)."""

from __future__ import annotations

from typing import Any

from kbert.checkpoint import Checkpoint, CheckpointError
from kbert.models.classification import BertClassifier, BertTokenClassifier
from kbert.models.finetuned import FineTunedModel
from kbert.models.multiple_choice import BertMultipleChoice
from kbert.models.pretraining import BertLeftToRightLM, BertPretrainer
from kbert.models.question_answering import BertQuestionAnswerer

# the fine-tuning task model of each head
TASK_MODELS: dict[str, type[FineTunedModel]] = {
    "classifier": BertClassifier, "tagger": BertTokenClassifier, "span": BertQuestionAnswerer,
    "choice": BertMultipleChoice}


def task_model(ckpt: Checkpoint, task: str | None = None) -> Any:
    """A Keras model for `fit`/`predict` built from a loaded checkpoint's weights (shared).

    task: "pretraining" (MLM, with NSP where the checkpoint has that head), "ltr",
        "classifier", "tagger", "span" or "choice"; by default the most specific one the
        checkpoint has heads for.

    >>> model = task_model(kbert.checkpoint.load("ckpt"), "pretraining")  # doctest: +SKIP
    """
    heads = ckpt.heads
    task = task or next((t for t in ("span", "classifier", "tagger", "choice", "ltr")
                         if t in heads), "pretraining")
    # Pretraining needs the MLM head; NSP is optional (the "No NSP" ablation has none).
    need = {"pretraining": ("mlm",) if "mlm" in heads else ("mlm", "nsp")}.get(task, (task,))
    missing = [h for h in need if h not in heads]
    if missing:
        raise CheckpointError(f"checkpoint {ckpt.path or ''} has no {' or '.join(missing)} "
                              f"head (it has: {', '.join(heads) or 'none'})")
    if task == "pretraining":
        return BertPretrainer(ckpt.backbone, heads["mlm"], heads.get("nsp"),
                              next_sentence="nsp" in heads)
    if task == "ltr":
        return BertLeftToRightLM(ckpt.backbone, heads["ltr"])
    return TASK_MODELS[task].with_head(ckpt.backbone, heads[task])
