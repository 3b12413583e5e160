"""What the CPU can do fast: the one place kbert reads the hardware.

`dtype="auto"` (`kbert.load`, `kbert app/evaluate/export --dtype`) resolves here: bfloat16 where
the CPU multiplies bfloat16 matrices natively (Intel AMX `amx_bf16`, or AVX-512 `avx512_bf16` as
on AMD Zen 4 and Intel Cooper Lake and later) or the Keras backend runs on a GPU with bfloat16
(NVIDIA compute capability 8.0 on), else float32. A CPU without those instructions runs
bfloat16 through conversions around float32 arithmetic, slower than float32 itself, so "auto"
never picks it there.

`keep_freed_memory` is the host side of training speed: PyTorch's freed CPU memory kept for
its next step instead of faulted in again.

Training's precision switch (`kbert finetune/pretrain --mixed-precision`) resolves here too:
`mixed_precision_policy("auto")` is "mixed_bfloat16" where `auto_dtype()` is "bfloat16", else
None (plain float32).

>>> info = cpu_info()
>>> sorted(info)
['bf16_flags', 'int8_flags', 'model']
>>> auto_dtype() in ("float32", "bfloat16")
True
>>> mixed_precision_policy("float32") is None, mixed_precision_policy("mixed_float16")
(True, 'mixed_float16')
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys

BF16_FLAGS = ("amx_bf16", "avx512_bf16")            # native bfloat16 matrix products
INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")  # native int8 dot products
MIXED_PRECISION = ("auto", "float32", "mixed_bfloat16", "mixed_float16")  # training's choices


@functools.lru_cache(maxsize=None)
def cpu_info(cpuinfo_path: str = "/proc/cpuinfo") -> dict:
    """{"model": the CPU's name, "bf16_flags": [...], "int8_flags": [...]}: the flags of
    `BF16_FLAGS` / `INT8_FLAGS` this CPU has (Linux /proc/cpuinfo; elsewhere none)."""
    model, flags = platform.processor() or platform.machine(), set[str]()
    if os.path.isfile(cpuinfo_path):
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(),
                                                     platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    return {"model": model or "unknown CPU",
            "bf16_flags": [f for f in BF16_FLAGS if f in flags],
            "int8_flags": [f for f in INT8_FLAGS if f in flags]}


def has_fast_bfloat16() -> bool:
    """Whether the CPU multiplies bfloat16 natively (AMX or AVX-512 BF16)."""
    return bool(cpu_info()["bf16_flags"])


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: `taskset`, a container's cpuset),
    which a runtime's default thread count can exceed: ONNX Runtime counts the machine's
    physical cores, and more threads than cores spin against each other."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def has_fast_int8() -> bool:
    """Whether the CPU has int8 dot-product instructions (AMX-INT8 or VNNI): without them the
    int8 runtimes measured no faster than float32 (AVX2: 0.5-1.0x), so int8 is not offered."""
    return bool(cpu_info()["int8_flags"])


def int8_pays() -> bool:
    """Whether kbert offers int8 on this CPU: int8 dot products (AMX-INT8, VNNI) and no native
    bfloat16. OpenVINO's int8 weights measured 0.86-0.97x float32 without VNNI (AMD Zen 2) and
    1.06-1.12x bfloat16 beside avx512_bf16 (AMD Zen 4: the products run in bfloat16 either
    way), short of the 1.2x that pays for int8's accuracy cost (benchmarks/serve_latency.py)."""
    return has_fast_int8() and not has_fast_bfloat16()


def _gpu() -> tuple[bool, bool]:
    """(runs on a GPU, that GPU has bfloat16) for the Keras backend's framework, already
    imported (nothing is imported here: a process that has not loaded a framework has no GPU in
    use)."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    try:
        if backend == "torch" and "torch" in sys.modules:
            torch = sys.modules["torch"]
            on_gpu = bool(torch.cuda.is_available())
            return on_gpu, on_gpu and bool(torch.cuda.is_bf16_supported())
        if backend == "jax" and "jax" in sys.modules:
            device = sys.modules["jax"].devices()[0]
            on_gpu = device.platform == "gpu"
            return on_gpu, on_gpu and float(getattr(device, "compute_capability", "0")) >= 8.0
        if backend == "tensorflow" and "tensorflow" in sys.modules:
            tf = sys.modules["tensorflow"]
            details = [tf.config.experimental.get_device_details(g)
                       for g in tf.config.list_physical_devices("GPU")]
            return bool(details), any(d.get("compute_capability", (0, 0)) >= (8, 0)
                                      for d in details)
    except (RuntimeError, ValueError, AttributeError):
        pass
    return False, False


def gpu_has_bfloat16() -> bool:
    """Whether the Keras backend's framework, already imported, runs on a GPU with bfloat16."""
    return _gpu()[1]


def gpu_in_use() -> bool:
    """Whether the Keras backend's framework, already imported, runs on a GPU."""
    return _gpu()[0]


def auto_dtype() -> str:
    """The inference dtype "auto" means on this machine: "bfloat16" or "float32"."""
    return "bfloat16" if has_fast_bfloat16() or gpu_has_bfloat16() else "float32"


def mixed_precision_policy(name: str | None) -> str | None:
    """The Keras dtype policy a training run uses for `--mixed-precision name`: None (plain
    float32) for None or "float32"; for "auto", "mixed_bfloat16" where `auto_dtype()` is
    "bfloat16", else None; "mixed_bfloat16" and "mixed_float16" as named (the latter needs
    loss scaling)."""
    if name is None or name == "float32":
        return None
    if name == "auto":
        return "mixed_bfloat16" if auto_dtype() == "bfloat16" else None
    if name in MIXED_PRECISION:
        return name
    raise ValueError(f"unknown mixed precision {name!r}; choose one of "
                     f"{', '.join(MIXED_PRECISION)}")


@functools.lru_cache(maxsize=None)
def keep_freed_memory(backend: str) -> bool:
    """Keep memory PyTorch frees on a CPU inside the process, for its next allocations, where
    `backend` (the Keras backend's name) is "torch"; True where this took effect. kbert's
    models call it when their training starts (`TaskModel.make_train_function`).

    PyTorch takes host memory from the C library's `malloc`, and glibc serves every block over
    32 MB (a masked-LM step's [640, 30522] float32 logits and their gradient: 78 MB each) with a
    fresh `mmap` that it returns on `free`: the next step faults every page in again, zeroed by
    the kernel (a `mini` pretraining step: ~114,000 faults, ~450 MB). glibc's `mallopt` without
    `mmap` and with a 2 GiB trim threshold keeps those pages: the step took 684 -> 584 ms in
    bfloat16 and 1,150 -> 1,025 in float32 (AMD EPYC Zen 4, A/B in one process).
    The process keeps its peak heap instead of returning it, as PyTorch's GPU allocator does.

    Only PyTorch on a CPU with glibc (TensorFlow's CPU allocator already caches: no faults a
    step; XLA's faults on JAX come from elsewhere). `KBERT_KEEP_FREED_MEMORY=0` leaves `malloc`
    as it is.
    """
    if (os.environ.get("KBERT_KEEP_FREED_MEMORY", "1") == "0"
            or backend != "torch" or gpu_in_use()
            or platform.libc_ver()[0] != "glibc"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4                       # <malloc.h>
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def describe() -> str:
    """One line for benchmark headers: the CPU model, its bf16/int8 flags and core count."""
    info = cpu_info()
    bf16 = ", ".join(info["bf16_flags"]) or "none (bfloat16 rows skipped)"
    int8 = ", ".join(info["int8_flags"]) or "none"
    return (f"CPU: {info['model']}, {os.cpu_count()} cores; bf16 matmul flags: {bf16}; "
            f"int8 dot-product flags: {int8}")


__all__ = ["BF16_FLAGS", "INT8_FLAGS", "MIXED_PRECISION", "auto_dtype", "cpu_info", "describe",
           "gpu_has_bfloat16", "gpu_in_use", "has_fast_bfloat16", "has_fast_int8", "int8_pays",
           "keep_freed_memory", "mixed_precision_policy", "usable_cores"]
