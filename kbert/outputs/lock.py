"""The writers' lock of an output: an exclusive `flock` on a hidden sibling file that exists
only while held (the kernel releases it if the holder dies), reentrant within a process."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from typing import IO

from kbert.outputs.kinds import OutputError


# --- the lock ----------------------------------------------------------------------------------
def sibling(path: str, what: str) -> str:
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
    lock = sibling(path, "lock")
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


def depth(path: str) -> int:
    """How many claims this process holds on the output `path`."""
    with _held_guard:
        held = _held.get(sibling(path, "lock"))
        return held[1] if held else 0
