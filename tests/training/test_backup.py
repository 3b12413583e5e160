"""Backups: crash-safe at every step of a write; resumed only by a run with the same settings;
removed when a run finishes, so a finished output is trained again, not silently reused."""

import os
import signal

import keras
import numpy as np
import pytest
from test_training import _setup, _weights

from kbert.models.optimization import batches_seen, create_optimizer
from kbert.outputs import OutputError
from kbert.training.callbacks import Backup


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no `except Exception` catches it."""


def _model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    model.compile(create_optimizer(learning_rate=1e-2, total_steps=100, warmup_steps=0),
                  loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


class Snapshots(keras.callbacks.Callback):
    """The weights and dropout state after every batch, by batches seen."""

    def __init__(self):
        super().__init__()
        self.at = {}

    def on_train_batch_end(self, batch, logs=None):
        self.at[batches_seen(self.model.optimizer)] = [
            np.array(v) for v in self.model.get_weights()]


@pytest.mark.parametrize("stage", Backup.STEPS)
def test_a_kill_at_any_step_of_a_backup_write_resumes_from_a_complete_backup(tmp_path, stage):
    x = np.random.default_rng(0).normal(size=(24, 4)).astype("float32")
    y = x.sum(1, keepdims=True)
    model, snapshots = _model(0), Snapshots()
    backup = Backup(tmp_path / "b", save_every_batches=2, settings={"seed": 0})

    def kill(step):
        if step == stage and batches_seen(model.optimizer) == 4:   # the second backup
            raise Killed
    Backup.after_step = staticmethod(kill)
    try:
        with pytest.raises(Killed):
            model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0,
                      callbacks=[snapshots, backup])
    finally:
        Backup.after_step = None
    # The same command again: a fresh process restores the newest complete backup.
    fresh = _model(1)
    seen = Backup(tmp_path / "b", 2, settings={"seed": 0}).restore(fresh)
    assert seen == (4 if stage in ("switch", "cleanup") else 2)
    for got, want in zip(fresh.get_weights(), snapshots.at[seen]):
        np.testing.assert_array_equal(got, want)
    # ... and clears what the kill left behind.
    assert sorted(os.listdir(tmp_path / "b")) == [f"ckpt-{seen:012d}"]


def test_backup_of_other_settings_is_refused_in_one_line(tmp_path):
    model = _model(0)
    first = Backup(tmp_path / "b", 2, settings={"learning_rate": 0.001, "seed": 1})
    first.set_model(model)
    first.save()
    other = Backup(tmp_path / "b", 2, settings={"learning_rate": 0.005, "seed": 2})
    with pytest.raises(ValueError) as e:
        other.restore(_model(1))
    message = str(e.value)
    assert "\n" not in message and "ckpt-000000000000 is the backup of a run with other " \
        "settings (learning_rate: 0.001 then, 0.005 now; seed: 1 then, 2 now)" in message


def _pretrain(tmp_path, data, vocab, config, **overrides):
    from kbert import training
    args = dict(config=config, vocab=vocab, batch_size=8, steps=4, warmup_steps=1,
                learning_rate=1e-3, checkpoint_every=2, jit_compile=False, verbose=0, seed=1,
                shuffle_buffer=16, overwrite=True)
    args.update(overrides)
    return training.pretrain(data, str(tmp_path / "ck"), **args)


class Interrupt(keras.callbacks.Callback):
    """Ctrl-C after `at` batches (the handled SIGINT path: backup, then stop)."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None):
        if batches_seen(self.model.optimizer) == self.at:
            os.kill(os.getpid(), signal.SIGINT)


def test_finished_output_is_trained_again_and_a_mismatched_resume_is_refused(tmp_path):
    data, vocab, config = _setup(tmp_path)
    first = _pretrain(tmp_path, data, vocab, config)
    assert first.steps == 4 and not os.path.exists(tmp_path / "ck.backup")   # removed when done
    weights = _weights(first.output)
    with pytest.raises(OutputError, match="holds a kbert checkpoint already; pass --overwrite"):
        _pretrain(tmp_path, data, vocab, config, overwrite=False)    # refused before training
    second = _pretrain(tmp_path, data, vocab, config, learning_rate=5e-3, seed=2)
    assert second.steps == 4 and len(second.history["loss"]) == len(first.history["loss"])
    changed = _weights(second.output)
    assert max(float(np.max(np.abs(weights[k] - changed[k]))) for k in weights) > 1e-3

    stopped = _pretrain(tmp_path, data, vocab, config, steps=6, callbacks=[Interrupt(3)])
    assert stopped.interrupted and os.path.isdir(tmp_path / "ck.backup")
    with pytest.raises(ValueError, match=r"ck\.backup/ckpt-0000000000\d\d is the backup of a run "
                                         r"with other settings \(learning_rate: 0\.001 then, "
                                         r"0\.002 now\)"):
        _pretrain(tmp_path, data, vocab, config, steps=6, learning_rate=2e-3)
    resumed = _pretrain(tmp_path, data, vocab, config, steps=6)   # the same settings resume
    assert resumed.steps == 6 and not os.path.exists(tmp_path / "ck.backup")
    assert len(resumed.history["loss"]) < len(first.history["loss"])   # only what was left
