"""What `pretrain` is asked for, checked before any work (`validate_settings` → `Settings`), and
the data it names: shards or text files, their shapes, checked against the model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # type-only
    from kbert.network.config import BertConfig

import dataclasses
import hashlib
import os

from kbert.hardware import MIXED_PRECISION, mixed_precision_policy  # noqa: F401  (re-exported)
from kbert.models.optimization import OPTIMIZERS
from kbert.training.distribution import STRATEGIES
from kbert.training.pretrainer import OBJECTIVES


@dataclasses.dataclass
class Settings:
    """What `pretrain` was asked for, checked. `resume_key` is what a backup must match."""

    datas: list
    phase_steps: list
    output: str | os.PathLike | None
    config: BertConfig | dict | str | None
    init: str | os.PathLike | None
    vocab: str | list[str] | None
    batch_size: int
    warmup_steps: int
    learning_rate: float
    max_seq_length: int | None
    max_predictions_per_seq: int | None
    optimizer: str
    weight_decay: float
    mixed_precision: str | None        # the Keras policy (`mixed_precision_policy`); None: float32
    jit_compile: str | bool
    checkpoint_every: int
    accumulate: int
    dynamic_masking: bool
    seed: int
    strategy: str
    tpu: str | None
    backup_dir: str | None
    shuffle_buffer: int
    objective: str = "mlm_nsp"
    text_mode: str | None = None       # None: `datas` are shards; else each is a list of text files
    data_service: str | None = None

    @property
    def from_text(self) -> bool:
        return self.text_mode is not None

    @property
    def steps(self) -> int:
        return sum(self.phase_steps)

    @property
    def micro_batch(self) -> int:
        return self.batch_size // self.accumulate

    def resume_key(self, model_config: BertConfig, vocab: Sequence[str]) -> dict[str, Any]:
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


def _abspath(data: str | os.PathLike | list | tuple) -> str | list[str]:
    return ([os.path.abspath(f) for f in data] if isinstance(data, (list, tuple))
            else os.path.abspath(data))


def validate_settings(data: str | os.PathLike | list | None, output: str | os.PathLike | None,
                      config: BertConfig | dict | str | None, init: str | os.PathLike | None,
                      vocab: str | list[str] | None, batch_size: int, steps: int,
                      warmup_steps: int | None, learning_rate: float,
                      max_seq_length: int | None, max_predictions_per_seq: int | None,
                      optimizer: str, weight_decay: float, mixed_precision: str | None,
                      jit_compile: str | bool, checkpoint_every: int, accumulate: int,
                      dynamic_masking: bool, phase_steps: list[int] | None, seed: int,
                      strategy: str, tpu: str | None, backup_dir: str | None,
                      shuffle_buffer: int, objective: str = "mlm_nsp",
                      text: str | list | None = None, text_mode: str | None = "nsp",
                      data_service: str | None = None) -> Settings:
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
    mixed_precision = mixed_precision_policy(mixed_precision)   # "auto" → this machine's
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


def _data_sources(data: str | os.PathLike | list | None, text: str | list | None,
                  text_mode: str | None, data_service: str | None) -> tuple[list, str | None]:
    """(the data of each phase, the text mode or None for shards), checked."""
    if (data is None) == (text is None):
        raise ValueError("pretrain needs shards (data) or text files (text), one of the two")
    if text is not None:
        return [_text_files(text, text_mode)], text_mode
    if data_service:
        raise ValueError("a data service prepares text (--text), not shards (--data)")
    datas = ([data] if isinstance(data, (str, os.PathLike))
             else list(data))   # type: ignore[arg-type]  # not None: `text` is
    for d in datas:
        if not os.path.exists(d) and not any(c in str(d) for c in "*?["):
            raise FileNotFoundError(f"pretraining data not found: {d}")
    return datas, None


def _text_files(text: str | os.PathLike | list, mode: str | None) -> list[str]:
    """The `text` argument → a checked list of file names."""
    from kbert.data.sentences import check_inputs
    from kbert.data.text import MODES  # imported on use: shards need no text pipeline
    if mode not in MODES:
        raise ValueError(f"unknown text mode {mode!r}: use {' or '.join(MODES)}")
    files = [text] if isinstance(text, (str, os.PathLike)) else list(text)
    check_inputs(files)
    return [str(f) for f in files]


def data_shapes(settings: Settings) -> list[tuple[int, int]]:
    """(max_seq_length, max_predictions_per_seq) of each phase: the shards' own, or for
    text the options (128 and 20 by default)."""
    if settings.from_text:
        return [(settings.max_seq_length or 128, settings.max_predictions_per_seq or 20)]
    from kbert.data import inputs
    return [inputs.shard_shapes(inputs.shard_files(d)) for d in settings.datas]


def check_data(datas: Sequence[Any], shapes: Sequence[tuple[int, int]], config: BertConfig,
               max_seq_length: int | None, max_predictions_per_seq: int | None,
               from_text: bool = False) -> None:
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
