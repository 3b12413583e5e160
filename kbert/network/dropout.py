"""`Dropout`: Keras' dropout layer with a cheaper mask on TensorFlow and PyTorch.

The encoder's layers (`kbert.network.layers`) and heads (`kbert.network.heads`) use it; the mask is
drawn from 16 (PyTorch: 15) random bits an element instead of a float32 uniform.
"""

import keras

from kbert.hints import Tensor


@keras.saving.register_keras_serializable(package="kbert")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose mask is drawn from 16 (PyTorch: 15) random bits an element.

    Keras' TensorFlow dropout draws a float32 uniform per element (`stateless_dropout`), its
    PyTorch dropout a float32 Bernoulli; the random-number generator is most of dropout's cost,
    and dropout ~14% of a training step (attention probabilities [B, N, T, T]). On TensorFlow
    one uint32 draw gives two 16-bit uniforms: half the draws, 0.6x the time (with and without
    XLA); on PyTorch 15 bits of an int64 draw (`_torch_dropout`). Elements are dropped with
    probability round(rate·65536)/65536 (within 1e-5 of `rate`; on PyTorch
    round(rate·32768)/32768, within 2e-5), the kept ones scaled by 1/(1 − rate),
    seeded by the layer's `SeedGenerator` as Keras' own. JAX (XLA fuses its own), and a
    `noise_shape`, use Keras' path.
    """

    def call(self, inputs: Tensor, training: bool = False) -> Tensor:
        backend = keras.backend.backend()
        if (not training or not 0 < self.rate < 1 or self.noise_shape is not None
                or backend not in ("tensorflow", "torch")
                or (backend == "torch" and inputs.device.type == "meta")):  # shape inference
            return super().call(inputs, training=training)
        scale = 1.0 / (1.0 - self.rate)
        if backend == "torch":
            import torch
            if torch.compiler.is_compiling():
                return self._traced_torch_dropout(inputs, scale)
            return self._torch_dropout(inputs, scale)
        import tensorflow as tf
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), 2 ** 31 - 1), tf.int32)
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None,
                                           maxval=None, dtype=tf.uint32)
        uniform16 = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
        keep = tf.reshape(uniform16, tf.shape(inputs)) >= min(round(self.rate * 65536), 65535)
        # A product with the scaled mask, not a `where`: TensorFlow's bfloat16 select runs at
        # half its float32 speed (a bfloat16 MiniLM step at 32x64: 602 -> 572 ms).
        return inputs * (tf.cast(keep, inputs.dtype) * tf.cast(scale, inputs.dtype))

    def _torch_dropout(self, inputs: Tensor, scale: float) -> Tensor:
        """PyTorch's mask: 15 random bits per element, four to one int64 draw (`random_`
        leaves each int64's sign bit 0): [32, 4, 128, 128] 5.5 ms in all against 12 for
        Keras' float32 Bernoulli, 6.3 for int16 `randint`. Seeded from the layer's
        `SeedGenerator` as Keras' own torch random functions are."""
        import torch
        first, second = self.seed_generator.next()
        generator = torch.Generator(device=inputs.device)
        generator.manual_seed(int(first + second) & 0xFFFFFFFF)
        size = inputs.numel()
        bits = torch.empty((size + 3) // 4, dtype=torch.int64, device=inputs.device)
        bits = bits.random_(generator=generator).view(torch.int16)[:size].view(inputs.shape)
        keep = torch.bitwise_and(bits, 0x7FFF) >= min(round(self.rate * 32768), 32767)
        return torch.where(keep, inputs * scale, torch.zeros((), dtype=inputs.dtype,
                                                             device=inputs.device))

    def _traced_torch_dropout(self, inputs: Tensor, scale: float) -> Tensor:
        """The mask inside a compiled PyTorch step (`kbert.models.torch_step`), where a seeded
        `torch.Generator` cannot be traced: 31 bits of a counter-based hash of each element's
        index keyed by the layer's `SeedGenerator` state (a tensor, so no step recompiles), which
        the compiler fuses with the product into one kernel. Seeded from the same state as
        `_torch_dropout`, so a resumed run draws what the uninterrupted one did (not the same
        bits as the eager mask: a run keeps one mode)."""
        import torch
        state = self.seed_generator.state
        seed = state.value.to(torch.int64)
        state.assign(state.value + torch.tensor([0, 1], dtype=state.value.dtype,
                                                device=state.value.device))
        counter = torch.arange(inputs.numel(), dtype=torch.int64, device=inputs.device)
        key = hash31(hash31(seed[0]) + (seed[1] & 0x7FFFFFFF))     # one stream per state
        bits = hash31(hash31(counter) ^ key)
        keep = (bits >> 16) >= min(round(self.rate * 32768), 32767)    # 15 high bits
        return torch.where(keep.view(inputs.shape), inputs * scale,
                           torch.zeros((), dtype=inputs.dtype, device=inputs.device))


def hash31(x: Tensor) -> Tensor:
    """A bijective integer hash of the low 31 bits of int64 `x` into [0, 2^31): xor-shifts and
    odd multipliers modulo 2^31 (the "lowbias32" construction on 31 bits), in int64 with
    operands below 2^31, so no product overflows. Counter-based random bits for a traced step.

    >>> import numpy as np
    >>> bits = hash31(np.arange(100_000, dtype="int64"))
    >>> 0.49 < float(((bits >> 30) & 1).mean()) < 0.51, len(set(bits.tolist())) == 100_000
    (True, True)
    """
    mask = 0x7FFFFFFF
    x = x & mask
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & mask
    x = ((x ^ (x >> 15)) * 0x046CA68B) & mask
    return x ^ (x >> 16)
