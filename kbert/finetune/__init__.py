"""Fine-tuning (paper, section 4): the tasks' data, their official scores, and the loop.

    tasks.py       the one task registry: TASKS, get_task(name) → how to read, encode, train
                   and score each benchmark task
    glue.py squad.py squad_postprocess.py ner.py swag.py
                   each task's reader, features and post-processing (numpy; no model imported)
    batching.py    length-bucketed batches padded only to their own longest row
    metrics.py     the official metric definitions (SQuAD, GLUE, conlleval)
    loop.py        `finetune` (train, score dev each epoch, keep the best), `encode` (the
                   tokenized sets, once: fine-tuning from them needs no TensorFlow), `evaluate`
"""

from kbert._lazy import lazy_attributes

# The public names load on first use (PEP 562): inference (`kbert.load(...).answer`, `tag`)
# reads only the numpy modules above, and must not import the training loop (Keras' whole
# training stack) with them.
_LAZY = {
    **dict.fromkeys(["PAD_TO_MULTIPLE", "Encoded", "FinetuneResult", "KeepBest", "encode",
                     "evaluate", "finetune", "predict"], "kbert.finetune.loop"),
    **dict.fromkeys(["TASKS", "get_task"], "kbert.tasks.registry"),
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
