"""benchmarks/step_overhead.py: its table, one row per implementation in its own process, HF
eager the 1.00x that the others are divided by."""

import subprocess
import sys

from helpers import REPO


def test_the_table_has_a_row_per_implementation_against_hf():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "step_overhead.py"), "--configs", "nano",
         "--rows", "hf", "kbert/jax", "bare-jax", "--steps", "2", "12", "--repeats", "1"],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("device: ") and "command: python benchmarks/step_overhead.py" \
        in lines[1]
    rows = {line.split()[0]: line.split() for line in lines
            if line.split() and line.split()[0] in ("hf", "kbert/jax", "bare-jax")}
    assert set(rows) == {"hf", "kbert/jax", "bare-jax"}, done.stdout
    # A busy machine can drown ten nano steps in noise: the table then says so, never a negative.
    for name, cells in rows.items():
        assert cells[1] == "noise" or float(cells[1]) > 0, (name, cells)
        assert cells[2].endswith("x") or cells[2] == "-", (name, cells)
    assert rows["hf"][2] in ("1.00x", "-")
    assert rows["kbert/jax"][3] != "-"          # train_on_batch timed beside fit
