"""Results as people read them: mean ± std cells, Markdown tables, the curves' plot.

>>> mean_std([80.0, 82.0, 84.0]), mean_std([90.0]), mean_std([])
('82.0 ± 2.0', '90.0', '—')
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def mean_std(values: Iterable[float | None], digits: int = 1) -> str:
    """'mean ± std' (sample standard deviation) of the seeds' scores; one value alone."""
    scores = [v for v in values if v is not None]
    if not scores:
        return "—"
    if len(scores) == 1:
        return f"{scores[0]:.{digits}f}"
    return f"{np.mean(scores):.{digits}f} ± {np.std(scores, ddof=1):.{digits}f}"


def write_atomic(path: str, text: str) -> None:
    """Writes `text` to `path` through a temporary file and a rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: `header` and `rows` are lists of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def plot_curves(path: str, curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                title: str) -> str | None:
    """Training loss against updates, one line per variant; `curves` {label: (steps, loss)}.
    Returns the path, or None without matplotlib (the `app` extra)."""
    try:        # matplotlib is optional (kbert[app]); the table is written without it
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, (steps, loss) in curves.items():
        ax.plot(steps, loss, marker="o", markersize=3, label=label)
    ax.set_xlabel("updates")
    ax.set_ylabel("training loss (mean over the interval)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = f"{path}.tmp{os.getpid()}.png"
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path
