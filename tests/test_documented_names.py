"""Every kbert name that README.md and docs/*.md show works as shown: each `import kbert...`
and `from kbert... import ...` of their code, and each `kbert.a.b` path of their code blocks
and code spans resolves — a path written as a call (`kbert.retrieval.ask(...)`) to a callable.

The names are read in a fresh interpreter, in the order a reader meets them: which attribute a
package has can depend on what was imported before (importing a submodule sets the package's
attribute of that name).
"""

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys

from helpers import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```[^\n]*\n(.*?)^\s*```", re.M | re.S)
SPAN = re.compile(r"`((?:[^`\n]|\n(?!\s*\n))+)`")    # may wrap, not span a blank line
PATH = re.compile(r"(?<![\w./-])(kbert(?:\.[A-Za-z_]\w*)+)(\s*\()?")
FROM = re.compile(r"\bfrom (kbert(?:\.\w+)*) import (\(?[\w, ]+)")
IMPORT = re.compile(r"(?:^|[;\s'\"])import (kbert(?:\.\w+)*)(?![\w.])")
NOT_IMPORTED = {"kbert.__main__"}    # running it runs the command line: found, not imported


def documented_names():
    """[{"where", "kind": "import" | "from" | "path", "name", "names", "call"}] in the order
    of the files and of the text."""
    checks = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        blocks = FENCE.findall(text)
        spans = SPAN.findall(FENCE.sub("", text))
        for code in blocks + spans:
            where = doc.name
            for module, names in FROM.findall(code):
                checks.append({"where": where, "kind": "from", "name": module,
                               "names": [n.strip() for n in names.strip("(").split(",")
                                         if n.strip()]})
            for module in IMPORT.findall(code):
                checks.append({"where": where, "kind": "import", "name": module})
            for path, call in PATH.findall(code):
                checks.append({"where": where, "kind": "path", "name": path,
                               "call": bool(call)})
    return checks


def resolve(path):
    """What `kbert.a.b.c` is for a user who imported what it needs: each part an attribute,
    or else a submodule imported."""
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        if not hasattr(obj, part) and hasattr(obj, "__path__"):
            importlib.import_module(".".join(parts[:i + 1]))
        obj = getattr(obj, part)
    return obj


def problems(checks):
    """One line per check that fails."""
    out = []
    for c in checks:
        try:
            if c["name"] in NOT_IMPORTED:
                if importlib.util.find_spec(c["name"]) is None:
                    out.append(f"{c['where']}: {c['name']} does not exist")
                continue
            if c["kind"] == "import":
                importlib.import_module(c["name"])
            elif c["kind"] == "from":
                module = importlib.import_module(c["name"])
                for name in c["names"]:
                    if not hasattr(module, name):
                        importlib.import_module(f"{c['name']}.{name}")
            else:
                value = resolve(c["name"])
                if c["call"] and not callable(value):
                    out.append(f"{c['where']}: {c['name']}(...) is shown as a call, but it is "
                               f"{type(value).__name__} {value!r}, not callable")
        except Exception as e:  # noqa: BLE001  (any failure is the finding)
            names = f" import {', '.join(c['names'])}" if c["kind"] == "from" else ""
            out.append(f"{c['where']}: {c['name']}{names}: {type(e).__name__}: {e}")
    return out


def test_the_docs_show_names():
    checks = documented_names()
    shown = {c["name"] for c in checks}
    # the extraction finds each form: imports, from-imports, paths, calls
    assert {"kbert", "kbert.retrieval", "kbert.load", "kbert.retrieval.ask"} <= shown
    assert any(c["kind"] == "from" and "Index" in c["names"] for c in checks)
    assert any(c.get("call") and c["name"] == "kbert.retrieval.ask" for c in checks)


def test_every_documented_name_resolves():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(
        [sys.executable, "-c", "import json, sys, test_documented_names as t; "
                               "print(json.dumps(t.problems(json.load(sys.stdin))))"],
        input=json.dumps(documented_names()), capture_output=True, text=True, env=env,
        cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert not found, "\n".join(found)


def test_no_lazy_name_is_also_a_module_name():
    """A package's lazy attribute named like one of its submodules is that module once the
    submodule is imported (the import system sets it on the package), whatever the lazy
    table says: only a subpackage may be listed under its own name (`kbert.retrieval`)."""
    for package in ("kbert", "kbert.finetune", "kbert.network", "kbert.retrieval", "kbert.tasks",
                    "kbert.training"):
        lazy = importlib.import_module(package)._LAZY
        for name, module in lazy.items():
            spec = importlib.util.find_spec(f"{package}.{name}")
            if module == f"{package}.{name}":
                assert spec is not None and spec.submodule_search_locations is not None, \
                    f"{package}.{name} is listed as a subpackage, but it is no package"
            else:
                assert spec is None, \
                    f"{package}.{name} is a module, which hides the attribute of {module}"


def test_ask_is_the_function_after_its_module_is_imported():
    import kbert.retrieval
    import kbert.retrieval.open_qa  # noqa: F401  (sets kbert.retrieval.open_qa, nothing else)
    assert callable(kbert.retrieval.ask) and callable(kbert.retrieval.evaluate_open_qa)
    assert kbert.retrieval.ask is kbert.retrieval.open_qa.ask
