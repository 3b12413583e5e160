"""benchmarks/serve_load.py: its pure helpers (locust's stats CSV, percentiles, the table's
cells and ratios) by their docstring examples. The load runs themselves are a benchmark: they
need the peer's and locust's venvs and minutes of an idle machine."""

import doctest
import importlib.util

from helpers import REPO


def test_the_helpers_examples():
    spec = importlib.util.spec_from_file_location("serve_load",
                                                  REPO / "benchmarks" / "serve_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failed, tried = doctest.testmod(module)
    assert tried >= 5 and failed == 0
