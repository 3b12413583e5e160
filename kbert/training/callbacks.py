"""The callbacks of a pretraining run: logged rates, a step limit, resumable backups.

Example:
>>> backup = Backup("out.backup", save_every_batches=1000)               # doctest: +SKIP
>>> seen = backup.restore(model)          # batches already trained      # doctest: +SKIP
>>> model.fit(ds.skip(seen), callbacks=[TrainingMetrics(32), backup])    # doctest: +SKIP
"""

import contextlib
import os
import signal
import time

import keras
import numpy as np

from kbert.training.optimization import batches_seen, inner_optimizer


class TrainingMetrics(keras.callbacks.Callback):
    """Adds `learning_rate` and `examples_per_second` to the logs (progress bar, TensorBoard)."""

    def __init__(self, batch_size):
        super().__init__()
        self.batch_size = batch_size
        self._last = None
        self._rate = None

    def on_train_batch_end(self, batch, logs=None):
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

    def on_epoch_end(self, epoch, logs=None):
        self.on_train_batch_end(None, logs)


class StopAfter(keras.callbacks.Callback):
    """Stops `fit` once the optimizer has consumed `total_batches` batches."""

    def __init__(self, total_batches):
        super().__init__()
        self.total_batches = total_batches

    def on_train_batch_end(self, batch, logs=None):
        if batches_seen(self.model.optimizer) >= self.total_batches:
            self.model.stop_training = True


class Backup(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` counted in optimizer steps, also saving on SIGTERM/SIGINT.

    The weights file holds the model and the optimizer (its iteration counter included), so the
    step and the data position come back with it; the run is restored before `fit` by `restore`
    so the data stream can skip to that position.
    """

    def __init__(self, backup_dir, save_every_batches):
        super().__init__(backup_dir, save_freq=int(save_every_batches), double_checkpoint=True,
                         delete_checkpoint=False)
        self.interrupted = False

    def restore(self, model):
        """Loads the last backup into `model` (compiled); returns the batches already seen."""
        self.set_model(model)
        super().on_train_begin()
        rng_path = self._weights_path + ".rng.npz"
        if os.path.exists(self._weights_path) and os.path.exists(rng_path):
            states = np.load(rng_path)
            for i, generator in enumerate(_seed_generators(model)):
                generator.state.assign(states[f"s{i}"])
        return batches_seen(model.optimizer)

    def on_train_begin(self, logs=None):
        pass                                    # restored before `fit`, see `restore`

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        seen = batches_seen(self.model.optimizer)
        if self.interrupted or seen % self.save_freq == 0:
            self._save_model()
        if self.interrupted:
            self.model.stop_training = True

    def _save_model(self):
        os.makedirs(self.backup_dir, exist_ok=True)
        if os.path.exists(self._weights_path):
            os.replace(self._weights_path, self._prev_weights_path)
        tmp = self._weights_path[:-len(".weights.h5")] + ".tmp.weights.h5"
        self.model.save_weights(tmp, overwrite=True)
        states = {f"s{i}": keras.ops.convert_to_numpy(g.state.value)
                  for i, g in enumerate(_seed_generators(self.model))}
        np.savez(tmp + ".rng.npz", **states)        # dropout's random state, for exact resumes
        os.replace(tmp + ".rng.npz", self._weights_path + ".rng.npz")
        os.replace(tmp, self._weights_path)


def _seed_generators(model):
    """The model's `keras.random.SeedGenerator`s (dropout), in a fixed order."""
    found, seen = [], set()
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", []):
            if id(generator) not in seen:
                seen.add(id(generator))
                found.append(generator)
    return found


@contextlib.contextmanager
def save_on_signal(backup):
    """SIGTERM/SIGINT → save at the end of the current step and stop (main thread only)."""
    def handler(signum, frame):
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
