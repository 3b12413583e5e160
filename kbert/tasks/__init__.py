"""The tasks: each benchmark task's and each own-data task's file format and reader, its
features, its post-processing and its official metric, and the preprocessors that turn raw text
into a task model's features. Below everything that uses them: the task models
(`kbert.models`), inference (`kbert.load(...).answer`, `tag`), the SavedModel export and the
training loops.

    registry.py           the one task registry: TASKS, get_task(name) → how to read, encode,
                          train and score each task
    glue.py squad.py squad_postprocess.py ner.py swag.py userdata.py
                          each task's reader, features and post-processing (numpy; no model)
    metrics.py            the official metric definitions (SQuAD, GLUE, conlleval)
    batching.py           length-bucketed batches padded only to their own longest row
    preprocessing.py      raw text → features as Keras layers (tf.data), one preprocessor a
                          task head
    inputs.py             the preprocessors' helpers: raw inputs → tensors, their checks,
                          padding to a multiple
"""

from kbert._lazy import lazy_attributes

# On first use (PEP 562): inference reads only the numpy modules, and must not import
# TensorFlow (the preprocessors) with them.
_LAZY = dict.fromkeys(["TASKS", "get_task"], "kbert.tasks.registry")
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
