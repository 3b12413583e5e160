"""README.md's commands run as written: each command of its ```bash / ```sh blocks and each
```python block, in the README's order, in one temporary working directory that holds the sample
files (`examples/data/`), as a reader of a fresh clone runs them. `kbert ...` runs as
`python -m kbert ...` with FAST's options added, which only make it shorter (argparse keeps the
last of a repeated option). A command that is not run is in NOT_RUN with the reason; a command
that is neither run nor listed fails, so a new kind of command is not skipped unseen.

A python line whose next lines are a comment holding a Python literal (`# {'is_next': 0.9995}`)
must give that value: strings, numbers of tokens, keys and order exactly, floats within
`TOLERANCE` of the digits shown (the shipped checkpoints answer as the README shows, on any CPU).

The files the docs name under `examples/data/` exist (docs/*.md too, whose commands are not run).
"""

import ast
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from helpers import REPO

README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(bash|sh|python)\n(.*?)^```", re.M | re.S)
SAMPLE_PATH = re.compile(r"examples/data/[\w./*-]*\w")

# Commands that are not run here, by how they start, and why.
NOT_RUN = {
    "make ": "sets up .venv (make app then serves until stopped): what CI itself runs",
    "pip install ": "installs packages from the network",
    "# needs the internet": "downloads from the Hugging Face Hub (tests/hub loads from a Hub "
                            "on 127.0.0.1)",
}

# Options added to a `kbert` command, by its subcommand: fewer epochs and shorter sequences on
# the sample files, no progress on stderr.
FAST = {
    ("finetune", "classify"): ["--epochs", "1", "--quiet"],
    ("finetune", "retrieve"): ["--batch-size", "8", "--max-seq-length", "64", "--quiet"],
    ("evaluate", "open-qa"): ["--quiet"],
}


def _commands(text):
    """(line, kind, code) of each ```bash/```sh command (its ` \\` continuations joined, its
    comments dropped) and of each ```python block, in the order of the text."""
    found = []
    for block in FENCE.finditer(text):
        kind, code = block.group(1), block.group(2)
        first = text.count("\n", 0, block.start(2)) + 1
        if kind == "python":
            found.append((first, "python", code))
            continue
        command, start = "", first
        for i, line in enumerate(code.splitlines()):
            if not command:
                start = first + i
            command += line.removesuffix("\\").strip() + " "
            if not line.endswith("\\"):
                if command.split("#")[0].strip():
                    found.append((start, "shell", command.strip()))
                command = ""
    return found


def _params():
    params = []
    for line, kind, code in _commands(README.read_text(encoding="utf-8")):
        words = shlex.split(code, comments=True) if kind == "shell" else []
        name = f"README.md:{line} " + (" ".join(words[:3]) if words else "python")
        reason = next((why for start, why in NOT_RUN.items() if code.startswith(start)), None)
        marks = [pytest.mark.skip(reason=f"not run: {reason}")] if reason else []
        params.append(pytest.param(kind, code, id=name, marks=marks))
    return params


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory like a clone's root for these commands: the sample files, nothing
    else (kbert itself is found through PYTHONPATH, the shipped checkpoints by name)."""
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "examples" / "data", work / "examples" / "data")
    return work


def _run(argv, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3",
               GRADIO_ANALYTICS_ENABLED="False", KERAS_BACKEND="tensorflow")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _kbert_argv(words, cwd):
    """`kbert ...` as `python -m kbert ...`: its globs expanded in cwd (as the shell would), FAST's
    options added."""
    args = []
    for word in words[1:]:
        matches = sorted(glob.glob(word, root_dir=cwd)) if glob.has_magic(word) else []
        assert matches or not glob.has_magic(word), f"{word} matches no file"
        args += matches or [word]
    return [sys.executable, "-m", "kbert", *args, *FAST.get(tuple(args[:2]), [])]


# The python blocks follow one another in the README: each runs after the imports of those
# before it (a reader's session), in a fresh interpreter.
@pytest.mark.parametrize("kind, code", _params())
def test_readme_command_runs(kind, code, workdir):
    if kind == "python":
        text = README.read_text(encoding="utf-8")
        first = text.count("\n", 0, text.index(code)) + 1
        done = _run([sys.executable, "-c", _with_earlier_imports(code, _shown(code, first))],
                    workdir)
    else:
        words = shlex.split(code, comments=True)
        assert words[0] == "kbert", (
            f"`{code.strip()}` is neither run by this test nor in NOT_RUN (add it, with a reason)")
        done = _run(_kbert_argv(words, workdir), workdir)
    assert done.returncode == 0, f"{code.strip()}\n{done.stderr[-3000:]}"


# Floats shown in the README are rounded, and the default (float32) path differs across CPUs only
# in the last digits: a shown score may be off by this much, never a label, a token or a span.
TOLERANCE = 0.01

CHECK = f"""
def _readme_shows(got, shown, where):
    import numpy
    def same(a, b):
        if isinstance(b, float):
            return isinstance(a, (float, int, numpy.floating)) and abs(a - b) <= {TOLERANCE}
        if isinstance(b, dict):
            return isinstance(a, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in b)
        if isinstance(b, (list, tuple)):
            return isinstance(a, (list, tuple)) and len(a) == len(b) and \\
                all(same(x, y) for x, y in zip(a, b))
        return a == b
    if not same(got, shown):
        raise SystemExit(f"{{where}}: the README shows {{shown!r}}, the code gives {{got!r}}")
"""


def _shown(code, first_line):
    """`code` with each expression statement that a literal comment follows wrapped in a check
    of that value (README.md:LINE named in the failure)."""
    lines = code.splitlines()
    checks = {}
    for node in ast.parse(code).body:
        if not isinstance(node, ast.Expr):
            continue
        comment, i = [], node.end_lineno
        while i < len(lines) and lines[i].lstrip().startswith("#"):
            comment.append(lines[i].lstrip()[1:].strip())
            i += 1
        try:
            shown = ast.literal_eval(" ".join(comment)) if comment else None
        except (ValueError, SyntaxError):
            continue
        if shown is not None:
            checks[node.lineno - 1] = (node.end_lineno, shown)
    out, i = [], 0
    while i < len(lines):
        if i in checks:
            end, shown = checks[i]
            expression = "\n".join(lines[i:end])
            out.append(f"_readme_shows(({expression}), {shown!r}, "
                       f"'README.md:{first_line + i}')")
            i = end
        else:
            out.append(lines[i])
            i += 1
    return CHECK + "\n".join(out)


def test_readme_shows_checked_values():
    """The check itself: a literal comment after an expression is compared, prose is not."""
    code = "x = 1\nx + 1\n# 2\nx\n# an int\n"
    checked = _shown(code, 10)
    assert "_readme_shows((x + 1), 2, 'README.md:11')" in checked and "_readme_shows((x)," \
        not in checked
    namespace = {}
    exec(_shown("[{'a': 0.5004, 'b': 'y'}]\n# [{'a': 0.5, 'b': 'y'}]\n", 1), namespace)
    with pytest.raises(SystemExit, match=r"README.md:1: the README shows \[\{'a': 0.5, "
                                         r"'b': 'z'\}\]"):
        exec(_shown("[{'a': 0.5, 'b': 'y'}]\n# [{'a': 0.5, 'b': 'z'}]\n", 1), namespace)
    with pytest.raises(SystemExit):
        exec(_shown("{'a': 0.6}\n# {'a': 0.5}\n", 1), namespace)


def _with_earlier_imports(code, run=None):
    """`run` (default `code`) after the imports of the python blocks before `code`."""
    text = README.read_text(encoding="utf-8")
    blocks = [c for k, c in FENCE.findall(text) if k == "python"]
    earlier = blocks[:blocks.index(code)]
    imports = [line for block in earlier for line in block.splitlines()
               if line.startswith(("import ", "from "))]
    return "\n".join(imports + [run or code])


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_sample_files_named_in_the_docs_exist(doc):
    text = doc.read_text(encoding="utf-8")
    missing = [p for p in SAMPLE_PATH.findall(text) if not glob.glob(str(REPO / p))]
    assert not missing, f"{doc.name} names sample files that are not in examples/data: {missing}"
