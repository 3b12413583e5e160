"""Pretraining (paper, section 3.1 and appendix A.2) with `model.fit`.

    loop.py          `pretrain` in named steps (validate_settings → select_distribution →
                     build_model_and_optimizer → make_phases → make_callbacks → fit_phases →
                     save_checkpoint); `build_pretrainer`, `evaluate_pretraining`
    distribution.py  one device, mirrored GPUs, multi-worker, TPU, JAX data parallel
    optimization.py  AdamW (Adam's ε on √v̂) and LAMB, warmup + linear decay, no decay on LN/bias
    callbacks.py     crash-safe backups, stop after N updates, throughput logging, SIGTERM

Nothing here needs TensorFlow except reading the TFRecords (`kbert.data.inputs`, on use).
"""

from kbert.training.distribution import Distribution, select_distribution
from kbert.training.loop import PretrainResult, build_pretrainer, evaluate_pretraining, pretrain
from kbert.training.optimization import create_optimizer

__all__ = ["Distribution", "PretrainResult", "build_pretrainer", "create_optimizer",
           "evaluate_pretraining", "pretrain", "select_distribution"]
