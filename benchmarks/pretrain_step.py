"""Time one pretraining step (MLM + NSP, forward + backward + AdamW update) side by side.

kbert on each Keras backend, HF `BertForPreTraining` (PyTorch) and keras-hub `BertMaskedLM`, each
in its own process, on the same shapes (batch 32, 128 tokens, 20 predictions, vocab 30,522).
Each runs in float32 and in bfloat16 (`benchmarks/precisions.py`: bfloat16 where the CPU has
AMX or avx512_bf16, and every row on a GPU): kbert as `kbert pretrain --mixed-precision
mixed_bfloat16` builds it (`BertPretrainer(dtype="mixed_bfloat16")`: float32 weights, bfloat16
products), keras-hub under the global `mixed_bfloat16` policy, HF under `torch.autocast`
bfloat16 (its one-line switch).
kbert and keras-hub compile the step as `kbert pretrain --jit-compile auto` does, Keras' choice:
XLA on JAX and on a TensorFlow GPU, none on a CPU-only TensorFlow (where XLA is faster on some
CPUs and slower on others: the `xla` variant adds a kbert/tensorflow row with it).

MFU = achieved FLOP/s ÷ a matmul peak measured in this run: float32 (the best of numpy and
torch on a CPU) and, where bfloat16 rows run, bfloat16 (torch); every row is shown against both,
so the distance to each limit shows. FLOPs per step, the 6·params·tokens rule, counted as:
    6 · (encoder matmul weights, without embeddings) · B·T     dense layers
  + 6 · (H·V) · B·P                                            tied MLM decoder, P positions
  + 12 · L · T · H · B·T                                       attention scores + context
(kbert and keras-hub score the P masked positions only; HF scores all T positions, which is more
work that this count does not credit.)

    python benchmarks/pretrain_step.py                       # mini and base, everything
    python benchmarks/pretrain_step.py --configs mini --steps 5 --backends jax
    python benchmarks/pretrain_step.py --configs base --backends jax torch \\
        --shapes 256x128x20 64x512x80 --variants attention-dropout-0 compile     # a GPU
    python benchmarks/pretrain_step.py --configs mini --backends tensorflow --skip hf keras-hub \\
        --variants xla                         # a CPU: the step `kbert pretrain` runs, and XLA's
    python benchmarks/pretrain_step.py --configs mini --backends tensorflow torch --skip keras-hub
                                               # the bfloat16 floors (a CPU with AMX/avx512_bf16)
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from precisions import PRECISIONS, bf16_floors, cpu_line, default_precisions, label, print_floors

SHAPES = {"mini": (4, 256, 4), "base": (12, 768, 12)}
# extra kbert rows, their backend
VARIANTS = {"attention-dropout-0": "jax", "compile": "torch", "xla": "tensorflow"}
VOCAB = 30522


def flops_per_step(config, batch, seq, preds):
    layers, hidden, _ = SHAPES[config]
    dense = layers * (4 * hidden * hidden + 2 * hidden * 4 * hidden) + 2 * hidden * hidden
    return (6 * dense * batch * seq + 6 * hidden * VOCAB * batch * preds
            + 12 * layers * seq * hidden * batch * seq)


def _inputs(batch, seq, preds, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, VOCAB, (batch, seq)).astype("int32")
    positions = np.sort(rng.choice(np.arange(1, seq), (batch, preds)), axis=1).astype("int32")
    return dict(input_ids=ids, segment_ids=(np.arange(seq)[None] >= seq // 2).repeat(batch, 0)
                .astype("int32"), input_mask=np.ones((batch, seq), "int32"),
                masked_lm_positions=positions,
                masked_lm_ids=rng.integers(1000, VOCAB, (batch, preds)).astype("int32"),
                next_sentence_labels=rng.integers(0, 2, (batch, 1)).astype("int32"))


def _time(step, warmup, steps, profile=False):
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    if profile:
        try:
            _profile(step)
        except Exception as e:  # noqa: BLE001  (a profiler problem must not lose the timing)
            print(f"PROFILE failed: {type(e).__name__}: {e}", flush=True)
    return seconds


def _profile(step, steps=3, top=15):
    """Where a step's time goes, printed: on a CPU by kind of work on every backend
    (`step_profile`); on a GPU (PyTorch) the top kernels by device time."""
    import keras
    if not (_gpu() and keras.backend.backend() == "torch"):
        from step_profile import print_profile, profile
        print_profile(profile(step, steps))
        return
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
    kernels = [e for e in prof.key_averages()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.self_device_time_total for e in kernels)
    print(f"PROFILE {sum(e.count for e in kernels) / steps:.0f} kernels and "
          f"{total / steps / 1e3:.1f} ms of device time per step; top {top}:", flush=True)
    for e in sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:top]:
        print(f"PROFILE {e.self_device_time_total / steps / 1e3:8.2f} ms "
              f"{100 * e.self_device_time_total / total:5.1f}% {e.count // steps:5d}x "
              f"{e.key[:90]}", flush=True)


def _gpu():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def run_kbert(config, batch, seq, preds, warmup, steps, variant="", profile=False,
              precision="float32"):
    """variant "attention-dropout-0": attention_dropout=0 (on JAX + GPU: cuDNN's fused
    attention; with dropout the explicit path runs); "compile": jit_compile=True on PyTorch
    (torch.compile, what `kbert pretrain --jit-compile auto` does on CUDA); "xla":
    jit_compile=True on TensorFlow (`--jit-compile on`; "auto" is XLA on a GPU only)."""
    import keras

    import kbert
    from kbert.models.optimization import create_optimizer
    layers, hidden, heads = SHAPES[config]
    cfg = kbert.BertConfig(num_layers=layers, hidden_size=hidden, num_heads=heads,
                           intermediate_size=4 * hidden,
                           attention_dropout=0.0 if variant == "attention-dropout-0" else 0.1)
    model = kbert.BertPretrainer(cfg, dtype="mixed_bfloat16" if precision == "bfloat16" else None)
    jit = "auto" if keras.backend.backend() != "torch" else variant == "compile"
    jit = True if variant == "xla" else jit
    model.compile(create_optimizer(total_steps=1000, warmup_steps=10), jit_compile=jit)
    f = _inputs(batch, seq, preds)
    x = {k: f[k] for k in ("input_ids", "segment_ids", "input_mask", "masked_lm_positions")}
    y = {"mlm_logits": f["masked_lm_ids"], "nsp_logits": f["next_sentence_labels"]}
    w = {"mlm_logits": np.ones((batch, preds), "float32"), "nsp_logits": np.ones(batch, "float32")}
    return _time(lambda: model.train_on_batch(x, y, w), warmup, steps, profile)


def run_keras_hub(config, batch, seq, preds, warmup, steps, profile=False, precision="float32"):
    import keras
    import keras_hub
    if precision == "bfloat16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    layers, hidden, heads = SHAPES[config]
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=4 * hidden, max_sequence_length=512)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, epsilon=1e-6, global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile="auto")
    f = _inputs(batch, seq, preds)
    x = {"token_ids": f["input_ids"], "segment_ids": f["segment_ids"],
         "padding_mask": f["input_mask"].astype(bool), "mask_positions": f["masked_lm_positions"]}
    return _time(lambda: model.train_on_batch(x, f["masked_lm_ids"]), warmup, steps, profile)


def run_hf(config, batch, seq, preds, warmup, steps, profile=False, precision="float32"):
    import torch
    import transformers
    layers, hidden, heads = SHAPES[config]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=4 * hidden)
    model = transformers.BertForPreTraining(cfg).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    f = _inputs(batch, seq, preds)
    labels = np.full((batch, seq), -100, "int64")
    np.put_along_axis(labels, f["masked_lm_positions"].astype("int64"), f["masked_lm_ids"], 1)
    t = {k: torch.as_tensor(v, dtype=torch.long, device=device) for k, v in dict(
        input_ids=f["input_ids"], token_type_ids=f["segment_ids"],
        attention_mask=f["input_mask"], labels=labels,
        next_sentence_label=f["next_sentence_labels"][:, 0]).items()}
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bfloat16")

    def step():
        with autocast:
            loss = model(**t).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
    return _time(step, warmup, steps, profile)


def matmul_peak(n=2048, repeats=5, precision="float32"):
    """FLOP/s of the best large matmul this machine does: float32 or bfloat16 on a CPU,
    bfloat16 on a GPU."""
    import torch
    if precision == "bfloat16" and not torch.cuda.is_available():
        size = 512                        # up to n while a product is quick (emulation is not)
        while size < n and _seconds(torch.randn(size, size, dtype=torch.bfloat16)) < 0.05:
            size *= 2
        a = torch.randn(size, size, dtype=torch.bfloat16)
        return max(2 * size ** 3 / _seconds(a) for _ in range(repeats))
    if torch.cuda.is_available():
        a, best = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16), 0.0
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            a @ a
            torch.cuda.synchronize()
            best = max(best, 2 * 8192 ** 3 / (time.perf_counter() - start))
        return best
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    return max(2 * n ** 3 / _seconds(m) for m in (a, torch.from_numpy(a)) for _ in range(repeats))


def _seconds(a):
    """Seconds of one a @ a."""
    start = time.perf_counter()
    a @ a
    return time.perf_counter() - start


def _shape(text):
    batch, seq, preds = (int(v) for v in text.split("x"))
    return batch, seq, preds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=["mini", "base"], choices=sorted(SHAPES))
    p.add_argument("--backends", nargs="+", default=["tensorflow", "jax", "torch"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--preds", type=int, default=20)
    p.add_argument("--shapes", nargs="+", type=_shape, metavar="BxTxP",
                   help="several shapes, each BATCHxSEQxPREDICTIONS (e.g. 256x128x20 64x512x80),"
                        " timed in one process per implementation; default: --batch/--seq/--preds")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--skip", nargs="*", default=[], help="hf and/or keras-hub")
    p.add_argument("--variants", nargs="*", default=[], choices=VARIANTS,
                   help="extra kbert rows: attention-dropout-0 (JAX), compile (PyTorch), "
                        "xla (TensorFlow)")
    p.add_argument("--precisions", nargs="+", choices=PRECISIONS,
                   help="default: float32, and bfloat16 where the CPU has AMX or avx512_bf16; "
                        "bfloat16 only on a GPU")
    p.add_argument("--json", help="also write every row here")
    p.add_argument("--worker-timeout", type=float, help="seconds one implementation may take")
    p.add_argument("--profile", action="store_true",
                   help="also print where each kbert/keras-hub/HF step's time goes: by kind of "
                        "work on a CPU (benchmarks/step_profile.py), top kernels on a GPU")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    shapes = args.shapes or [(args.batch, args.seq, args.preds)]
    if args.worker:
        impl, config, precision = args.worker.split(":")
        name, _, variant = impl.partition("+")
        run = {"kbert": run_kbert, "keras-hub": run_keras_hub, "hf": run_hf}[name]
        extra = {"variant": variant} if variant else {}
        extra["precision"] = precision
        extra.update({"profile": True} if args.profile else {})
        for shape in shapes:
            seconds = run(config, *shape, args.warmup, args.steps, **extra)
            print("RESULT", json.dumps({"shape": list(shape), "seconds": seconds}), flush=True)
        return

    gpu = _gpu()
    precisions = args.precisions or default_precisions(gpu)
    print(cpu_line(gpu), flush=True)
    peaks = {"float32": matmul_peak()} if not gpu else {}
    if "bfloat16" in precisions:
        peaks["bfloat16"] = matmul_peak(precision="bfloat16")
    print("matmul peak measured: " + ", ".join(
        f"{peak / 1e9:.1f} GFLOP/s {'GPU ' if gpu else 'CPU '}{precision}"
        for precision, peak in peaks.items()), flush=True)
    jobs = [("kbert", b) for b in args.backends]
    jobs += [(f"kbert+{v}", VARIANTS[v]) for v in args.variants if VARIANTS[v] in args.backends]
    jobs += [] if "keras-hub" in args.skip else [("keras-hub", b) for b in args.backends]
    jobs += [] if "hf" in args.skip else [("hf", "torch")]
    jobs = [(impl, backend, precision) for precision in precisions for impl, backend in jobs]
    everything = []
    for config in args.configs:
        rows = {shape: {} for shape in shapes}          # {shape: {(impl, backend, precision): s}}
        for impl, backend, precision in jobs:
            name = _row_name(impl, backend, precision, gpu)
            results, said = _run_worker(args, impl, backend, precision, config, shapes)
            shown = ", ".join(f"{'x'.join(map(str, r['shape']))}: {r['seconds'] * 1e3:.1f} ms"
                              for r in results)
            print(f"{config} {name}: {shown or 'no shape timed'} {said}", flush=True)
            for r in results:
                rows[tuple(r["shape"])][impl, backend, precision] = r["seconds"]
        for shape, row in rows.items():
            everything += _print_table(config, shape, row, peaks, gpu)
            print_floors(bf16_floors({k: v for k, v in row.items() if "+" not in k[0]}, gpu))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(peak_flops=peaks, gpu=gpu, rows=everything), f, indent=1)


def _row_name(impl, backend, precision, gpu):
    library, _, variant = impl.partition("+")
    return (f"{library}/{backend}" + (f" ({variant})" if variant else "")
            + label(precision, gpu))


def _run_worker(args, impl, backend, precision, config, shapes):
    """([{"shape", "seconds"}], what to say after them) from one worker process."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(
                   filter(None, [os.path.dirname(here), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, __file__, "--worker", f"{impl}:{config}:{precision}", "--shapes",
           *("x".join(map(str, s)) for s in shapes), "--warmup", str(args.warmup),
           "--steps", str(args.steps)] + (["--profile"] if args.profile else [])
    started = time.perf_counter()
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True,
                             timeout=args.worker_timeout)
        stdout, failed = out.stdout, out.returncode and out.stderr.strip()[-300:]
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        failed = f"stopped after {args.worker_timeout} s"
    for line in stdout.splitlines():
        if line.startswith("PROFILE "):
            print(f"    {line[8:]}", flush=True)
    results = [json.loads(x[7:]) for x in stdout.splitlines() if x.startswith("RESULT ")]
    return results, (f"({time.perf_counter() - started:.0f} s in all)"
                     + (f"; failed: {failed}" if failed else ""))


def _print_table(config, shape, row, peaks, gpu):
    """One table: every row's step time, throughput, speed against HF at the same precision
    and MFU against each measured peak; the rows as dicts for --json."""
    batch, seq, preds = shape
    flops = flops_per_step(config, batch, seq, preds)
    print(f"\n{config}: batch {batch}, seq {seq}, {preds} predictions, "
          f"{flops / 1e9:.0f} GFLOP/step")
    print(f"{'implementation':<40}{'step ms':>10}{'examples/s':>12}{'vs HF':>8}"
          + "".join(f"{'MFU ' + ('bf16' if p == 'bfloat16' else 'f32'):>10}" for p in peaks))
    out = []
    for key, seconds in sorted(row.items(), key=lambda kv: kv[1]):
        hf = row.get(("hf", "torch", key[2]))          # HF at the same precision
        ratio = f"{hf / seconds:.2f}x" if hf else "-"
        mfu = {p: flops / seconds / peak for p, peak in peaks.items()}
        print(f"{_row_name(*key, gpu):<40}{seconds * 1e3:>10.1f}{batch / seconds:>12.1f}"
              f"{ratio:>8}" + "".join(f"{m:>10.1%}" for m in mfu.values()))
        out.append(dict(config=config, batch=batch, seq=seq, preds=preds,
                        implementation=_row_name(*key, gpu), precision=key[2],
                        seconds=seconds, vs_hf=hf / seconds if hf else None, mfu=mfu))
    sys.stdout.flush()
    return out

if __name__ == "__main__":
    main()
