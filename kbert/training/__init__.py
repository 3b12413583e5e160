"""Pretraining (paper, section 3.1 and appendix A.2) with `model.fit`.

    loop.py          `pretrain` in named steps (validate_settings → select_distribution →
                     build_model_and_optimizer → make_phases → make_callbacks → fit_phases →
                     save_checkpoint)
    settings.py      `validate_settings` → `Settings`: every argument checked before any work;
                     the data's shapes, checked against the model
    pretrainer.py    the model of each objective (MLM + NSP, MLM, LTR): `build_pretrainer`,
                     `evaluate_pretraining`
    distribution.py  one device, mirrored GPUs, multi-worker, TPU, JAX data parallel
    callbacks.py     crash-safe backups, stop after N updates, throughput logging, SIGTERM
    arrays.py        `pretrain_arrays`: the same model, objectives and optimizer fed from NumPy
                     arrays (`kbert.data.arrays`), where TensorFlow is not installed

The optimizers (AdamW with Adam's ε on √v̂, LAMB, warmup + linear decay) live one level down
in `kbert/optimization.py`, because the task models' `compile()` defaults use them too.
Nothing here needs TensorFlow except reading the TFRecords (`kbert.data.inputs`, on use).
"""

from kbert.optimization import create_optimizer
from kbert.training.distribution import Distribution, select_distribution
from kbert.training.loop import PretrainResult, build_pretrainer, evaluate_pretraining, pretrain

__all__ = ["Distribution", "PretrainResult", "build_pretrainer", "create_optimizer",
           "evaluate_pretraining", "pretrain", "select_distribution"]
