"""benchmarks/input_rate.py: the `--quick` run end to end, and its projection arithmetic."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO

SCRIPT = REPO / "benchmarks" / "input_rate.py"


def _module():
    spec = importlib.util.spec_from_file_location("input_rate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_projection_and_needed_rates():
    bench = _module()
    assert bench.amdahl(100, 200) == pytest.approx(1600)          # perfect scaling: linear
    assert bench.amdahl(100, 100) == pytest.approx(100)           # serial: no gain
    assert bench.amdahl(100, 150) == pytest.approx(100 / (1 / 3 + 2 / 3 / 16))
    assert bench.amdahl(100) == pytest.approx(1600)
    assert bench.amdahl(100, 1000, n=16) == pytest.approx(1000)  # measured at 16: itself
    assert bench.amdahl(100, 700, n=8, cores=8) == pytest.approx(700)
    assert bench.needed("base", 128) == 3300 and bench.needed("mini", 512) == 3500


def test_quick_run_prints_every_path_and_shape(tmp_path, shared_data):
    out = tmp_path / "rows.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [(r["path"], r["shape"].split(",")[0]) for r in rows] == [
        (p, s) for s in ("64x128", "16x512") for p in ("static", "dynamic", "arrays", "text")]
    for r in rows:
        assert r["one"] > 0 and r["one_cpu"] > 0 and r["many"] is None
        assert r["projected"] == pytest.approx(16 * r["one"])    # one core measured: linear
        assert r["headroom_mini"] == pytest.approx(r["projected"] / r["needed_mini"])
        assert r["cores_for_base"] == pytest.approx(r["needed_base"] / r["one"])
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(rows) and "projected, 16 cores" in table[0]
