"""Pretraining with `model.fit`: one device, several GPUs, several workers, a TPU, or JAX devices.

`pretrain` is the whole recipe (paper, section 3.1 and appendix A.2): MLM + NSP on the original
BERT TFRecords, AdamW with warmup and linear decay (`kbert.training.optimization`), checkpoints every N
steps and on SIGTERM/SIGINT, a resumable data stream, TensorBoard logs, and a kbert checkpoint
directory at the end.

Example (the same thing with plain Keras, as a user script would write it):
>>> import keras, kbert                                                          # doctest: +SKIP
>>> from kbert.data.inputs import pretraining_dataset                            # doctest: +SKIP
>>> from kbert.training.optimization import create_optimizer                              # doctest: +SKIP
>>> ds = pretraining_dataset("shards/", 32, seed=0).map(kbert.pretraining_targets)  # doctest: +SKIP
>>> model = kbert.BertPretrainer(kbert.BertConfig.preset("mini"))                # doctest: +SKIP
>>> model.compile(create_optimizer(learning_rate=1e-4, total_steps=1000, warmup_steps=100))  # doctest: +SKIP
>>> model.fit(ds, steps_per_epoch=100, epochs=10)                                # doctest: +SKIP
"""

import contextlib
import dataclasses
import math
import os
import time

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert.training.callbacks import Backup, StopAfter, TrainingMetrics, save_on_signal
from kbert.config import BertConfig, read_vocab
from kbert.models import BertPretrainer
from kbert.training.optimization import batches_seen, create_optimizer

STRATEGIES = ("auto", "default", "mirrored", "multi-worker", "tpu", "data-parallel")
MIXED_PRECISION = (None, "mixed_bfloat16", "mixed_float16")


def _targets(features):
    # The tf.data inputs need TensorFlow; imported on use so the rest of this module does not.
    from kbert.data.inputs import pretraining_targets
    return pretraining_targets(features)


# --- where training runs -------------------------------------------------------------------------
@dataclasses.dataclass
class Distribution:
    """The devices a run uses and how a global batch is split across them.

    `strategy` is a `tf.distribute.Strategy` on TensorFlow (None for one device); on JAX a
    `keras.distribution.DataParallel` is set globally and `strategy` is None.
    """

    kind: str
    strategy: object = None
    num_replicas: int = 1
    worker_index: int = 0

    @property
    def is_chief(self):
        return self.worker_index == 0

    def scope(self):
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def dataset(self, make_stream, global_batch_size):
        """`make_stream()` gives global batches of features; returns what `fit` should read.

        Every input pipeline reads the same deterministic stream and keeps its slice of each
        global batch, so global batch k is the same whatever the number of devices (and a
        resumed run can skip to its position).
        """
        if global_batch_size % self.num_replicas:
            raise ValueError(f"batch size {global_batch_size} is not divisible by the "
                             f"{self.num_replicas} replicas")
        if self.strategy is None:
            return make_stream().map(_targets)

        stream = make_stream()                  # built here: the same seeds as one device

        def per_pipeline(context):
            size = global_batch_size // context.num_input_pipelines
            start = context.input_pipeline_id * size
            ds = stream.map(lambda f: {k: v[start:start + size] for k, v in f.items()})
            ds = ds.rebatch(context.get_per_replica_batch_size(global_batch_size))
            return ds.map(_targets)
        return self.strategy.distribute_datasets_from_function(per_pipeline)


def select_distribution(kind="auto", tpu=None):
    """One entry point for every topology.

    TensorFlow: "tpu" (a `TPUClusterResolver`, `tpu` names it; "auto" picks it when `TPU_NAME`
    is set), "multi-worker" (`MultiWorkerMirroredStrategy` from `TF_CONFIG`; "auto" when it is
    set), "mirrored" (every GPU, or every logical CPU when there is no GPU; "auto" with 2+ GPUs),
    "default" (one device). JAX: "data-parallel" (`keras.distribution.DataParallel` over all
    devices; "auto" with 2+ devices). PyTorch: one device.
    """
    if kind not in STRATEGIES:
        raise ValueError(f"unknown strategy {kind!r}; choose one of {', '.join(STRATEGIES)}")
    backend = keras.backend.backend()
    if backend == "jax":
        import jax
        if kind in ("auto", "data-parallel") and (kind == "data-parallel" or jax.device_count() > 1):
            distribution = keras.distribution.DataParallel(devices=jax.devices())
            keras.distribution.set_distribution(distribution)
            return Distribution("data-parallel", None, jax.device_count(), jax.process_index())
        if kind not in ("auto", "default"):
            raise ValueError(f"strategy {kind!r} needs the tensorflow backend")
        return Distribution("default")
    if backend != "tensorflow":
        if kind not in ("auto", "default"):
            raise ValueError(f"strategy {kind!r} is not available on the {backend} backend")
        return Distribution("default")

    import tensorflow as tf
    if kind == "auto":                          # TPU and TF_CONFIG first: listing devices
        kind = ("tpu" if tpu or os.environ.get("TPU_NAME") else          # starts the runtime
                "multi-worker" if os.environ.get("TF_CONFIG") else
                "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default")
    if kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif kind == "multi-worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        strategy = tf.distribute.MirroredStrategy([d.name for d in devices])
    else:
        return Distribution("default")
    resolver = strategy.cluster_resolver
    index = resolver.task_id if resolver is not None and resolver.task_id is not None else 0
    return Distribution(kind, strategy, strategy.num_replicas_in_sync, int(index))


# --- the model -----------------------------------------------------------------------------------
def build_pretrainer(config=None, init=None, vocab=None, dtype=None):
    """(BertPretrainer, vocab, do_lower_case) from a config and vocabulary, or from a checkpoint.

    A checkpoint without MLM/NSP heads (e.g. converted encoder weights) gets fresh heads.
    """
    if init is not None:
        ckpt = checkpoint_lib.load(init, dtype=dtype)
        if config is not None:
            wanted = _config_for_vocab(config, len(ckpt.vocab))
            if wanted.to_dict() != ckpt.config.to_dict():
                raise ValueError(f"--config does not match the checkpoint {init} "
                                 f"({ckpt.summary()}); leave --config out to continue it")
        if vocab is not None and list(read_vocab(vocab)) != list(ckpt.vocab):
            raise ValueError(f"--vocab differs from the vocabulary of {init}")
        heads = {name: ckpt.heads.get(name) or checkpoint_lib.make_head(name, ckpt.backbone)
                 for name in ("mlm", "nsp")}
        model = BertPretrainer(ckpt.backbone, heads["mlm"], heads["nsp"], dtype=dtype)
        return model, ckpt.vocab, ckpt.do_lower_case
    if vocab is None:
        raise ValueError("pretraining from scratch needs a vocabulary (--vocab)")
    vocab = read_vocab(vocab)
    config = _config_for_vocab(config or "base", len(vocab))
    return BertPretrainer(config, dtype=dtype), vocab, True


def _config_for_vocab(config, vocab_size):
    """A preset takes the vocabulary's size; a config file or object must match it."""
    from kbert.config import PRESETS
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


def pretrain(data: str | os.PathLike | list, output: str | os.PathLike | None = None,
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
             callbacks: tuple | list = ()) -> "PretrainResult":
    """Pretrains (MLM + NSP) and writes a kbert checkpoint directory to `output`.

    Args:
        data: a shard directory (or glob), or one per phase for the two-phase schedule (128
            then 512 tokens, `phase_steps=[s1, s2]`).
        batch_size: the global batch per optimizer update (split over replicas and over
            `accumulate` gradient-accumulation batches).
        steps: optimizer updates in total; `warmup_steps` defaults to 1% of them.
        checkpoint_every: updates between backups (in `backup_dir`, default `output + ".backup"`);
            a killed run started again with the same arguments resumes from the last one.
        dynamic_masking: re-draw the masks of every batch (RoBERTa) instead of the stored ones.

    Example:
    >>> result = pretrain("shards/", "out/ckpt", config="mini", vocab="vocab.txt",  # doctest: +SKIP
    ...                   batch_size=32, steps=1000)
    """
    from kbert.data import inputs

    started = time.perf_counter()
    datas = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    for d in datas:
        if not os.path.exists(d) and not any(c in str(d) for c in "*?["):
            raise FileNotFoundError(f"pretraining data not found: {d}")
    phase_steps = list(phase_steps) if phase_steps else [steps]
    if len(phase_steps) != len(datas):
        raise ValueError(f"{len(datas)} data sets but {len(phase_steps)} phase step counts")
    steps = sum(phase_steps)
    if accumulate < 1 or batch_size % accumulate:
        raise ValueError(f"batch size {batch_size} is not divisible by --accumulate {accumulate}")
    if mixed_precision not in MIXED_PRECISION:
        raise ValueError(f"unknown mixed precision policy {mixed_precision!r}")
    micro_batch = batch_size // accumulate
    dist = select_distribution(strategy, tpu)   # first: collective ops need a fresh runtime
    shapes = [inputs.shard_shapes(inputs.shard_files(str(d))) for d in datas]

    keras.utils.set_random_seed(seed)
    with dist.scope():
        model, vocab, do_lower_case = build_pretrainer(config, init, vocab, dtype=mixed_precision)
        model({"input_ids": np.ones((1, 4), "int32"),                      # builds the model
               "masked_lm_positions": np.zeros((1, 1), "int32")})
        _check_data(datas, shapes, model.config, max_seq_length, max_predictions_per_seq)
        warmup = int(0.01 * steps) if warmup_steps is None else warmup_steps
        model.compile(create_optimizer(optimizer, learning_rate, steps, warmup, weight_decay,
                                       gradient_accumulation_steps=accumulate,
                                       loss_scale=mixed_precision == "mixed_float16"),
                      jit_compile=jit_compile)
        model.optimizer.build(model.trainable_variables)
    if output is None and backup_dir is None:
        raise ValueError("pretrain needs an output directory or a backup_dir")
    backup_dir = backup_dir or os.path.abspath(output) + ".backup"
    if dist.num_replicas > 1 and not dist.is_chief:
        backup_dir = os.path.join(backup_dir, f"worker-{dist.worker_index}")
    backup = Backup(backup_dir, checkpoint_every * accumulate)
    seen = backup.restore(model)

    masking = None
    if dynamic_masking:
        from kbert.data.inputs import DynamicMasking
        masking = DynamicMasking(vocab, shapes[0][1])
    callbacks = [TrainingMetrics(batch_size), StopAfter(0), backup, *callbacks]
    if log_dir:
        callbacks.append(keras.callbacks.TensorBoard(log_dir, update_freq=max(1, checkpoint_every // 10)))
    history, end = {}, 0
    with save_on_signal(backup):
        for d, phase in zip(datas, phase_steps):
            start, end = end, end + phase * accumulate
            if seen >= end or backup.interrupted:
                continue
            skip = seen - start

            def stream(d=d, skip=skip):
                return inputs.pretraining_dataset(
                    str(d), micro_batch, seed=seed, dynamic_masking=masking,
                    shuffle_buffer=shuffle_buffer).skip(skip)
            callbacks[1].total_batches = end
            if dist.kind == "multi-worker" and not hasattr(model, "_kbert_step"):
                # Keras averages the per-replica logs with axis=0, which scalars lack.
                import tensorflow as tf
                model._kbert_step = model.train_step
                model.train_step = lambda data: {
                    k: tf.reshape(v, [1]) for k, v in model._kbert_step(data).items()}
            if dist.strategy is not None:
                # Keras builds metrics from a batch it reduces across replicas (failing under
                # MultiWorkerMirroredStrategy); hand it a local batch instead.
                sample = next(iter(stream().take(1).map(_targets)))
                model._maybe_symbolic_build = (
                    lambda iterator=None, data_batch=None, build=model._maybe_symbolic_build,
                    sample=sample: build(data_batch=sample))
            per_epoch = checkpoint_every * accumulate
            first_epoch = seen // per_epoch
            fit = model.fit(dist.dataset(stream, micro_batch), steps_per_epoch=per_epoch,
                            initial_epoch=first_epoch,
                            epochs=first_epoch + math.ceil((end - seen) / per_epoch) + 1,
                            callbacks=callbacks, verbose=verbose)
            for k, v in fit.history.items():
                history.setdefault(k, []).extend(v)
            seen = batches_seen(model.optimizer)
    result = PretrainResult(model, seen // accumulate, history, backup.interrupted)
    if not backup.interrupted and output is not None:
        target = output if dist.is_chief else os.path.join(backup_dir, "final")
        checkpoint_lib.save(target, model, vocab=vocab, do_lower_case=do_lower_case,
                            dtype=save_dtype, model_card=model_card)
        result.output = target
    result.wall_seconds = time.perf_counter() - started
    return result


def _check_data(datas, shapes, config, max_seq_length, max_predictions_per_seq):
    """Shard shapes against the options and the model; ids against the vocabulary."""
    import tensorflow as tf
    from kbert.data import inputs
    for d, (seq, preds) in zip(datas, shapes):
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


def evaluate_pretraining(model, data, batch_size=64, max_batches=None):
    """Held-out MLM and NSP accuracy and loss of a `BertPretrainer` (compiled or not).

    Reads every record once in file order (no shuffling, no repetition).

    Example:
    >>> evaluate_pretraining(kbert.load("ckpt").task_model("pretraining"), "heldout/")  # doctest: +SKIP
    {'mlm_accuracy': 0.55, 'nsp_accuracy': 0.9, 'mlm_loss': 2.4, 'nsp_loss': 0.25, 'examples': 1553}
    """
    from kbert.data import inputs
    if not getattr(model, "compiled", False):
        model.compile()
    ds = inputs.pretraining_dataset(str(data), batch_size, is_training=False)
    ds = ds.map(_targets)
    examples = sum(1 for _ in inputs.pretraining_dataset(str(data), 4096, is_training=False)
                   .unbatch())
    out = model.evaluate(ds, steps=max_batches, return_dict=True, verbose=0)
    return {"mlm_accuracy": float(out["mlm_logits_accuracy"]),
            "nsp_accuracy": float(out["nsp_logits_accuracy"]),
            "mlm_loss": float(out["mlm_logits_loss"]), "nsp_loss": float(out["nsp_logits_loss"]),
            "examples": int(examples)}
