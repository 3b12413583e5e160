"""The names scripts imported from `kbert.finetune` before fine-tuning joined the other kinds of
training: the loop is `kbert.training.finetuning`, the tasks are `kbert.tasks`."""

from kbert import tasks, training
from kbert._lazy import lazy_attributes

# fine-tuning's names as kbert.training loads them, and the task registry's
_LAZY = {**{name: module for name, module in training._LAZY.items()
            if module == "kbert.training.finetuning" or name == "KeepBest"},
         **tasks._LAZY}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
