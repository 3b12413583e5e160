"""The training callbacks: of a pretraining run (logged rates, the progress line, a step limit,
resumable backups) and of every run scored on a dev set (`KeepBest`: fine-tuning and the
retrievers' training).

Example:
>>> backup = Backup("out.backup", save_every_batches=1000)                       # doctest: +SKIP
>>> seen = backup.restore(model)          # batches already trained              # doctest: +SKIP
>>> callbacks = [TrainingMetrics(32), StopAfter(5000), backup]                   # doctest: +SKIP
>>> model.fit(ds.skip(seen), callbacks=callbacks)                                # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np

from kbert import progress
from kbert.models.optimization import batches_seen, inner_optimizer


class TrainingMetrics(keras.callbacks.Callback):
    """Adds `learning_rate` and `examples_per_second` to the logs (progress bar, TensorBoard)."""

    def __init__(self, batch_size: int) -> None:
        super().__init__()
        self.batch_size = batch_size
        self._last: float | None = None
        self._rate: float | None = None

    def on_train_batch_end(self, batch: int | None, logs: dict | None = None) -> None:
        now = time.perf_counter()
        if self._last is not None and batch is not None:
            rate = self.batch_size / max(now - self._last, 1e-9)
            self._rate = rate if self._rate is None else 0.9 * self._rate + 0.1 * rate
        self._last = now if batch is not None else self._last
        if logs is not None:
            optimizer = inner_optimizer(self.model.optimizer)
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
            if self._rate is not None:
                logs["examples_per_second"] = self._rate

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.on_train_batch_end(None, logs)


class Progress(keras.callbacks.ProgbarLogger):
    """The progress line of a run: updates done of the run's `total_steps`, the time so far,
    the time per update measured on this process's updates, the time left, and the logs
    (`fit`'s `verbose`: 0 silent, 2 a line at the end of each `fit` epoch, 1 that line too
    and, between them, redrawn after every update on a terminal or written as a line of its
    own at least every `kbert.progress.LOG_INTERVAL` seconds elsewhere: a log file).

    In `fit`'s callbacks it replaces Keras' progress bar, which counts `fit`'s own steps and
    epochs: a run cut into epochs (one per backup interval, or one `fit` per phase) is not
    what the user asked for, and a run stopped early (`StopAfter`) would show the epoch's
    length as done.
    """

    def __init__(self, total_steps: int, accumulate: int = 1) -> None:
        super().__init__()
        self.total_steps = int(total_steps)
        self.accumulate = int(accumulate)
        self._started: float | None = None               # the first `fit`'s start
        self._begin: tuple[float, int] = (0.0, 0)        # (time, batches) at this `fit`'s start
        self._mark: tuple[float, int] | None = None      # (time, batches) measured from
        self._drawn = 0.0
        self._open = False          # a redrawn line not ended yet
        self._width = 0
        self._terminal = progress.terminal(sys.stdout)

    def set_params(self, params: dict) -> None:
        verbose = params.get("verbose", 1)
        self.verbose = 1 if verbose == "auto" else int(verbose)

    def on_train_begin(self, logs: dict | None = None) -> None:
        now = time.perf_counter()
        self._started = now if self._started is None else self._started
        self._begin = (now, batches_seen(self.model.optimizer))
        self._mark = None           # set after the first step (tracing or compiling)
        self._drawn = now if not self._terminal else self._drawn

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        pass

    def on_train_batch_end(self, batch: int | None, logs: dict | None = None) -> None:
        now = time.perf_counter()
        if self._mark is None:
            self._mark = (now, batches_seen(self.model.optimizer))
        if self.verbose != 1:
            return
        if self._terminal and now - self._drawn >= 0.1:
            self._write(self.line(logs), end="\r")
            self._drawn, self._open = now, True
        elif not self._terminal and now - self._drawn >= progress.LOG_INTERVAL:
            self._write(self.line(logs), end="\n")
            self._drawn = now

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.verbose:
            self._write(self.line(logs), end="\n")
            self._open = False
            self._drawn = time.perf_counter() if not self._terminal else self._drawn
        self._mark = (time.perf_counter(), batches_seen(self.model.optimizer))

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._open:
            self._write("", end="\n")
            self._open = False

    def line(self, logs: dict | None = None) -> str:
        """`step/total - elapsed - time per update - time left - logs`, as of now."""
        now, seen = time.perf_counter(), batches_seen(self.model.optimizer)
        since, first = self._mark or self._begin, self._begin
        if seen <= since[1]:        # no update since the mark: count the first one in
            since = first
        per_step = (now - since[0]) * self.accumulate / max(1, seen - since[1])
        width = len(str(self.total_steps))
        started = self._started if self._started is not None else first[0]
        left = max(0, self.total_steps - seen // self.accumulate) * per_step
        text = (f"{seen // self.accumulate:>{width}}/{self.total_steps} - "
                f"{_clock(now - started)} - {_duration(per_step)}/step - {_clock(left)} left")
        return text + "".join(f" - {key}: {value}"
                              for key, value in progress.scalars(logs).items())

    def _write(self, text: str, end: str) -> None:
        sys.stdout.write(text.ljust(self._width if self._open else 0) + end)
        sys.stdout.flush()
        self._width = len(text)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds * 1e3:.0f}ms"


def _clock(seconds: float) -> str:
    """0.4s, 12s, 4:05, 1:02:03."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs}s"


class StopAfter(keras.callbacks.Callback):
    """Stops `fit` once the optimizer has consumed `total_batches` batches."""

    def __init__(self, total_batches: int) -> None:
        super().__init__()
        self.total_batches = total_batches

    def on_train_batch_end(self, batch: int | None, logs: dict | None = None) -> None:
        if batches_seen(self.model.optimizer) >= self.total_batches:
            self.model.stop_training = True


class Backup(keras.callbacks.Callback):
    """Crash-safe backups every `save_every_batches` batches, and on SIGTERM/SIGINT.

    A backup is a directory `ckpt-<batches seen>/` in `backup_dir` holding the weights (the
    model and the optimizer, its step counter included), dropout's random state and
    `state.json` (the run's `settings` and the batches seen). Each is written complete under a
    temporary name, then renamed into place (atomic), and only then are older ones removed:
    at every instant the directory holds a complete backup, the new one or the last good one.

    `restore` (before `fit`, so the data stream can skip to the restored position) loads the
    newest backup, and refuses one whose stored settings differ from this run's. `delete`
    removes the backups once a run has finished, so a finished run is never resumed.

    Example:
    >>> backup = Backup("out.backup", 1000, settings={"seed": 0})   # doctest: +SKIP
    >>> seen = backup.restore(model)          # batches already trained   # doctest: +SKIP
    """

    WEIGHTS, RNG, STATE = "model.weights.h5", "rng.npz", "state.json"
    STEPS = ("weights", "rng", "state", "switch", "cleanup")
    # a test hook: called with each name in STEPS as a write passes it
    after_step: Callable[[str], None] | None = None

    def __init__(self, backup_dir: str | os.PathLike, save_every_batches: int,
                 settings: dict[str, Any] | None = None) -> None:
        super().__init__()
        if int(save_every_batches) < 1:
            raise ValueError(f"backups every {save_every_batches} batches: must be at least 1")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = int(save_every_batches)
        self.settings = _as_json(settings) if settings is not None else None
        self.interrupted = False

    # --- reading -----------------------------------------------------------------------------
    def backups(self) -> list[str]:
        """The complete backups, oldest first."""
        if not os.path.isdir(self.backup_dir):
            return []
        names = [n for n in os.listdir(self.backup_dir) if n.startswith("ckpt-")
                 and os.path.isfile(os.path.join(self.backup_dir, n, self.STATE))]
        return [os.path.join(self.backup_dir, n) for n in sorted(names)]

    def restore(self, model: keras.Model) -> int:
        """Loads the newest backup into `model` (compiled, built); returns the batches seen."""
        self.set_model(model)
        self._remove_temporaries()              # what a kill in the middle of a write left
        found = self.backups()
        if not found:
            return batches_seen(model.optimizer)
        with open(os.path.join(found[-1], self.STATE), encoding="utf-8") as f:
            state = json.load(f)
        self._check_settings(state.get("settings"), found[-1])
        model.load_weights(os.path.join(found[-1], self.WEIGHTS))
        states = np.load(os.path.join(found[-1], self.RNG))
        for i, variable in enumerate(seed_states(model)):
            variable.assign(states[f"s{i}"])
        for path in found[:-1]:                 # a kill after the switch left the older one
            shutil.rmtree(path, ignore_errors=True)
        return batches_seen(model.optimizer)

    def _check_settings(self, stored: dict[str, Any] | None, where: str) -> None:
        if self.settings is None or stored == self.settings:
            return
        stored = stored or {}
        changed = [k for k in sorted(set(stored) | set(self.settings))
                   if stored.get(k) != self.settings.get(k)]
        shown = "; ".join(f"{k}: {stored.get(k)!r} then, {self.settings.get(k)!r} now"
                          for k in changed[:3])
        raise ValueError(f"{where} is the backup of a run with other settings ({shown}); "
                         "run again with those settings to resume it, or delete it (or choose "
                         "another output) to start afresh")

    # --- writing -----------------------------------------------------------------------------
    def on_train_batch_end(self, batch: int | None, logs: dict | None = None) -> None:
        if self.interrupted or batches_seen(self.model.optimizer) % self.save_freq == 0:
            self.save()
        if self.interrupted:
            self.model.stop_training = True

    def save(self) -> str:
        """Writes a backup of the current state (see the class docstring for the order)."""
        seen = batches_seen(self.model.optimizer)
        target = os.path.join(self.backup_dir, f"ckpt-{seen:012d}")
        if os.path.isdir(target):
            return target                       # this very state is saved already
        os.makedirs(self.backup_dir, exist_ok=True)
        older = self.backups()
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=self.backup_dir)
        self.model.save_weights(os.path.join(tmp, self.WEIGHTS))
        self._passed("weights")
        np.savez(os.path.join(tmp, self.RNG),  # dropout's random state, for exact resumes
                 **{f"s{i}": keras.ops.convert_to_numpy(v.value)
                    for i, v in enumerate(seed_states(self.model))})
        self._passed("rng")
        with open(os.path.join(tmp, self.STATE), "w", encoding="utf-8") as f:
            json.dump({"batches_seen": seen, "settings": self.settings}, f, indent=1)
        self._passed("state")
        os.replace(tmp, target)
        self._passed("switch")
        for path in older:
            shutil.rmtree(path, ignore_errors=True)
        self._remove_temporaries()
        self._passed("cleanup")
        return target

    def delete(self) -> None:
        """Removes this run's backups (and the directory, when nothing else is in it)."""
        for path in self.backups():
            shutil.rmtree(path, ignore_errors=True)
        self._remove_temporaries()
        with contextlib.suppress(OSError):
            os.rmdir(self.backup_dir)

    def _remove_temporaries(self) -> None:
        """Half-written backups of this or an earlier, killed, run."""
        if os.path.isdir(self.backup_dir):
            for name in os.listdir(self.backup_dir):
                if name.startswith(".tmp-"):
                    shutil.rmtree(os.path.join(self.backup_dir, name), ignore_errors=True)

    def _passed(self, step: str) -> None:
        if Backup.after_step is not None:
            Backup.after_step(step)


def _as_json(settings: Any) -> Any:
    """Settings as they read back from state.json (tuples become lists, keys strings)."""
    return json.loads(json.dumps(settings, default=str))


def seed_states(model: keras.Model) -> list[keras.Variable]:
    """The state variables of the model's `keras.random.SeedGenerator`s (dropout), in a fixed
    order, found through the public `model.variables`."""
    found, seen = [], set()
    for variable in model.variables:
        if variable.name == "seed_generator_state" and id(variable) not in seen:
            seen.add(id(variable))
            found.append(variable)
    return found


@contextlib.contextmanager
def save_on_signal(backup: Backup) -> Iterator[None]:
    """SIGTERM/SIGINT → save at the end of the current step and stop (main thread only)."""
    def handler(signum: int, frame: Any) -> None:
        backup.interrupted = True
    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:                          # not the main thread
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class KeepBest(keras.callbacks.Callback):
    """Scores the dev set after each epoch (`score(model)` -> {metric: value}) and saves the
    model (`save(history)`) when `metric` improves — every epoch where there is no dev set
    (`score` None). Adds the scores to the logs as `dev_*` (the curves, TensorBoard), so put it
    before the callbacks that read them.

    `history` holds one entry per epoch: {"epoch", "loss", "seconds" (training, the scoring
    left out), **scores}; `best_epoch` and `best_scores` the best one, `train_seconds` the
    epochs' training time in all.
    """

    def __init__(self, score: Callable[[Any], dict[str, float]] | None,
                 save: Callable[[list[dict[str, Any]]], None], metric: str,
                 verbose: bool = True, epochs: int | None = None) -> None:
        super().__init__()
        self.score, self.save, self.metric, self.verbose = score, save, metric, verbose
        self.epochs = epochs        # said in each epoch's line ("epoch 2/3") where given
        self.best: float | None = None
        self.best_epoch = 0
        self.best_scores: dict[str, float] = {}
        self.history: list[dict[str, Any]] = []
        self.train_seconds = 0.0
        self._start: float | None = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        assert self._start is not None             # set by on_epoch_begin
        spent = time.perf_counter() - self._start
        self.train_seconds += spent
        scores = self.score(self.model) if self.score is not None else {}
        entry = {"epoch": epoch + 1, "loss": float((logs or {}).get("loss", float("nan"))),
                 "seconds": round(spent, 1), **scores}
        self.history.append(entry)
        improved = not scores or self.best is None or scores[self.metric] > self.best
        if improved:
            self.best = scores.get(self.metric)
            self.best_epoch, self.best_scores = epoch + 1, scores
            self.save(self.history)
        if logs is not None:
            logs.update({f"dev_{k}": v for k, v in scores.items()})
        if self.verbose:
            shown = ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
            of = f"/{self.epochs}" if self.epochs else ""
            progress.echo(f"epoch {epoch + 1}{of}: loss {entry['loss']:.4f}, {spent:.0f}s"
                          f"{', dev ' + shown if shown else ''}"
                          f"{' (best, saved)' if improved else ''}")
