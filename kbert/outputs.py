"""Where kbert writes: the one module every writer goes through.

An output is a directory (a checkpoint, an export, a SavedModel version, an index, pretraining
data, experiment results) or one file (a vocabulary). Writing one follows the same four rules:

- **Its kind is recorded and checked.** A finished output holds `.kbert-output.json` (its kind,
  the files kbert wrote, the kbert version). An existing output is replaced only when it is of
  the writer's own kind and `overwrite` is asked for; a directory holding anything else is
  refused in one line (`OutputError`), and so are `/`, the home directory and the current
  directory (or one above it). Outputs written before the record existed are recognised by
  their own manifests (`kind_of`).
- **Nothing kbert did not write is deleted.** Replacing an output keeps the user's files in it
  (hard links into the new version); a folder of the user's inside it is refused.
- **Swapped in whole.** Files are written into a hidden sibling (`.NAME.kbert-new-*`), then
  renamed into place: a reader sees the old output or the new one. A write killed between the
  two renames of a swap is put right by the next writer or reader (the old version put back,
  one line on stderr); leftovers of killed writes are removed by the next writer.
- **Locked while written, with the user's modes.** A writer holds an exclusive `flock` on a
  hidden sibling (`.NAME.kbert-lock`, there only while held; the kernel releases it if the
  process dies): a second writer waits (`wait=True`, e.g. `kbert index add`) or is refused in
  one line. Directories get 0777 and files 0666 less the user's umask (0755/0644 under the
  usual 022), so a server running as another user (TF Serving, Triton) can read them.

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "out")
>>> with writing(path, "checkpoint") as tmp:
...     with open(os.path.join(tmp, "config.json"), "w") as f:
...         _ = f.write("{}")
>>> kind_of(path), sorted(os.listdir(path))
('checkpoint', ['.kbert-output.json', 'config.json'])
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import inspect
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar, cast

_F = TypeVar("_F", bound=Callable[..., Any])

MARKER = ".kbert-output.json"

# kind -> how a message names it
KINDS = {
    "checkpoint": "a kbert checkpoint",
    "export": "a kbert export (ONNX/OpenVINO graphs)",
    "saved_model": "a kbert SavedModel",
    "index": "a kbert index",
    "pretraining_data": "kbert pretraining data",
    "experiments": "kbert experiment results",
    "hf": "a transformers checkpoint written by kbert",
    "keras_hub": "a keras-hub preset written by kbert",
    "google": "a google-research checkpoint written by kbert",
}
# An output is replaced by a writer of a compatible kind: an export is also a checkpoint
# directory, so `kbert finetune --output EXPORT --overwrite` may replace it (not the reverse).
_REPLACES = {"checkpoint": {"checkpoint", "export"}, "export": {"export", "checkpoint"}}
_SHARD = re.compile(r"shard-\d{5}\.tfrecord")


class OutputError(ValueError):
    """An output that cannot be written as asked; the message is one line for the user."""


# --- what a directory holds --------------------------------------------------------------------
def read_marker(path: str) -> dict | None:
    """The record of a kbert output directory, or None."""
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("kind") in KINDS else None


def kind_of(path: str | os.PathLike) -> str | None:
    """The kind of kbert output `path` holds (its record, else its own manifests), or None."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return None
    marker = read_marker(path)
    if marker is not None:
        return str(marker["kind"])
    return _recognise(path)


def _recognise(path: str) -> str | None:
    """The kind of an output written before records existed, from its own manifests."""
    names = set(os.listdir(path))
    if {"config.json", "model.safetensors"} <= names and _kbert_weights(
            os.path.join(path, "model.safetensors")):
        return "export" if "export.json" in names else "checkpoint"
    if "index.json" in names:
        try:
            with open(os.path.join(path, "index.json"), encoding="utf-8") as f:
                if json.load(f).get("format") == "kbert-index":
                    return "index"
        except (OSError, ValueError, AttributeError):
            return None
    if "saved_model.pb" in names and os.path.isfile(
            os.path.join(path, "assets.extra", "export_options.json")):
        return "saved_model"
    if any(_SHARD.fullmatch(n) for n in names):
        return "pretraining_data"
    if "units" in names and os.path.isdir(os.path.join(path, "units")):
        return "experiments"
    return None


def _kbert_weights(path: str) -> bool:
    """Whether a safetensors file was written by kbert (its header's metadata says so)."""
    try:
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            if size > 100_000_000:
                return False
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return False
    return isinstance(header, dict) and (header.get("__metadata__") or {}).get("format") == "kbert"


def own_files(path: str) -> set[str]:
    """The top-level names in the output `path` that kbert wrote (its record's list; for an
    output without one, the names its kind writes)."""
    marker = read_marker(path)
    if marker is not None and isinstance(marker.get("files"), list):
        return set(marker["files"]) | {MARKER}
    kind = _recognise(path)
    names = set(os.listdir(path))
    if kind in ("checkpoint", "export"):
        return names & {"config.json", "vocab.txt", "model.safetensors", "MODEL_CARD.md",
                        "export.json", "onnx", "openvino"}
    if kind == "index":
        return names & {"index.json", "embeddings.npy", "passages.jsonl", "faiss.index"}
    if kind == "pretraining_data":
        return {n for n in names if _SHARD.fullmatch(n)}
    if kind in ("saved_model", "experiments"):
        return names
    return set()


def foreign_entries(path: str) -> list[str]:
    """The entries of the output `path` that kbert did not write, sorted."""
    own = own_files(path)
    return sorted(n for n in os.listdir(path) if n not in own)


# --- what may be written where ------------------------------------------------------------------
def _protected(path: str) -> str | None:
    """Why `path` may never be an output directory, or None."""
    real = os.path.realpath(path)
    if real == os.path.sep:
        return "the root directory"
    if real == os.path.realpath(os.path.expanduser("~")):
        return "your home directory"
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        return None
    if real == cwd:
        return "the current directory"
    if cwd.startswith(real.rstrip(os.sep) + os.sep):
        return "a directory above the current one"
    return None


def _describe(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def check(path: str | os.PathLike, kind: str, overwrite: bool = False,
          resume: bool = False) -> None:
    """Raises `OutputError` (one line) unless `path` may be written as a `kind` output: it does
    not exist, or is an empty directory, or holds an output of this kind and `overwrite` (or
    `resume`, for writers that go on with what is there) is given.

    >>> check("/", "checkpoint")
    Traceback (most recent call last):
    ...
    kbert.outputs.OutputError: --output /: refusing to write over the root directory
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    path = os.fspath(path)
    why = _protected(path)
    if why:
        raise OutputError(f"--output {path}: refusing to write over {why}")
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise OutputError(f"--output {path} exists and is not a directory")
    if not os.listdir(path):
        return
    found = kind_of(path)
    if found is None or found not in _REPLACES.get(kind, {kind}):
        what = KINDS[found] if found else "files kbert did not write"
        shown = "" if found else f" ({_describe(sorted(os.listdir(path)))})"
        raise OutputError(f"--output {path} holds {what}{shown}; choose a new or empty "
                          f"directory")
    if not (overwrite or resume):
        raise OutputError(f"--output {path} holds {KINDS[found]} already; pass --overwrite "
                          f"(overwrite=True) to replace it, or choose another directory")
    folders = [n for n in foreign_entries(path) if os.path.isdir(os.path.join(path, n))
               and not os.path.islink(os.path.join(path, n))]
    if folders and not resume:
        raise OutputError(f"--output {path} holds folders kbert did not write "
                          f"({_describe(folders)}); move them out before replacing the output")


def check_file(path: str | os.PathLike, overwrite: bool = False) -> None:
    """Raises `OutputError` unless `path` may be written as a file output."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"--output {path} is a directory; give the file to write")
    if os.path.lexists(path) and not overwrite:
        raise OutputError(f"--output {path} exists; pass --overwrite to replace it")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"--output {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"--output {path}: the directory {parent} is not writable")


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


# --- the lock ----------------------------------------------------------------------------------
def _sibling(path: str, what: str) -> str:
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.kbert-{what}")


_held: dict[str, list] = {}          # lock path -> [file, depth]: a process may nest its claims
_held_guard = threading.Lock()


@contextlib.contextmanager
def locked(path: str, wait: bool = False,
           on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Holds the writers' lock of the output `path` (reentrant within a process). Another
    process holding it: `wait` blocks until it is free (after calling `on_wait` with a line
    saying so), else `OutputError`."""
    lock = _sibling(path, "lock")
    with _held_guard:
        if lock in _held:
            _held[lock][1] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _held_guard:
                _held[lock][1] -= 1
        return
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    f = _acquire(lock, path, wait, on_wait)
    try:
        _say_holder(f, f"kbert process {os.getpid()}\n")
        with _held_guard:
            _held[lock] = [f, 1]
        try:
            yield
        finally:
            with _held_guard:
                del _held[lock]
            with contextlib.suppress(OSError):
                os.remove(lock)                    # while held: see `_acquire`
    finally:
        f.close()                                  # releases the flock


def _acquire(lock: str, path: str, wait: bool,
             on_wait: Callable[[str], None] | None) -> IO[str]:
    """The lock file `lock`, opened and flocked. A holder removes its lock file before it
    lets go, so none is left beside the output: a process that got the lock on a file that
    is no longer at `lock` (removed, or made anew by a later writer) tries again."""
    told = False
    while True:
        try:
            f = open(lock, "a+", encoding="ascii")
        except PermissionError:                    # another user's lock file: flock reads too
            f = open(lock, encoding="ascii")
        try:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                f.seek(0)
                holder = f.read().strip() or "another process"
                if not wait:
                    raise OutputError(f"{path} is being written by {holder}; wait for it to "
                                      f"finish or choose another output") from None
                if on_wait and not told:
                    on_wait(f"waiting for {holder}, which is writing {path}")
                    told = True
                fcntl.flock(f, fcntl.LOCK_EX)
            mine = os.fstat(f.fileno())
            try:
                there = os.stat(lock)
            except FileNotFoundError:
                there = None
            if there is not None and (there.st_ino, there.st_dev) == (mine.st_ino, mine.st_dev):
                return f
        except BaseException:
            f.close()
            raise
        f.close()


def _say_holder(f: IO[str], text: str) -> None:
    """Writes who holds the lock into the lock file (for the message a second writer gets)."""
    with contextlib.suppress(OSError, ValueError):
        f.seek(0)
        f.truncate()
        f.write(text)
        f.flush()


def _depth(path: str) -> int:
    """How many claims this process holds on the output `path`."""
    with _held_guard:
        held = _held.get(_sibling(path, "lock"))
        return held[1] if held else 0


# --- recovery of killed writes -----------------------------------------------------------------
def _note(line: str) -> None:
    print(f"kbert: {line}", file=sys.stderr, flush=True)


def recover(path: str | os.PathLike) -> bool:
    """Puts right what a killed write of `path` left (the caller holds the lock, or `path` is
    missing): the previous version back in place if the swap was cut between its renames, and
    the leftovers removed. Returns whether the previous version was put back."""
    path = os.path.abspath(os.fspath(path))
    old = _sibling(path, "old")
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
    if os.path.lexists(path) or not os.path.isdir(_sibling(path, "old")):
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
            if _depth(self.path) == 1:               # not a claim nested in this process's own
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
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
        return
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
    old = _sibling(path, "old")
    if os.path.lexists(old):
        shutil.rmtree(old)
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
    kbert.outputs.OutputError: --output /: refusing to write over the root directory
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


__all__ = ["KINDS", "MARKER", "Output", "OutputError", "apply_modes", "check", "check_file",
           "claims",
           "die_with_parent", "foreign_entries", "kind_of", "locked", "own_files", "read_marker",
           "recover", "recover_missing", "umask", "write_json", "write_text", "writing"]
