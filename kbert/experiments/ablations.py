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


def pretrain_variant(units, work, name, data, vocab, plan, log):
    """Unit "pretrain-NAME": the variant's checkpoint, training curve and held-out scores."""
    from kbert import training
    variant = VARIANTS[name]
    ckpt = os.path.join(work, "checkpoints", name)

    def run():
        every = max(1, plan.steps // plan.curve_points)
        source = (dict(text=data["text"], text_mode="full_sentences",
                       max_seq_length=plan.max_seq_length,
                       max_predictions_per_seq=plan.max_predictions_per_seq)
                  if "text" in data else dict(data=data["train"]))
        result = training.pretrain(
            output=ckpt, **source, config=plan.config, vocab=vocab, batch_size=plan.batch_size,
            steps=plan.steps, warmup_steps=int(plan.warmup * plan.steps),
            learning_rate=plan.learning_rate, checkpoint_every=every,
            dynamic_masking=variant.dynamic_masking and "text" not in data,   # text: always
            objective=variant.objective, seed=0,
            verbose=0, jit_compile=plan.jit_compile)
        if result.interrupted:
            raise KeyboardInterrupt
        held_out = training.evaluate_pretraining(result.model, data["heldout"])
        history = result.history
        steps = [min(plan.steps, (i + 1) * every) for i in range(len(history["loss"]))]
        return {"variant": name, "objective": variant.objective, "steps": result.steps,
                "curve": {"step": steps, "loss": [float(v) for v in history["loss"]]},
                "heldout": held_out, "seconds": round(result.wall_seconds, 1)}
    if not os.path.isdir(ckpt):
        units.forget(f"pretrain-{name}")
    return units.run(f"pretrain-{name}", run), ckpt


def task_files(units, work, shared, plan, tasks):
    """Unit "task-files-...": each task's (train, dev) files; SQuAD split 18/6 by article, and
    in quick mode the dev files cut to `max_dev_examples` rows."""
    from kbert.finetune.squad import split_by_article
    folder = os.path.join(work, "tasks")

    def run():
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
    return units.run("task-files-" + "-".join(tasks), run)


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


def finetune_unit(units, work, name, ckpt, task, files, seed, plan):
    """Unit "finetune-NAME-TASK-seedS": the best-epoch dev scores (the checkpoint is removed)."""
    from kbert import finetune
    output = os.path.join(work, "finetuned", f"{name}-{task}-seed{seed}")

    def run():
        result = finetune.finetune(
            task, ckpt, files[0], files[1], output, epochs=plan.finetune_epochs,
            learning_rate=plan.finetune_learning_rate, batch_size=plan.finetune_batch_size,
            seed=seed, max_train_examples=plan.max_train_examples, verbose=False,
            jit_compile=plan.jit_compile)
        return {"scores": result.best_scores, "best_epoch": result.best_epoch,
                "seconds": round(result.wall_seconds, 1)}
    out = units.run(f"finetune-{name}-{task}-seed{seed}", run)
    shutil.rmtree(output, ignore_errors=True)
    return out


def run(output, quick=False, variants=None, tasks=None, seeds=None, shared=None,
        vocab=None, steps=None, log=print):
    """Runs (or resumes) every unit and writes `ablations.md`, `ablations.json`, `curves.png`.

    Args:
        output: the results folder (its `units/` hold what is done).
        quick: the tiny plan (`QUICK`: CPU, minutes), else `FULL` (a GPU).
        variants, tasks: subsets of `VARIANTS`, `TASKS` (default: all).
        seeds: fine-tuning seeds per cell (default: the plan's).
        shared: the shared data folder (corpus/, glue/, squad/).
        vocab: the WordPiece vocabulary (default: the shipped MiniLM checkpoint's, uncased).
        steps: pretraining updates (default: the plan's).
    Returns the results dict written to `ablations.json`.
    """
    plan = QUICK if quick else FULL
    plan = dataclasses.replace(plan, **{k: v for k, v in (("seeds", seeds), ("steps", steps))
                                        if v is not None})
    variants = _choose(variants, VARIANTS, "variant")
    tasks = _choose(tasks, TASKS, "task")
    shared = shared or os.environ.get("KBERT_SHARED_DATA") or _default_shared()
    vocab = vocab or _default_vocab()
    output = os.path.abspath(output)
    units = Units(output, log)
    work = os.path.join(output, "work")
    started = time.perf_counter()
    corpus = os.path.join(shared, "corpus")
    pair_data = None
    results = {"plan": dataclasses.asdict(plan), "variants": {}}
    files = task_files(units, work, shared, plan, tasks) if tasks else {}
    for name in variants:
        if pair_data is None:      # segment pairs: the pair variants' data, everyone's held-out
            pair_data = make_segment_pairs(units, work, corpus, vocab, plan)[1]
        data = (full_sentences_data(corpus, plan, pair_data)
                if VARIANTS[name].inputs == "full_sentences" else pair_data)
        pretrained, ckpt = pretrain_variant(units, work, name, data, vocab, plan, log)
        cells = {}
        for task in tasks:
            cells[task] = [finetune_unit(units, work, name, ckpt, task, files[task], seed,
                                         plan)["scores"] for seed in range(plan.seeds)]
        results["variants"][name] = {"pretraining": pretrained, "finetuning": cells}
    results["seconds_this_run"] = round(time.perf_counter() - started, 1)
    write_results(output, results, tasks, quick)
    return results


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
