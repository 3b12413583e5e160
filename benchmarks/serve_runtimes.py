"""The runtimes section of `serve_latency.py`: kbert's runtimes and precisions beside the peers
of `serving_peers.py`, and the floors they must meet (see `serve_latency.py`'s docstring)."""

from __future__ import annotations

import os
import time

import numpy as np
import serving_peers as peers

# (method, workload, batch, what it calls)
WORKLOADS = (("embed", "32 questions", 32), ("embed", "32 passages", 32),
             ("embed", "1 question", 1), ("fill_mask", "32 sentences", 32),
             ("fill_mask", "1 sentence", 1), ("answer", "32 pairs", 32), ("answer", "1 pair", 1))
# the accuracy a row needs to count as a kbert path: embed worst cosine against HF float32,
# fill_mask top-1 agreement, answer text agreement (normalised as SQuAD scores it)
ACCURACY = {"embed": 0.99, "fill_mask": 0.95, "answer": 0.95}
ACCURACY_NAME = {"embed": "worst cos", "fill_mask": "top-1 agree", "answer": "text agree"}
REFERENCE = "HF torch fp32"
BATCH1_ROUNDS = 10   # batch-1 calls per round: a ~6 ms call varies by ~0.5 ms call to call
RUNTIMES, DTYPES = ("keras", "openvino", "onnx"), ("float32", "bfloat16", "int8")
NO_BF16 = "this CPU has neither AMX nor avx512_bf16"


def calls(inputs):
    """{workload: function(engine) -> outputs} on the benchmark's inputs."""
    q, p, m = inputs["questions"], inputs["passages"], inputs["masked"]
    qs, cs = inputs["pairs"]
    return {"32 questions": lambda e: e.embed(q), "32 passages": lambda e: e.embed(p),
            "1 question": lambda e: e.embed(q[:1]), "32 sentences": lambda e: e.fill_mask(m),
            "1 sentence": lambda e: e.fill_mask(m[:1]), "32 pairs": lambda e: e.answer(qs, cs),
            "1 pair": lambda e: e.answer(qs[:1], cs[:1])}


def workload_flops(inputs, tokenizer, config):
    """{workload: model FLOPs of one call} from the real token counts (`peers.model_flops`)."""
    q, p, m = inputs["questions"], inputs["passages"], inputs["masked"]
    qs, cs = inputs["pairs"]
    windows = tokenizer(qs, cs, truncation="only_second", max_length=384, stride=128,
                        return_overflowing_tokens=True)["input_ids"]
    one_window = tokenizer(qs[:1], cs[:1], truncation="only_second", max_length=384, stride=128,
                           return_overflowing_tokens=True)["input_ids"]
    lengths = lambda texts: peers.token_lengths(tokenizer, texts)  # noqa: E731
    return {"32 questions": peers.model_flops(lengths(q), config),
            "32 passages": peers.model_flops(lengths(p), config),
            "1 question": peers.model_flops(lengths(q[:1]), config),
            "32 sentences": peers.model_flops(lengths(m), config, masks=len(m), head="mlm"),
            "1 sentence": peers.model_flops(lengths(m[:1]), config, masks=1, head="mlm"),
            "32 pairs": peers.model_flops([len(w) for w in windows], config, head="span"),
            "1 pair": peers.model_flops([len(w) for w in one_window], config, head="span")}


def accuracy(method, outputs, reference):
    if method == "embed":
        return peers.worst_cosine(outputs, reference)
    if method == "fill_mask":
        return peers.top1_agreement(outputs, reference)
    return peers.answer_agreement(outputs, reference)


# -- the engines ---------------------------------------------------------------------------


def _first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def build_peers(paths, workdir, threads, fast_bf16):
    """The peers that run here, and a 'skipped: why' line for each that does not."""
    made, skipped = [], []
    hf, squad = paths["hf_mlm"], paths["hf_squad"]
    makers = [("HF torch fp32", lambda: peers.HfTorch(hf, squad)),
              ("HF torch autocast bf16", lambda: peers.HfTorch(hf, squad, bfloat16=True)),
              ("ONNX Runtime fp32", lambda: peers.OnnxRuntime(hf, squad, workdir, threads)),
              ("ONNX Runtime int8",
               lambda: peers.OnnxRuntime(hf, squad, workdir, threads, int8=True)),
              ("OpenVINO", lambda: peers.OpenVino(hf, squad, threads)),
              ("sentence-transformers", lambda: peers.SentenceTransformers(hf, squad))]
    for name, make in makers:
        if "bf16" in name and not fast_bf16:
            skipped.append(f"{name}: skipped: {NO_BF16}")
            continue
        try:
            made.append(make())
        except ImportError as e:
            skipped.append(f"{name}: skipped: {_first_line(e)}")
    return made, skipped


_MAKE_GRAPHS = """
import sys
import kbert
mlm, squad, dtypes, runtimes = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4:]
for runtime in runtimes:
    for dtype in dtypes:
        try:
            m, q = (kbert.load(path, runtime=runtime, dtype=dtype) for path in (mlm, squad))
        except (ValueError, ImportError):     # not offered here: the timing says why
            continue
        m.embed(["a b"], pooling="mean"), m.fill_mask(["a [MASK] b"]), q.answer("a?", "a b")
"""


def make_graphs(paths):
    """Makes kbert's OpenVINO and ONNX graphs of both checkpoints, and their int8 copies, in a
    child process before timing (a no-op where the cache has them): NNCF quantizes in the
    process that asks, and a timing process that had made graphs ran some peers slower after
    (OpenVINO's fill_mask ~1.7x)."""
    import subprocess
    import sys
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MAKE_GRAPHS, paths["mlm"], paths["squad"],
                           ",".join(DTYPES), *[r for r in RUNTIMES if r != "keras"]],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said = "" if done.returncode == 0 else f"; it failed, graphs are made here: " \
        f"{(done.stderr.strip().splitlines() or ['?'])[-1]}"
    print(f"kbert's graphs made or found in a child process "
          f"({time.perf_counter() - start:.0f} s{said})", flush=True)


def build_kbert(paths, fast_bf16):
    """Every `kbert.load(runtime=, dtype=)` combination that loads, and why the others don't."""
    made, skipped = [], []
    make_graphs(paths)
    for runtime in RUNTIMES:
        for dtype in DTYPES:
            name = f"kbert {runtime} {dtype}"
            if dtype == "bfloat16" and not fast_bf16:
                skipped.append(f"{name}: skipped: {NO_BF16}")
                continue
            try:
                made.append(peers.Kbert(paths["mlm"], paths["squad"], runtime, dtype))
            except (ValueError, ImportError, TypeError) as e:
                skipped.append(f"{name}: skipped: {_first_line(e)}")
    return made, skipped


# -- timing --------------------------------------------------------------------------------


def time_workload(engines, call, rounds, warmup=1):
    """({engine: seconds per call}, {engine: last outputs}, {engine: why skipped}): every
    engine called in turn, the starting one rotating each round, so noise hits all alike."""
    live, outputs, skipped = [], {}, {}
    for engine in engines:
        try:
            for _ in range(warmup):
                outputs[engine.name] = call(engine)
            live.append(engine)
        except ValueError as e:        # a combination kbert refuses at the call
            skipped[engine.name] = _first_line(e)
    seconds = {e.name: [] for e in live}
    for r in range(rounds):
        for engine in live[r % max(len(live), 1):] + live[:r % max(len(live), 1)]:
            start = time.perf_counter()
            outputs[engine.name] = call(engine)
            seconds[engine.name].append(time.perf_counter() - start)
    return seconds, outputs, skipped


def measure(engines, inputs, rounds):
    """{workload: {engine: {"ms": median, "accuracy": against HF float32}}}, skipped cells."""
    results, skipped = {}, []
    for method, workload, batch in WORKLOADS:
        able = [e for e in engines if getattr(e, method, None) is not None]
        n = rounds if batch > 1 else BATCH1_ROUNDS * rounds
        seconds, outputs, refused = time_workload(able, calls(inputs)[workload], n,
                                                  warmup=1 if batch > 1 else 2)
        skipped += [f"{name} {method} ({workload}): skipped: {why}"
                    for name, why in refused.items()]
        reference = outputs.get(REFERENCE)
        results[workload] = {
            name: {"ms": float(np.median(s)) * 1e3,
                   "accuracy": (accuracy(method, outputs[name], reference)
                                if reference is not None else float("nan"))}
            for name, s in seconds.items()}
        print(f"  {method} {workload}: done ({len(seconds)} engines, {n} rounds)", flush=True)
    return results, skipped


# -- printing and the floors ---------------------------------------------------------------


def print_tables(results, flops, engines, peak):
    """One table per method: median ms per workload, accuracy, GFLOP/s at batch 32."""
    peak_name, peak_gflops = peak
    for method in ("embed", "fill_mask", "answer"):
        loads = [(w, b) for m, w, b in WORKLOADS if m == method]
        print(f"\n#### {method}\n")
        print("| engine | " + " | ".join(f"{w} (ms)" for w, _ in loads) +
              f" | {ACCURACY_NAME[method]} | GFLOP/s (batch 32) | % of {peak_name} peak |")
        print("|---|" + "---:|" * (len(loads) + 3))
        for engine in engines:
            cells = [results[w].get(engine.name) for w, _ in loads]
            if not any(cells):
                continue
            times = [f"{c['ms']:,.1f}" if c else "--" for c in cells]
            worst = min(c["accuracy"] for c in cells if c)
            rates = [flops[w] / c["ms"] / 1e6 for (w, b), c in zip(loads, cells) if c and b > 1]
            print(f"| {engine.name} | " + " | ".join(times) + f" | {worst:.4f} | " +
                  " / ".join(f"{r:.1f}" for r in rates) +
                  f" | {100 * max(rates, default=0) / peak_gflops:.0f}% |")


def _accurate_kbert(cells, method):
    return {n: c for n, c in cells.items()
            if n.startswith("kbert ") and c["accuracy"] >= ACCURACY[method]}


def _peer_floors(workload, batch):
    """[(peer, floor, kind)]: 'speed' = peer ms / kbert ms >= floor; 'latency' = kbert ms /
    peer ms <= floor."""
    if batch == 1:
        return [("OpenVINO", 1.1, "latency"), ("ONNX Runtime fp32", 1.0, "latency")]
    rows = [("OpenVINO", 1.0, "speed"), ("HF torch autocast bf16", 1.3, "speed")]
    return rows + ([(REFERENCE, 2.5, "speed")] if workload == "32 passages" else [])


def _int8_lines(workload, method, cells):
    """The int8 rule: a kbert int8 path must beat kbert's bfloat16 (float32 where this CPU has
    no bfloat16 rows) by >= 1.2x at item 5's accuracy."""
    lines, failures = [], []
    for dtype in ("bfloat16", "float32"):
        base = {n: c for n, c in _accurate_kbert(cells, method).items() if n.endswith(dtype)}
        if base:
            break
    for name, cell in cells.items():
        if not (name.startswith("kbert ") and name.endswith("int8")) or not base:
            continue
        best = min(base, key=lambda n: base[n]["ms"])
        speed = base[best]["ms"] / cell["ms"]
        ok = speed >= 1.2 and cell["accuracy"] >= ACCURACY[method]
        lines.append(f"{method}, {workload}: {name} {speed:.2f}x {best}, "
                     f"{ACCURACY_NAME[method]} {cell['accuracy']:.4f} (floor >= 1.2x at "
                     f">= {ACCURACY[method]}){'' if ok else '  MISSED'}")
        if not ok:
            failures.append(f"{method}, {workload}: {name} offered at {speed:.2f}x {best}, "
                            f"{ACCURACY_NAME[method]} {cell['accuracy']:.4f}")
    return lines, failures


def floors(results, skipped_peers=()):
    """(ratio lines, failures) for every floor; a peer that did not run is said, not failed."""
    lines, failures = [], []
    absent = {line.split(":")[0]: line for line in skipped_peers}
    for method, workload, batch in WORKLOADS:
        cells = results.get(workload, {})
        kbert = _accurate_kbert(cells, method)
        if not kbert:
            failures.append(f"{method}, {workload}: no kbert path ran at the accuracy floor")
            continue
        best = min(kbert, key=lambda n: kbert[n]["ms"])
        ms = kbert[best]["ms"]
        for peer, floor, kind in _peer_floors(workload, batch):
            head = f"{method}, {workload}: {best} ({ms:,.1f} ms)"
            if peer not in cells:
                lines.append(f"{head} vs {peer}: no row ({absent.get(peer, 'did not run')})")
                continue
            ratio = cells[peer]["ms"] / ms if kind == "speed" else ms / cells[peer]["ms"]
            ok = ratio >= floor if kind == "speed" else ratio <= floor
            sign = ">=" if kind == "speed" else "<="
            lines.append(f"{head} = {ratio:.2f}x {peer}'s {kind} (floor {sign} {floor}x)"
                         + ("" if ok else "  MISSED"))
            if not ok:
                failures.append(f"{method}, {workload}: {ratio:.2f}x {peer} ({sign} {floor}x)")
        if batch > 1:
            more_lines, more_failures = _int8_lines(workload, method, cells)
            lines += more_lines
            failures += more_failures
    return lines, failures


def run(paths, workdir, threads_label, threads, rounds, data):
    """The whole section at one thread setting; returns the floors missed."""
    import json

    import torch
    import transformers

    from kbert import hardware
    fast_bf16 = hardware.has_fast_bfloat16()
    fp32_peak = peers.matmul_peak("float32")
    bf16_peak = peers.matmul_peak("bfloat16") if fast_bf16 else None
    print(f"\n### Runtimes and precisions, threads: {threads_label} ({threads} for the peers, "
          f"torch {torch.get_num_threads()}), load average {os.getloadavg()[0]:.1f}\n")
    print(hardware.describe())
    print(f"matmul peak (torch, 1024^3, {torch.get_num_threads()} threads): float32 "
          f"{fp32_peak:.1f} GFLOP/s; bfloat16 " +
          (f"{bf16_peak:.1f} GFLOP/s" if bf16_peak else f"skipped: {NO_BF16}"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(paths["hf_mlm"])
    inputs = peers.squad_inputs(data, tokenizer)
    with open(os.path.join(paths["hf_mlm"], "config.json"), encoding="utf-8") as f:
        flops = workload_flops(inputs, tokenizer, json.load(f))
    peer_list, skipped = build_peers(paths, os.path.join(workdir, "onnx"), threads, fast_bf16)
    kbert_list, kbert_skipped = build_kbert(paths, fast_bf16)
    engines = peer_list + kbert_list
    print("\nsettings:")
    for engine in engines:
        print(f"- {engine.name}: {engine.settings}")
    for line in skipped + kbert_skipped:
        print(f"- {line}")
    print(f"\ntiming {rounds} rounds at batch 32, {BATCH1_ROUNDS * rounds} at batch 1 (medians):",
          flush=True)
    results, refused = measure(engines, inputs, rounds)
    fp32_peak = max(fp32_peak, peers.matmul_peak("float32"))    # before and after: the best
    bf16_peak = max(bf16_peak, peers.matmul_peak("bfloat16")) if fast_bf16 else None
    print(f"matmul peak again after the timings: float32 {fp32_peak:.1f} GFLOP/s (the best "
          "of the two is used below)")
    for line in refused:
        print(f"- {line}")
    peak = ("bfloat16", bf16_peak) if bf16_peak else ("float32", fp32_peak)
    print_tables(results, flops, engines, peak)
    lines, failures = floors(results, skipped)
    print(f"\nfloors, threads {threads_label}:")
    print("\n".join(lines))
    print("\n".join(["all met"] if not failures else ["missed: " + f for f in failures]))
    return [f"threads {threads_label}: {f}" for f in failures]
