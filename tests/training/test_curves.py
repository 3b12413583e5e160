"""`kbert.training.curves`: the points a `fit` records, history.json as plain JSON, curves.png,
and both added to a finished checkpoint as its own files."""

import json
import os
import sys

import keras
import numpy as np
import pytest

from kbert import outputs
from kbert.training import curves

PNG = b"\x89PNG\r\n\x1a\n"


def _doc(points=None, unit="epoch"):
    points = points or [{"epoch": 1, "loss": 0.7, "accuracy": 0.5, "learning_rate": 2e-5,
                         "dev_accuracy": 60.0},
                        {"epoch": 2, "loss": 0.4, "accuracy": 0.8, "learning_rate": 0.0,
                         "dev_accuracy": 75.5}]
    return curves.document("kbert finetune sst2", unit, {"epochs": 2, "train": "t.tsv"},
                           points, dev_metric="dev_accuracy", best_epoch=2)


@pytest.mark.multibackend
def test_the_recorder_takes_every_logged_number_the_learning_rate_and_the_updates():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    schedule = keras.optimizers.schedules.PolynomialDecay(0.1, 6, 0.0)
    model.compile(keras.optimizers.SGD(schedule), "mse", metrics=["mae"])
    x, y = np.ones((12, 3), "float32"), np.zeros((12, 1), "float32")
    epochs, steps = curves.Recorder("epoch"), curves.Recorder("step")
    history = model.fit(x, y, batch_size=4, epochs=2, callbacks=[epochs, steps], verbose=0)
    assert [p["epoch"] for p in epochs.points] == [1, 2]
    assert [p["step"] for p in steps.points] == [3, 6]               # optimizer updates
    assert [p["learning_rate"] for p in steps.points] == pytest.approx([0.05, 0.0])
    for key, values in history.history.items():                      # the History saw it too
        assert [p[key] for p in epochs.points] == pytest.approx(values), key
    assert {"loss", "mae", "learning_rate"} <= set(epochs.points[0])
    with pytest.raises(ValueError, match="unit must be one of epoch, step"):
        curves.Recorder("batch")


def test_history_json_is_plain_json_and_curves_png_a_png(tmp_path):
    doc = _doc([{"epoch": 1, "loss": float("nan"), "learning_rate": np.float32(1e-5),
                 "dev_accuracy": np.float64(50.0)},
                {"epoch": np.int64(2), "loss": 0.5, "learning_rate": 0.0, "dev_accuracy": 60.0}])
    curves.write(tmp_path, doc)
    text = (tmp_path / "history.json").read_text()
    loaded = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in history.json"))
    assert loaded == doc and loaded["points"][0]["loss"] is None       # not finite: null
    assert loaded["best_epoch"] == 2 and loaded["settings"]["train"] == "t.tsv"
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG
    many = [{"step": 100 * i, "loss": 5.0 / i, "mlm_loss": 4.0 / i, "learning_rate": 1e-4}
            for i in range(1, 60)]                          # no dev scores: two panels
    curves.plot(curves.document("kbert pretrain", "step", {}, many), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG


def test_without_matplotlib_history_json_alone_and_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)             # import fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    curves.write(tmp_path, _doc())
    assert sorted(os.listdir(tmp_path)) == ["history.json"]
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "matplotlib is not installed" in err


def test_record_adds_both_files_to_a_checkpoint_swapped_in_whole(tmp_path):
    out = tmp_path / "ck"
    with outputs.writing(out, "checkpoint") as tmp:
        for name in ("config.json", "model.safetensors"):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(name)
    weights = os.stat(out / "model.safetensors").st_ino
    (out / "notes.txt").write_text("mine")                            # the user's file
    curves.record(out, _doc())
    assert sorted(os.listdir(out)) == [outputs.MARKER, "config.json", "curves.png",
                                       "history.json", "model.safetensors", "notes.txt"]
    assert outputs.read_marker(str(out))["files"] == ["config.json", "curves.png",
                                                      "history.json", "model.safetensors"]
    assert os.stat(out / "model.safetensors").st_ino == weights      # linked, not copied
    assert (out / "notes.txt").read_text() == "mine"
    curves.record(out, _doc([{"epoch": 1, "loss": 0.1}]))             # replaced, not appended
    assert json.loads((out / "history.json").read_text())["points"] == [{"epoch": 1, "loss": 0.1}]
    assert [n for n in os.listdir(tmp_path) if n != "ck"] == []        # nothing left beside it
    with pytest.raises(outputs.OutputError, match="does not hold a kbert checkpoint"):
        curves.record(tmp_path / "missing", _doc())
