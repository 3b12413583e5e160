"""Resumable experiments: each unit of work (a data set, a pretraining run, a fine-tuning
seed) writes its result as one JSON file, atomically, and is skipped once that file exists.

Example:
>>> import tempfile
>>> units = Units(tempfile.mkdtemp(), log=lambda line: None)
>>> units.run("square-3", lambda: {"value": 9})
{'value': 9}
>>> units.run("square-3", lambda: 1 / 0)      # done already: read back, not run again
{'value': 9}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


class Units:
    """The results folder's `units/NAME.json` files."""

    def __init__(self, output: str | os.PathLike,
                 log: Callable[[str], Any] = print) -> None:
        self.folder = os.path.join(os.fspath(output), "units")
        self.log = log
        os.makedirs(self.folder, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.json")

    def done(self, name: str) -> bool:
        return os.path.isfile(self.path(name))

    def load(self, name: str) -> Any:
        with open(self.path(name), encoding="utf-8") as f:
            return json.load(f)

    def forget(self, name: str) -> None:
        if self.done(name):
            os.remove(self.path(name))

    def run(self, name: str, work: Callable[[], Any]) -> Any:
        """`work()`'s dict, computed once: later calls read it back from `units/NAME.json`."""
        if self.done(name):
            self.log(f"{name}: done already, skipped")
            return self.load(name)
        self.log(f"{name}: running")
        result = work()
        tmp = self.path(name) + f".tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, self.path(name))
        return result
