"""README.md's commands run as written: each command of its ```bash / ```sh blocks and each
```python block, in the README's order, in one temporary working directory that holds the sample
files (`examples/data/`), as a reader of a fresh clone runs them. `kbert ...` runs as
`python -m kbert ...` with FAST's options added, which only make it shorter (argparse keeps the
last of a repeated option). A command that is not run is in NOT_RUN with the reason; a command
that is neither run nor listed fails, so a new kind of command is not skipped unseen.

The files the docs name under `examples/data/` exist (docs/*.md too, whose commands are not run).
"""

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
        done = _run([sys.executable, "-c", _with_earlier_imports(code)], workdir)
    else:
        words = shlex.split(code, comments=True)
        assert words[0] == "kbert", (
            f"`{code.strip()}` is neither run by this test nor in NOT_RUN (add it, with a reason)")
        done = _run(_kbert_argv(words, workdir), workdir)
    assert done.returncode == 0, f"{code.strip()}\n{done.stderr[-3000:]}"


def _with_earlier_imports(code):
    text = README.read_text(encoding="utf-8")
    blocks = [c for k, c in FENCE.findall(text) if k == "python"]
    earlier = blocks[:blocks.index(code)]
    imports = [line for block in earlier for line in block.splitlines()
               if line.startswith(("import ", "from "))]
    return "\n".join(imports + [code])


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_sample_files_named_in_the_docs_exist(doc):
    text = doc.read_text(encoding="utf-8")
    missing = [p for p in SAMPLE_PATH.findall(text) if not glob.glob(str(REPO / p))]
    assert not missing, f"{doc.name} names sample files that are not in examples/data: {missing}"
