"""Fine-tuning (paper, section 4) with `model.fit`, and the official dev scores of each task.

`finetune` puts a fresh head on a checkpoint's encoder (`[CLS]` classifier or regressor for
GLUE, a tagger on each word's first piece for CoNLL-2003, start/end logits for SQuAD, a
shared choice scorer for SWAG), trains with the paper's recipe — AdamW (decay 0.01, not on
LayerNorm or biases), 10% warmup then linear decay, batches of similar length padded only
to their own longest row — scores the dev file with the task's official metric after each
epoch, and keeps the best epoch as a checkpoint directory (written atomically), with the
run's curves beside it (`history.json`, `curves.png`: `kbert.training.curves`).

`evaluate` scores a fine-tuned checkpoint on a file: the dict `kbert evaluate` prints.
The per-task reading, encoding and scoring lives in `kbert.tasks.registry`.

Example:
>>> result = finetune("sst2", "saved_models/minilm", "SST-2/train.tsv",  # doctest: +SKIP
...                   "SST-2/dev.tsv", "out/sst2", epochs=3, learning_rate=2e-5)
>>> evaluate("sst2", "out/sst2", "SST-2/dev.tsv")                        # doctest: +SKIP
{'accuracy': 91.2}
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert import hub, outputs, progress
from kbert.hardware import mixed_precision_policy
from kbert.models import compilation
from kbert.models.optimization import check_schedule, create_optimizer
from kbert.models.task_models import task_model
from kbert.tasks import batching
from kbert.tasks.registry import TASKS, Prepared, get_task, rename_labels
from kbert.training import curves
from kbert.training.callbacks import KeepBest

if TYPE_CHECKING:
    from kbert.network.config import BertConfig
    from kbert.pipeline import Bert
    from kbert.tasks.registry import Options, Task

INPUT_KEYS = ("input_ids", "segment_ids", "input_mask")
PAD_TO_MULTIPLE = 16   # batch widths rounded up: few shapes for XLA / JAX to compile

__all__ = ["TASKS", "finetune", "encode", "evaluate", "predict", "Encoded", "FinetuneResult"]


def _compiles_per_shape(jit_compile: str | bool) -> bool:
    """Whether the train step is compiled for each batch shape (XLA): JAX, and TensorFlow with
    `jit_compile` (on, or "auto" on a GPU); their batches take `width_ladder`'s few widths.
    PyTorch's compiled step generalizes over shapes (Dynamo's dynamic shapes)."""
    backend = keras.backend.backend()
    if backend == "jax":
        return jit_compile is not False
    if backend == "tensorflow":
        import tensorflow as tf
        return jit_compile is True or (jit_compile == "auto"
                                       and bool(tf.config.list_logical_devices("GPU")))
    return False


def predict(model: keras.Model, features: dict[str, np.ndarray], batch_size: int = 64,
            sequence_output: bool = False, multiple: int = PAD_TO_MULTIPLE,
            desc: str = "predicting") -> np.ndarray | dict[str, np.ndarray]:
    """Model outputs for every row of `features`, in the rows' order (a progress bar `desc`).

    Batches group similar lengths; per-token outputs (`sequence_output=True`) come back
    zero-padded to the features' full width. A dict output gives a dict of arrays.
    """
    inputs = {k: features[k] for k in INPUT_KEYS if k in features}
    n, full = len(inputs["input_ids"]), np.shape(inputs["input_ids"])[-1]
    results: dict = {}                 # output name (None: a bare array) → [N, ...]
    with progress.bar(total=n, desc=desc, unit="example") as shown:
        for index, batch in batching.batches(inputs, batch_size, bucket=True, multiple=multiple):
            out = model.predict_on_batch(batch)
            shown.update(len(index))
            for key, value in (out.items() if isinstance(out, dict) else [(None, out)]):
                value = np.asarray(value, dtype="float32")
                if key not in results:
                    rest = (full,) + value.shape[2:] if sequence_output else value.shape[1:]
                    results[key] = np.zeros((n,) + rest, "float32")
                if sequence_output:
                    results[key][index, :value.shape[1]] = value
                else:
                    results[key][index] = value
    return results[None] if list(results) == [None] else results


def _max_seq_length(spec: Task, max_seq_length: int | None, config: BertConfig) -> int:
    if not max_seq_length:                 # the task's default, within the model's positions
        return min(spec.max_seq_length, config.max_position_embeddings)
    length = max_seq_length
    if length > config.max_position_embeddings:
        raise ValueError(f"max_seq_length {length} exceeds the model's "
                         f"max_position_embeddings {config.max_position_embeddings}")
    return length


def _load(model: str | os.PathLike | checkpoint_lib.Checkpoint | Bert,
          dtype: str = "float32") -> checkpoint_lib.Checkpoint:
    """A Checkpoint from a directory, a Checkpoint or what `kbert.load` returns; a directory
    is read with its encoder in `dtype` ("float32", "bfloat16" or "auto"; the heads stay
    float32)."""
    if isinstance(model, checkpoint_lib.Checkpoint):
        return model
    if hasattr(model, "checkpoint"):
        # a Keras-runtime `Bert` (`_graph_runtime_model`): its checkpoint has the layers
        return model.checkpoint  # type: ignore[return-value]
    from kbert.runtime import resolve
    _, dtype = resolve("keras", dtype)
    return checkpoint_lib.load(hub.resolve(model), dtype=dtype, head_dtype="float32")


def _scores(spec: Task, model: Any, prepared: Prepared, options: Options, batch_size: int,
            tune: bool = False, desc: str = "scoring") -> tuple[dict[str, float], Options]:
    outputs = predict(model, prepared.features, batch_size, spec.sequence_output, desc=desc)
    return spec.score(prepared, outputs, options, tune=tune)


def evaluate(task: str, model: "str | os.PathLike | checkpoint_lib.Checkpoint",
             data: str | os.PathLike, batch_size: int = 64,
             max_seq_length: int | None = None,
             task_options: dict | None = None, dtype: str = "float32",
             runtime: str | None = None) -> dict[str, float]:
    """The task's official scores (percentages) of a fine-tuned checkpoint on `data`.

    Args:
        task: one of `TASKS`.
        model: a checkpoint directory, a loaded `Checkpoint` or `kbert.load(...)`'s result;
            it needs the task's head (a clear error names the missing one).
        data: the task's file (GLUE TSV, SQuAD JSON, CoNLL-2003, SWAG CSV; for the own-data
            tasks a CSV/TSV/JSONL, CoNLL or SQuAD file).
        task_options: `get_task`'s column options (own-data tasks).
        dtype: the encoder's precision for a checkpoint directory: "float32" (default),
            "bfloat16", "auto" or (on a graph runtime) "int8" (`kbert.load`'s meaning); the
            heads stay float32.
        runtime: None or "keras" (the Keras task model), "openvino" or "onnx": the scores of
            the exported graphs `kbert.load(model, runtime=..., dtype=...)` serves, on the
            same features, batches and metric (what a precision or runtime costs in accuracy).
    """
    spec = get_task(task, **(task_options or {}))
    bert = _graph_runtime_model(model, runtime, dtype)
    ckpt = bert.checkpoint if bert is not None else _load(model, dtype)
    options = ckpt.head_options.get(spec.head, {})
    # the path (None: a Checkpoint made in memory) only names it in an error message
    spec.check_options(options, ckpt.path)  # type: ignore[arg-type]
    if bert is not None:
        predictor = _PassPredictor(bert, spec.head)
    else:                             # `_load`'s Checkpoint (not a Bert's Contents)
        predictor = task_model(ckpt, spec.head)  # type: ignore[arg-type]
    from kbert.tokenizer import Tokenizer  # TensorFlow Text; predict() runs without it
    tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
    prepared = spec.encode(tokenizer, spec.read(data), _max_seq_length(
        spec, max_seq_length, ckpt.config), training=False, options=options)
    return _scores(spec, predictor, prepared, options, batch_size)[0]


def _graph_runtime_model(model: str | os.PathLike | checkpoint_lib.Checkpoint | Bert,
                         runtime: str | None, dtype: str) -> Bert | None:
    """`kbert.load`'s model where the passes run on another runtime than Keras (or in int8),
    else None (the Keras task model is scored)."""
    if runtime in (None, "keras") and dtype != "int8":
        if getattr(model, "runtime", "keras") == "keras":
            return None
        # a graph runtime's `kbert.load` result (only a `Bert` has a runtime)
        return model  # type: ignore[return-value]
    if hasattr(model, "checkpoint"):
        raise ValueError("evaluate: pass the checkpoint directory with runtime=/dtype=, "
                         "not a loaded model")
    from kbert.pipeline import load
    # a directory here: a loaded `Bert` is refused above
    return load(os.fspath(model),  # type: ignore[arg-type]
                dtype=dtype, runtime=runtime or "keras")


class _PassPredictor:
    """`predict_on_batch` over a loaded model's forward pass (kbert.runtime), giving what the
    Keras task model gives, so that `evaluate` scores every runtime with one code path."""

    PASSES = ("classifier", "tagger", "span")     # the heads a runtime serves as a pass

    def __init__(self, bert: Bert, head: str) -> None:
        if head not in self.PASSES:
            raise ValueError(f"evaluate: the {head!r} head runs on the keras runtime only "
                             f"(runtime={bert.runtime!r} serves {', '.join(self.PASSES)})")
        from kbert.inference.arguments import require_head
        require_head(bert.checkpoint, head, "evaluate")
        self.bert, self.kind = bert, head

    def predict_on_batch(self, batch: dict[str, np.ndarray]) -> np.ndarray | dict[str, np.ndarray]:
        n = len(batch["input_ids"])
        features = {k: np.asarray(batch[k], "int32") for k in INPUT_KEYS}
        out = np.asarray(self.bert.text_runner.run(self.kind, features, n))
        if self.kind == "span":                      # [B, T, 2] -> the task model's dict
            return {"start_logits": out[..., 0], "end_logits": out[..., 1]}
        return out


@dataclasses.dataclass
class Encoded:
    """A task's training and dev files read and tokenized once, for one vocabulary
    (`encode`). `finetune(..., encoded=...)` trains from it without reading or tokenizing,
    so without TensorFlow: encode where TensorFlow is, pickle it, fine-tune anywhere."""

    task: str
    vocab: list
    do_lower_case: bool
    max_seq_length: int
    options: dict          # the head's options (e.g. the labels found in the training file)
    train: Prepared        # the task's encoded sets (`spec.encode`'s)
    dev: Prepared


def encode(task: str, vocab: str | os.PathLike | Sequence[str], train: str | os.PathLike,
           dev: str | os.PathLike,
           max_seq_length: int | None = None, do_lower_case: bool = True,
           max_train_examples: int | None = None,
           task_options: dict | None = None) -> Encoded:
    """Reads and tokenizes a task's `train` and `dev` files (TensorFlow Text) into an `Encoded`.

    Args:
        vocab: a `vocab.txt` path or token list: the checkpoint's that will be fine-tuned.
        max_seq_length: default: the task's (128; SQuAD 384).
        max_train_examples: keep the first N training examples only.
    """
    from kbert.network.config import read_vocab
    from kbert.tokenizer import Tokenizer  # TensorFlow Text; training from Encoded runs without
    spec = get_task(task, **(task_options or {}))
    vocab = list(read_vocab(vocab) if isinstance(vocab, (str, os.PathLike)) else vocab)
    length = max_seq_length or spec.max_seq_length
    tokenizer = Tokenizer(vocab, lower_case=do_lower_case)
    train_data, dev_data = spec.read(train), spec.read(dev)
    if max_train_examples:
        train_data = spec.head_of(train_data, max_train_examples)
    options = spec.head_options(train_data)
    return Encoded(spec.name, vocab, do_lower_case, length, options,
                   spec.encode(tokenizer, train_data, length, training=True, options=options),
                   spec.encode(tokenizer, dev_data, length, training=False, options=options))


def _check_encoded(encoded: Encoded, spec: Task, ckpt: checkpoint_lib.Checkpoint,
                   init: str | os.PathLike) -> None:
    if encoded.task != spec.name:
        raise ValueError(f"the encoded data is for {encoded.task}, not {spec.name}")
    if list(encoded.vocab) != list(ckpt.vocab) or encoded.do_lower_case != ckpt.do_lower_case:
        raise ValueError(f"the encoded data was tokenized with another vocabulary than {init}'s")
    _max_seq_length(spec, encoded.max_seq_length, ckpt.config)     # fits the positions


@dataclasses.dataclass
class FinetuneResult:
    output: str
    metric: str            # the dev metric that picked the best epoch
    best_epoch: int        # 1-based
    best_scores: dict
    history: list          # per epoch: {"epoch", "loss", "seconds", dev scores ...}
    train_examples: int
    train_seconds: float   # model.fit only (evaluation included)
    wall_seconds: float    # everything, reading and encoding included
    precision: str = "float32"   # what ran: "float32" or the mixed policy


def _model_card(task: str, init: str | os.PathLike, train: str | os.PathLike,
                dev: str | os.PathLike, settings: dict[str, Any], history: list[dict[str, Any]],
                metric: str) -> str:
    lines = [f"# {task} fine-tuned with kbert", "",
             f"Fine-tuned with `kbert finetune {task}` from `{init}`.", "",
             f"- train file: `{train}`", f"- dev file: `{dev}`",
             "- " + ", ".join(f"{k} {v}" for k, v in settings.items()), "",
             f"Dev scores per epoch (the best {metric} is kept):", ""]
    for h in history:
        lines.append(f"- epoch {h['epoch']}: " + ", ".join(
            f"{k} {v:.2f}" for k, v in h.items() if k not in ("epoch", "seconds")))
    return "\n".join(lines) + "\n"


def finetune(task: str, init: str | os.PathLike, train: str | os.PathLike | None,
             dev: str | os.PathLike | None, output: str | os.PathLike, epochs: int = 3,
             learning_rate: float = 3e-5, batch_size: int = 32, warmup: float = 0.1,
             max_seq_length: int | None = None, seed: int = 0, weight_decay: float = 0.01,
             tune_null_threshold: bool = False, jit_compile: str | bool = "auto",
             save_dtype: str = "float32", eval_batch_size: int = 64,
             max_train_examples: int | None = None, bucketing: bool = True,
             model_card: str | None = None, verbose: bool = True,
             task_options: dict | None = None,
             encoded: Encoded | None = None,
             mixed_precision: str | None = None,
             overwrite: bool = False, log_dir: str | os.PathLike | None = None,
             label_names: Sequence[str] | None = None,
             ) -> "FinetuneResult":
    """Fine-tunes `init` on `train`, keeping the epoch with the best `dev` score in `output`.

    Args:
        task: one of `TASKS` (`sst2 cola mrpc rte stsb qqp mnli qnli wnli squad squad2
            conll2003 swag`, or on your own files `classify regress tag qa`: the labels
            found in `train` are stored in the checkpoint).
        init: the checkpoint directory to start from (its encoder; a fresh task head).
        epochs, learning_rate, batch_size: the paper suggests 2–4, {5e-5, 3e-5, 2e-5},
            {16, 32}.
        warmup: the fraction of the updates with a rising learning rate.
        max_seq_length: default 128 (SQuAD 384).
        tune_null_threshold: SQuAD v2.0: pick the null-score threshold with the best dev F1
            and store it in the span head's options.
        max_train_examples: train on the first N examples only (quick runs).
        bucketing: group examples of similar length into a batch (less padding, faster);
            `False` shuffles freely. Either way each batch is padded to its longest row.
        model_card: MODEL_CARD.md text; default: a short generated one (an existing card in
            `output` is kept).
        task_options: `get_task`'s column options (`text_column`, `text_pair_column`,
            `label_column`) for the own-data tasks.
        encoded: `encode(...)`'s sets, made with the checkpoint's vocabulary: nothing is read
            or tokenized (`train`, `dev`, `max_seq_length`, `max_train_examples` are those
            it was made with; the paths only name the files in the model card).
        mixed_precision: None or "float32" (default), "auto" (mixed_bfloat16 where the
            machine has fast bfloat16, else float32), "mixed_bfloat16" or "mixed_float16"
            (with loss scaling): the encoder computes in that precision on float32 weights;
            the head, its logits and the loss stay float32, the checkpoint is `save_dtype`.
        overwrite: replace a checkpoint already at `output` (refused otherwise, before any
            work; anything else there is always refused). `output` is locked for the run.
        log_dir: a TensorBoard log directory (`keras.callbacks.TensorBoard`: the loss, the
            metrics, the learning rate and the dev scores of each epoch); default none.
        label_names: classifier tasks: what the checkpoint calls its labels, in the order of
            the task's labels (a GLUE task's table, e.g. sst2's "0", "1" → "negative",
            "positive"; classify: the training file's labels, sorted); default: the files'
            values. Checked before any work (classify: once the training file is read).
    Returns a `FinetuneResult`; `output` also gets the run's `history.json` and `curves.png`
    (`kbert.training.curves`: the loss, Keras' metrics, the learning rate and the dev scores of each
    epoch).
    """
    started = time.perf_counter()
    spec = get_task(task, **(task_options or {}))
    check_schedule(epochs, batch_size, learning_rate, warmup)
    if tune_null_threshold and spec.name != "squad2":
        raise ValueError("--tune-null-threshold is for squad2 only")
    if label_names and spec.head != "classifier":
        raise ValueError(f"label names are for classifier tasks, not {spec.name}")
    if label_names and spec.name not in ("classify", "regress"):
        rename_labels(spec.head_options([]), label_names)   # a GLUE task's labels: known now
    with outputs.Output(output, "checkpoint", overwrite=overwrite):     # checked, locked
        policy = mixed_precision_policy(mixed_precision)       # None: float32
        keras.utils.set_random_seed(seed)
        ckpt = checkpoint_lib.load(hub.resolve(init), dtype=policy, head_dtype="float32")
        if encoded is None:
            # `dev` is given whenever `encoded` is not
            encoded = encode(task, ckpt.vocab, train, dev,  # type: ignore[arg-type]
                             _max_seq_length(spec, max_seq_length, ckpt.config),
                             ckpt.do_lower_case, max_train_examples, task_options)
        else:
            _check_encoded(encoded, spec, ckpt, init)
        length, options = encoded.max_seq_length, encoded.options
        if label_names:
            options = rename_labels(options, label_names)
        train_set, dev_set = encoded.train, encoded.dev

        head = checkpoint_lib.make_head(spec.head, ckpt.backbone, options, dtype="float32")
        ckpt.heads, ckpt.head_options = {spec.head: head}, {spec.head: options}
        model = task_model(ckpt, spec.head)
        features, label_keys, weight_key = spec.targets(train_set)
        ladder = _compiles_per_shape(jit_compile)
        dataset, per_epoch = batching.feed(features, batch_size, label_keys, weight_key,
                                           bucket=bucketing, shuffle=True, seed=seed,
                                           multiple=PAD_TO_MULTIPLE, ladder=ladder)
        steps = per_epoch * epochs
        model.compile(optimizer=create_optimizer("adamw", learning_rate, steps,
                                                 int(round(warmup * steps)), weight_decay,
                                                 loss_scale=policy == "mixed_float16"),
                      jit_compile=jit_compile)     # the task model's loss and metrics

        settings = dict(epochs=epochs, learning_rate=learning_rate, batch_size=batch_size,
                        warmup=warmup, max_seq_length=length, seed=seed, weight_decay=weight_decay,
                        bucketing=bucketing, precision=policy or "float32")
        card_exists = os.path.isfile(os.path.join(output, "MODEL_CARD.md"))

        def score(keras_model: Any) -> dict[str, float]:
            scores, new_options = _scores(spec, keras_model, dev_set, options, eval_batch_size,
                                          tune=tune_null_threshold, desc="scoring dev")
            # the head options of the last scoring (SQuAD v2.0: a tuned threshold), for `save`
            score.options = new_options  # type: ignore[attr-defined]
            return scores

        def save(history: list[dict[str, Any]]) -> None:
            card = model_card or (None if card_exists else _model_card(
                spec.name, init, train or "(encoded)", dev or "(encoded)", settings, history,
                spec.metric))
            checkpoint_lib.save(output, model, vocab=ckpt.vocab, do_lower_case=ckpt.do_lower_case,
                                head_options={spec.head: score.options},  # type: ignore[attr-defined]
                                dtype=save_dtype,
                                model_card=card)

        keeper = KeepBest(score, save, spec.metric, verbose=bool(verbose))
        recorder = curves.Recorder("epoch")      # after the dev scores, before TensorBoard
        callbacks = [keeper, recorder] + (
            [keras.callbacks.TensorBoard(os.fspath(log_dir))] if log_dir else []) + (
            [progress.fit_callback("training")] if verbose else [])
        fit_started = time.perf_counter()
        with compilation.Compiles() as compiles:
            model.fit(dataset, epochs=epochs, callbacks=callbacks, shuffle=False, verbose=0)
        files = {"init": init, "train": train or "(encoded)", "dev": dev or "(encoded)"}
        curves.record(output, curves.document(
            f"kbert finetune {spec.name}", "epoch", {**files, **settings}, recorder.points,
            dev_metric=f"dev_{spec.metric}", best_epoch=keeper.best_epoch))
        if verbose and ladder:
            shapes = batching.batch_shapes(features, batch_size, PAD_TO_MULTIPLE)
            cached = f", {compiles.cached} read from the cache" if compiles.cached else ""
            print(f"compiled {compiles.count} XLA programs{cached} in {compiles.seconds:.1f} s "
                  f"(the epochs' times include them): {len(shapes)} training batch shapes",
                  file=sys.stderr)
        return FinetuneResult(os.path.abspath(output), spec.metric, keeper.best_epoch,
                              keeper.best_scores, keeper.history, spec.size(train_set),
                              time.perf_counter() - fit_started, time.perf_counter() - started,
                              policy or "float32")
