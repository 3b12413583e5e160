"""The import layers of docs/architecture.md: every module of kbert/ has its line in the
import-linter contract (pyproject.toml), which `make lint` checks."""

import pathlib

import pytest

tomllib = pytest.importorskip("tomllib")   # Python 3.11+

REPO = pathlib.Path(__file__).resolve().parents[1]
# Package roots that only re-export (or load on first use) what their modules hold.
ROOTS = {"kbert", "kbert.finetune", "kbert.serving"}


def _modules():
    for path in sorted((REPO / "kbert").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_module_has_its_layer():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {m.strip() for line in layers for m in line.split("|")}
    missing = [m for m in _modules() if m not in ROOTS and not any(
        m == n or m.startswith(n + ".") for n in named)]
    assert not missing, f"add these modules to a layer in pyproject.toml: {missing}"
