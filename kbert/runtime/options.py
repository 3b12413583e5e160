"""The precision and runtime a model runs with: names, defaults, and what each runtime offers.

`resolve(runtime, dtype)` is the one place that checks a combination and turns "auto" into a
dtype and a runtime; every entry point (`kbert.load`, the CLI, the playground) calls it and shows
its one-line errors as they are.

| runtime    | float32 | bfloat16                                | int8                          |
|------------|---------|-----------------------------------------|-------------------------------|
| "keras"    | yes     | yes (fast only with AMX / AVX-512 BF16) | no                            |
| "openvino" | yes     | where the CPU has AMX / AVX-512 BF16    | NNCF int8 weights (*)         |
| "onnx"     | yes     | no (no bfloat16 matmul kernels on CPU)  | no (**)                       |

(*) where the CPU has int8 dot products (AMX-INT8, AVX-512 VNNI or AVX-VNNI) and no native
bfloat16 (`hardware.int8_pays`): without VNNI int8 ran no faster than float32 (an AVX2 EPYC:
0.5-1.0x), and beside avx512_bf16 it ran 1.06-1.12x bfloat16 (an EPYC Zen 4), short of 1.2x.
(**) ONNX Runtime's dynamic quantization (int8 weights and activations of every product with a
weight) fails the accuracy bar on BERT encoders (benchmarks/precision_accuracy.py: SQuAD F1
-2.0, fill_mask top-1 agreement 90%, embedding cosine 0.987); OpenVINO's int8 weights keep it.

runtime="auto" is the fastest path measured for the dtype on a CPU (docs/inference.md):
float32 on ONNX Runtime (then OpenVINO), bfloat16 and int8 on OpenVINO; Keras on a GPU (the graph
runtimes run on the CPU), and wherever TensorFlow (which makes the graphs) or the runtime's
package is not installed.
"""

from __future__ import annotations

import importlib.util

from kbert import hardware

RUNTIMES = ("keras", "openvino", "onnx")
RUNTIME_CHOICES = ("auto", *RUNTIMES)
DTYPES = ("auto", "float32", "bfloat16", "int8")
PACKAGES = {"openvino": ("openvino", "kbert[openvino]"),
            "onnx": ("onnxruntime", "kbert[onnx]")}


class RuntimeOptionError(ValueError):
    """An unknown or unavailable runtime/dtype combination; the message names the fix."""


def resolve(runtime: str | None = "keras", dtype: str | None = "float32") -> tuple[str, str]:
    """(runtime, dtype) checked, with "auto" resolved for this machine.

    >>> resolve("keras", "float32")
    ('keras', 'float32')
    >>> resolve("onnx", "auto")
    ('onnx', 'float32')
    >>> resolve("tflite", "float32")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    kbert.runtime.options.RuntimeOptionError: unknown runtime 'tflite': use one of auto, keras, ...
    """
    runtime = "keras" if runtime is None else runtime   # None is the default; "" is no name
    dtype = "float32" if dtype is None else dtype
    if runtime not in RUNTIME_CHOICES:
        raise RuntimeOptionError(f"unknown runtime {runtime!r}: use one of "
                                 f"{', '.join(RUNTIME_CHOICES)}")
    if dtype not in DTYPES:
        raise RuntimeOptionError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if runtime == "auto":
        runtime = auto_runtime(hardware.auto_dtype() if dtype == "auto" else dtype)
    if dtype == "auto":
        dtype = "float32" if runtime == "onnx" else hardware.auto_dtype()
    if runtime == "keras" and dtype == "int8":
        raise RuntimeOptionError("dtype 'int8' runs on runtime 'openvino', not on 'keras'")
    if runtime == "onnx" and dtype == "int8":
        raise RuntimeOptionError("ONNX Runtime's int8 (dynamic quantization) loses too much "
                                 "accuracy on BERT (SQuAD F1 -2, embedding cosine 0.987): use "
                                 "runtime 'openvino' for int8")
    if runtime == "onnx" and dtype == "bfloat16":
        raise RuntimeOptionError("ONNX Runtime has no bfloat16 matrix kernels on CPU: use "
                                 "runtime 'openvino' or 'keras' for bfloat16")
    if runtime == "openvino" and dtype == "bfloat16" and not hardware.has_fast_bfloat16():
        raise RuntimeOptionError(
            f"OpenVINO runs bfloat16 only on a CPU with AMX or AVX-512 BF16, and this one "
            f"({hardware.cpu_info()['model']}) has neither: use dtype 'float32' or 'auto'")
    if dtype == "int8" and not hardware.int8_pays():
        model = hardware.cpu_info()["model"]
        if hardware.has_fast_bfloat16():
            raise RuntimeOptionError(
                f"int8 is not offered on this CPU ({model}): its products run in bfloat16 "
                f"either way, and int8 weights measured 1.06-1.12x bfloat16's speed, short of "
                f"the 1.2x that would pay for their accuracy: use dtype 'bfloat16' or 'auto'")
        raise RuntimeOptionError(
            f"int8 runs no faster than float32 on this CPU ({model} has no AMX-INT8 or VNNI "
            f"instructions): use dtype 'float32' or 'auto'")
    require_package(runtime)
    return runtime, dtype


def auto_runtime(dtype: str) -> str:
    """The runtime "auto" means for `dtype` ("float32", "bfloat16" or "int8") here."""
    if dtype == "int8":
        return "openvino"                        # the only int8 offered (resolve says if not)
    if hardware.gpu_in_use() or not _installed("tensorflow"):
        return "keras"
    if dtype == "bfloat16":
        fast = hardware.has_fast_bfloat16() and _installed(PACKAGES["openvino"][0])
        return "openvino" if fast else "keras"
    for runtime in ("onnx", "openvino"):
        if _installed(PACKAGES[runtime][0]):
            return runtime
    return "keras"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def require_package(runtime: str) -> None:
    """A one-line error when the runtime's package is not installed."""
    if runtime in PACKAGES:
        module, extra = PACKAGES[runtime]
        if not _installed(module):
            raise RuntimeOptionError(f"runtime {runtime!r} needs the {module} package: "
                                     f"pip install '{extra}'")


__all__ = ["DTYPES", "RUNTIMES", "RUNTIME_CHOICES", "RuntimeOptionError", "auto_runtime",
           "require_package", "resolve"]
