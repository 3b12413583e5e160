"""The names scripts imported from `kbert.finetune` before fine-tuning joined the other kinds of
training: the loop is `kbert.training.finetuning`, the tasks are `kbert.tasks`."""

from kbert._lazy import lazy_attributes

_LAZY = {
    **dict.fromkeys(["PAD_TO_MULTIPLE", "Encoded", "FinetuneResult", "encode", "evaluate",
                     "finetune", "predict"], "kbert.training.finetuning"),
    "KeepBest": "kbert.training.callbacks",
    **dict.fromkeys(["TASKS", "get_task"], "kbert.tasks.registry"),
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
