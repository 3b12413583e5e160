"""Fine-tuning (paper, section 4): the tasks' data, their official scores, and the loop.

    tasks.py       the one task registry: TASKS, get_task(name) → how to read, encode, train
                   and score each benchmark task
    glue.py squad.py squad_postprocess.py ner.py swag.py
                   each task's reader, features and post-processing (numpy; no model imported)
    batching.py    length-bucketed batches padded only to their own longest row
    metrics.py     the official metric definitions (SQuAD, GLUE, conlleval)
    loop.py        `finetune` (train, score dev each epoch, keep the best) and `evaluate`
"""

from kbert.finetune.loop import (
                                 PAD_TO_MULTIPLE,
                                 FinetuneResult,
                                 KeepBest,
                                 evaluate,
                                 finetune,
                                 predict,
)
from kbert.finetune.tasks import TASKS, get_task

__all__ = ["PAD_TO_MULTIPLE", "TASKS", "FinetuneResult", "KeepBest", "evaluate", "finetune",
           "get_task", "predict"]
