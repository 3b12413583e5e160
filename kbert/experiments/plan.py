"""The value types of the ablations: a pretraining `Variant` and the sizes of a run (`Plan`,
`FULL` and `QUICK`), apart from the code that runs them (`ablations`) and the code that
pretrains and fine-tunes for them (`sources`), which both read them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Variant:
    label: str
    objective: str           # kbert.training.pretrain's: mlm_nsp, mlm or ltr
    inputs: str              # "segment_pairs" (the TFRecord shards) or "full_sentences"
    dynamic_masking: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """The sizes of a run; `QUICK` runs on a CPU in minutes, `FULL` wants a GPU."""

    config: str = "mini"
    documents: int | None = None      # corpus documents used (None: all)
    held_out_every: int = 50          # every N-th document is held out
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    dupe_factor: int = 5
    data_workers: int = 8             # processes writing the shards
    steps: int = 10000
    batch_size: int = 128
    learning_rate: float = 5e-4
    warmup: float = 0.1
    curve_points: int = 20
    finetune_epochs: int = 3
    finetune_learning_rate: float = 1e-4
    finetune_batch_size: int = 32
    max_train_examples: int | None = None
    max_dev_examples: int | None = None
    seeds: int = 3
    jit_compile: str | bool = "auto"  # XLA: worth its compile time on a GPU, not in minutes
    mixed_precision: str | None = None   # e.g. "mixed_bfloat16" on a GPU


FULL = Plan()
QUICK = Plan(config="tiny", documents=24, held_out_every=8, max_seq_length=64,
             max_predictions_per_seq=10, dupe_factor=1, data_workers=1, steps=4, batch_size=8,
             learning_rate=1e-3, curve_points=2, finetune_epochs=1, finetune_batch_size=8,
             max_train_examples=16, max_dev_examples=16, seeds=1, jit_compile=False)

