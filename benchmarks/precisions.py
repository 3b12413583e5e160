"""The training benchmarks' precisions (`pretrain_step.py`, `finetune_vs_hf.py`): which rows run
on this machine, and the floors bfloat16 training must meet against float32 and HF.

bfloat16 rows run by default where the CPU multiplies bfloat16 natively (`kbert.hardware`: AMX or
AVX-512 BF16) and on a GPU; elsewhere they are skipped with a line saying why. Asked for by name
on a CPU without those instructions they run as emulation, are marked so, and judge no floor.

The floors: kbert's bfloat16 step or epoch >= 2.5x its float32 on an AMX CPU (>= 1.5x where only
avx512_bf16 is present) and >= 3x HF under `torch.autocast` bfloat16, on TensorFlow and PyTorch.
"""

from kbert import hardware

PRECISIONS = ("float32", "bfloat16")
FLOOR_BACKENDS = ("tensorflow", "torch")
VS_HF_FLOOR = 3.0


def default_precisions(gpu: bool) -> list[str]:
    """bfloat16 only on a GPU (as before: every row there is bfloat16); float32, and bfloat16
    where the CPU has it, on a CPU."""
    if gpu:
        return ["bfloat16"]
    return list(PRECISIONS) if hardware.has_fast_bfloat16() else ["float32"]


def cpu_line(gpu: bool) -> str:
    """The header line: the CPU and its bf16 flags; what happens to the bfloat16 rows."""
    line = hardware.describe()
    if not gpu and not hardware.has_fast_bfloat16():
        line += ("\nbfloat16 rows: skipped unless asked for (--precisions float32 bfloat16); "
                 "asked for, they time emulation on this CPU and judge no floor")
    return line


def label(precision: str, gpu: bool) -> str:
    """The suffix a row's name takes: "" for float32, " bf16", or " bf16 (emulated)"."""
    if precision == "float32":
        return ""
    return " bf16" if gpu or hardware.has_fast_bfloat16() else " bf16 (emulated)"


def speed_floor() -> tuple[float, str]:
    """(kbert bfloat16 ÷ float32 floor, why): 2.5x with AMX, 1.5x with avx512_bf16 only."""
    flags = hardware.cpu_info()["bf16_flags"]
    return (2.5, "AMX") if "amx_bf16" in flags else (1.5, "avx512_bf16 without AMX")


def bf16_floors(seconds: dict, gpu: bool) -> list[tuple[str, bool | None]]:
    """[(line, passed)] from {(library, backend, precision): seconds of a step or an epoch}
    (lower is faster); passed is None where a floor cannot be judged (a row missing, a GPU, or a
    CPU without bfloat16 instructions)."""
    if gpu:
        return [("bfloat16 floors: for a CPU; not judged on a GPU", None)]
    if not hardware.has_fast_bfloat16():
        return [(f"bfloat16 floors: not judged: {hardware.cpu_info()['model']} has no bfloat16 "
                 f"instructions", None)]
    floor, why = speed_floor()
    hf = seconds.get(("hf", "torch", "bfloat16"))
    out = []
    for backend in FLOOR_BACKENDS:
        fp32 = seconds.get(("kbert", backend, "float32"))
        bf16 = seconds.get(("kbert", backend, "bfloat16"))
        name = f"kbert/{backend} bfloat16"
        if bf16 is None:
            out.append((f"{name}: no row, floors not judged", None))
            continue
        if fp32 is None:
            out.append((f"{name} vs its float32: no float32 row", None))
        else:
            out.append((f"{name} {fp32 / bf16:.2f}x its float32 (floor {floor}x: {why})",
                        fp32 / bf16 >= floor))
        if hf is None:
            out.append((f"{name} vs HF autocast bfloat16: no HF row", None))
        else:
            out.append((f"{name} {hf / bf16:.2f}x HF under torch.autocast bfloat16 "
                        f"(floor {VS_HF_FLOOR}x)", hf / bf16 >= VS_HF_FLOOR))
    return out


def print_floors(lines: list[tuple[str, bool | None]]) -> None:
    for line, passed in lines:
        mark = {True: "PASS", False: "FAIL", None: "----"}[passed]
        print(f"{mark}  {line}", flush=True)
