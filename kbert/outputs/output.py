"""Writing an output: staged beside it, given the user's modes, recorded, swapped in (keeping
the user's files), and what a killed write left put right."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

from kbert.outputs.kinds import (
    KINDS,
    MARKER,
    OutputError,
    beside_versions,
    check,
    check_version,
    foreign_entries,
    kind_of,
    own_files,
    read_marker,
)
from kbert.outputs.lock import depth, locked, sibling

_F = TypeVar("_F", bound=Callable[..., Any])


# --- modes -------------------------------------------------------------------------------------
def umask() -> int:
    """The process's umask, read without changing it (other threads may be creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)      # no /proc: the only other way to read it
    os.umask(mask)
    return mask


def apply_modes(path: str) -> None:
    """Directories 0777 and files 0666, less the umask, for `path` and everything in it (what
    `mkdtemp` and other private temporary files would leave at 0700/0600)."""
    mask = umask()
    if os.path.isfile(path):
        os.chmod(path, 0o666 & ~mask)
        return
    os.chmod(path, 0o777 & ~mask)
    for root, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o666 & ~mask)

# --- recovery of killed writes -----------------------------------------------------------------
def _note(line: str) -> None:
    print(f"kbert: {line}", file=sys.stderr, flush=True)


def recover(path: str | os.PathLike) -> bool:
    """Puts right what a killed write of `path` left (the caller holds the lock, or `path` is
    missing): the previous version back in place if the swap was cut between its renames, and
    the leftovers removed. Returns whether the previous version was put back."""
    path = os.path.abspath(os.fspath(path))
    old = sibling(path, "old")
    restored = False
    if os.path.isdir(old) and not os.path.islink(old):
        if not os.path.lexists(path):
            os.replace(old, path)
            _note(f"restored {path}: a write was interrupted, the previous version is back")
            restored = True
        elif kind_of(old) is not None and not foreign_entries(old):
            shutil.rmtree(old, ignore_errors=True)
    parent, name = os.path.split(path)
    prefix = f".{name}.kbert-new-"
    with contextlib.suppress(OSError):
        for entry in os.listdir(parent):
            if entry.startswith(prefix):
                shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
    return restored


def recover_missing(path: str | os.PathLike) -> bool:
    """For readers: if `path` is missing because a swap was cut short, put the previous version
    back (under the writers' lock). Returns whether it did."""
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path) or not os.path.isdir(sibling(path, "old")):
        return False
    try:
        with locked(path, wait=True):
            return recover(path)
    except OSError:                                # not ours to fix (read-only place)
        return False

# --- writing -----------------------------------------------------------------------------------
class Output:
    """A claimed output: checked, locked and recovered on entry; `staging()` gives a hidden
    sibling directory to write into and `commit()` swaps it in. Leftover staging directories are
    removed on exit, and the lock released.

    resume: a writer that goes on with an output of its kind (experiment results) rather than
        replacing it; `commit` is then not used, `mark()` records the kind in place.
    wait: block while another process writes `path` (else `OutputError` at once).
    """

    def __init__(self, path: str | os.PathLike, kind: str, overwrite: bool = False,
                 wait: bool = False, resume: bool = False,
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.given = os.fspath(path)
        self.kind, self.overwrite, self.wait, self.resume = kind, overwrite, wait, resume
        self.on_wait = on_wait or _note
        self._staged: list[str] = []
        self._lock: contextlib.ExitStack | None = None

    def __enter__(self) -> Output:
        check(self.given, self.kind, self.overwrite, self.resume)   # fast, before any lock
        stack = contextlib.ExitStack()
        stack.enter_context(locked(self.path, self.wait, self.on_wait))
        self._lock = stack
        try:
            if depth(self.path) == 1:               # not a claim nested in this process's own
                recover(self.path)
            check(self.given, self.kind, self.overwrite, self.resume)   # as it is now
            if self.resume:
                self.mark()                          # the kind recorded from the start
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for tmp in self._staged:
            shutil.rmtree(tmp, ignore_errors=True)
        self._staged.clear()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def staging(self) -> str:
        """A new empty directory beside the output, to write the next version into."""
        parent, name = os.path.split(self.path)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}.kbert-new-", dir=parent)
        self._staged.append(tmp)
        return tmp

    def mark(self, directory: str | None = None, files: Iterable[str] | None = None) -> None:
        """Writes the record into `directory` (default the output itself), listing `files`
        (default everything in it)."""
        directory = directory or self.path
        os.makedirs(directory, exist_ok=True)
        names = sorted(set(files) if files is not None else
                       set(os.listdir(directory)) - {MARKER})
        if directory == self.path and os.path.isfile(os.path.join(directory, MARKER)):
            names = sorted(set(names) | set((read_marker(directory) or {}).get("files", [])))
        record = {"kind": self.kind, "files": names, "kbert_version": _version(),
                  "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_json(os.path.join(directory, MARKER), record)

    def commit(self, tmp: str) -> str:
        """Records `tmp`'s files, gives them the user's modes, keeps the user's files of the
        output being replaced (hard links), and swaps `tmp` in. Returns the output's path."""
        self.mark(tmp)
        apply_modes(tmp)
        if os.path.isdir(self.path):
            check(self.given, self.kind, overwrite=True)           # as it is now
            for name in foreign_entries(self.path):
                _keep(os.path.join(self.path, name), os.path.join(tmp, name))
        _swap(tmp, self.path)
        self._staged.remove(tmp)
        return self.path


def _version() -> str:
    """kbert's installed version (the package metadata: no import of the root package)."""
    from importlib import metadata
    try:
        return metadata.version("kbert")
    except metadata.PackageNotFoundError:
        return "unknown"


def _keep(source: str, target: str) -> None:
    """The user's file `source` also at `target` (a hard link; a copy where links fail)."""
    if os.path.lexists(target):
        raise OutputError(f"{source} is not kbert's but has the name of a file kbert writes; "
                          f"move it out of the output")
    _link(source, target)


def _link(source: str, target: str) -> None:
    """`source` (a file, a link or a folder) also at `target`: hard links, copies where links
    fail."""
    if os.path.isdir(source) and not os.path.islink(source):
        shutil.copytree(source, target, symlinks=True, copy_function=_link)
    elif os.path.islink(source):
        os.symlink(os.readlink(source), target)
    else:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


def _swap(tmp: str, path: str) -> None:
    """Renames `tmp` to `path`; an existing `path` is first renamed aside, then removed (a
    kill between the renames is put right by `recover`)."""
    if not os.path.lexists(path):
        os.replace(tmp, path)
        return
    old = sibling(path, "old")
    if os.path.lexists(old):            # `recover` left it: it holds files kbert did not write
        raise OutputError(f"{old} holds files kbert did not write (left by an interrupted "
                          f"write of {path}); move them out, then remove it")
    os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)


def claims(kind: str, argument: str = "output", resume: bool = False) -> Callable[[_F], _F]:
    """Decorates a function that writes its `argument` (a path) as a `kind` output: each call
    holds the claim (`Output`: checked with its `overwrite` argument if it has one, locked)
    while it runs; `resume` for writers that go on with what is there.

    >>> @claims("checkpoint")
    ... def train(output, overwrite=False):
    ...     return kind_of(output)
    >>> train("/")
    Traceback (most recent call last):
    ...
    kbert.outputs.OutputError: /: refusing to write over the root directory
    """
    def decorate(function: _F) -> _F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            output = bound.arguments[argument]
            overwrite = bool(bound.arguments.get("overwrite", False))
            if output is None:                       # a run that writes nothing
                return function(*args, **kwargs)
            with Output(output, kind, overwrite=overwrite, resume=resume):
                return function(*args, **kwargs)
        return cast(_F, run)
    return decorate


@contextlib.contextmanager
def writing(path: str | os.PathLike, kind: str, overwrite: bool = True,
            wait: bool = False) -> Iterator[str]:
    """Yields a staging directory for a `kind` output at `path`, swapped in when the block
    ends without an error (and removed when it raises). `overwrite` defaults to True here, as
    Keras' `model.save` does: the Python API's `save` calls replace their own kind; the
    commands pass `--overwrite`."""
    with Output(path, kind, overwrite=overwrite, wait=wait) as out:
        tmp = out.staging()
        yield tmp
        out.commit(tmp)


@contextlib.contextmanager
def claim_version(base: str | os.PathLike, version: int,
                  overwrite: bool = False) -> Iterator[Output]:
    """Claims version `version` of a SavedModel in the model base directory `base` (TF
    Serving's layout, `base/<version>/`; the other versions are left as they are): checked
    (`check_version`), the base locked while the block runs (a second writer into it is
    refused), what killed writes of any version left put right. Yields the version's `Output`
    (`staging()`, then `commit()`)."""
    base = os.fspath(base)
    check_version(base, version, overwrite)                # fast, before any lock
    with locked(os.path.abspath(base)):
        check_version(base, version, overwrite)            # as it is now
        for left in beside_versions(base) if os.path.isdir(base) else []:
            with locked(os.path.join(base, left)):
                recover(os.path.join(base, left))
        with Output(os.path.join(base, str(version)), "saved_model",
                    overwrite=overwrite) as out:
            yield out


def amend(path: str | os.PathLike, kind: str, write: Callable[[str], None]) -> str:
    """Adds files to the finished `kind` output at `path` (training curves beside a checkpoint):
    `write(tmp)` writes them into a staging directory, which also gets the output's own files
    (hard links, no copy of the weights), and is recorded and swapped in whole, as any new
    version: a reader sees the output without the new files or with them, never half. A file
    of the output with the name of a new one is replaced; the user's files are kept. Returns
    the output's path.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out")
    >>> with writing(path, "checkpoint") as tmp:
    ...     write_text(os.path.join(tmp, "config.json"), "{}")
    >>> _ = amend(path, "checkpoint", lambda tmp: write_text(os.path.join(tmp, "notes.md"), ""))
    >>> read_marker(path)["files"]
    ['config.json', 'notes.md']
    """
    with Output(path, kind, overwrite=True) as out:
        if kind_of(out.path) != kind:
            raise OutputError(f"{out.given} does not hold {KINDS[kind]} to add files to")
        tmp = out.staging()
        write(tmp)
        for name in sorted(own_files(out.path) - {MARKER} - set(os.listdir(tmp))):
            if os.path.lexists(os.path.join(out.path, name)):
                _link(os.path.join(out.path, name), os.path.join(tmp, name))
        return out.commit(tmp)


# --- writers' child processes -------------------------------------------------------------------
def die_with_parent() -> None:
    """`preexec_fn` of a writer's child process (a converter): the kernel kills it when its
    parent dies, so a killed `kbert export` leaves no converter running (Linux; elsewhere a
    no-op, and a Ctrl-C still reaches the whole process group)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

# --- single files ------------------------------------------------------------------------------
def write_json(path: str, value: object) -> None:
    """`value` as indented JSON at `path`, atomically, with the user's modes."""
    write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def write_text(path: str, text: str) -> None:
    """`text` (UTF-8) at `path`, atomically: a reader sees the old file or the new one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".kbert-tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
