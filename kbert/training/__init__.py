"""Training with `model.fit`: pretraining (paper, section 3.1 and appendix A.2), fine-tuning
(section 4) and the retrievers' training, beside each other, with what they share.

  pretraining
    pretraining.py         `pretrain` in named steps (validate_settings → select_distribution →
                           build_model_and_optimizer → make_phases → make_callbacks →
                           fit_phases → save_checkpoint)
    settings.py            `validate_settings` → `Settings`: every argument checked before any
                           work; the data's shapes, checked against the model
    pretrainer.py          the model of each objective (MLM + NSP, MLM, LTR)
    distribution.py        one device, mirrored GPUs, multi-worker, TPU, JAX data parallel
    pretraining_arrays.py  `pretrain_arrays`: the same fed from NumPy arrays, without TensorFlow
  fine-tuning
    finetuning.py          `finetune` (train, score dev each epoch, keep the best), `encode`
                           (the tokenized sets, once), `evaluate`; the tasks are `kbert.tasks`'
  retrievers
    pairs.py               the training pairs (`read_pairs`) and their hard negatives
                           (`mine_negatives`, by BM25 or the encoder)
    retrievers.py          `train_retriever` (bi-encoder) and `train_reranker` (cross-encoder)
  shared
    callbacks.py           crash-safe backups, stop after N updates, rates, the progress line,
                           SIGTERM; `KeepBest` (score dev each epoch, save the best)
    curves.py              a run's history.json and curves.png

The optimizers (AdamW with Adam's ε on √v̂, LAMB, warmup + linear decay) live one level down in
`kbert.models.optimization`, because the task models' `compile()` defaults use them too.
"""

from kbert._lazy import lazy_attributes

# On first use (PEP 562): each kind of training imports only its own stack.
_LAZY = {
    **dict.fromkeys(["PretrainResult", "build_pretrainer", "evaluate_pretraining", "pretrain"],
                    "kbert.training.pretraining"),
    **dict.fromkeys(["Distribution", "select_distribution"], "kbert.training.distribution"),
    "create_optimizer": "kbert.models.optimization",
    **dict.fromkeys(["PAD_TO_MULTIPLE", "Encoded", "FinetuneResult", "encode", "evaluate",
                     "finetune", "predict"], "kbert.training.finetuning"),
    **dict.fromkeys(["Pairs", "PairsError", "read_pairs", "mine_negatives"],
                    "kbert.training.pairs"),
    **dict.fromkeys(["TrainResult", "train_retriever", "train_reranker"],
                    "kbert.training.retrievers"),
    "KeepBest": "kbert.training.callbacks",
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
