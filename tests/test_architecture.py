"""The import layers of docs/architecture.md, drawn from the code by .ci/layers.py: every
import counts (inside functions, under `if TYPE_CHECKING:`, and the names a package loads on
first use), there is no circle, the picture in the docs is the code's, and every module has its
line in the import-linter contract (pyproject.toml) that `make lint` checks."""

import pathlib
import subprocess
import sys

import pytest

tomllib = pytest.importorskip("tomllib")   # Python 3.11+

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".ci"))
import layers  # noqa: E402


def test_every_module_has_its_layer():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert "exclude_type_checking_imports" not in config      # a hint is a dependency too
    lines = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {m.strip() for line in lines for m in line.split("|")}
    missing = [m for m in layers.modules() if m != "kbert" and not any(
        m == n or m.startswith(n + ".") for n in named)]
    assert not missing, f"add these modules to a layer in pyproject.toml: {missing}"


def test_no_module_reaches_up_through_the_root_package():
    """`import kbert` inside kbert/ would reach the facade (and everything it loads) from
    below it: the layers below take what they need as an argument (a `Loader`, say)."""
    by_module, _ = layers.graph()
    assert [m for m, targets in by_module.items() if "kbert" in targets] == []


def test_no_circles_and_the_picture_is_the_codes():
    assert layers.problems() == []
    out = subprocess.run([sys.executable, str(REPO / ".ci" / "layers.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_drawing_sees_every_kind_of_import(tmp_path, monkeypatch):
    """A function-level import, a TYPE_CHECKING one and a lazily loaded name are all arrows."""
    package = tmp_path / "kbert"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    from kbert import high\n")
    (package / "high.py").write_text("from typing import TYPE_CHECKING\n"
                                     "if TYPE_CHECKING:\n    from kbert.low import a\n")
    (package / "lazy.py").write_text("from kbert._lazy import lazy_attributes\n"
                                     "_LAZY = {'x': 'kbert.high'}\n")
    (package / "_lazy.py").write_text("")
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    monkeypatch.setattr(layers, "PACKAGE", package)
    by_module, by_part = layers.graph()
    assert by_module["kbert.low.a"] == {"kbert.high"}
    assert by_module["kbert.high"] == {"kbert.low.a"}
    assert by_module["kbert.lazy"] == {"kbert._lazy", "kbert.high"}
    assert layers.circles(by_part) == [["kbert.high", "kbert.low"]]


def test_a_name_that_moved_up_says_where_it_is():
    """The retrievers' training moved above retrieval: the old name is one line saying where."""
    import kbert.retrieval
    with pytest.raises(AttributeError, match="kbert.retrieval.train_retriever has moved: use "
                                             "kbert.training.train_retriever"):
        kbert.retrieval.train_retriever  # noqa: B018
    from kbert.training import train_retriever  # noqa: F401  (where it is)
