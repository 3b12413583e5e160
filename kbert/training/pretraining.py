"""Pretraining with `model.fit`: one device, several GPUs, several workers, a TPU, or JAX devices.

`pretrain` is the whole recipe (paper, section 3.1 and appendix A.2): MLM + NSP on the original
BERT TFRecords, AdamW with warmup and linear decay (`kbert.models.optimization`), checkpoints
every N steps and on SIGTERM/SIGINT, a resumable data stream, TensorBoard logs, and a kbert
checkpoint directory at the end, with the run's curves beside it (`history.json`,
`curves.png`: `kbert.training.curves`).

Example (the same thing with plain Keras, as a user script would write it):
>>> import keras, kbert                                                          # doctest: +SKIP
>>> from kbert.data.inputs import pretraining_dataset                            # doctest: +SKIP
>>> from kbert.models.optimization import create_optimizer                   # doctest: +SKIP
>>> ds = pretraining_dataset("shards/", 32, seed=0).map(kbert.pretraining_targets)  # doctest: +SKIP
>>> model = kbert.BertPretrainer(kbert.BertConfig.preset("mini"))                # doctest: +SKIP
>>> optimizer = create_optimizer(learning_rate=1e-4, total_steps=1000)         # doctest: +SKIP
>>> model.compile(optimizer)                                                     # doctest: +SKIP
>>> model.fit(ds, steps_per_epoch=100, epochs=10)                                # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert import outputs
from kbert.models.optimization import batches_seen, create_optimizer
from kbert.network.config import BertConfig
from kbert.training import curves
from kbert.training.callbacks import (
    Backup,
    Progress,
    StopAfter,
    TrainingMetrics,
    save_on_signal,
)
from kbert.training.distribution import Distribution, select_distribution
from kbert.training.pretrainer import (  # noqa: F401  (re-exported: one module before)
    OBJECTIVES,
    build_pretrainer,
    evaluate_pretraining,
    objective_of,
)
from kbert.training.settings import (  # noqa: F401  (re-exported)
    MIXED_PRECISION,
    Settings,
    check_data,
    data_shapes,
    validate_settings,
)

__all__ = ["Distribution", "PretrainResult", "build_pretrainer", "evaluate_pretraining",
           "pretrain", "select_distribution"]


@dataclasses.dataclass
class PretrainResult:
    model: object
    steps: int                  # optimizer updates done in total
    history: dict
    interrupted: bool = False
    output: str | os.PathLike | None = None
    wall_seconds: float = 0.0


@dataclasses.dataclass
class Phase:
    """One `--data` set trained on from batch `start` to batch `end` (counted over the run)."""
    data: str
    start: int
    end: int
    # skip -> a tf.data stream of feature batches from `start + skip`
    make_stream: Callable[[int], Any]


def pretrain(data: str | os.PathLike | list | None = None, output: str | os.PathLike | None = None,
             config: BertConfig | dict | str | None = None, init: str | os.PathLike | None = None,
             vocab: str | list[str] | None = None, batch_size: int = 32, steps: int = 1000,
             warmup_steps: int | None = None, learning_rate: float = 1e-4,
             max_seq_length: int | None = None, max_predictions_per_seq: int | None = None,
             optimizer: str = "adamw", weight_decay: float = 0.01,
             mixed_precision: str | None = None, jit_compile: str | bool = "auto",
             checkpoint_every: int = 1000, accumulate: int = 1, dynamic_masking: bool = False,
             phase_steps: list[int] | None = None, seed: int = 0, strategy: str = "auto",
             tpu: str | None = None, backup_dir: str | None = None, log_dir: str | None = None,
             save_dtype: str = "float32", verbose: bool | int | str = "auto",
             model_card: str | None = None, shuffle_buffer: int = 10000,
             callbacks: tuple | list = (), objective: str = "mlm_nsp",
             text: str | list | None = None, text_mode: str = "nsp",
             data_service: str | None = None, overwrite: bool = False) -> "PretrainResult":
    """Pretrains (MLM + NSP) and writes a kbert checkpoint directory to `output`.

    Args:
        data: a shard directory (or glob), or one per phase for the two-phase schedule (128
            then 512 tokens, `phase_steps=[s1, s2]`).
        batch_size: the global batch per optimizer update (split over replicas and over
            `accumulate` gradient-accumulation batches).
        steps: optimizer updates in total; `warmup_steps` defaults to 1% of them.
        checkpoint_every: updates between backups (in `backup_dir`, default `output + ".backup"`);
            a killed run started again with the same arguments resumes from the last one, a
            run with other settings is refused, and a finished run removes its backups.
        dynamic_masking: re-draw the masks of every batch (RoBERTa) instead of the stored ones.
        mixed_precision: None or "float32", "auto" (mixed_bfloat16 where the machine has fast
            bfloat16, else float32), "mixed_bfloat16" or "mixed_float16" (with loss scaling):
            `kbert.hardware.mixed_precision_policy`.
        jit_compile: compile the step (XLA, or `torch.compile` on PyTorch); "auto": see
            `jit_compile_setting`.
        objective: "mlm_nsp" (the paper's), or the section 5.1 ablations on the same shards:
            "mlm" (no NSP head or loss), "ltr" (a left-to-right LM on a causal encoder,
            next-token loss at every position, no NSP).
        text: text files to train on straight, instead of shards (`data=None`): read,
            tokenized, packed and masked anew each epoch in tf.data
            (`kbert.data.text.text_pretraining_dataset`); `max_seq_length` and
            `max_predictions_per_seq` default to 128 and 20.
        text_mode: `nsp` (BERT's sentence pairs) or `full_sentences` (RoBERTa's packing, no NSP).
        data_service: a tf.data service dispatcher (`grpc://host:port`) whose workers prepare
            the text batches (see docs/pretraining.md).
        overwrite: replace a checkpoint already at `output` (refused otherwise, before any
            work; anything else there always is). The chief locks `output` for the run.
        log_dir: a TensorBoard log directory (`keras.callbacks.TensorBoard`); default none.

    `output` also gets the run's `history.json` and `curves.png` (`kbert.training.curves`): a point
    per `checkpoint_every` updates, with the losses and metrics averaged over them and the
    learning rate (a resumed run's points start where it resumed).

    The steps, each a function below: `validate_settings` → `select_distribution` →
    `build_model_and_optimizer` → `make_phases` → `make_callbacks` → `fit_phases` →
    `save_checkpoint`.

    Example:
    >>> result = pretrain("shards/", "out/ckpt", config="mini", vocab="vocab.txt",  # doctest: +SKIP
    ...                   batch_size=32, steps=1000)
    """
    started = time.perf_counter()
    settings = validate_settings(
        data, output, config, init, vocab, batch_size, steps, warmup_steps, learning_rate,
        max_seq_length, max_predictions_per_seq, optimizer, weight_decay, mixed_precision,
        jit_compile, checkpoint_every, accumulate, dynamic_masking, phase_steps, seed, strategy,
        tpu, backup_dir, shuffle_buffer, objective, text, text_mode, data_service)
    if output is not None:
        outputs.check(output, "checkpoint", overwrite)     # before any work, in one line
    dist = select_distribution(settings.strategy, settings.tpu)  # first: collectives need a
    shapes = data_shapes(settings)                              # fresh runtime
    claim = (outputs.Output(output, "checkpoint", overwrite=overwrite)
             if output is not None and dist.is_chief else contextlib.nullcontext())
    with claim:                                 # checked and locked for the run
        keras.utils.set_random_seed(settings.seed)
        model, vocab, do_lower_case = build_model_and_optimizer(settings, dist, shapes)
        backup = Backup(_backup_dir(settings, dist),
                        settings.checkpoint_every * settings.accumulate,
                        settings.resume_key(model.config, vocab))
        seen = backup.restore(model)
        phases = make_phases(settings, vocab, shapes, do_lower_case)
        stop, all_callbacks = make_callbacks(settings, backup, log_dir, callbacks)
        history, seen = fit_phases(model, phases, seen, dist, stop, all_callbacks, settings,
                                   verbose)
        result = PretrainResult(model, seen // settings.accumulate, history, backup.interrupted)
        if not backup.interrupted and output is not None:
            result.output = save_checkpoint(model, vocab, do_lower_case, settings, dist,
                                            save_dtype, model_card)
            if dist.is_chief:
                recorder = [c for c in all_callbacks if isinstance(c, curves.Recorder)][-1]
                curves.record(output, curves.document(
                    "kbert pretrain", "step",
                    {**settings.resume_key(model.config, vocab),
                     "checkpoint_every": settings.checkpoint_every}, recorder.points))
            backup.delete()                         # finished: nothing to resume any more
        result.wall_seconds = time.perf_counter() - started
        return result


def build_model_and_optimizer(settings: Settings, dist: Distribution,
                              shapes: Sequence[tuple[int, int]],
                              ) -> tuple[keras.Model, list[str], bool]:
    """(compiled and built pretraining model, vocabulary, do_lower_case), in the strategy's
    scope, after checking the shards fit the model."""
    s = settings
    with dist.scope():
        model, vocab, do_lower_case = build_pretrainer(s.config, s.init, s.vocab,
                                                       dtype=s.mixed_precision,
                                                       objective=s.objective)
        model({"input_ids": np.ones((1, 4), "int32"),                      # builds the model
               "masked_lm_positions": np.zeros((1, 1), "int32")})
        check_data(s.datas, shapes, model.config, s.max_seq_length, s.max_predictions_per_seq,
                    s.from_text)
        model.compile(create_optimizer(s.optimizer, s.learning_rate, s.steps, s.warmup_steps,
                                       s.weight_decay, gradient_accumulation_steps=s.accumulate,
                                       loss_scale=s.mixed_precision == "mixed_float16"),
                      jit_compile=jit_compile_setting(s.jit_compile))
        model.optimizer.build(model.trainable_variables)
    return model, vocab, do_lower_case


def jit_compile_setting(jit_compile: str | bool) -> str | bool:
    """`jit_compile` for the pretraining step. "auto" is Keras' choice (XLA on a TensorFlow GPU,
    always on JAX), except on PyTorch, where Keras never compiles: there "auto" compiles the
    whole step on a GPU and runs it eagerly on a CPU (`kbert.models.torch_step`)."""
    if jit_compile == "auto" and keras.backend.backend() == "torch":
        from kbert.models import torch_step
        return torch_step.compiles_by_default()
    return jit_compile


def _backup_dir(settings: Settings, dist: Distribution) -> str:
    """Where this worker's backups go (one folder per non-chief worker)."""
    # validate_settings: no backup_dir without an output
    backup_dir = settings.backup_dir or os.path.abspath(settings.output) + ".backup"  # type: ignore[arg-type]
    if dist.num_replicas > 1 and not dist.is_chief:
        backup_dir = os.path.join(backup_dir, f"worker-{dist.worker_index}")
    return backup_dir


def make_phases(settings: Settings, vocab: list[str], shapes: Sequence[tuple[int, int]],
                do_lower_case: bool = True) -> list[Phase]:
    """One `Phase` per data set: its batch range and a stream that can skip into it."""
    from kbert.data import inputs
    if settings.from_text:
        return [_text_phase(settings, vocab, shapes[0], do_lower_case)]
    masking = None
    if settings.dynamic_masking:
        masking = inputs.DynamicMasking(vocab, shapes[0][1])
    phases, end = [], 0
    for d, steps in zip(settings.datas, settings.phase_steps):
        start, end = end, end + steps * settings.accumulate

        def make_stream(skip: int, d: str = d) -> Any:
            return inputs.pretraining_dataset(
                d, settings.micro_batch, seed=settings.seed, dynamic_masking=masking,
                shuffle_buffer=settings.shuffle_buffer).skip(skip)
        phases.append(Phase(d, start, end, make_stream))
    return phases


def _text_phase(settings: Settings, vocab: list[str], shape: tuple[int, int],
                do_lower_case: bool) -> Phase:
    """The one phase of a run from text. Locally the stream is deterministic and a resumed
    run skips to its position; from a data service the groups arrive in the workers' order, so
    a resumed run continues with fresh batches."""
    from kbert.data.text import text_pretraining_dataset
    files = settings.datas[0]

    def make_stream(skip: int) -> Any:
        return text_pretraining_dataset(
            files, vocab, settings.micro_batch, *shape,
            mode=settings.text_mode,  # type: ignore[arg-type]  # a text run has one
            lower_case=do_lower_case, seed=settings.seed, shuffle_buffer=settings.shuffle_buffer,
            data_service=settings.data_service).skip(skip)
    return Phase(files, 0, settings.steps * settings.accumulate, make_stream)


def make_callbacks(settings: Settings, backup: Backup, log_dir: str | None = None,
                   extra: Sequence[keras.callbacks.Callback] = (),
                   ) -> tuple[StopAfter, list[keras.callbacks.Callback]]:
    """(the `StopAfter` that ends each phase, every callback of the run in order). The
    progress line (`Progress`) counts the run's updates, not `fit`'s epochs (a backup interval
    each, see `fit_phases`); so does the curve (`kbert.training.curves.Recorder`)."""
    stop = StopAfter(0)
    callbacks = [TrainingMetrics(settings.batch_size), stop, backup, *extra,
                 curves.Recorder("step", settings.accumulate)]
    if log_dir:
        callbacks.append(keras.callbacks.TensorBoard(
            log_dir, update_freq=max(1, settings.checkpoint_every // 10)))
    callbacks.append(Progress(settings.steps, settings.accumulate))
    return stop, callbacks


def fit_phases(model: keras.Model, phases: Sequence[Phase], seen: int, dist: Distribution,
               stop: StopAfter, callbacks: list[keras.callbacks.Callback], settings: Settings,
               verbose: bool | int | str = "auto") -> tuple[dict[str, list], int]:
    """`model.fit` over each phase not finished yet, from batch `seen`; returns the merged
    history and the batches seen at the end. A SIGTERM/SIGINT saves a backup and stops.

    Each `fit` epoch is one backup interval: one point of the history's curve (its metrics
    averaged over the interval), one line of progress."""
    backup = next(c for c in callbacks if isinstance(c, Backup))
    per_epoch = settings.checkpoint_every * settings.accumulate
    history: dict[str, list] = {}
    prepared = False
    with save_on_signal(backup):
        for phase in phases:
            if seen >= phase.end or backup.interrupted:
                continue
            skip = seen - phase.start

            def stream(phase: Phase = phase, skip: int = skip) -> Any:
                return phase.make_stream(skip)
            targets = _targets(settings.objective)
            if not prepared:
                dist.prepare_for_fit(model, next(iter(stream().take(1).map(targets))))
                prepared = True
            stop.total_batches = phase.end
            first_epoch = seen // per_epoch
            fit = model.fit(dist.dataset(stream, settings.micro_batch, targets),
                            steps_per_epoch=per_epoch, initial_epoch=first_epoch,
                            epochs=first_epoch + math.ceil((phase.end - seen) / per_epoch) + 1,
                            callbacks=callbacks, verbose=verbose)
            for k, v in fit.history.items():
                history.setdefault(k, []).extend(v)
            seen = batches_seen(model.optimizer)
    return history, seen


def _targets(objective: str) -> Callable[[dict[str, Any]], Any]:
    """The objective's features → (x, y, sample_weight) map (tf.data: TensorFlow, on use)."""
    from kbert.data.inputs import targets_for
    return targets_for(objective)


def save_checkpoint(model: keras.Model, vocab: list[str], do_lower_case: bool,
                    settings: Settings, dist: Distribution, save_dtype: str = "float32",
                    model_card: str | None = None) -> str | os.PathLike:
    """Writes the checkpoint directory (the chief writes `output`; other workers a copy in
    their backup folder, as every worker must save under a multi-worker strategy)."""
    target = (settings.output if dist.is_chief else
              os.path.join(_backup_dir(settings, dist), "final"))
    assert target is not None, "save_checkpoint is for a run with an output directory"
    checkpoint_lib.save(target, model, vocab=vocab, do_lower_case=do_lower_case,
                        dtype=save_dtype, model_card=model_card)
    return target
