"""Training curves: the `history.json` and `curves.png` every training command writes beside
its checkpoint (`kbert pretrain`, `kbert finetune` with every task, `pretrain_arrays`).

    Recorder  a Keras callback: one point per `fit` epoch (the epoch, or the updates done),
              every number Keras logged and the optimizer's learning rate
    document  history.json's document: a header (the command, what a point's unit is, the
              command's settings) and the points
    plot      curves.png: the losses, the dev scores and the learning rate against the unit
    record    both files added to a finished checkpoint (`kbert.outputs.amend`: recorded in the
              checkpoint's record and swapped in whole)

history.json is plain JSON (`json.load`; a loss that was not finite is `null`):

    {"command": "kbert finetune sst2", "unit": "epoch", "settings": {"epochs": 3, ...},
     "dev_metric": "dev_accuracy",
     "points": [{"epoch": 1, "loss": 0.41, "accuracy": 0.81, "learning_rate": 2e-05,
                 "dev_accuracy": 88.1}, ...]}

A point's keys are the names Keras logged (those the progress line and TensorBoard show):
the training loss and metrics as the model names them, `learning_rate`, and the dev scores
with `dev_` (percentages). `unit` is "epoch" (fine-tuning: a point per epoch) or "step"
(pretraining: a point per logging interval, at the optimizer updates done).

Example:
>>> import os, tempfile
>>> doc = document("kbert finetune sst2", "epoch", {"epochs": 2}, [
...     {"epoch": 1, "loss": 0.6, "learning_rate": 2e-5, "dev_accuracy": 71.0},
...     {"epoch": 2, "loss": 0.4, "learning_rate": 0.0, "dev_accuracy": 80.5}],
...     dev_metric="dev_accuracy")
>>> folder = tempfile.mkdtemp()
>>> write(folder, doc)
>>> sorted(os.listdir(folder))
['curves.png', 'history.json']
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

from kbert import outputs
from kbert.models.optimization import batches_seen, inner_optimizer

HISTORY_FILE, CURVES_FILE = "history.json", "curves.png"
UNITS = {"epoch": "epoch", "step": "optimizer updates"}      # unit -> the x axis' label


class Recorder(keras.callbacks.Callback):
    """The points of a run's curve, one at the end of each `fit` epoch: the epoch (unit
    "epoch") or the optimizer updates done (unit "step", `accumulate` batches an update),
    with every number in the logs and the learning rate, which it also adds to the logs (the
    History, the progress line and TensorBoard show it). Put it after the callbacks that add
    to the logs (dev scores) and before TensorBoard.

    >>> recorder = Recorder("step")
    >>> model.fit(data, callbacks=[recorder])                              # doctest: +SKIP
    >>> recorder.points[-1]                                                # doctest: +SKIP
    {'step': 1000, 'loss': 2.31, 'learning_rate': 9.9e-05}
    """

    def __init__(self, unit: str = "epoch", accumulate: int = 1) -> None:
        super().__init__()
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
        self.unit, self.accumulate = unit, int(accumulate)
        self.points: list[dict[str, Any]] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        if "learning_rate" not in logs:
            rate = inner_optimizer(self.model.optimizer).learning_rate
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(rate))
        at = (epoch + 1 if self.unit == "epoch" else
              batches_seen(self.model.optimizer) // self.accumulate)
        self.points.append({self.unit: at, **{k: float(v) for k, v in logs.items()
                                              if np.ndim(v) == 0}})


def document(command: str, unit: str, settings: Mapping[str, Any],
             points: Sequence[Mapping[str, Any]], dev_metric: str | None = None,
             **header: Any) -> dict[str, Any]:
    """history.json's document: `command` (as the user would type it), `unit` ("epoch" or
    "step"), the command's `settings`, the key of the main dev score (`dev_metric`, None
    without a dev set), anything else in `header` (e.g. the epoch kept), then the points.
    Numbers that are not finite become None (JSON has no NaN)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    return {"command": command, "unit": unit, "settings": _plain(dict(settings)),
            "dev_metric": dev_metric, **_plain(header),
            "points": [_plain(dict(p)) for p in points]}


def _plain(value: Any) -> Any:
    """`value` as plain JSON: dicts, lists, str, int, float (finite), bool, None."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return str(value)


def plot(doc: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Draws `doc`'s curves as a PNG at `path`: the losses, the dev scores (where the command
    scored a dev set) and the learning rate, one panel each, against the unit. matplotlib's
    Agg canvas, without pyplot: the process's plotting backend is left alone."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    unit, points = doc["unit"], doc["points"]
    x = [p[unit] for p in points]
    keys = list(dict.fromkeys(k for p in points for k in p))
    panels = [("training loss", "loss", [k for k in keys if k.endswith("loss")]),
              ("dev scores", "score (%)", [k for k in keys if k.startswith("dev_")]),
              ("learning rate", "learning rate", ["learning_rate"] * ("learning_rate" in keys))]
    panels = [panel for panel in panels if panel[2]]
    figure = Figure(figsize=(7, 1 + 2.4 * max(1, len(panels))), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(max(1, len(panels)), 1, sharex=True, squeeze=False)[:, 0]
    main = {"loss", doc.get("dev_metric"), "learning_rate"}
    marker = "o" if len(x) <= 30 else None
    for ax, (title, label, names) in zip(axes, panels):
        for name in names:
            y = [_number(p.get(name)) for p in points]
            ax.plot(x, y, marker=marker, markersize=3, label=name,
                    linewidth=2 if name in main else 1)
        ax.set_title(title)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize="small")
    if "learning_rate" in keys:
        axes[-1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    axes[-1].set_xlabel(UNITS[unit])
    if unit == "epoch":
        axes[-1].xaxis.get_major_locator().set_params(integer=True)
    figure.suptitle(f"{doc['command']}: training curves ({len(points)} "
                    f"point{'s' * (len(points) != 1)})")
    figure.savefig(os.fspath(path), dpi=100)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def write(directory: str | os.PathLike, doc: Mapping[str, Any]) -> None:
    """history.json and curves.png into `directory` (a staging directory: `record` puts them
    in a checkpoint). Without matplotlib, history.json only, and a line on stderr."""
    directory = os.fspath(directory)
    outputs.write_json(os.path.join(directory, HISTORY_FILE), doc)
    try:
        plot(doc, os.path.join(directory, CURVES_FILE))
    except ImportError:
        print(f"kbert: {CURVES_FILE} not drawn: matplotlib is not installed (pip install "
              f"matplotlib); {HISTORY_FILE} has the numbers", file=sys.stderr, flush=True)


def record(checkpoint: str | os.PathLike, doc: Mapping[str, Any]) -> str:
    """Adds history.json and curves.png to the checkpoint directory `checkpoint` (written
    already): staged with its files, recorded and swapped in whole (`kbert.outputs.amend`)."""
    return outputs.amend(checkpoint, "checkpoint", lambda tmp: write(tmp, doc))


__all__ = ["CURVES_FILE", "HISTORY_FILE", "Recorder", "document", "plot", "record", "write"]
