"""What a framework costs per training step: kbert's `fit` beside HF and a bare compiled step.

A step whose arithmetic is a few MFLOP measures only the framework around it: Python, op
dispatch, kernel launches, host syncs. `nano` (2 layers, hidden 32, vocab 1,000, batch 4 x 16,
2 predictions) is that step on any CPU; `mini` at batch 32 (4 layers, hidden 256, 128 tokens,
20 predictions) is the accelerator benchmark's size. Each row runs in its own process, MLM+NSP
with AdamW, clipping 1.0 and a warmup schedule, float32:

- kbert/<backend> fit:  `BertPretrainer.fit` on NumPy arrays, as a user script trains; on
  PyTorch eager (`jit_compile=False`, what "auto" runs on a CPU) and compiled
  (`jit_compile=True`: `kbert.models.torch_step`).
- kbert/<backend> train_on_batch: the same model, one `train_on_batch` call per step.
- hf eager: `BertForPreTraining` in the loop a PyTorch user writes (forward, backward, clip,
  AdamW, schedule, zero_grad).
- hf compile: the same loop with `torch.compile(model)`, fused AdamW.
- bare jax: the same math written directly (`jax.numpy` BERT, loss + grad + clip + AdamW in
  one `jax.jit`), the floor of what any framework on JAX can cost.
- bare torch: the same in PyTorch (`torch.compile` of forward + loss, fused AdamW).

A `fit` row's step is (a 70-step fit - a 10-step fit) / 60 on one model, best of three (mini:
8 - 3 steps), so start-up and compilation cancel out; compile time is printed apart. Where
the longer fit is not the slower even after three times the rounds, the row says `noise`. Columns:
ms per step, the ratio to HF eager (lower is faster), the Python-side ms per step (the self
time of Python functions under `cProfile`, which slows what it measures: compare rows, not
absolute values), device syncs per step (PyTorch: `aten::_local_scalar_dense` and, on CUDA,
host-device copies; JAX: transfers under `jax.transfer_guard("log")`) and PyTorch's graph
breaks in the compiled step (`torch._dynamo.explain`).

    python benchmarks/step_overhead.py                       # nano and mini, every row
    python benchmarks/step_overhead.py --configs nano --rows kbert/torch hf
"""

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import subprocess
import sys
import time

import numpy as np

CONFIGS = {  # layers, hidden, heads, vocab, batch, seq, predictions, (short, long) fit steps
    "nano": (2, 32, 2, 1000, 4, 16, 2, (10, 70)),
    "mini": (4, 256, 4, 30522, 32, 128, 20, (3, 8)),
}
ROWS = ("hf", "kbert/tensorflow", "kbert/jax", "kbert/torch", "kbert/torch-compiled",
        "hf-compile", "bare-jax", "bare-torch")
WARMUP_LR = dict(peak=1e-4, warmup=10, total=1000)


def _features(config, n, seed=0):
    layers, hidden, heads, vocab, batch, seq, preds, _ = CONFIGS[config]
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (n, seq)).astype("int32")
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq), preds, replace=False)
                                  for _ in range(n)]), axis=1).astype("int32")
    return dict(input_ids=ids, segment_ids=(np.arange(seq)[None] >= seq // 2).repeat(n, 0)
                .astype("int32"), input_mask=np.ones((n, seq), "int32"),
                masked_lm_positions=positions,
                masked_lm_ids=rng.integers(5, vocab, (n, preds)).astype("int32"),
                next_sentence_labels=rng.integers(0, 2, (n, 1)).astype("int32"))


def _python_ms(step, steps=20):
    """Self time of Python functions per step under cProfile (C functions and kernels out)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO()).stats
    python = sum(tottime for (filename, _, _), (_, _, tottime, _, _) in stats.items()
                 if filename != "~")
    return 1e3 * python / steps


def _torch_syncs(step, steps=5):
    import torch
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
    names = ("aten::_local_scalar_dense", "Memcpy HtoD", "Memcpy DtoH")
    return sum(e.count for e in prof.key_averages() if e.key.startswith(names)) / steps


def _jax_transfers(step, steps=5):
    import jax

    class Count(logging.Handler):
        n = 0

        def emit(self, record):
            Count.n += "transfer" in record.getMessage().lower()
    handler = Count()
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.transfer_guard("log"):
            for _ in range(steps):
                step()
    finally:
        logging.getLogger("jax").removeHandler(handler)
    return Count.n / steps


REPEATS = 3


def _fit_timing(fit, short, long, repeats=None):
    """(ms per step, seconds of the first fit) from fit(n) callables on one warm model."""
    start = time.perf_counter()
    fit(short)
    first = time.perf_counter() - start
    times = {}
    rounds = repeats or REPEATS
    for round_ in range(3 * rounds):
        for n in (short, long):
            start = time.perf_counter()
            fit(n)
            times[n] = min(times.get(n, 1e9), time.perf_counter() - start)
        if round_ + 1 >= rounds and times[long] > times[short]:
            break
    # Where the machine's noise outweighs the longer fit's extra steps even after three times the
    # rounds, the difference says nothing: None, printed as "-", not a negative time.
    if times[long] <= times[short]:
        return None, first
    return 1e3 * (times[long] - times[short]) / (long - short), first


def run_kbert(config, backend, compiled, profile):
    import keras

    import kbert
    from kbert.models.optimization import create_optimizer
    layers, hidden, heads, vocab, batch, seq, preds, (short, long) = CONFIGS[config]
    keras.utils.set_random_seed(0)
    cfg = kbert.BertConfig(vocab_size=vocab, num_layers=layers, hidden_size=hidden,
                           num_heads=heads, intermediate_size=4 * hidden)
    model = kbert.BertPretrainer(cfg)
    jit = compiled if backend == "torch" else "auto"
    model.compile(create_optimizer(learning_rate=WARMUP_LR["peak"],
                                   total_steps=WARMUP_LR["total"],
                                   warmup_steps=WARMUP_LR["warmup"]), jit_compile=jit)
    f = _features(config, batch * long)
    x = {k: f[k] for k in ("input_ids", "segment_ids", "input_mask", "masked_lm_positions")}
    y = {"mlm_logits": f["masked_lm_ids"], "nsp_logits": f["next_sentence_labels"]}
    w = {"mlm_logits": np.ones((batch * long, preds), "float32"),
         "nsp_logits": np.ones(batch * long, "float32")}

    def fit(steps):
        n = batch * steps
        model.fit({k: v[:n] for k, v in x.items()}, {k: v[:n] for k, v in y.items()},
                  sample_weight={k: v[:n] for k, v in w.items()}, batch_size=batch, epochs=1,
                  verbose=0, shuffle=False)
    ms, first = _fit_timing(fit, short, long)
    one = ({k: v[:batch] for k, v in x.items()}, {k: v[:batch] for k, v in y.items()},
           {k: v[:batch] for k, v in w.items()})

    def step():
        model.train_on_batch(*one)
    step()
    start = time.perf_counter()
    for _ in range(long - short):
        step()
    tob = 1e3 * (time.perf_counter() - start) / (long - short)
    row = {"ms": ms, "train_on_batch_ms": tob, "first_fit_s": first}
    if profile:
        row["python_ms"] = _python_ms(step)
        if backend == "torch":
            row["syncs"] = _torch_syncs(step)
            if compiled:
                row["graph_breaks"] = _kbert_graph_breaks(model, one)
        elif backend == "jax":
            row["syncs"] = _jax_transfers(step)
    return row


def _kbert_graph_breaks(model, batch):
    import torch
    from keras.src.trainers.data_adapters import data_adapter_utils
    step = model.train_function
    x, y, w = data_adapter_utils.unpack_x_y_sample_weight(
        keras_tensors := tuple(_to_torch(v) for v in batch))
    del keras_tensors
    forward = torch._dynamo.explain(step.forward._torchdynamo_orig_callable)(x, y, w)
    loss, _ = step.forward(x, y, w)
    loss.backward()
    grads = [p.grad for p in step._params]
    update = torch._dynamo.explain(step.update._torchdynamo_orig_callable)(grads)
    for p in step._params:
        p.grad = None
    return forward.graph_break_count + update.graph_break_count


def _to_torch(tree):
    import keras
    return keras.tree.map_structure(keras.ops.convert_to_tensor, tree)


def _torch_loop(loss_of, params, optimizer, schedule, batches):
    """(train_step, fit) of the loop a PyTorch user writes: loss, backward, clipping to 1.0,
    the optimizer and schedule steps, gradients dropped; `fit(n)` runs the first n batches
    and reads the last loss, as a loop's end does."""
    import torch

    def train_step(b):
        loss = loss_of(b)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def fit(steps):
        for b in batches[:steps]:
            loss = train_step(b)
        float(loss)
    return train_step, fit


def run_hf(config, compiled, profile):
    import torch
    import transformers
    layers, hidden, heads, vocab, batch, seq, preds, (short, long) = CONFIGS[config]
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=4 * hidden)
    model = transformers.BertForPreTraining(cfg).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARMUP_LR["peak"], eps=1e-6,
                                  weight_decay=0.01, fused=True if compiled else None)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / WARMUP_LR["warmup"], 1.0))
    forward = torch.compile(model) if compiled else model
    f = _features(config, batch * long)
    labels = np.full(f["input_ids"].shape, -100, "int64")
    np.put_along_axis(labels, f["masked_lm_positions"].astype("int64"), f["masked_lm_ids"], 1)
    batches = [{k: torch.as_tensor(v[i:i + batch], dtype=torch.long) for k, v in dict(
        input_ids=f["input_ids"], token_type_ids=f["segment_ids"], attention_mask=f["input_mask"],
        labels=labels, next_sentence_label=f["next_sentence_labels"][:, 0]).items()}
        for i in range(0, batch * long, batch)]

    train_step, fit = _torch_loop(
        lambda b: forward(**{k: v.to(device, non_blocking=True) for k, v in b.items()}).loss,
        list(model.parameters()), optimizer, schedule, batches)
    ms, first = _fit_timing(fit, short, long)
    row = {"ms": ms, "first_fit_s": first}
    if profile:
        row["python_ms"] = _python_ms(lambda: train_step(batches[0]))
        row["syncs"] = _torch_syncs(lambda: train_step(batches[0]))
        if compiled:
            b = batches[0]
            row["graph_breaks"] = torch._dynamo.explain(model)(**b).graph_break_count
    return row


def _bare_params(config, randn):
    """The bare steps' weights: N(0, 0.02) matrices, LayerNorm scales 1, biases 0."""
    layers, hidden, heads, vocab, batch, seq, preds, _ = CONFIGS[config]

    def zeros(n):
        return 0 * randn(n)

    def ones(n):
        return 1 + 0 * randn(n)
    p = {"word": randn(vocab, hidden), "pos": randn(512, hidden), "type": randn(2, hidden),
         "ln_g": ones(hidden), "ln_b": zeros(hidden), "mlm_w": randn(hidden, hidden),
         "mlm_b": zeros(hidden), "mlm_g": ones(hidden), "mlm_beta": zeros(hidden),
         "out_b": zeros(vocab), "pool_w": randn(hidden, hidden), "pool_b": zeros(hidden),
         "nsp_w": randn(hidden, 2), "nsp_b": zeros(2)}
    for i in range(layers):
        p.update({f"{i}.qkv": randn(hidden, 3 * hidden), f"{i}.qkv_b": zeros(3 * hidden),
                  f"{i}.o": randn(hidden, hidden), f"{i}.o_b": zeros(hidden),
                  f"{i}.ln1_g": ones(hidden), f"{i}.ln1_b": zeros(hidden),
                  f"{i}.ff1": randn(hidden, 4 * hidden), f"{i}.ff1_b": zeros(4 * hidden),
                  f"{i}.ff2": randn(4 * hidden, hidden), f"{i}.ff2_b": zeros(hidden),
                  f"{i}.ln2_g": ones(hidden), f"{i}.ln2_b": zeros(hidden)})
    return p


def _bare_loss(xp, config, p, b, key_dropout):
    """BERT MLM + NSP in JAX array ops (`xp`: the layer functions, in `run_bare_jax`); its
    twin in torch ops is `run_bare_torch`'s `loss_fn`."""
    layers, hidden, heads, vocab, batch, seq, preds, _ = CONFIGS[config]
    d = hidden // heads
    x = p["word"][b["input_ids"]] + p["pos"][:seq][None] + p["type"][b["segment_ids"]]
    x = xp.dropout(xp.ln(x, p["ln_g"], p["ln_b"]), key_dropout, 0)
    bias = (1.0 - b["input_mask"][:, None, None, :].astype(x.dtype)) * -1e9
    for i in range(layers):
        qkv = (x @ p[f"{i}.qkv"] + p[f"{i}.qkv_b"]).reshape(batch, seq, 3, heads, d)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        a = xp.softmax(q @ k.transpose(0, 1, 3, 2) / d ** 0.5 + bias)
        a = xp.dropout(a, key_dropout, 3 * i + 1)
        c = (a @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = xp.ln(x + xp.dropout(c @ p[f"{i}.o"] + p[f"{i}.o_b"], key_dropout, 3 * i + 2),
                  p[f"{i}.ln1_g"], p[f"{i}.ln1_b"])
        h = xp.gelu(x @ p[f"{i}.ff1"] + p[f"{i}.ff1_b"]) @ p[f"{i}.ff2"] + p[f"{i}.ff2_b"]
        x = xp.ln(x + xp.dropout(h, key_dropout, 3 * i + 3), p[f"{i}.ln2_g"], p[f"{i}.ln2_b"])
    picked = xp.take_rows(x, b["masked_lm_positions"])                     # [B, P, H]
    t = xp.ln(xp.gelu(picked @ p["mlm_w"] + p["mlm_b"]), p["mlm_g"], p["mlm_beta"])
    logits = t @ p["word"].T + p["out_b"]
    pooled = xp.tanh(x[:, 0] @ p["pool_w"] + p["pool_b"])
    nsp = pooled @ p["nsp_w"] + p["nsp_b"]
    return (xp.ce(logits.reshape(-1, vocab), b["masked_lm_ids"].reshape(-1))
            + xp.ce(nsp, b["next_sentence_labels"].reshape(-1)))


def run_bare_jax(config, profile):
    import jax
    import jax.numpy as jnp
    layers, hidden, heads, vocab, batch, seq, preds, (short, long) = CONFIGS[config]
    key = jax.random.PRNGKey(0)

    def randn(*shape):
        nonlocal key
        key, sub = jax.random.split(key)
        return 0.02 * jax.random.normal(sub, shape, jnp.float32)

    class xp:
        tanh = staticmethod(jnp.tanh)

        @staticmethod
        def ln(x, g, b):
            m = x.mean(-1, keepdims=True)
            v = ((x - m) ** 2).mean(-1, keepdims=True)
            return (x - m) * jax.lax.rsqrt(v + 1e-12) * g + b

        @staticmethod
        def softmax(x):
            return jax.nn.softmax(x, axis=-1)

        @staticmethod
        def gelu(x):
            return jax.nn.gelu(x, approximate=False)

        @staticmethod
        def dropout(x, k, i):
            keep = jax.random.bernoulli(jax.random.fold_in(k, i), 0.9, x.shape)
            return jnp.where(keep, x / 0.9, 0)

        @staticmethod
        def take_rows(x, positions):
            return jnp.take_along_axis(x, positions[..., None], axis=1)

        @staticmethod
        def ce(logits, labels):
            logp = jax.nn.log_softmax(logits)
            return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()

    params = _bare_params(config, randn)
    state = (params, jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params),
             jnp.zeros((), jnp.int32), jax.random.PRNGKey(1))

    @jax.jit
    def train_step(state, b):
        p, m, v, t, k = state
        k, dk = jax.random.split(k)
        loss, g = jax.value_and_grad(lambda p: _bare_loss(xp, config, p, b, dk))(p)
        norm = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(g)))
        g = jax.tree.map(lambda x: x * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), g)
        t = t + 1
        lr = WARMUP_LR["peak"] * jnp.minimum(t / WARMUP_LR["warmup"], 1.0)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
        p = jax.tree.map(lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + 1e-6)
                                                  + 0.01 * p), p, m, v)
        return (p, m, v, t, k), loss

    f = _features(config, batch * long)
    batches = [{k: v[i:i + batch] for k, v in f.items()} for i in range(0, batch * long, batch)]

    def fit(steps):
        nonlocal state
        for b in batches[:steps]:
            state, loss = train_step(state, b)
        float(loss)
    ms, first = _fit_timing(fit, short, long)
    row = {"ms": ms, "first_fit_s": first}
    if profile:
        def one():
            nonlocal state
            state, loss = train_step(state, batches[0])
            loss.block_until_ready()
        row["python_ms"] = _python_ms(one)
        row["syncs"] = _jax_transfers(one)
    return row


def run_bare_torch(config, profile):
    import torch
    import torch.nn.functional as F
    layers, hidden, heads, vocab, batch, seq, preds, (short, long) = CONFIGS[config]
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def randn(*shape):
        return 0.02 * torch.randn(*shape, device=device)

    params = {k: v.detach().requires_grad_() for k, v in _bare_params(config, randn).items()}
    optimizer = torch.optim.AdamW(params.values(), lr=WARMUP_LR["peak"], eps=1e-6,
                                  weight_decay=0.01, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / WARMUP_LR["warmup"], 1.0))
    d = hidden // heads

    def ln(x, g, b):
        return F.layer_norm(x, x.shape[-1:], g, b, 1e-12)

    def loss_fn(b):                   # `_bare_loss` (JAX's) in torch ops, line for line
        p = params
        x = p["word"][b["input_ids"]] + p["pos"][:seq][None] + p["type"][b["segment_ids"]]
        x = F.dropout(ln(x, p["ln_g"], p["ln_b"]), 0.1)
        bias = (1.0 - b["input_mask"][:, None, None, :].to(x.dtype)) * -1e9
        for i in range(layers):
            qkv = (x @ p[f"{i}.qkv"] + p[f"{i}.qkv_b"]).reshape(batch, seq, 3, heads, d)
            q, k, v = (qkv[:, :, j].permute(0, 2, 1, 3) for j in range(3))
            a = F.dropout(torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5 + bias, -1), 0.1)
            c = (a @ v).permute(0, 2, 1, 3).reshape(batch, seq, hidden)
            x = ln(x + F.dropout(c @ p[f"{i}.o"] + p[f"{i}.o_b"], 0.1), p[f"{i}.ln1_g"],
                   p[f"{i}.ln1_b"])
            h = F.gelu(x @ p[f"{i}.ff1"] + p[f"{i}.ff1_b"]) @ p[f"{i}.ff2"] + p[f"{i}.ff2_b"]
            x = ln(x + F.dropout(h, 0.1), p[f"{i}.ln2_g"], p[f"{i}.ln2_b"])
        picked = torch.take_along_dim(x, b["masked_lm_positions"][..., None], dim=1)
        t = ln(F.gelu(picked @ p["mlm_w"] + p["mlm_b"]), p["mlm_g"], p["mlm_beta"])
        logits = t @ p["word"].T + p["out_b"]
        nsp = torch.tanh(x[:, 0] @ p["pool_w"] + p["pool_b"]) @ p["nsp_w"] + p["nsp_b"]
        return (F.cross_entropy(logits.reshape(-1, vocab), b["masked_lm_ids"].reshape(-1))
                + F.cross_entropy(nsp, b["next_sentence_labels"].reshape(-1)))
    compiled = torch.compile(loss_fn)
    f = _features(config, batch * long)
    batches = [{k: torch.as_tensor(v[i:i + batch], dtype=torch.long, device=device)
                for k, v in f.items()} for i in range(0, batch * long, batch)]

    train_step, fit = _torch_loop(compiled, list(params.values()), optimizer, schedule,
                                  batches)
    ms, first = _fit_timing(fit, short, long)
    row = {"ms": ms, "first_fit_s": first}
    if profile:
        row["python_ms"] = _python_ms(lambda: train_step(batches[0]))
        row["syncs"] = _torch_syncs(lambda: train_step(batches[0]))
        row["graph_breaks"] = torch._dynamo.explain(loss_fn)(batches[0]).graph_break_count
    return row


def _run_row(row, config, profile):
    if row.startswith("kbert/"):
        backend = row.split("/")[1].removesuffix("-compiled")
        return run_kbert(config, backend, row.endswith("-compiled"), profile)
    if row in ("hf", "hf-compile"):
        return run_hf(config, row == "hf-compile", profile)
    return {"bare-jax": run_bare_jax, "bare-torch": run_bare_torch}[row](config, profile)


def _device_line():
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from kbert import hardware
    try:
        import torch
        if torch.cuda.is_available():
            return f"GPU: {torch.cuda.get_device_name()}; host: {hardware.describe()}"
    except ImportError:
        pass
    return hardware.describe()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    p.add_argument("--no-profile", action="store_true",
                   help="time only: no Python-side ms, syncs or graph breaks")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--worker-timeout", type=float, default=900,
                   help="seconds one row may take")
    p.add_argument("--steps", nargs=2, type=int, metavar=("SHORT", "LONG"),
                   help="the two fits' steps (default: nano 10 70, mini 3 8)")
    p.add_argument("--repeats", type=int, default=REPEATS, help="each fit's best of")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps:
        for name, c in CONFIGS.items():
            CONFIGS[name] = c[:-1] + (tuple(args.steps),)
    globals()["REPEATS"] = args.repeats
    if args.worker:
        row, config = args.worker.split(":")
        print("RESULT", json.dumps(_run_row(row, config, not args.no_profile)), flush=True)
        return
    print(f"device: {_device_line()}")
    print(f"date: {time.strftime('%Y-%m-%d')}; command: python benchmarks/step_overhead.py "
          f"{' '.join(sys.argv[1:])}".rstrip())
    results = []
    for config in args.configs:
        layers, hidden, heads, vocab, batch, seq, preds, (short, long) = CONFIGS[config]
        print(f"\n{config}: {layers} layers, hidden {hidden}, vocab {vocab:,}, batch {batch} x "
              f"{seq}, {preds} predictions; a step = (fit({long}) - fit({short})) / "
              f"{long - short}, best of {args.repeats}")
        print(f"{'row':22s} {'ms/step':>8s} {'x HF':>6s} {'train_on_batch':>14s} "
              f"{'Python ms':>9s} {'syncs':>5s} {'breaks':>6s} {'first fit s':>11s}")
        hf = None
        for row in args.rows:
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
            if row.startswith("kbert/"):
                env["KERAS_BACKEND"] = row.split("/")[1].removesuffix("-compiled")
            command = [sys.executable, __file__, "--worker", f"{row}:{config}",
                       "--repeats", str(args.repeats)] + (
                ["--no-profile"] if args.no_profile else []) + (
                ["--steps", *map(str, args.steps)] if args.steps else [])
            try:
                done = subprocess.run(command, env=env, capture_output=True, text=True,
                                      timeout=args.worker_timeout)
            except subprocess.TimeoutExpired:
                print(f"{row:22s} timed out after {args.worker_timeout:.0f} s", flush=True)
                continue
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{row:22s} failed: {tail[:150]}", flush=True)
                continue
            r = json.loads(lines[-1][7:])
            hf = r["ms"] if row == "hf" else hf
            ratio = f"{r['ms'] / hf:5.2f}x" if hf and r["ms"] else "-"
            tob = r.get("train_on_batch_ms")

            def cell(key, width, fmt):
                return format(r[key], fmt).rjust(width) if key in r else "-".rjust(width)
            ms = format(r["ms"], ".2f") if r["ms"] else "noise"
            print(f"{row:22s} {ms:>8s} {ratio:>6s} "
                  f"{(format(tob, '.2f') if tob else '-'):>14s} {cell('python_ms', 9, '.2f')} "
                  f"{cell('syncs', 5, '.0f')} {cell('graph_breaks', 6, 'd')} "
                  f"{r['first_fit_s']:11.1f}", flush=True)
            results.append({"config": config, "row": row, **r})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
