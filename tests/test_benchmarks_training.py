"""The training benchmarks' precision rows and bfloat16 floors (benchmarks/precisions.py), and
pretrain_step.py's table: MFU against both measured peaks, HF at the same precision."""

import sys

import pytest

from helpers import REPO
from kbert import hardware

sys.path.insert(0, str(REPO / "benchmarks"))
import precisions  # noqa: E402
import pretrain_step  # noqa: E402

AMX = {"model": "Xeon", "bf16_flags": ["amx_bf16", "avx512_bf16"], "int8_flags": []}
ZEN4 = {"model": "EPYC 9004", "bf16_flags": ["avx512_bf16"], "int8_flags": []}
ZEN2 = {"model": "EPYC 7002", "bf16_flags": [], "int8_flags": []}


def _cpu(monkeypatch, info):
    monkeypatch.setattr(hardware, "cpu_info", lambda *a: info)


def test_bfloat16_rows_run_only_where_the_cpu_has_them(monkeypatch):
    _cpu(monkeypatch, ZEN2)
    assert precisions.default_precisions(gpu=False) == ["float32"]
    assert precisions.label("bfloat16", gpu=False) == " bf16 (emulated)"
    assert "skipped unless asked for" in precisions.cpu_line(gpu=False)
    _cpu(monkeypatch, ZEN4)
    assert precisions.default_precisions(gpu=False) == ["float32", "bfloat16"]
    assert precisions.label("bfloat16", gpu=False) == " bf16"
    assert precisions.label("float32", gpu=False) == ""
    assert precisions.default_precisions(gpu=True) == ["bfloat16"]


def test_the_floors_are_ratios_against_float32_and_hf_autocast(monkeypatch):
    seconds = {("kbert", "tensorflow", "float32"): 1.0, ("kbert", "tensorflow", "bfloat16"): 0.5,
               ("kbert", "torch", "float32"): 1.2, ("kbert", "torch", "bfloat16"): 0.3,
               ("hf", "torch", "bfloat16"): 1.2}
    _cpu(monkeypatch, ZEN4)                 # avx512_bf16 only: 1.5x its float32
    got = dict(precisions.bf16_floors(seconds, gpu=False))
    assert got == {
        "kbert/tensorflow bfloat16 2.00x its float32 (floor 1.5x: avx512_bf16 without AMX)": True,
        "kbert/tensorflow bfloat16 2.40x HF under torch.autocast bfloat16 (floor 3.0x)": False,
        "kbert/torch bfloat16 4.00x its float32 (floor 1.5x: avx512_bf16 without AMX)": True,
        "kbert/torch bfloat16 4.00x HF under torch.autocast bfloat16 (floor 3.0x)": True}
    _cpu(monkeypatch, AMX)                  # AMX: 2.5x
    assert dict(precisions.bf16_floors(seconds, gpu=False))[
        "kbert/tensorflow bfloat16 2.00x its float32 (floor 2.5x: AMX)"] is False
    del seconds["kbert", "torch", "bfloat16"]
    assert dict(precisions.bf16_floors(seconds, gpu=False))[
        "kbert/torch bfloat16: no row, floors not judged"] is None
    _cpu(monkeypatch, ZEN2)                 # emulation judges nothing
    assert precisions.bf16_floors(seconds, gpu=False) == [
        ("bfloat16 floors: not judged: EPYC 7002 has no bfloat16 instructions", None)]


def test_pretrain_table_shows_mfu_against_both_peaks(monkeypatch, capsys):
    _cpu(monkeypatch, ZEN4)
    flops = pretrain_step.flops_per_step("mini", 32, 128, 20)
    row = {("kbert", "tensorflow", "float32"): 1.0, ("kbert", "tensorflow", "bfloat16"): 0.5,
           ("hf", "torch", "float32"): 3.0, ("hf", "torch", "bfloat16"): 2.0}
    peaks = {"float32": flops / 0.8, "bfloat16": flops / 0.2}
    rows = pretrain_step._print_table("mini", (32, 128, 20), row, peaks, gpu=False)
    by_name = {r["implementation"]: r for r in rows}
    bf16 = by_name["kbert/tensorflow bf16"]
    assert bf16["vs_hf"] == pytest.approx(4.0)                  # HF autocast: 2.0 s
    assert bf16["mfu"] == pytest.approx({"float32": 1.6, "bfloat16": 0.4})
    assert by_name["kbert/tensorflow"]["vs_hf"] == pytest.approx(3.0)   # HF float32: 3.0 s
    header = capsys.readouterr().out.splitlines()[2]
    assert "MFU f32" in header and "MFU bf16" in header
