"""Compiled steps on JAX: a persistent compilation cache, and the compiles counted and timed.

JAX compiles a program per input shape (XLA). A fine-tuning run sees one shape per batch width
(`kbert.tasks.batching.width_ladder` keeps them to a few) and every run of the same command
compiled them all again. With the persistent cache on, the second run reads them from disk:
`enable_persistent_cache` turns it on for `fit` on kbert's models and for every `kbert`
command, in `~/.cache/kbert/jax` (`$XDG_CACHE_HOME/kbert/jax`), unless JAX already has a cache
directory set by the user; `KBERT_COMPILATION_CACHE` names another directory, or `off`.
PyTorch's Inductor keeps its own on-disk cache (`/tmp/torchinductor_$USER`), on by default.

`Compiles` counts XLA's backend compiles and their seconds while it is open, so a run can
report its compile time apart from its step time.

>>> with Compiles() as compiles:
...     pass
>>> compiles.count, compiles.cached, compiles.seconds
(0, 0, 0.0)
"""

from __future__ import annotations

import os
from types import TracebackType

import keras

CACHE_ENV = "KBERT_COMPILATION_CACHE"
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"   # a compile or a cache read
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def cache_dir() -> str | None:
    """The persistent cache's directory: `$KBERT_COMPILATION_CACHE` (None for "off"), else
    `kbert/jax` in the user's cache directory."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "false") else chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kbert", "jax")


def enable_persistent_cache() -> str | None:
    """Turns on JAX's persistent compilation cache (on the JAX backend; a no-op elsewhere) and
    returns its directory, or None where it stays off. A directory the user gave JAX is kept.
    Every compiled program is cached, however quick its compile (JAX's default skips those
    under a second), so a second run compiles nothing."""
    if keras.backend.backend() != "jax":
        return None
    import jax
    current = jax.config.jax_compilation_cache_dir
    if current:
        return str(current)
    path = cache_dir()
    if path is None:
        return None
    from jax.experimental.compilation_cache import compilation_cache
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # JAX decides at its first compile whether a cache is used: one already made (building
    # the model compiles its initializers) would leave it off for the process
    compilation_cache.reset_cache()
    return path


class Compiles:
    """Counts XLA's backend compiles (JAX) and their seconds while open; a cached program read
    from disk is no compile. On other backends it counts nothing."""

    def __init__(self) -> None:
        self.count = 0                  # programs compiled (not read from the cache)
        self.seconds = 0.0              # compiling them and reading the cached ones
        self.cached = 0                 # programs read from the persistent cache
        self._open = False

    def _record(self, event: str, seconds: float, **_: object) -> None:
        if self._open and event == _COMPILE_EVENT:
            self.count += 1
            self.seconds += seconds

    def _hit(self, event: str, **_: object) -> None:
        if self._open and event == _CACHE_HIT_EVENT:
            self.cached += 1
            self.count -= 1             # its `_COMPILE_EVENT` follows (a read, timed)

    def __enter__(self) -> Compiles:
        if keras.backend.backend() == "jax":
            from jax import monitoring
            if not getattr(self, "_registered", False):
                monitoring.register_event_duration_secs_listener(self._record)
                monitoring.register_event_listener(self._hit)
                self._registered = True
        self._open = True
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._open = False
        if getattr(self, "_registered", False):
            from jax._src import monitoring
            for name, callback in (("_unregister_event_duration_listener_by_callback",
                                    self._record),
                                   ("_unregister_event_listener_by_callback", self._hit)):
                unregister = getattr(monitoring, name, None)
                if unregister is not None:
                    unregister(callback)
            self._registered = False
