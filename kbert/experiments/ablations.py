"""The paper's Table 5 pretraining ablations and RoBERTa's NSP finding, at small scale.

Every variant pretrains the same architecture on the same corpus (held-out documents kept
apart), with the same number of updates, batch and schedule:

    bert      MLM + NSP on segment pairs, static masks (as `create-pretraining-data` writes)
    no_nsp    MLM only, on the same segment pairs
    ltr       a left-to-right LM (causal encoder, next-token loss at every position), no NSP;
              the causal constraint stays on in fine-tuning, as in the paper
    roberta   MLM only on FULL-SENTENCES inputs (contiguous sentences packed to the length,
              crossing documents with a [SEP]) with dynamic masking (Liu et al., 2019, §4.2)

Each logs its training curve and its held-out MLM / NSP (or next-token) accuracy, then is
fine-tuned on SST-2, MRPC and SQuAD v1.1 (the 18/6-article split of dev-v1.1-part-a.json)
with several seeds, with `kbert.finetune`. Each step is a unit (`units/NAME.json`) written
atomically and skipped once done, so a killed run continues where it stopped. The results
folder gets `ablations.md` (mean ± std per cell, beside the papers' numbers), `ablations.json`
and `curves.png`.

Example:
>>> run("results/", quick=True)                                 # doctest: +SKIP
"""

import dataclasses
import glob
import json
import os
import shutil
import time

from kbert.experiments import report
from kbert.experiments.units import Units


@dataclasses.dataclass(frozen=True)
class Variant:
    label: str
    objective: str           # kbert.training.pretrain's: mlm_nsp, mlm or ltr
    inputs: str              # "segment_pairs" (the TFRecord shards) or "full_sentences"
    dynamic_masking: bool = False


VARIANTS = {
    "bert": Variant("BERT (MLM + NSP)", "mlm_nsp", "segment_pairs"),
    "no_nsp": Variant("No NSP", "mlm", "segment_pairs"),
    "ltr": Variant("LTR & No NSP", "ltr", "segment_pairs"),
    "roberta": Variant("Full sentences, dynamic masking, no NSP (RoBERTa)", "mlm",
                       "full_sentences", dynamic_masking=True),
}
# task: (train file, dev file under the shared data folder, the metric reported)
TASKS = {
    "sst2": ("glue/SST-2/train.tsv", "glue/SST-2/dev.tsv", "accuracy"),
    "mrpc": ("glue/MRPC/train.tsv", "glue/MRPC/dev.tsv", "accuracy"),
    "squad": ("squad/dev-v1.1-part-a.json", None, "f1"),       # split 18/6 by article
}
# Dev scores of BERT-base (paper, Table 5) and of RoBERTa's FULL-SENTENCES row (RoBERTa
# paper, Table 2; no MRPC there).
PAPER = {
    "bert": {"sst2": 92.7, "mrpc": 86.7, "squad": 88.5},
    "no_nsp": {"sst2": 92.6, "mrpc": 86.5, "squad": 87.9},
    "ltr": {"sst2": 92.1, "mrpc": 77.5, "squad": 77.8},
    "roberta": {"sst2": 92.5, "mrpc": None, "squad": 90.4},
}


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


def corpus_split(corpus, plan):
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


def make_segment_pairs(units, work, corpus, vocab, plan):
    """Unit "data": the segment-pair shards (train and held-out) all pair-input variants use."""
    from kbert.data import pretraining
    options = pretraining.Options(plan.max_seq_length, plan.max_predictions_per_seq,
                                  dupe_factor=plan.dupe_factor, seed=12345)
    paths = {"train": os.path.join(work, "data", "train"),
             "heldout": os.path.join(work, "data", "heldout")}

    def run():
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


def full_sentences_data(corpus, plan, pair_data):
    """RoBERTa's FULL-SENTENCES inputs: the training documents as text, packed to the length
    across documents and masked anew each epoch by kbert's one text-to-batches pipeline
    (`kbert.data.text`, mode "full_sentences", through `pretrain(text=...)`). Held out: the
    same segment-pair shards as every other variant, so the MLM accuracies share one fixed
    evaluation set."""
    train, _ = corpus_split(corpus, plan)
    return {"text": train, "heldout": pair_data["heldout"]}


def _pretraining_unit(name, variant, plan, result, held_out, every, feed):
    history = result.history
    steps = [min(plan.steps, (i + 1) * every) for i in range(len(history["loss"]))]
    return {"variant": name, "objective": variant.objective, "steps": result.steps,
            "curve": {"step": steps, "loss": [float(v) for v in history["loss"]]},
            "heldout": held_out, "seconds": round(result.wall_seconds, 1), "feed": feed}


class Shards:
    """Where TensorFlow is: the segment pairs as TFRecord shards (`create-pretraining-data`),
    `kbert.training.pretrain` (FULL-SENTENCES straight from the text), `kbert.finetune` on the
    task files."""

    def __init__(self, units, work, shared, vocab, plan, tasks):
        self.units, self.work, self.shared, self.vocab = units, work, shared, vocab
        self.plan, self.tasks = plan, tasks
        self.corpus = os.path.join(shared, "corpus")
        self._pairs = self._files = None

    def pair_data(self):
        if self._pairs is None:    # segment pairs: the pair variants' data, everyone's held-out
            self._pairs = make_segment_pairs(self.units, self.work, self.corpus, self.vocab,
                                             self.plan)[1]
        return self._pairs

    def pretrain(self, name, ckpt):
        from kbert import training
        plan, variant = self.plan, VARIANTS[name]
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
            verbose=0, jit_compile=plan.jit_compile)
        if result.interrupted:
            raise KeyboardInterrupt
        held_out = training.evaluate_pretraining(result.model, data["heldout"])
        return _pretraining_unit(name, variant, plan, result, held_out, every, "shards")

    def finetune(self, name, ckpt, task, seed, output):
        from kbert import finetune
        if self._files is None:
            self._files = task_files(self.units, self.work, self.shared, self.plan, self.tasks)
        plan = self.plan
        train, dev = self._files[task]
        return finetune.finetune(
            task, ckpt, train, dev, output, epochs=plan.finetune_epochs,
            learning_rate=plan.finetune_learning_rate, batch_size=plan.finetune_batch_size,
            seed=seed, max_train_examples=plan.max_train_examples, verbose=False,
            jit_compile=plan.jit_compile)


class Arrays:
    """Where TensorFlow is not (a GPU machine with JAX or PyTorch): the folder `export` wrote.
    The pair variants' instances are made here by the code of `create-pretraining-data`
    (`kbert.data.arrays.segment_pairs`: the same rule and seed, other draws), FULL-SENTENCES
    rows are masked anew for every batch (`kbert.data.arrays.DynamicMasking`), the held-out set
    is the very shards' content, and fine-tuning reads the tasks as `kbert.finetune.encode`
    made them."""

    def __init__(self, folder, plan):
        from kbert.config import read_vocab
        self.folder, self.plan = folder, plan
        self.vocab = list(read_vocab(os.path.join(folder, "vocab.txt")))
        self._pairs = self._heldout = None

    def _load(self, name):
        from kbert.data import arrays
        return arrays.load(os.path.join(self.folder, name))

    def pretrain(self, name, ckpt):
        from kbert.data import arrays
        from kbert.data.pretraining import Options
        from kbert.training import evaluate_pretraining
        from kbert.training.arrays import pretrain_arrays
        plan, variant = self.plan, VARIANTS[name]
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
            dynamic_masking=plan.max_predictions_per_seq if variant.dynamic_masking else None,
            log_every=every, seed=0, mixed_precision=plan.mixed_precision,
            jit_compile=plan.jit_compile, verbose=0)
        if result.interrupted:
            raise KeyboardInterrupt
        held_out = evaluate_pretraining(result.model, self._heldout)
        return _pretraining_unit(name, variant, plan, result, held_out, every, "arrays")

    def finetune(self, name, ckpt, task, seed, output):
        import gzip
        import pickle

        from kbert import finetune
        with gzip.open(os.path.join(self.folder, "tasks", f"{task}.pkl.gz"), "rb") as f:
            encoded = pickle.load(f)
        plan = self.plan
        return finetune.finetune(
            task, ckpt, None, None, output, epochs=plan.finetune_epochs,
            learning_rate=plan.finetune_learning_rate, batch_size=plan.finetune_batch_size,
            seed=seed, verbose=False, jit_compile=plan.jit_compile, encoded=encoded)


def run_variant(units, source, work, name, tasks, plan):
    """Units "pretrain-NAME" (checkpoint, curve, held-out scores) and
    "finetune-NAME-TASK-seedS" (best-epoch dev scores); a fine-tuned checkpoint is removed
    once scored, the pretrained one is kept in `work/checkpoints/NAME`."""
    ckpt = os.path.join(work, "checkpoints", name)
    pending = [f"finetune-{name}-{task}-seed{seed}" for task in tasks
               for seed in range(plan.seeds)]
    pending = [u for u in pending if not units.done(u)]
    if pending and not os.path.isdir(ckpt):
        units.forget(f"pretrain-{name}")        # its checkpoint is needed, and gone
    pretrained = units.run(f"pretrain-{name}", lambda: source.pretrain(name, ckpt))
    cells = {}
    for task in tasks:
        cells[task] = []
        for seed in range(plan.seeds):
            output = os.path.join(work, "finetuned", f"{name}-{task}-seed{seed}")

            def unit(task=task, seed=seed, output=output):
                result = source.finetune(name, ckpt, task, seed, output)
                return {"scores": result.best_scores, "best_epoch": result.best_epoch,
                        "seconds": round(result.wall_seconds, 1)}
            cells[task].append(units.run(f"finetune-{name}-{task}-seed{seed}", unit)["scores"])
            shutil.rmtree(output, ignore_errors=True)
    return {"pretraining": pretrained, "finetuning": cells}


def task_files(units, work, shared, plan, tasks):
    """Unit "task-files-...": each task's (train, dev) files (`_task_files`)."""
    return units.run("task-files-" + "-".join(tasks),
                     lambda: _task_files(os.path.join(work, "tasks"), shared, plan, tasks))


def _task_files(folder, shared, plan, tasks):
    """Each task's [train, dev] files; SQuAD split 18/6 by article (written to `folder`), and
    in quick mode the dev files cut to `max_dev_examples` rows."""
    from kbert.finetune.squad import split_by_article
    os.makedirs(folder, exist_ok=True)
    files = {}
    for task in tasks:
        train, dev, _ = TASKS[task]
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
        files[task] = [train, dev]
    return files


def _head_of_squad(squad, questions):
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


def _plan(quick, seeds, steps, mixed_precision=None):
    plan = QUICK if quick else FULL
    return dataclasses.replace(plan, **{k: v for k, v in (
        ("seeds", seeds), ("steps", steps), ("mixed_precision", mixed_precision))
        if v is not None})


def run(output, quick=False, variants=None, tasks=None, seeds=None, shared=None,
        vocab=None, steps=None, mixed_precision=None, arrays=None, work=None, log=print):
    """Runs (or resumes) every unit and writes `ablations.md`, `ablations.json`, `curves.png`.

    Args:
        output: the results folder (its `units/` hold what is done).
        quick: the tiny plan (`QUICK`: CPU, minutes), else `FULL` (a GPU).
        variants, tasks: subsets of `VARIANTS`, `TASKS` (default: all; with `arrays`, all
            that were exported).
        seeds: fine-tuning seeds per cell (default: the plan's).
        shared: the shared data folder (corpus/, glue/, squad/).
        vocab: the WordPiece vocabulary (default: the shipped MiniLM checkpoint's, uncased).
        steps: pretraining updates (default: the plan's).
        mixed_precision: e.g. "mixed_bfloat16" (a GPU), for pretraining and fine-tuning.
        arrays: a folder `export` wrote: run from it without TensorFlow (its plan, vocabulary
            and data; `quick`, `seeds`, `steps`, `mixed_precision`, `shared`, `vocab` were
            fixed by `export`).
        work: where data and checkpoints go (default `output/work`).
    Returns the results dict written to `ablations.json`.
    """
    output = os.path.abspath(output)
    work = os.path.abspath(work or os.path.join(output, "work"))
    units = Units(output, log)
    if arrays:
        with open(os.path.join(arrays, "plan.json"), encoding="utf-8") as f:
            exported = json.load(f)
        plan, quick = Plan(**exported["plan"]), exported["quick"]
        variants = _choose(variants, {n: 0 for n in exported["variants"]}, "exported variant")
        tasks = _choose(tasks, {n: 0 for n in exported["tasks"]}, "exported task")
        source = Arrays(arrays, plan)
    else:
        plan = _plan(quick, seeds, steps, mixed_precision)
        variants = _choose(variants, VARIANTS, "variant")
        tasks = _choose(tasks, TASKS, "task")
        shared = shared or os.environ.get("KBERT_SHARED_DATA") or _default_shared()
        source = Shards(units, work, shared, vocab or _default_vocab(), plan, tasks)
    stored, wanted = units.run("plan", lambda: dataclasses.asdict(plan)), dataclasses.asdict(plan)
    if stored != wanted:
        differ = ", ".join(f"{k} {stored.get(k)!r} (now {wanted.get(k)!r})"
                           for k in sorted(set(stored) | set(wanted))
                           if stored.get(k) != wanted.get(k))
        raise ValueError(f"{output} holds the results of another plan: {differ}; give the "
                         "same options, or another --output")
    if plan.mixed_precision:
        import keras
        keras.mixed_precision.set_global_policy(plan.mixed_precision)
    _cache_compiles(work)
    started = time.perf_counter()
    results = {"plan": dataclasses.asdict(plan), "variants": {}}
    for name in variants:
        results["variants"][name] = run_variant(units, source, work, name, tasks, plan)
    results["seconds_this_run"] = round(time.perf_counter() - started, 1)
    write_results(output, results, tasks, quick)
    return results


CORPUS, HELDOUT, FULL_SENTENCES = "corpus-train.npz", "heldout.npz", "full-sentences.npz"


def export(folder, quick=False, variants=None, tasks=None, seeds=None, shared=None, vocab=None,
           steps=None, mixed_precision=None, log=print):
    """Writes what `run(arrays=folder)` needs on a machine without TensorFlow (tokenizing is
    done here, with TensorFlow Text): `plan.json`, `vocab.txt`, the training documents as
    token ids (`corpus-train.npz`, for the segment-pair variants), the held-out shards'
    features (`heldout.npz`, the evaluation set every run shares), RoBERTa's FULL-SENTENCES rows
    unmasked (`full-sentences.npz`), and each task encoded (`tasks/TASK.pkl.gz`). Returns the
    folder's size in bytes."""
    import gzip
    import pickle
    import tempfile

    from kbert.config import read_vocab
    from kbert.data import arrays, inputs, pretraining, text
    from kbert.finetune import encode
    plan = _plan(quick, seeds, steps, mixed_precision)
    variants = _choose(variants, VARIANTS, "variant")
    tasks = _choose(tasks, TASKS, "task")
    shared = shared or os.environ.get("KBERT_SHARED_DATA") or _default_shared()
    vocab = list(read_vocab(vocab or _default_vocab()))
    os.makedirs(os.path.join(folder, "tasks"), exist_ok=True)
    train, heldout = corpus_split(os.path.join(shared, "corpus"), plan)
    report.write_atomic(os.path.join(folder, "vocab.txt"), "\n".join(vocab) + "\n")
    if any(VARIANTS[v].inputs == "segment_pairs" for v in variants):
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
    if any(VARIANTS[v].inputs == "full_sentences" for v in variants):
        log(f"{FULL_SENTENCES}: packing {len(train)} documents")
        ds = text.text_pretraining_dataset(
            train, vocab, 4096, plan.max_seq_length, plan.max_predictions_per_seq,
            mode="full_sentences", epochs=1, drop_remainder=False).map(inputs.unmask)
        rows = arrays.from_dataset(ds, ("input_ids", "segment_ids", "input_mask"))
        arrays.save(os.path.join(folder, FULL_SENTENCES), _compact(rows))
    squad_like = _task_files(os.path.join(folder, "files"), shared, plan, tasks)
    for task in tasks:
        log(f"tasks/{task}.pkl.gz: encoding")
        encoded = encode(task, vocab, *squad_like[task],
                         max_train_examples=plan.max_train_examples)
        with gzip.open(os.path.join(folder, "tasks", f"{task}.pkl.gz"), "wb") as f:
            pickle.dump(encoded, f)
    shutil.rmtree(os.path.join(folder, "files"))
    report.write_atomic(os.path.join(folder, "plan.json"), json.dumps(
        {"plan": dataclasses.asdict(plan), "quick": quick, "variants": variants,
         "tasks": tasks}, indent=2))
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def _compact(features):
    """Integer features in the smallest unsigned type that holds them (`arrays.load` gives
    int32 back)."""
    import numpy as np
    out = {}
    for k, v in features.items():
        if v.dtype.kind in "iu" and v.size and 0 <= v.min() and v.max() < 1 << 16:
            v = v.astype(np.uint8 if v.max() < 256 else np.uint16)
        out[k] = v
    return out


def _cache_compiles(work):
    """On JAX, keep compiled steps in `work/jax-cache` (unless a cache is set already): the 36
    fine-tuning runs share a few architectures and batch shapes, so after the first of each
    the compiles are read back (a SQuAD epoch of the quick plan: 15.7 → 5.3 s on CPU)."""
    import keras
    if keras.backend.backend() != "jax":
        return
    import jax
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", os.path.join(work, "jax-cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def _choose(names, known, what):
    names = list(known) if not names else list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown[0]!r}; choose from {', '.join(known)}")
    return names


def _default_shared():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "data"))


def _default_vocab():
    from kbert import checkpoint as checkpoint_lib
    return os.path.join(checkpoint_lib.resolve("minilm-l6-mlm-nsp"), "vocab.txt")


def table_rows(results, tasks):
    """One row per variant: held-out accuracies, then each task's mean ± std (and the paper's)."""
    rows = []
    for name, r in results["variants"].items():
        held = r["pretraining"]["heldout"]
        row = [VARIANTS[name].label, _pct(held.get("mlm_accuracy")),
               _pct(held.get("nsp_accuracy")), _pct(held.get("lm_accuracy"))]
        for task in tasks:
            metric = TASKS[task][2]
            row.append(report.mean_std([s[metric] for s in r["finetuning"][task]]))
            paper = PAPER[name].get(task)
            row.append("—" if paper is None else paper)
        rows.append(row)
    return rows


def _pct(value):
    return "—" if value is None else f"{100 * value:.1f}"


def write_results(output, results, tasks, quick):
    """`ablations.md`, `ablations.json` and `curves.png` in `output`, each atomically."""
    header = ["Pretraining", "held-out MLM acc", "held-out NSP acc", "held-out next-token acc"]
    for task in tasks:
        header += [f"{task} {TASKS[task][2]}", f"{task} (paper)"]
    plan = results["plan"]
    lines = [f"Plan: `{plan['config']}` encoder, {plan['steps']} updates of "
             f"{plan['batch_size']} sequences of {plan['max_seq_length']} tokens; fine-tuning "
             f"{plan['finetune_epochs']} epochs, lr {plan['finetune_learning_rate']}, "
             f"{plan['seeds']} seed(s) per cell (mean ± std)" + (" — QUICK MODE: the numbers "
                                                                   "are noise" if quick else "."),
             "", report.markdown_table(header, table_rows(results, tasks)), ""]
    curves = {VARIANTS[n].label + f" ({r['pretraining']['objective']})":
              (r["pretraining"]["curve"]["step"], r["pretraining"]["curve"]["loss"])
              for n, r in results["variants"].items()}
    plot = report.plot_curves(os.path.join(output, "curves.png"), curves,
                              "Pretraining loss per variant")
    if plot:
        lines += ["", "![pretraining curves](curves.png)"]
    report.write_atomic(os.path.join(output, "ablations.md"), "\n".join(lines) + "\n")
    report.write_atomic(os.path.join(output, "ablations.json"), json.dumps(results, indent=2))
