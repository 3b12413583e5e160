"""Where the ablations' data and training come from, in two interchangeable sources:

    Shards   where TensorFlow is: segment pairs as TFRecord shards (`create-pretraining-data`),
             `kbert.training.pretrain` (FULL-SENTENCES straight from the text),
             `kbert.training.finetune` on the task files
    Arrays   where it is not (a GPU machine with JAX or PyTorch): the folder `export_data`
             wrote, `kbert.training.pretraining_arrays.pretrain_arrays`, `finetune(encoded=...)`

Both give `pretrain(name, variant, ckpt)` the same unit dict and `finetune(task, ckpt, seed,
output)` a `FinetuneResult`; `kbert.experiments.ablations` runs either.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kbert.experiments import report
from kbert.experiments.plan import Plan, Variant

if TYPE_CHECKING:
    from kbert.experiments.units import Units
    from kbert.training.finetuning import FinetuneResult
    from kbert.training.pretraining import PretrainResult

# {task: (train file, dev file)} under the shared folder
TaskFiles = Mapping[str, Sequence[Any]]

CORPUS, HELDOUT, FULL_SENTENCES = "corpus-train.npz", "heldout.npz", "full-sentences.npz"


def corpus_split(corpus: str, plan: Plan) -> tuple[list[str], list[str]]:
    """(training files, held-out files): every `held_out_every`-th document is held out."""
    files = sorted(glob.glob(os.path.join(corpus, "*", "*.txt")))
    if not files:
        raise FileNotFoundError(f"no corpus documents (*/*.txt) in {corpus}")
    if plan.documents:
        step = max(1, len(files) // plan.documents)       # spread over the sub-corpora
        files = files[::step][:plan.documents]
    every = plan.held_out_every
    return ([f for i, f in enumerate(files) if i % every != every - 1],
            [f for i, f in enumerate(files) if i % every == every - 1])


def make_segment_pairs(units: Units, work: str, corpus: str, vocab: str | list[str],
                       plan: Plan) -> tuple[dict[str, Any], dict[str, str]]:
    """Unit "data": the segment-pair shards (train and held-out) all pair-input variants use."""
    from kbert.data import pretraining
    options = pretraining.Options(plan.max_seq_length, plan.max_predictions_per_seq,
                                  dupe_factor=plan.dupe_factor, seed=12345)
    paths = {"train": os.path.join(work, "data", "train"),
             "heldout": os.path.join(work, "data", "heldout")}

    def run() -> dict[str, Any]:
        counts = {}
        for name, files in zip(("train", "heldout"), corpus_split(corpus, plan)):
            totals = pretraining.create_pretraining_data(
                files, vocab, paths[name], options, progress=False, overwrite=True,
                workers=min(plan.data_workers, os.cpu_count() or 1))
            counts[name] = {"documents": len(files), "instances": int(totals["instances"])}
        return counts
    if not all(os.path.isdir(p) for p in paths.values()):
        units.forget("data")
    return units.run("data", run), paths


def full_sentences_data(corpus: str, plan: Plan, pair_data: dict[str, str]) -> dict[str, Any]:
    """RoBERTa's FULL-SENTENCES inputs: the training documents as text, packed to the length
    across documents and masked anew each epoch by kbert's one text-to-batches pipeline
    (`kbert.data.text`, mode "full_sentences", through `pretrain(text=...)`). Held out: the
    same segment-pair shards as every other variant, so the MLM accuracies share one fixed
    evaluation set."""
    train, _ = corpus_split(corpus, plan)
    return {"text": train, "heldout": pair_data["heldout"]}


def pretraining_unit(name: str, variant: Variant, plan: Plan, result: PretrainResult,
                     held_out: dict[str, float], every: int, feed: str) -> dict[str, Any]:
    """The unit "pretrain-NAME": the curve (mean loss per `every` updates), held-out scores."""
    history = result.history
    steps = [min(plan.steps, (i + 1) * every) for i in range(len(history["loss"]))]
    return {"variant": name, "objective": variant.objective, "steps": result.steps,
            "curve": {"step": steps, "loss": [float(v) for v in history["loss"]]},
            "heldout": held_out, "seconds": round(result.wall_seconds, 1), "feed": feed}


class Shards:
    """Where TensorFlow is: the segment pairs as TFRecord shards (`create-pretraining-data`),
    `kbert.training.pretrain` (FULL-SENTENCES straight from the text), `kbert.training.finetune` on
    the task files ({task: (train, dev)} under `shared`)."""

    def __init__(self, units: Units, work: str, shared: str, vocab: str | list[str], plan: Plan,
                 files: TaskFiles) -> None:
        self.units, self.work, self.shared, self.vocab = units, work, shared, vocab
        self.plan, self.files = plan, files
        self.corpus = os.path.join(shared, "corpus")
        self._pairs: dict[str, str] | None = None
        self._files: dict[str, list[str]] | None = None

    def pair_data(self) -> dict[str, str]:
        if self._pairs is None:    # segment pairs: the pair variants' data, everyone's held-out
            self._pairs = make_segment_pairs(self.units, self.work, self.corpus, self.vocab,
                                             self.plan)[1]
        return self._pairs

    def pretrain(self, name: str, variant: Variant, ckpt: str) -> dict[str, Any]:
        from kbert import training
        plan = self.plan
        data = (full_sentences_data(self.corpus, plan, self.pair_data())
                if variant.inputs == "full_sentences" else self.pair_data())
        every = max(1, plan.steps // plan.curve_points)
        source = (dict(text=data["text"], text_mode="full_sentences",
                       max_seq_length=plan.max_seq_length,
                       max_predictions_per_seq=plan.max_predictions_per_seq)
                  if "text" in data else dict(data=data["train"]))
        result = training.pretrain(
            output=ckpt, **source, config=plan.config, vocab=self.vocab,
            batch_size=plan.batch_size, steps=plan.steps,
            warmup_steps=int(plan.warmup * plan.steps), learning_rate=plan.learning_rate,
            checkpoint_every=every,
            dynamic_masking=variant.dynamic_masking and "text" not in data,   # text: always
            objective=variant.objective, seed=0, mixed_precision=plan.mixed_precision,
            verbose=0, jit_compile=plan.jit_compile, overwrite=True)   # the plan's own work
        if result.interrupted:
            raise KeyboardInterrupt
        held_out = training.evaluate_pretraining(result.model, data["heldout"])
        return pretraining_unit(name, variant, plan, result, held_out, every, "shards")

    def finetune(self, task: str, ckpt: str, seed: int, output: str) -> FinetuneResult:
        from kbert.training import finetuning as finetune
        if self._files is None:
            self._files = task_files(self.units, self.work, self.shared, self.plan, self.files)
        plan = self.plan
        train, dev = self._files[task]
        return finetune.finetune(
            task, ckpt, train, dev, output, epochs=plan.finetune_epochs,
            learning_rate=plan.finetune_learning_rate, batch_size=plan.finetune_batch_size,
            seed=seed, max_train_examples=plan.max_train_examples, verbose=False,
            jit_compile=plan.jit_compile, overwrite=True)


class Arrays:
    """Where TensorFlow is not (a GPU machine with JAX or PyTorch): the folder `export_data`
    wrote. The pair variants' instances are made here by the code of `create-pretraining-data`
    (`kbert.data.arrays.segment_pairs`: the same rule and seed, other draws), FULL-SENTENCES
    rows are masked anew for every batch (`kbert.data.arrays.DynamicMasking`), the held-out set
    is the very shards' content, and fine-tuning reads the tasks as `kbert.training.encode`
    made them."""

    def __init__(self, folder: str, plan: Plan) -> None:
        from kbert.network.config import read_vocab
        self.folder, self.plan = folder, plan
        self.vocab = list(read_vocab(os.path.join(folder, "vocab.txt")))
        self._pairs: dict[str, Any] | None = None
        self._heldout: dict[str, Any] | None = None
        self._encoded: dict[str, Any] = {}

    def _load(self, name: str) -> dict[str, Any]:
        from kbert.data import arrays
        return arrays.load(os.path.join(self.folder, name))

    def pretrain(self, name: str, variant: Variant, ckpt: str) -> dict[str, Any]:
        from kbert.data import arrays
        from kbert.data.pretraining import Options
        from kbert.training import evaluate_pretraining
        from kbert.training.pretraining_arrays import pretrain_arrays
        plan = self.plan
        if variant.inputs == "full_sentences":
            data = self._load(FULL_SENTENCES)
        else:
            if self._pairs is None:
                self._pairs = arrays.segment_pairs(self._load(CORPUS), Options(
                    plan.max_seq_length, plan.max_predictions_per_seq,
                    dupe_factor=plan.dupe_factor, seed=12345))
            data = self._pairs
        if self._heldout is None:
            self._heldout = self._load(HELDOUT)
        every = max(1, plan.steps // plan.curve_points)
        result = pretrain_arrays(
            data, ckpt, config=plan.config, vocab=self.vocab, objective=variant.objective,
            batch_size=plan.batch_size, steps=plan.steps,
            warmup_steps=int(plan.warmup * plan.steps), learning_rate=plan.learning_rate,
            dynamic_masking=variant.dynamic_masking,
            max_predictions_per_seq=plan.max_predictions_per_seq,
            log_every=every, seed=0, mixed_precision=plan.mixed_precision,
            jit_compile=plan.jit_compile, verbose=0)
        if result.interrupted:
            raise KeyboardInterrupt
        held_out = evaluate_pretraining(result.model, self._heldout)
        return pretraining_unit(name, variant, plan, result, held_out, every, "arrays")

    def finetune(self, task: str, ckpt: str, seed: int, output: str) -> FinetuneResult:
        import gzip
        import pickle

        from kbert.training import finetuning as finetune
        if task not in self._encoded:           # read once for all variants and seeds
            with gzip.open(os.path.join(self.folder, "tasks", f"{task}.pkl.gz"), "rb") as f:
                self._encoded[task] = pickle.load(f)
        plan = self.plan
        return finetune.finetune(
            task, ckpt, None, None, output, epochs=plan.finetune_epochs,
            learning_rate=plan.finetune_learning_rate, batch_size=plan.finetune_batch_size,
            seed=seed, verbose=False, jit_compile=plan.jit_compile, encoded=self._encoded[task],
            overwrite=True)


def task_files(units: Units, work: str, shared: str, plan: Plan,
               files: TaskFiles) -> dict[str, list[str]]:
    """Unit "task-files-...": each task's (train, dev) files (`_task_files`)."""
    return units.run("task-files-" + "-".join(files),
                     lambda: _task_files(os.path.join(work, "tasks"), shared, plan, files))


def _task_files(folder: str, shared: str, plan: Plan, files: TaskFiles) -> dict[str, list[str]]:
    """Each task's [train, dev] files; SQuAD split 18/6 by article (written to `folder`), and
    in quick mode the dev files cut to `max_dev_examples` rows."""
    from kbert.tasks.squad import split_by_article
    os.makedirs(folder, exist_ok=True)
    out = {}
    for task, (train, dev) in files.items():
        train, dev = os.path.join(shared, train), dev and os.path.join(shared, dev)
        if task == "squad":
            parts = split_by_article(train)
            train, dev = (os.path.join(folder, f"squad-{p}.json") for p in ("train", "dev"))
            for path, part in zip((train, dev), parts):
                report.write_atomic(path, json.dumps(_head_of_squad(
                    part, plan.max_dev_examples) if path == dev else part))
        elif plan.max_dev_examples:
            with open(dev, encoding="utf-8") as f:
                lines = f.read().splitlines()
            dev = os.path.join(folder, f"{task}-dev.tsv")
            report.write_atomic(dev, "\n".join(lines[:1 + plan.max_dev_examples]) + "\n")
        out[task] = [train, dev]
    return out


def _head_of_squad(squad: dict[str, Any], questions: int | None) -> dict[str, Any]:
    """The first `questions` questions of a SQuAD object (all of them for None)."""
    if not questions:
        return squad
    articles, left = [], questions
    for article in squad["data"]:
        paragraphs = []
        for p in article["paragraphs"]:
            if left <= 0:
                break
            paragraphs.append(dict(p, qas=p["qas"][:left]))
            left -= len(paragraphs[-1]["qas"])
        if paragraphs:
            articles.append(dict(article, paragraphs=paragraphs))
    return dict(squad, data=articles)


def export_data(folder: str, plan: Plan, variants: Mapping[str, Variant], files: TaskFiles,
                shared: str, vocab: list[str], log: Callable[[str], Any] = print) -> None:
    """Writes what `Arrays` reads (tokenizing here, with TensorFlow Text): `vocab.txt`, the
    training documents as token ids (`corpus-train.npz`, for the segment-pair variants), the
    held-out shards' features (`heldout.npz`, the evaluation set every run shares), RoBERTa's
    FULL-SENTENCES rows unmasked (`full-sentences.npz`), and each task encoded
    (`tasks/TASK.pkl.gz`).

    Args:
        variants: {name: Variant}; files: {task: (train, dev) under `shared`}; vocab: tokens.
    """
    import gzip
    import pickle
    import tempfile

    from kbert.data import arrays, inputs, pretraining, text
    from kbert.training import encode
    os.makedirs(os.path.join(folder, "tasks"), exist_ok=True)
    train, heldout = corpus_split(os.path.join(shared, "corpus"), plan)
    report.write_atomic(os.path.join(folder, "vocab.txt"), "\n".join(vocab) + "\n")
    if any(v.inputs == "segment_pairs" for v in variants.values()):
        log(f"{CORPUS}: tokenizing {len(train)} documents")
        arrays.save(os.path.join(folder, CORPUS), arrays.token_documents(train, vocab))
    log(f"{HELDOUT}: {len(heldout)} held-out documents as segment pairs")
    with tempfile.TemporaryDirectory() as tmp:
        pretraining.create_pretraining_data(
            heldout, vocab, tmp, pretraining.Options(plan.max_seq_length,
                                                     plan.max_predictions_per_seq,
                                                     dupe_factor=plan.dupe_factor, seed=12345),
            progress=False, overwrite=True, workers=min(plan.data_workers, os.cpu_count() or 1))
        arrays.save(os.path.join(folder, HELDOUT), _compact(arrays.from_dataset(
            inputs.pretraining_dataset(tmp, 4096, is_training=False))))
    if any(v.inputs == "full_sentences" for v in variants.values()):
        log(f"{FULL_SENTENCES}: packing {len(train)} documents")
        ds = text.text_pretraining_dataset(
            train, vocab, 4096, plan.max_seq_length, plan.max_predictions_per_seq,
            mode="full_sentences", epochs=1, drop_remainder=False).map(inputs.unmask)
        rows = arrays.from_dataset(ds, ("input_ids", "segment_ids", "input_mask"))
        arrays.save(os.path.join(folder, FULL_SENTENCES), _compact(rows))
    squad_like = _task_files(os.path.join(folder, "files"), shared, plan, files)
    for task in files:
        log(f"tasks/{task}.pkl.gz: encoding")
        encoded = encode(task, vocab, *squad_like[task],
                         max_train_examples=plan.max_train_examples)
        path = os.path.join(folder, "tasks", f"{task}.pkl.gz")
        with gzip.open(f"{path}.tmp{os.getpid()}", "wb") as f:
            pickle.dump(encoded, f)
        os.replace(f"{path}.tmp{os.getpid()}", path)
    shutil.rmtree(os.path.join(folder, "files"))


def _compact(features: Mapping[str, Any]) -> dict[str, Any]:
    """Integer features in the smallest unsigned type that holds them (`arrays.load` gives
    int32 back)."""
    import numpy as np
    out = {}
    for k, v in features.items():
        if v.dtype.kind in "iu" and v.size and 0 <= v.min() and v.max() < 1 << 16:
            v = v.astype(np.uint8 if v.max() < 256 else np.uint16)
        out[k] = v
    return out


