"""Pretraining (paper, section 3.1 and appendix A.2) with `model.fit`.

    loop.py          `pretrain`: the whole recipe, from TFRecord shards to a checkpoint directory;
                     `build_pretrainer`, `select_distribution`, `evaluate_pretraining`
    optimization.py  AdamW (Adam's ε on √v̂) and LAMB, warmup + linear decay, no decay on LN/bias
    callbacks.py     crash-safe backups, stop after N updates, throughput/MFU logging, SIGTERM

Nothing here needs TensorFlow except reading the TFRecords (`kbert.data.inputs`, on use).
"""

from kbert.training.loop import (PretrainResult, build_pretrainer, evaluate_pretraining,
                                 pretrain, select_distribution)
from kbert.training.optimization import create_optimizer

__all__ = ["PretrainResult", "build_pretrainer", "create_optimizer", "evaluate_pretraining",
           "pretrain", "select_distribution"]
