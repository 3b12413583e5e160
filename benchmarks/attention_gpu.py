"""Time the encoder's forward + backward on JAX with fused attention vs the explicit path.

BERT-base (12 layers, H 768, 12 heads) at batch x length 256x128 and 64x512, in `mixed_bfloat16`
on a GPU (float32 on CPU), rows padded at the end to lengths drawn from [T/2, T]. Three columns:
  fused             attention_dropout=0: `kbert.network.attention.jax_fused_attention` (cuDNN flash
                    attention on a GPU;
                    where cuDNN cannot run, the layer's explicit path, as in the next column)
  explicit          the same model through the explicit path (`output_attentions=True`)
  explicit+dropout  attention_dropout=0.1, training: the explicit path with its dropout
Each is one jitted `value_and_grad` over the trainable weights (hidden dropout on, training=True);
ms is the mean of `--steps` calls after `--warmup`, MiB XLA's temporaries (`memory_analysis`).
Runs without TensorFlow.

    python benchmarks/attention_gpu.py                 # base, both shapes
    python benchmarks/attention_gpu.py --smoke         # a one-layer model, seconds on CPU
"""

import argparse
import dataclasses
import os
import time

os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import kbert  # noqa: E402
from kbert.network.attention import jax_fused  # noqa: E402

VARIANTS = {"fused": (0.0, False), "explicit": (0.0, True), "explicit+dropout": (0.1, False)}


def _inputs(batch, seq, vocab, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(seq // 2, seq + 1, batch)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype("int32")            # [B, T]
    ids = rng.integers(1000 % vocab, vocab, (batch, seq)).astype("int32") * mask
    return {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": mask}


def time_variant(config, batch, seq, attention_dropout, explicit, warmup, steps):
    """(ms per forward + backward, MiB of XLA temporaries) of one jitted gradient step."""
    backbone = kbert.BertBackbone(dataclasses.replace(config, attention_dropout=attention_dropout))
    trainable = [v.value for v in backbone.trainable_variables]
    non_trainable = [v.value for v in backbone.non_trainable_variables]
    x = _inputs(batch, seq, config.vocab_size)
    readout = jnp.asarray(np.random.default_rng(1).normal(size=(batch, seq, config.hidden_size)),
                          "float32")

    def loss(trainable, non_trainable, x):
        out, _ = backbone.stateless_call(trainable, non_trainable, x, training=True,
                                         output_attentions=explicit)
        return jnp.sum(out["sequence_output"].astype("float32") * readout)

    step = jax.jit(jax.value_and_grad(loss)).lower(trainable, non_trainable, x).compile()
    mib = step.memory_analysis().temp_size_in_bytes / 2 ** 20
    for _ in range(warmup):
        jax.block_until_ready(step(trainable, non_trainable, x))
    start = time.perf_counter()
    for _ in range(steps):
        jax.block_until_ready(step(trainable, non_trainable, x))
    return 1e3 * (time.perf_counter() - start) / steps, mib


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["256x128", "64x512"], help="BATCHxLENGTH")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--smoke", action="store_true", help="a one-layer model at 2x16, one step")
    args = p.parse_args(argv)
    gpu = jax.devices()[0].platform == "gpu"
    if gpu:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    config = kbert.BertConfig.preset("base")
    if args.smoke:
        config = kbert.BertConfig(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=16)
        args.shapes, args.warmup, args.steps = ["2x16"], 1, 1
    dtype = keras.mixed_precision.dtype_policy().compute_dtype
    head_size = config.hidden_size // config.num_heads
    fused = jax_fused(jnp.zeros((1, 1, 1, head_size), dtype))
    print(f"{jax.devices()[0].device_kind}, {dtype}, {config.num_layers} layers, "
          f"H {config.hidden_size}, attention without dropout: "
          f"{'cuDNN fused' if fused else 'explicit (no cuDNN kernel here)'}")
    print(f"{'shape':>9} " + " ".join(f"{name + ' ms':>21} {'MiB':>7}" for name in VARIANTS)
          + f" {'explicit/fused':>15}")
    for shape in args.shapes:
        batch, seq = (int(n) for n in shape.split("x"))
        results = {name: time_variant(config, batch, seq, *VARIANTS[name], args.warmup,
                                      args.steps) for name in VARIANTS}
        ratio = results["explicit"][0] / results["fused"][0]
        print(f"{shape:>9} " + " ".join(f"{ms:21.1f} {mib:7.1f}" for ms, mib in results.values())
              + f" {ratio:15.2f}", flush=True)


if __name__ == "__main__":
    main()
