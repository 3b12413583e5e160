"""Pretraining from NumPy arrays (`kbert.data.arrays`): `model.fit` without TensorFlow.

The model, optimizer (AdamW, no decay on LayerNorm or biases, warmup then linear decay,
clipping 1.0), objectives and losses are those of `kbert.training.pretrain`; only the feed
differs: a `keras.utils.PyDataset` of arrays instead of tf.data over shards. What it leaves
out (distribution strategies, backups mid-run, phases) is what a single accelerator run of
minutes does not need; a run is repeatable from its seed.

Example:
>>> from kbert.data import arrays
>>> data = arrays.segment_pairs(arrays.load("corpus.npz"))                # doctest: +SKIP
>>> result = pretrain_arrays(data, "out/ckpt", config="mini", vocab=vocab,  # doctest: +SKIP
...                          batch_size=256, steps=5000, learning_rate=5e-4)
"""

from __future__ import annotations

import math
import os
import time

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert.hardware import mixed_precision_policy
from kbert.models.optimization import batches_seen, create_optimizer
from kbert.network.config import BertConfig
from kbert.training import curves
from kbert.training.callbacks import Progress, StopAfter, TrainingMetrics
from kbert.training.pretraining import PretrainResult, build_pretrainer


def pretrain_arrays(arrays: dict[str, np.ndarray], output: str | os.PathLike | None = None,
                    config: BertConfig | dict | str | None = None,
                    init: str | os.PathLike | None = None, vocab: str | list[str] | None = None,
                    objective: str = "mlm_nsp", batch_size: int = 256, steps: int = 1000,
                    warmup_steps: int | None = None, learning_rate: float = 1e-4,
                    weight_decay: float = 0.01, dynamic_masking: bool = False,
                    max_predictions_per_seq: int = 20, log_every: int = 200, seed: int = 0,
                    mixed_precision: str | None = None, jit_compile: str | bool = "auto",
                    max_seconds: float | None = None, save_dtype: str = "float32",
                    verbose: int = 2) -> PretrainResult:
    """Pretrains on feature arrays and returns a `PretrainResult` (saving `output` if given).

    Args:
        arrays: `kbert.data.arrays` features (`segment_pairs`' static masks), or with
            `dynamic_masking` rows of `input_ids`, `segment_ids`, `input_mask` (any masks they
            carry are put back first).
        config, init, vocab, objective: as `build_pretrainer` (a preset from scratch, or a
            checkpoint to continue).
        dynamic_masking: mask every batch anew (`kbert.data.arrays.DynamicMasking`, with
            `max_predictions_per_seq`) instead of using the arrays' own masks; as `pretrain`'s.
        log_every: updates per logged point of the curve (a Keras epoch).
        warmup_steps: default 1% of `steps`.
        max_seconds: stop (and save) after this wall time.
        mixed_precision: as `pretrain`'s (`kbert.hardware.mixed_precision_policy`: "auto",
            "float32", "mixed_bfloat16", "mixed_float16").

    `output` also gets the run's `history.json` and `curves.png` (`kbert.training.curves`): a
    point per `log_every` updates.
    """
    from kbert.data import arrays as arrays_lib
    started = time.perf_counter()
    if steps < 1 or batch_size < 1 or log_every < 1:
        raise ValueError("need steps >= 1, batch_size >= 1, log_every >= 1")
    policy = mixed_precision_policy(mixed_precision)       # None: float32
    keras.utils.set_random_seed(seed)
    model, vocab, lower = build_pretrainer(config, init, vocab, dtype=policy,
                                           objective=objective)
    masking = None
    if dynamic_masking:
        if "masked_lm_weights" in arrays:
            arrays = arrays_lib.unmask(arrays)
        arrays = {k: arrays[k] for k in ("input_ids", "segment_ids", "input_mask")}
        masking = arrays_lib.DynamicMasking(vocab, max_predictions_per_seq)
    warmup = steps // 100 if warmup_steps is None else warmup_steps
    model.compile(create_optimizer("adamw", learning_rate, steps, warmup, weight_decay,
                                   loss_scale=policy == "mixed_float16"),
                  jit_compile=jit_compile)
    feed = arrays_lib.PretrainingBatches(arrays, batch_size, objective,
                                         steps_per_epoch=log_every, masking=masking, seed=seed)

    class Deadline(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            if max_seconds and time.perf_counter() - started > max_seconds:
                self.model.stop_training = True

    recorder = curves.Recorder("step")
    history = model.fit(feed, epochs=math.ceil(steps / log_every), shuffle=False,
                        callbacks=[TrainingMetrics(batch_size), StopAfter(steps), Deadline(),
                                   recorder, Progress(steps)],
                        verbose=verbose)
    done = batches_seen(model.optimizer)
    if output:
        checkpoint_lib.save(output, model, vocab=vocab, do_lower_case=lower, dtype=save_dtype)
        settings = dict(init=init, objective=objective, batch_size=batch_size, steps=steps,
                        warmup_steps=warmup, learning_rate=learning_rate,
                        weight_decay=weight_decay, dynamic_masking=dynamic_masking,
                        log_every=log_every, seed=seed, precision=policy or "float32",
                        config=model.config.to_dict())
        curves.record(output, curves.document("pretrain_arrays", "step", settings,
                                              recorder.points))
    return PretrainResult(model, done, history.history, interrupted=done < steps,
                          output=output, wall_seconds=time.perf_counter() - started)
