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
with several seeds, with `kbert.training.finetune`. Each step is a unit (`units/NAME.json`) written
atomically and skipped once done, so a killed run continues where it stopped. The results
folder gets `ablations.md` (mean ± std per cell, beside the papers' numbers), `ablations.json`
and `curves.png`. Where TensorFlow is not, `export` (run where it is) writes a folder from
which `run(..., arrays=folder)` does the whole plan (`kbert.experiments.sources.Arrays`).

Example:
>>> run("results/", quick=True)                                 # doctest: +SKIP
>>> export("plan/", quick=True)                                 # doctest: +SKIP
>>> run("results/", arrays="plan/")          # a GPU machine     # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kbert import outputs
from kbert.experiments import report, sources
from kbert.experiments.plan import FULL, QUICK, Plan, Variant
from kbert.experiments.units import Units
from kbert.wording import plural

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
PAPER: dict[str, dict[str, float | None]] = {
    "bert": {"sst2": 92.7, "mrpc": 86.7, "squad": 88.5},
    "no_nsp": {"sst2": 92.6, "mrpc": 86.5, "squad": 87.9},
    "ltr": {"sst2": 92.1, "mrpc": 77.5, "squad": 77.8},
    "roberta": {"sst2": 92.5, "mrpc": None, "squad": 90.4},
}


def run_variant(units: Units, source: sources.Shards | sources.Arrays, work: str, name: str,
                tasks: Sequence[str], plan: Plan) -> dict[str, Any]:
    """Units "pretrain-NAME" (checkpoint, curve, held-out scores) and
    "finetune-NAME-TASK-seedS" (best-epoch dev scores); a fine-tuned checkpoint is removed
    once scored, the pretrained one is kept in `work/checkpoints/NAME`."""
    ckpt = os.path.join(work, "checkpoints", name)
    pending = [f"finetune-{name}-{task}-seed{seed}" for task in tasks
               for seed in range(plan.seeds)]
    pending = [u for u in pending if not units.done(u)]
    if pending and not os.path.isdir(ckpt):
        units.forget(f"pretrain-{name}")        # its checkpoint is needed, and gone
    pretrained = units.run(f"pretrain-{name}",
                           lambda: source.pretrain(name, VARIANTS[name], ckpt))
    cells: dict[str, list] = {}
    for task in tasks:
        cells[task] = []
        for seed in range(plan.seeds):
            output = os.path.join(work, "finetuned", f"{name}-{task}-seed{seed}")

            def unit(task: str = task, seed: int = seed, output: str = output) -> dict[str, Any]:
                result = source.finetune(task, ckpt, seed, output)
                return {"scores": result.best_scores, "best_epoch": result.best_epoch,
                        "seconds": round(result.wall_seconds, 1)}
            cells[task].append(units.run(f"finetune-{name}-{task}-seed{seed}", unit)["scores"])
            shutil.rmtree(output, ignore_errors=True)
    return {"pretraining": pretrained, "finetuning": cells}


def _plan(quick: bool, seeds: int | None, steps: int | None,
          mixed_precision: str | None = None) -> Plan:
    plan = QUICK if quick else FULL
    changes: dict[str, Any] = {k: v for k, v in (
        ("seeds", seeds), ("steps", steps), ("mixed_precision", mixed_precision))
        if v is not None}
    return dataclasses.replace(plan, **changes)


@outputs.claims("experiments", resume=True)
def run(output: str, quick: bool = False, variants: Sequence[str] | None = None,
        tasks: Sequence[str] | None = None, seeds: int | None = None,
        shared: str | None = None, vocab: str | None = None, steps: int | None = None,
        mixed_precision: str | None = None, arrays: str | None = None, work: str | None = None,
        log: Callable[[str], Any] = print) -> dict[str, Any]:
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
    source: sources.Shards | sources.Arrays
    if arrays:
        with open(os.path.join(arrays, "plan.json"), encoding="utf-8") as f:
            exported = json.load(f)
        plan, quick = Plan(**exported["plan"]), exported["quick"]
        variants = _choose(variants, {n: 0 for n in exported["variants"]}, "exported variant")
        tasks = _choose(tasks, {n: 0 for n in exported["tasks"]}, "exported task")
        source = sources.Arrays(arrays, plan)
    else:
        plan = _plan(quick, seeds, steps, mixed_precision)
        variants = _choose(variants, VARIANTS, "variant")
        tasks = _choose(tasks, TASKS, "task")
        shared = shared or os.environ.get("KBERT_SHARED_DATA") or _default_shared()
        source = sources.Shards(units, work, shared, vocab or _default_vocab(), plan,
                                {t: TASKS[t][:2] for t in tasks})
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
    results: dict[str, Any] = {"plan": dataclasses.asdict(plan), "variants": {}}
    for name in variants:
        results["variants"][name] = run_variant(units, source, work, name, tasks, plan)
    results["seconds_this_run"] = round(time.perf_counter() - started, 1)
    write_results(output, results, tasks, quick)
    return results


@outputs.claims("experiments", argument="folder", resume=True)
def export(folder: str, quick: bool = False, variants: Sequence[str] | None = None,
           tasks: Sequence[str] | None = None, seeds: int | None = None,
           shared: str | None = None, vocab: str | None = None, steps: int | None = None,
           mixed_precision: str | None = None, log: Callable[[str], Any] = print) -> int:
    """Writes what `run(arrays=folder)` needs on a machine without TensorFlow: `plan.json` (the
    plan, fixed here) and `sources.export_data`'s files (tokenized here, with TensorFlow Text).
    Returns the folder's size in bytes."""
    from kbert.network.config import read_vocab
    plan = _plan(quick, seeds, steps, mixed_precision)
    variants = _choose(variants, VARIANTS, "variant")
    tasks = _choose(tasks, TASKS, "task")
    shared = shared or os.environ.get("KBERT_SHARED_DATA") or _default_shared()
    tokens = list(read_vocab(vocab or _default_vocab()))
    sources.export_data(folder, plan, {v: VARIANTS[v] for v in variants},
                        {t: TASKS[t][:2] for t in tasks}, shared, tokens, log)
    report.write_atomic(os.path.join(folder, "plan.json"), json.dumps(
        {"plan": dataclasses.asdict(plan), "quick": quick, "variants": variants,
         "tasks": tasks}, indent=2))
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def _cache_compiles(work: str) -> None:
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


def _choose(names: Sequence[str] | None, known: Mapping[str, Any], what: str) -> list[str]:
    names = list(known) if not names else list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown[0]!r}; choose from {', '.join(known)}")
    return names


def _default_shared() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "data"))


def _default_vocab() -> str:
    from kbert import checkpoint as checkpoint_lib
    return os.path.join(checkpoint_lib.resolve("minilm-l6-mlm-nsp"), "vocab.txt")


def table_rows(results: dict[str, Any], tasks: Sequence[str]) -> list[list[str | float]]:
    """One row per variant: held-out accuracies, then each task's mean ± std (and the paper's)."""
    rows = []
    for name, r in results["variants"].items():
        held = r["pretraining"]["heldout"]
        row: list[str | float] = [VARIANTS[name].label, _pct(held.get("mlm_accuracy")),
                                  _pct(held.get("nsp_accuracy")), _pct(held.get("lm_accuracy"))]
        for task in tasks:
            metric = TASKS[task][2]
            row.append(report.mean_std([s[metric] for s in r["finetuning"][task]]))
            paper = PAPER[name].get(task)
            row.append("—" if paper is None else paper)
        rows.append(row)
    return rows


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def write_results(output: str, results: dict[str, Any], tasks: Sequence[str],
                  quick: bool) -> None:
    """`ablations.md`, `ablations.json` and `curves.png` in `output`, each atomically."""
    header = ["Pretraining", "held-out MLM acc", "held-out NSP acc", "held-out next-token acc"]
    for task in tasks:
        header += [f"{task} {TASKS[task][2]}", f"{task} (paper)"]
    plan = results["plan"]
    lines = [f"Plan: `{plan['config']}` encoder, {plural(plan['steps'], 'update')} of "
             f"{plan['batch_size']} sequences of {plan['max_seq_length']} tokens; fine-tuning "
             f"{plural(plan['finetune_epochs'], 'epoch')}, lr {plan['finetune_learning_rate']}, "
             f"{plural(plan['seeds'], 'seed')} per cell (mean ± std)"
             + (" — QUICK MODE: the numbers are noise" if quick else "."),
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
