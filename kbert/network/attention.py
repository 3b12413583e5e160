"""Attention's parts below the Transformer block: the key mask, the masked softmax's two
halves, and the fused kernels per backend (cuDNN's flash attention on JAX, PyTorch's
`scaled_dot_product_attention`). `kbert.network.layers.TransformerEncoderBlock` picks among them.
Shapes: B batch, T sequence length, N heads, D head size.
"""

import keras
import ml_dtypes
from keras import ops

from kbert.hints import Tensor


def attention_mask(input_mask: Tensor, causal: bool = False) -> Tensor:
    """Which keys each query may attend to: bool [B, 1, 1, T], or [B, 1, T, T] when `causal`.

    `input_mask` [B, T] is 1 for real tokens, 0 for padding. A causal (left-to-right) mask also
    hides every key after the query: position i sees positions 0..i only, as in a left-to-right
    language model (the paper's "LTR & No NSP" ablation, section 5.1).

    >>> m = attention_mask(ops.array([[1, 1, 0]]), causal=True)
    >>> ops.convert_to_numpy(m)[0, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    """
    mask = ops.cast(input_mask, "bool")[:, None, None, :]                     # [B, 1, 1, T]
    if not causal:
        return mask
    seq_len = ops.shape(input_mask)[1]
    positions = ops.arange(seq_len)
    left = positions[None, :] <= positions[:, None]                          # [T, T] key <= query
    return ops.logical_and(mask, left[None, None, :, :])                     # [B, 1, T, T]


def masked_exp(scores: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The softmax of `scores` [B, N, T, T] over the keys `mask` [B, 1, 1 or T, T] lets
    through, in two parts: exp(scores − row max) (0 where masked) and the row sums [B, N, T, 1];
    the probabilities are their ratio.

    Float32 scores get -1e9 added where masked. Lower precision (bf16, fp16) keeps the scores
    and their exponentials in that dtype, adding a finite lowest value (also finite in fp16),
    and sums them in float32, so no float32 [B, N, T, T] tensor is kept for the backward pass.

    >>> weights, total = masked_exp(ops.zeros((1, 1, 1, 3)), ops.array([[[[True, True, False]]]]))
    >>> ops.convert_to_numpy(weights / total).round(2).tolist()
    [[[[0.5, 0.5, 0.0]]]]
    """
    dtype = keras.backend.standardize_dtype(scores.dtype)
    lowest = -1e9 if dtype == "float32" else -0.7 * float(ml_dtypes.finfo(dtype).max)
    scores = scores + (1.0 - ops.cast(mask, dtype)) * ops.cast(lowest, dtype)
    weights = ops.exp(scores - ops.stop_gradient(ops.amax(scores, axis=-1, keepdims=True)))
    return weights, ops.sum(ops.cast(weights, "float32"), axis=-1, keepdims=True)


def jax_attention_implementation(q: Tensor) -> str:
    """"cudnn" where cuDNN's flash attention takes `q` [B, T, N, D], else "xla".

    cuDNN's kernel needs an NVIDIA GPU of compute capability 8.0 or later (Ampere on), bf16 or
    fp16 inputs and a head size that is a multiple of 8, at most 128 (256 from Hopper on).
    """
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    if device.platform != "gpu" or "cuda" not in device.client.platform_version.lower():
        return "xla"
    major, minor = (int(p) for p in device.compute_capability.split(".")[:2])
    head_size = q.shape[-1]
    if (q.dtype not in (jnp.bfloat16, jnp.float16) or (major, minor) < (8, 0)
            or head_size % 8 or head_size > (256 if major >= 9 else 128)):
        return "xla"
    return "cudnn"


def jax_fused(q: Tensor) -> bool:
    """Whether attention on JAX is `jax_fused_attention`: where cuDNN's kernel takes `q` (or
    anything with its dtype and head size last, as the [B, T, 3, N, D] projection). On
    XLA's CPU runtime `jax.nn.dot_product_attention` takes 1.4x the explicit path's time."""
    return jax_attention_implementation(q) == "cudnn"


def jax_fused_attention(q: Tensor, k: Tensor, v: Tensor, input_mask: Tensor, causal: bool,
                         scale: float) -> Tensor:
    """Attention as one `jax.nn.dot_product_attention` call: cuDNN's flash attention on a GPU.

    Twin of the explicit path in `kbert.network.layers.TransformerEncoderBlock._attention` (a test
    holds them equal).
    `q`, `k`, `v` [B, T, N, D] → context [B, T, N, D]. Padding goes in as key lengths, the one
    form cuDNN's kernel takes (it rejects a [B, 1, 1, T] mask); that needs every row's padding to
    come after its real tokens, as every kbert input pipeline lays it out (`Tokenizer.pack`,
    pretraining data, the in-graph packers). A mask where a real token follows padding falls
    back to the mask, computed by XLA; under `jit` the choice is a `lax.cond`. Padded queries
    attend to the real keys, as in the explicit path; a row without a real token attends to its
    first position only (the explicit path spreads it evenly).
    """
    import jax

    mask = ops.cast(input_mask, "bool")                                      # [B, T]
    lengths = ops.cast(ops.maximum(ops.sum(ops.cast(mask, "int32"), axis=1), 1), "int32")  # [B]
    suffix_padding = ops.all(mask[:, :-1] >= mask[:, 1:])    # no real token after a pad

    def by_lengths(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return jax.nn.dot_product_attention(
            q, k, v, scale=scale, is_causal=causal, key_value_seq_lengths=lengths,
            implementation=jax_attention_implementation(q))

    def by_mask(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return jax.nn.dot_product_attention(
            q, k, v, mask=mask[:, None, None, :], scale=scale, is_causal=causal,
            implementation="xla")

    if not isinstance(suffix_padding, jax.core.Tracer):                  # eager: pick now
        return (by_lengths if bool(suffix_padding) else by_mask)(q, k, v)
    # The fallback is rematerialised, so its backward saves only what the fused one saves.
    return jax.lax.cond(suffix_padding, by_lengths, jax.checkpoint(by_mask), q, k, v)


def fused_dropout(x: Tensor) -> bool:
    """Whether the backend's fused attention drops the probabilities faster than the explicit
    path: PyTorch on a GPU (memory-efficient attention). On a CPU PyTorch's fused kernels take
    no dropout, so `scaled_dot_product_attention` falls back to its math path with a float32
    Bernoulli mask; the explicit path with `kbert.network.layers.Dropout`'s 16-bit mask is faster
    there (one layer of a `mini` step, forward + backward, [32, 4, 128, 64]: 38 -> 24 ms in
    bfloat16, 48 -> 38 ms in float32). TensorFlow's and JAX's fused kernels drop nothing."""
    return keras.backend.backend() == "torch" and x.device.type != "cpu"


def torch_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float,
                     drop_rate: float) -> Tensor:
    """Attention as one `torch.nn.functional.scaled_dot_product_attention`, dropout included.

    Twin of the explicit path (a test holds them equal without dropout, and the dropout
    unbiased). `q`, `k`, `v` [B, T, N, D], `mask` bool [B, 1, 1 or T, T] → [B, T, N, D].
    PyTorch drops the attention probabilities inside its kernel (memory-efficient attention on
    CUDA: no [B, N, T, T] tensor kept for the backward pass) with its global random generator,
    the one Keras' own (unseeded) `Dropout` draws from on this backend. The mask rules flash
    attention out; PyTorch picks its fastest kernel that takes one. On a CPU: half the explicit
    path's time.
    """
    import torch

    # Added to the scores, not a bool mask: a row with no real key stays finite (a bool mask
    # gives NaN there, and a NaN row poisons a batch's gradient even at weight 0).
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
        ~mask, -0.7 * torch.finfo(q.dtype).max)
    context = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias,
        dropout_p=drop_rate, scale=scale)                                  # [B, N, T, D]
    return context.transpose(1, 2)
