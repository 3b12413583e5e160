"""Progress of long work on stderr: a count, a rate and the time left, drawn by tqdm.

On a terminal a bar is redrawn in place. Elsewhere (a log file, a CI job, a pipe) each update
is a line of its own, one at least every 30 s while the work goes on and one at the end, so a
log shows that a run is alive and how long it has left. The `kbert` command shows progress
unless `--quiet` is given; in Python it shows on a terminal only, and `show(True)` or
`show(False)` decides for the process.

Example:
>>> from kbert import progress
>>> progress.show(False)
>>> sum(1 for _ in progress.bar(range(3), desc="documents", unit="doc"))
3
>>> progress.show(None)                 # back to the default: on a terminal only
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import IO, Any

# tqdm is a dependency of TensorFlow's side (and of the data tools): light, no import of Keras
from tqdm import tqdm

LOG_INTERVAL = 30.0       # seconds between two lines where the bar cannot be redrawn
_TERMINAL_INTERVAL = 0.2
_LOG_FORMAT = ("{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%), {elapsed} elapsed, "
               "{remaining} left, {rate_fmt}{postfix}")
_LOG_FORMAT_OPEN = "{desc}: {n_fmt} {unit}, {elapsed} elapsed, {rate_fmt}{postfix}"

_shown: bool | None = None
_interrupted = False


def interrupt(on: bool = True) -> None:
    """Marks the command interrupted (the `kbert` command's Ctrl-C / SIGTERM handler does,
    before raising KeyboardInterrupt), or no longer (`interrupt(False)`, when it starts)."""
    global _interrupted
    _interrupted = on


def check_interrupt() -> None:
    """Raises KeyboardInterrupt where the command was interrupted: what a long loop calls
    between two steps. Python swallows a KeyboardInterrupt raised inside a garbage-collector
    callback (jax's, which TensorFlow imports where jax is installed), so a Ctrl-C may not
    stop the work by itself; the mark it leaves does, at the next step."""
    if _interrupted:
        raise KeyboardInterrupt


def show(on: bool | None) -> None:
    """Progress on (True) or off (False) for this process; None: on a terminal only."""
    global _shown
    _shown = on


def shown() -> bool:
    """Whether a bar made now is drawn."""
    return terminal(sys.stderr) if _shown is None else _shown


def terminal(stream: IO[str]) -> bool:
    """Whether `stream` is a terminal (where a bar is redrawn in place)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_MOVES = re.compile(r"\x1b\[\d*[A-Za-z]")


class _Lines:
    """tqdm's file where the bar cannot be redrawn: each refresh becomes a line of its own,
    but for the first (tqdm draws the bar as it is made, at 0): a quick command's log gets
    its last line only, and a bad input's error stays the one line it ends with."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.drawn = 0

    def write(self, text: str) -> None:
        text = _MOVES.sub("", text.replace("\r", "")).strip()   # no cursor moves in a log
        if text:
            self.drawn += 1
            if self.drawn > 1:
                self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


class _Bar(tqdm):
    """tqdm, but a bar that an error ends (an exception through its `with`, or from the
    iterable it wraps) is cleared, not left: the error's line is what the output ends with."""

    def __init__(self, iterable: Iterable[Any] | None = None, **kwargs: Any):
        super().__init__(iterable, **kwargs)
        if iterable is not None:
            self.iterable = self._guarded(iterable)

    def _guarded(self, iterable: Iterable[Any]) -> Iterator[Any]:
        try:
            yield from iterable
        except BaseException:
            self.leave = False      # tqdm closes the bar as the error leaves its loop
            raise

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if exc_type is not None:
            self.leave = False
        super().__exit__(exc_type, exc_value, traceback)


def bar(iterable: Iterable[Any] | None = None, *, total: float | None = None,
        desc: str | None = None, unit: str = "it", initial: float = 0,
        leave: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr: redrawn on a terminal, a line at least every `LOG_INTERVAL` s
    elsewhere, none when progress is not shown. `total` gives the percentage and the time left
    (`len(iterable)` where it has one); the other arguments are tqdm's."""
    stream = sys.stderr
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    if terminal(stream):
        options: dict[str, Any] = dict(file=stream, mininterval=_TERMINAL_INTERVAL,
                                       dynamic_ncols=True)
    else:
        options = dict(file=_Lines(stream), mininterval=LOG_INTERVAL, maxinterval=LOG_INTERVAL,
                       bar_format=_LOG_FORMAT if total else _LOG_FORMAT_OPEN)
    options.update(kwargs)
    return _Bar(iterable, total=total, desc=desc, unit=unit, initial=initial, leave=leave,
                disable=not shown(), **options)


def clear() -> None:
    """Clears every bar still open (one a Keras callback made, which an error in `fit` or
    `predict` does not close), so that an error's line is not preceded by one."""
    for shown in list(getattr(tqdm, "_instances", ())):
        if isinstance(shown, _Bar):
            shown.leave = False
            shown.close()


def echo(text: str, file: IO[str] | None = None) -> None:
    """Prints a line (stdout by default) without breaking a bar that is being redrawn."""
    stream = file or sys.stdout
    tqdm.write(text, file=stream)
    stream.flush()                      # a log shows the line now, not when the buffer fills


def scalars(logs: dict[str, Any] | None) -> dict[str, str]:
    """The logs' numbers as a progress line shows them (4 decimals, or 4 significant digits
    in e-notation at 0.001 and below); values that are not one number are left out."""
    shown_logs = {}
    for key, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        shown_logs[key] = f"{number:.4f}" if abs(number) > 1e-3 else f"{number:.4e}"
    return shown_logs


_FIT_CALLBACK: type | None = None


def fit_callback(desc: str = "train") -> Any:
    """A Keras callback for `fit`: one bar over all of the run's batches (every epoch, so the
    time left is the run's; from `initial_epoch` on), with the logs (loss, metrics) beside it.
    Run `fit` with `verbose=0` beside it."""
    global _FIT_CALLBACK
    if _FIT_CALLBACK is None:
        import keras

        class FitProgress(keras.callbacks.Callback):
            def __init__(self, desc: str):
                super().__init__()
                self.desc = desc
                self.bar: tqdm | None = None
                self.epochs = self.runs = 1
                self._logged = 0.0

            def on_train_begin(self, logs: dict | None = None) -> None:
                self.epochs = int(self.params.get("epochs") or 1)

            def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
                if self.bar is None:        # the first epoch this fit runs (`initial_epoch`)
                    steps = self.params.get("steps")
                    self.runs = self.epochs - epoch
                    self.bar = bar(total=steps * self.runs if steps else None, desc=self.desc,
                                   unit="batch")
                if self.runs > 1:
                    self.bar.set_description_str(
                        f"{self.desc} (epoch {epoch + 1}/{self.epochs})", refresh=False)

            def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
                if self.bar is None:
                    return
                now = time.monotonic()
                # the logs only as often as they are drawn: reading them waits for the step
                if self.bar.disable is False and now - self._logged >= self.bar.mininterval:
                    self.bar.set_postfix(scalars(logs), refresh=False)
                    self._logged = now
                self.bar.update(1)

            def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
                if self.bar is not None:
                    self.bar.set_postfix(scalars(logs), refresh=False)

            def on_train_end(self, logs: dict | None = None) -> None:
                if self.bar is not None:
                    self.bar.close()
                    self.bar = None

        _FIT_CALLBACK = FitProgress
    return _FIT_CALLBACK(desc)


_PREDICT_CALLBACK: type | None = None


def predict_callbacks(desc: str | None, total: int, batch_size: int,
                      unit: str = "example") -> list[Any]:
    """`predict`'s `callbacks`: a bar `desc` over its `total` rows, counted from each batch's
    outputs, where they fill more than one batch; none without `desc`."""
    global _PREDICT_CALLBACK
    if not desc or total <= batch_size:
        return []
    if _PREDICT_CALLBACK is None:
        import keras

        class PredictProgress(keras.callbacks.Callback):
            def __init__(self, desc: str, total: int, unit: str):
                super().__init__()
                self.desc, self.total, self.unit = desc, total, unit
                self.bar: tqdm | None = None

            def on_predict_begin(self, logs: dict | None = None) -> None:
                self.bar = bar(total=self.total, desc=self.desc, unit=self.unit)

            def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
                if self.bar is not None:
                    self.bar.update(int((logs or {})["outputs"].shape[0]))

            def on_predict_end(self, logs: dict | None = None) -> None:
                if self.bar is not None:
                    self.bar.close()
                    self.bar = None

        _PREDICT_CALLBACK = PredictProgress
    return [_PREDICT_CALLBACK(desc, total, unit)]


__all__ = ["LOG_INTERVAL", "bar", "clear", "echo", "fit_callback", "predict_callbacks", "scalars",
           "show", "shown", "terminal"]
