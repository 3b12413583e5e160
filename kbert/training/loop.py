"""Pretraining with `model.fit`: one device, several GPUs, several workers, a TPU, or JAX devices.

`pretrain` is the whole recipe (paper, section 3.1 and appendix A.2): MLM + NSP on the original
BERT TFRecords, AdamW with warmup and linear decay (`kbert.optimization`), checkpoints
every N steps and on SIGTERM/SIGINT, a resumable data stream, TensorBoard logs, and a kbert
checkpoint directory at the end.

Example (the same thing with plain Keras, as a user script would write it):
>>> import keras, kbert                                                          # doctest: +SKIP
>>> from kbert.data.inputs import pretraining_dataset                            # doctest: +SKIP
>>> from kbert.optimization import create_optimizer                   # doctest: +SKIP
>>> ds = pretraining_dataset("shards/", 32, seed=0).map(kbert.pretraining_targets)  # doctest: +SKIP
>>> model = kbert.BertPretrainer(kbert.BertConfig.preset("mini"))                # doctest: +SKIP
>>> optimizer = create_optimizer(learning_rate=1e-4, total_steps=1000)         # doctest: +SKIP
>>> model.compile(optimizer)                                                     # doctest: +SKIP
>>> model.fit(ds, steps_per_epoch=100, epochs=10)                                # doctest: +SKIP
"""

import dataclasses
import hashlib
import math
import os
import time

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert.config import PRESETS, BertConfig, read_vocab
from kbert.models import BertLeftToRightLM, BertPretrainer
from kbert.optimization import OPTIMIZERS, batches_seen, create_optimizer
from kbert.training.callbacks import Backup, StopAfter, TrainingMetrics, save_on_signal
from kbert.training.distribution import STRATEGIES, Distribution, select_distribution

__all__ = ["Distribution", "PretrainResult", "build_pretrainer", "evaluate_pretraining",
           "pretrain", "select_distribution"]
MIXED_PRECISION = (None, "mixed_bfloat16", "mixed_float16")
# The paper's objective and its section 5.1 ablations: MLM + NSP, MLM alone ("No NSP"), and a
# left-to-right LM on a causal encoder ("LTR & No NSP"). Targets: kbert.data.inputs.targets_for.
OBJECTIVES = ("mlm_nsp", "mlm", "ltr")


# --- the model -----------------------------------------------------------------------------------
def build_pretrainer(config=None, init=None, vocab=None, dtype=None, objective="mlm_nsp"):
    """(pretraining model, vocab, do_lower_case) from a config and vocabulary, or from a
    checkpoint: a `BertPretrainer` (with an NSP head for `objective="mlm_nsp"`, without for
    "mlm"), or for "ltr" a `BertLeftToRightLM` on a causal encoder.

    A checkpoint without the objective's heads (e.g. converted encoder weights) gets fresh heads.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown pretraining objective {objective!r}; choose one of "
                         f"{', '.join(OBJECTIVES)}")
    if init is not None:
        ckpt = checkpoint_lib.load(init, dtype=dtype)
        if config is not None:
            wanted = _config_for_vocab(config, len(ckpt.vocab))
            if wanted.to_dict() != ckpt.config.to_dict():
                raise ValueError(f"--config does not match the checkpoint {init} "
                                 f"({ckpt.summary()}); leave --config out to continue it")
        if vocab is not None and list(read_vocab(vocab)) != list(ckpt.vocab):
            raise ValueError(f"--vocab differs from the vocabulary of {init}")
        if (objective == "ltr") != ckpt.config.causal:
            raise ValueError(f"{init} has a {'causal' if ckpt.config.causal else 'bidirectional'}"
                             f" encoder: it cannot continue with the {objective} objective")
        names = {"mlm_nsp": ("mlm", "nsp"), "mlm": ("mlm",), "ltr": ("ltr",)}[objective]
        heads = {name: ckpt.heads.get(name) or checkpoint_lib.make_head(name, ckpt.backbone)
                 for name in names}
        if objective == "ltr":
            return BertLeftToRightLM(ckpt.backbone, heads["ltr"], dtype=dtype), ckpt.vocab, \
                ckpt.do_lower_case
        model = BertPretrainer(ckpt.backbone, heads["mlm"], heads.get("nsp"),
                               next_sentence=objective == "mlm_nsp", dtype=dtype)
        return model, ckpt.vocab, ckpt.do_lower_case
    if vocab is None:
        raise ValueError("pretraining from scratch needs a vocabulary (--vocab)")
    vocab = read_vocab(vocab)
    config = _config_for_vocab(config or "base", len(vocab))
    if objective == "ltr":
        return BertLeftToRightLM(config, dtype=dtype), vocab, True
    return BertPretrainer(config, next_sentence=objective == "mlm_nsp", dtype=dtype), vocab, True


def _config_for_vocab(config, vocab_size):
    """A preset takes the vocabulary's size; a config file or object must match it."""
    if isinstance(config, str) and config in PRESETS:
        return BertConfig.preset(config, vocab_size=vocab_size)
    config = BertConfig.from_any(config)
    if config.vocab_size != vocab_size:
        raise ValueError(f"config vocab_size {config.vocab_size} does not match the "
                         f"vocabulary's {vocab_size} tokens")
    return config


# --- the run -------------------------------------------------------------------------------------
@dataclasses.dataclass
class PretrainResult:
    model: object
    steps: int                  # optimizer updates done in total
    history: dict
    interrupted: bool = False
    output: str = None
    wall_seconds: float = 0.0


@dataclasses.dataclass
class Settings:
    """What `pretrain` was asked for, checked. `resume_key` is what a backup must match."""

    datas: list
    phase_steps: list
    output: str
    config: object
    init: str
    vocab: object
    batch_size: int
    warmup_steps: int
    learning_rate: float
    max_seq_length: int
    max_predictions_per_seq: int
    optimizer: str
    weight_decay: float
    mixed_precision: str
    jit_compile: object
    checkpoint_every: int
    accumulate: int
    dynamic_masking: bool
    seed: int
    strategy: str
    tpu: str
    backup_dir: str
    shuffle_buffer: int
    objective: str = "mlm_nsp"
    text_mode: str = None       # None: `datas` are shards; else each is a list of text files
    data_service: str = None

    @property
    def from_text(self):
        return self.text_mode is not None

    @property
    def steps(self):
        return sum(self.phase_steps)

    @property
    def micro_batch(self):
        return self.batch_size // self.accumulate

    def resume_key(self, model_config, vocab):
        """The settings that decide the weights a run ends with (not where it logs or how
        often it saves): a backup made with other ones is not resumed."""
        return {"data": [_abspath(d) for d in self.datas], "text_mode": self.text_mode,
                "phase_steps": self.phase_steps, "config": model_config.to_dict(),
                "init": os.path.abspath(self.init) if self.init else None,
                "vocab_sha256": hashlib.sha256("\n".join(vocab).encode()).hexdigest(),
                "batch_size": self.batch_size, "warmup_steps": self.warmup_steps,
                "learning_rate": self.learning_rate, "optimizer": self.optimizer,
                "weight_decay": self.weight_decay, "mixed_precision": self.mixed_precision,
                "accumulate": self.accumulate, "dynamic_masking": self.dynamic_masking,
                "seed": self.seed, "shuffle_buffer": self.shuffle_buffer,
                **({"objective": self.objective} if self.objective != "mlm_nsp" else {})}


def _abspath(data):
    return ([os.path.abspath(f) for f in data] if isinstance(data, (list, tuple))
            else os.path.abspath(data))


@dataclasses.dataclass
class Phase:
    """One `--data` set trained on from batch `start` to batch `end` (counted over the run)."""
    data: str
    start: int
    end: int
    make_stream: object         # skip -> a tf.data stream of feature batches from `start + skip`


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
             save_dtype: str = "float32", verbose: bool | str = "auto",
             model_card: str | None = None, shuffle_buffer: int = 10000,
             callbacks: tuple | list = (), objective: str = "mlm_nsp",
             text: str | list | None = None, text_mode: str = "nsp",
             data_service: str | None = None) -> "PretrainResult":
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
    dist = select_distribution(settings.strategy, settings.tpu)  # first: collectives need a
    shapes = _data_shapes(settings)                              # fresh runtime
    keras.utils.set_random_seed(settings.seed)
    model, vocab, do_lower_case = build_model_and_optimizer(settings, dist, shapes)
    backup = Backup(_backup_dir(settings, dist), settings.checkpoint_every * settings.accumulate,
                    settings.resume_key(model.config, vocab))
    seen = backup.restore(model)
    phases = make_phases(settings, vocab, shapes, do_lower_case)
    stop, all_callbacks = make_callbacks(settings, backup, log_dir, callbacks)
    history, seen = fit_phases(model, phases, seen, dist, stop, all_callbacks, settings, verbose)
    result = PretrainResult(model, seen // settings.accumulate, history, backup.interrupted)
    if not backup.interrupted and output is not None:
        result.output = save_checkpoint(model, vocab, do_lower_case, settings, dist,
                                        save_dtype, model_card)
        backup.delete()                         # finished: nothing to resume any more
    result.wall_seconds = time.perf_counter() - started
    return result


def validate_settings(data, output, config, init, vocab, batch_size, steps, warmup_steps,
                      learning_rate, max_seq_length, max_predictions_per_seq, optimizer,
                      weight_decay, mixed_precision, jit_compile, checkpoint_every, accumulate,
                      dynamic_masking, phase_steps, seed, strategy, tpu, backup_dir,
                      shuffle_buffer, objective="mlm_nsp", text=None, text_mode="nsp",
                      data_service=None):
    """Every argument of `pretrain` checked before any work, each problem in one line."""
    datas, text_mode = _data_sources(data, text, text_mode, data_service)
    phase_steps = list(phase_steps) if phase_steps else [steps]
    if len(phase_steps) != len(datas):
        raise ValueError(f"{len(datas)} data sets but {len(phase_steps)} phase step counts")
    for name, value in [("batch size", batch_size), ("--checkpoint-every", checkpoint_every),
                        ("--accumulate", accumulate), ("--shuffle-buffer", shuffle_buffer),
                        *(("steps", s) for s in phase_steps)]:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if batch_size % accumulate:
        raise ValueError(f"batch size {batch_size} is not divisible by --accumulate {accumulate}")
    total = sum(phase_steps)
    warmup = int(0.01 * total) if warmup_steps is None else warmup_steps
    if not 0 <= warmup <= total:
        raise ValueError(f"warmup steps must be in [0, {total}] (the steps), got {warmup}")
    if not learning_rate > 0:
        raise ValueError(f"learning rate must be positive, got {learning_rate}")
    if mixed_precision not in MIXED_PRECISION:
        raise ValueError(f"unknown mixed precision policy {mixed_precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown pretraining objective {objective!r}; choose one of "
                         f"{', '.join(OBJECTIVES)}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if output is None and backup_dir is None:
        raise ValueError("pretrain needs an output directory or a backup_dir")
    if output is not None and os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"output {output} exists and is not a directory")
    return Settings([d if text_mode else str(d) for d in datas], phase_steps, output,
                    config, init, vocab, batch_size, warmup, learning_rate, max_seq_length,
                    max_predictions_per_seq, optimizer, weight_decay, mixed_precision,
                    jit_compile, checkpoint_every, accumulate, dynamic_masking, seed, strategy,
                    tpu, backup_dir, shuffle_buffer, objective, text_mode, data_service)


def _data_sources(data, text, text_mode, data_service):
    """(the data of each phase, the text mode or None for shards), checked."""
    if (data is None) == (text is None):
        raise ValueError("pretrain needs shards (data) or text files (text), one of the two")
    if text is not None:
        return [_text_files(text, text_mode)], text_mode
    if data_service:
        raise ValueError("a data service prepares text (--text), not shards (--data)")
    datas = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    for d in datas:
        if not os.path.exists(d) and not any(c in str(d) for c in "*?["):
            raise FileNotFoundError(f"pretraining data not found: {d}")
    return datas, None


def _text_files(text, mode):
    """The `text` argument → a checked list of file names."""
    from kbert.data.sentences import check_inputs
    from kbert.data.text import MODES  # imported on use: shards need no text pipeline
    if mode not in MODES:
        raise ValueError(f"unknown text mode {mode!r}: use {' or '.join(MODES)}")
    files = [text] if isinstance(text, (str, os.PathLike)) else list(text)
    check_inputs(files)
    return [str(f) for f in files]


def _data_shapes(settings):
    """(max_seq_length, max_predictions_per_seq) of each phase: the shards' own, or for
    text the options (128 and 20 by default)."""
    if settings.from_text:
        return [(settings.max_seq_length or 128, settings.max_predictions_per_seq or 20)]
    from kbert.data import inputs
    return [inputs.shard_shapes(inputs.shard_files(d)) for d in settings.datas]


def build_model_and_optimizer(settings, dist, shapes):
    """(compiled and built pretraining model, vocabulary, do_lower_case), in the strategy's
    scope, after checking the shards fit the model."""
    s = settings
    with dist.scope():
        model, vocab, do_lower_case = build_pretrainer(s.config, s.init, s.vocab,
                                                       dtype=s.mixed_precision,
                                                       objective=s.objective)
        model({"input_ids": np.ones((1, 4), "int32"),                      # builds the model
               "masked_lm_positions": np.zeros((1, 1), "int32")})
        _check_data(s.datas, shapes, model.config, s.max_seq_length, s.max_predictions_per_seq,
                    s.from_text)
        model.compile(create_optimizer(s.optimizer, s.learning_rate, s.steps, s.warmup_steps,
                                       s.weight_decay, gradient_accumulation_steps=s.accumulate,
                                       loss_scale=s.mixed_precision == "mixed_float16"),
                      jit_compile=jit_compile_setting(s.jit_compile))
        model.optimizer.build(model.trainable_variables)
    return model, vocab, do_lower_case


def jit_compile_setting(jit_compile):
    """`jit_compile` for the pretraining step. "auto" is Keras' choice (XLA on a TensorFlow GPU,
    always on JAX), except on PyTorch, where Keras never compiles: there a GPU compiles the step
    (`torch.compile`, the optimizer included), as a long run on fixed shapes pays back minutes of
    compiling, and the eager step is bound by launching many small kernels; a CPU stays eager (a
    compile costs minutes on CPU for a step that gains little from it)."""
    if jit_compile == "auto" and keras.backend.backend() == "torch":
        import torch
        return torch.cuda.is_available()
    return jit_compile


def _backup_dir(settings, dist):
    """Where this worker's backups go (one folder per non-chief worker)."""
    backup_dir = settings.backup_dir or os.path.abspath(settings.output) + ".backup"
    if dist.num_replicas > 1 and not dist.is_chief:
        backup_dir = os.path.join(backup_dir, f"worker-{dist.worker_index}")
    return backup_dir


def make_phases(settings, vocab, shapes, do_lower_case=True):
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

        def make_stream(skip, d=d):
            return inputs.pretraining_dataset(
                d, settings.micro_batch, seed=settings.seed, dynamic_masking=masking,
                shuffle_buffer=settings.shuffle_buffer).skip(skip)
        phases.append(Phase(d, start, end, make_stream))
    return phases


def _text_phase(settings, vocab, shape, do_lower_case):
    """The one phase of a run from text. Locally the stream is deterministic and a resumed
    run skips to its position; from a data service the groups arrive in the workers' order, so
    a resumed run continues with fresh batches."""
    from kbert.data.text import text_pretraining_dataset
    files = settings.datas[0]

    def make_stream(skip):
        return text_pretraining_dataset(
            files, vocab, settings.micro_batch, *shape, mode=settings.text_mode,
            lower_case=do_lower_case, seed=settings.seed, shuffle_buffer=settings.shuffle_buffer,
            data_service=settings.data_service).skip(skip)
    return Phase(files, 0, settings.steps * settings.accumulate, make_stream)


def make_callbacks(settings, backup, log_dir=None, extra=()):
    """(the `StopAfter` that ends each phase, every callback of the run in order)."""
    stop = StopAfter(0)
    callbacks = [TrainingMetrics(settings.batch_size), stop, backup, *extra]
    if log_dir:
        callbacks.append(keras.callbacks.TensorBoard(
            log_dir, update_freq=max(1, settings.checkpoint_every // 10)))
    return stop, callbacks


def fit_phases(model, phases, seen, dist, stop, callbacks, settings, verbose="auto"):
    """`model.fit` over each phase not finished yet, from batch `seen`; returns the merged
    history and the batches seen at the end. A SIGTERM/SIGINT saves a backup and stops."""
    backup = next(c for c in callbacks if isinstance(c, Backup))
    per_epoch = settings.checkpoint_every * settings.accumulate
    history, prepared = {}, False
    with save_on_signal(backup):
        for phase in phases:
            if seen >= phase.end or backup.interrupted:
                continue
            skip = seen - phase.start

            def stream(phase=phase, skip=skip):
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


def _targets(objective):
    """The objective's features → (x, y, sample_weight) map (tf.data: TensorFlow, on use)."""
    from kbert.data.inputs import targets_for
    return targets_for(objective)


def save_checkpoint(model, vocab, do_lower_case, settings, dist, save_dtype="float32",
                    model_card=None):
    """Writes the checkpoint directory (the chief writes `output`; other workers a copy in
    their backup folder, as every worker must save under a multi-worker strategy)."""
    target = (settings.output if dist.is_chief else
              os.path.join(_backup_dir(settings, dist), "final"))
    checkpoint_lib.save(target, model, vocab=vocab, do_lower_case=do_lower_case,
                        dtype=save_dtype, model_card=model_card)
    return target


def _check_data(datas, shapes, config, max_seq_length, max_predictions_per_seq,
                from_text=False):
    """Shard shapes against the options and the model; ids against the vocabulary."""
    import tensorflow as tf

    from kbert.data import inputs
    for d, (seq, preds) in zip(datas, shapes):
        if from_text:
            if seq > config.max_position_embeddings:
                raise ValueError(f"--max-seq-length {seq} exceeds the model's "
                                 f"max_position_embeddings {config.max_position_embeddings}")
            continue
        if max_seq_length and len(datas) == 1 and seq != max_seq_length:
            raise ValueError(f"{d}: shards have max_seq_length {seq}, not {max_seq_length}")
        if max_predictions_per_seq and preds != max_predictions_per_seq:
            raise ValueError(f"{d}: shards have max_predictions_per_seq {preds}, "
                             f"not {max_predictions_per_seq}")
        if seq > config.max_position_embeddings:
            raise ValueError(f"{d}: sequences of {seq} tokens exceed the model's "
                             f"max_position_embeddings {config.max_position_embeddings}")
        files = inputs.shard_files(str(d))
        spec = inputs.feature_spec(seq, preds)
        for record in tf.data.TFRecordDataset(files[:1]).take(64).batch(64):
            top = int(tf.reduce_max(tf.io.parse_example(record, spec)["input_ids"]))
            if top >= config.vocab_size:
                raise ValueError(f"{d}: token id {top} is outside the vocabulary of "
                                 f"{config.vocab_size} (data made with another vocab.txt?)")


def objective_of(model):
    """"mlm_nsp", "mlm" or "ltr": the pretraining objective a model trains."""
    if isinstance(model, BertLeftToRightLM):
        return "ltr"
    return "mlm_nsp" if model.next_sentence else "mlm"


def evaluate_pretraining(model, data, batch_size=64, max_batches=None):
    """Held-out accuracy and loss of a pretraining model (compiled or not) on shards, or on a
    dict of feature arrays (`kbert.data.arrays`, no TensorFlow needed): MLM and NSP for a
    `BertPretrainer` (MLM alone without an NSP head), next-token `lm_` ones for a
    `BertLeftToRightLM` (its loss is the log of the perplexity).

    Reads every record once in order (no shuffling, no repetition).

    Example:
    >>> model = kbert.load("ckpt").task_model("pretraining")          # doctest: +SKIP
    >>> evaluate_pretraining(model, "heldout/")                       # doctest: +SKIP
    {'mlm_accuracy': 0.55, 'nsp_accuracy': 0.9, 'mlm_loss': 2.4, 'nsp_loss': 0.25, 'examples': 1553}
    """
    if not getattr(model, "compiled", False):
        model.compile()
    if isinstance(data, dict):
        from kbert.data import arrays
        ds = arrays.PretrainingBatches(data, batch_size, objective_of(model), shuffle=False)
        examples = len(data["input_ids"])
    else:
        from kbert.data import inputs
        ds = inputs.pretraining_dataset(str(data), batch_size, is_training=False)
        ds = ds.map(inputs.targets_for(objective_of(model)))
        examples = sum(1 for _ in inputs.pretraining_dataset(str(data), 4096, is_training=False)
                       .unbatch())
    out = model.evaluate(ds, steps=max_batches, return_dict=True, verbose=0)
    result, single = {}, len(model.outputs_trained) == 1
    for output in model.outputs_trained:                 # "mlm_logits" -> "mlm_accuracy", ...
        name = output.removesuffix("_logits")
        # Keras names a single output's metrics without the output's name.
        result[f"{name}_accuracy"] = float(out["accuracy" if single else f"{output}_accuracy"])
        result[f"{name}_loss"] = float(out["loss" if single else f"{output}_loss"])
    return {**{k: v for k, v in sorted(result.items(), key=lambda kv: kv[0].endswith("loss"))},
            "examples": int(examples)}
