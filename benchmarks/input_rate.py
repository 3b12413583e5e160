"""Sequences per second each pretraining input path delivers per CPU core, against what a GPU
consumes.

    python benchmarks/input_rate.py                 # shards from the shared corpus (brown)
    python benchmarks/input_rate.py --cores 16      # on the GPU host: measured, not projected
    python benchmarks/input_rate.py --quick         # a few files, one core, short windows

The paths, as `kbert pretrain` and `examples/pretrain_arrays.py` build them:
- `static`: `kbert.data.inputs.pretraining_dataset` over TFRecord shards (masks written by
  `kbert create-pretraining-data`), seeded as `kbert pretrain` seeds it, then `targets_for`;
- `dynamic`: the same with `DynamicMasking` (new masks drawn for every batch);
- `arrays`: `kbert.data.arrays.PretrainingBatches` (the feed of `examples/pretrain_arrays.py`),
  NumPy arrays (the same shards read into memory);
- `text`: `kbert.data.text.text_pretraining_dataset`, straight from the text files (sentence
  splitting, tokenization, pairs and masking in tf.data; `kbert pretrain --text`).

The shards are written first by kbert's own `create_pretraining_data` from real text (not
synthetic features), at sequence 128 / 20 predictions (batch 256) and 512 / 80 (batch 64). Each
core count runs in its own process, pinned with `os.sched_setaffinity` to that many CPUs, with
TensorFlow's intra/inter-op pools and the tf.data private thread pool the same size; batches
are taken as the JAX and PyTorch backends take them (NumPy), by a consumer on the same cores.
A rate is one timed window of `--seconds` after a warm-up as long (the shuffle buffer fills,
autotuning settles); each core count runs `--repeats` times, alternated, and the best is kept.
Beside each wall-clock rate, sequences per CPU-second of that process: other load on the machine
slows the first, hardly the second (and on n cores the second shows what running in parallel
costs in extra CPU work).

Projection to 16 cores: Amdahl's law through the rates on 1 and on `--cores` n CPUs (2 here): the
serial fraction s from the speedup S, s = (n/S - 1)/(n - 1), then 1 / (s + (1 - s)/16); with
one CPU measured (`--quick`, or one usable CPU), linear. The rates needed are what one H200
consumes in pretraining at sequence 128 (base 3,300, mini 14,000 sequences/s); at 512 the same
tokens/s (a quarter of the sequences: an upper bound, attention makes a 512 step dearer than
four 128 steps). "Cores needed" divides that by the 1-core rate: it does not lean on the
projection.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus")
VOCAB = os.path.join(ROOT, "saved_models", "minilm-l6-mlm-nsp", "vocab.txt")
PATHS = ("static", "dynamic", "arrays", "text")
SHAPES = ((128, 20, 256), (512, 80, 64))     # (max_seq_length, max_predictions_per_seq, batch)
NEEDED_128 = {"base": 3300, "mini": 14000}   # sequences/s one H200 consumes at sequence 128
TARGET_CORES = 16


def needed(config, seq):
    """Sequences/s a GPU consumes: the measured rate at 128, the same tokens/s at other lengths."""
    return NEEDED_128[config] * 128 / seq


def amdahl(one, many=None, n=2, cores=TARGET_CORES):
    """The rate on `cores` from the rates on 1 and on `n` cores (linear when `many` is None):
    Amdahl's law with the serial fraction s that the `n`-core speedup S gives,
    s = (n/S - 1) / (n - 1).

    >>> round(amdahl(100, 200)), round(amdahl(100, 100)), round(amdahl(100, 150))
    (1600, 100, 320)
    """
    if many is None:
        return one * cores
    serial = min(1.0, max(0.0, (n * one / many - 1) / (n - 1)))
    return one / (serial + (1 - serial) / cores)


# --- data ---------------------------------------------------------------------------------------
def write_shards(out, files, vocab, quick):
    """`out/seqN`, one shard directory per shape, written by kbert's `create_pretraining_data`
    (by the first measuring process: one TensorFlow start fewer); returns {N: directory}."""
    from kbert.data import pretraining
    dirs = {seq: os.path.join(out, f"seq{seq}") for seq, _, _ in SHAPES}
    for seq, preds, _ in SHAPES:
        if os.path.isdir(dirs[seq]):
            continue
        totals = pretraining.create_pretraining_data(
            files, vocab, dirs[seq], pretraining.Options(seq, preds, dupe_factor=1, seed=1),
            block_size=2000 if quick else 20000, progress=False)
        print(f"sequence {seq}: {totals['instances']} instances in {totals['shards']} shards "
              f"from {len(files)} files", file=sys.stderr, flush=True)
    return dirs


def corpus_files(sources, limit=None):
    import glob
    files = [f for s in sources for f in sorted(glob.glob(os.path.join(CORPUS, s, "*.txt")))]
    if not files:
        sys.exit(f"no corpus files under {CORPUS} for {sources}")
    return files[:limit]


# --- one process per core count -----------------------------------------------------------------
def pin(cores):
    """This process (and the threads it starts from now on) on its first `cores` CPUs."""
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    os.sched_setaffinity(0, cpus)
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(cores)
    tf.config.threading.set_inter_op_parallelism_threads(cores)
    return cpus


def tf_batches(directory, batch_size, dynamic, vocab, cores):
    """`kbert pretrain`'s stream (seeded), its targets, as NumPy batches."""
    import tensorflow as tf

    from kbert.data import inputs
    masking = None
    if dynamic:
        predictions = inputs.shard_shapes(inputs.shard_files(directory))[1]
        masking = inputs.DynamicMasking(vocab, predictions)
    ds = inputs.pretraining_dataset(directory, batch_size, seed=0, dynamic_masking=masking)
    ds = ds.map(inputs.targets_for("mlm_nsp"))
    options = tf.data.Options()
    options.threading.private_threadpool_size = cores
    options.threading.max_intra_op_parallelism = 1
    return ds.with_options(options).as_numpy_iterator()


def text_batches(files, vocab, seq, preds, batch_size, cores):
    """`kbert pretrain --text`'s stream (local; a shuffle buffer of 1,000 rows so that the
    warm-up is short: the steady rate does not depend on it), its targets, as NumPy batches."""
    import tensorflow as tf

    from kbert.data import inputs, text
    ds = text.text_pretraining_dataset(files, vocab, batch_size, seq, preds, seed=0,
                                       shuffle_buffer=1000)
    options = tf.data.Options()
    options.threading.private_threadpool_size = cores
    options.threading.max_intra_op_parallelism = 1
    return ds.map(inputs.targets_for("mlm_nsp")).with_options(options).as_numpy_iterator()


def array_batches(directory, batch_size):
    """`kbert.data.arrays.PretrainingBatches` (the feed of
    `kbert.training.pretraining_arrays`) over the shards' features read into memory."""
    import itertools

    from kbert.data import arrays, inputs
    data = arrays.from_dataset(inputs.pretraining_dataset(directory, 4096, is_training=False))
    feed = arrays.PretrainingBatches(data, batch_size, steps_per_epoch=10 ** 9)
    return (feed[i] for i in itertools.count())


def rate(batches, batch_size, seconds):
    """(sequences/s, sequences per CPU-second of this process) over one window of `seconds`,
    after a warm-up as long (the shuffle buffer fills, autotuning settles)."""
    start = time.perf_counter()
    for n in range(10 ** 9):
        next(batches)
        if n >= 2 and time.perf_counter() - start > seconds:
            break
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while n < 2 or time.perf_counter() - start < seconds:
        next(batches)
        n += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return n * batch_size / wall, n * batch_size / cpu


def child(args):
    """Measures every path and shape on `args.cores` CPUs; prints one JSON line each."""
    cpus = pin(args.cores)
    from kbert.network.config import read_vocab
    vocab = read_vocab(args.vocab)
    files = corpus_files(args.sources, 4 if args.quick else None)
    dirs = write_shards(args.data, files, args.vocab, args.quick)
    for seq, preds, batch in SHAPES:
        if args.quick:
            batch //= 4
        for path in args.paths:
            if path == "arrays":
                batches = array_batches(dirs[seq], batch)
            elif path == "text":
                batches = text_batches(files, vocab, seq, preds, batch, args.cores)
            else:
                batches = tf_batches(dirs[seq], batch, path == "dynamic", vocab, args.cores)
            wall, cpu = rate(batches, batch, args.seconds)
            print(json.dumps({"path": path, "seq": seq, "batch": batch, "cores": args.cores,
                              "cpus": cpus, "rate": wall, "cpu_rate": cpu}), flush=True)
            del batches


def run_child(args, cores):
    command = [sys.executable, os.path.abspath(__file__), "--child", "--cores", str(cores),
               "--data", args.data, "--vocab", args.vocab, "--seconds", str(args.seconds),
               "--sources", *args.sources, "--paths", *args.paths]
    command += ["--quick"] if args.quick else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=env)
    if done.returncode:
        sys.exit(f"the {cores}-core run failed")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def measure(args, core_counts):
    """The best of `args.repeats` rounds, each a fresh process per core count (alternated, so a
    burst of other load on the machine hits one round, not every run of one core count)."""
    best = {}
    for _ in range(args.repeats):
        for cores in core_counts:
            for r in run_child(args, cores):
                key = (r["path"], r["seq"], r["cores"])
                if key not in best or r["rate"] > best[key]["rate"]:
                    best[key] = r
    return best


# --- the table ----------------------------------------------------------------------------------
def table(results, n):
    """Rows of (path, shape, rates on 1 and `n` cores, projection, needs and headroom)."""
    rows = []
    for seq, preds, _ in SHAPES:
        for path in sorted({p for p, s, _ in results if s == seq}, key=PATHS.index):
            one = results[(path, seq, 1)]
            many = results[(path, seq, n)] if n > 1 else {"rate": None, "cpu_rate": None}
            many, many_cpu = many["rate"], many["cpu_rate"]
            projected = amdahl(one["rate"], many, n)
            rows.append({
                "path": path, "shape": f"{one['batch']}x{seq}, {preds} pred",
                "one": one["rate"], "one_cpu": one["cpu_rate"], "cores": n, "many": many,
                "many_cpu": many_cpu,
                "scaling": many and many / one["rate"], "projected": projected,
                **{f"needed_{c}": needed(c, seq) for c in NEEDED_128},
                **{f"cores_for_{c}": needed(c, seq) / one["rate"] for c in NEEDED_128},
                **{f"headroom_{c}": projected / needed(c, seq) for c in NEEDED_128}})
    return rows


def show(rows, n):
    def f(x):
        return "-" if x is None else f"{x:,.0f}"
    print(f"\n| path | batch x seq | 1 core: seq/s | seq/CPU-s | {n} cores: seq/s | seq/CPU-s | "
          f"scaling 1→{n} | projected, {TARGET_CORES} cores | needed base / mini | "
          f"cores needed base / mini | headroom base / mini |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        scaling = "-" if r["scaling"] is None else f"{r['scaling']:.2f}×"
        print(f"| {r['path']} | {r['shape']} | {f(r['one'])} | {f(r['one_cpu'])} | "
              f"{f(r['many'])} | {f(r['many_cpu'])} | {scaling} | {f(r['projected'])} | "
              f"{f(r['needed_base'])} / {f(r['needed_mini'])} | {r['cores_for_base']:.2f} / "
              f"{r['cores_for_mini']:.2f} | {r['headroom_base']:,.1f}× / "
              f"{r['headroom_mini']:,.1f}× |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="+", default=["brown"], help="corpus folders")
    parser.add_argument("--vocab", default=VOCAB)
    parser.add_argument("--seconds", type=float, default=2.0, help="each timed window")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the best is kept")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--cores", type=int, default=2,
                        help="the second core count measured (2 here; 16 on a GPU host measures "
                             "instead of projecting)")
    parser.add_argument("--quick", action="store_true",
                        help="a few corpus files, quarter batches, one core, one short window")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    if args.child:
        return child(args)
    if args.quick:
        args.seconds, args.repeats = min(args.seconds, 0.3), 1
    usable = len(os.sched_getaffinity(0))
    n = 1 if args.quick else min(args.cores, usable)
    print(f"{usable} usable CPUs, load average {os.getloadavg()[0]:.1f}; best of "
          f"{args.repeats} rounds of {args.seconds:g} s windows", flush=True)
    with tempfile.TemporaryDirectory() as args.data:
        results = measure(args, sorted({1, n}))
    rows = table(results, n)
    show(rows, n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
