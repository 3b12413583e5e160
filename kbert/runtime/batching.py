"""How `kbert.load`'s methods cut a list of inputs into batches, and pad them where a runtime
needs static shapes.

`plan_batches` sorts by length and cuts where padding would cost more than another call (every
runtime that runs a batch at its own shape); JAX compiles per shape, so its batches are padded to
bucket shapes (`bucket_length`, `bucket_batch`, `pad_batch`), one compilation each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def bucket_length(n: int, limit: int) -> int:
    """`n` rounded up to a step that grows with it (exact up to 16 tokens, then steps of 2, 4,
    8, 16, 32 per doubling), at most `limit`: under 12.5% padding, 56 lengths up to 512.

    Each length is one JAX compilation (~1 s for MiniLM-L6 on a CPU core, once per process);
    every padded token is paid on every call after it.

    >>> [bucket_length(n, 512) for n in (1, 13, 17, 33, 100, 300, 512)]
    [1, 13, 18, 36, 104, 320, 512]
    """
    step = 1
    while n > 16 * step and step < 32:
        step *= 2
    return max(1, min(limit, -(-n // step) * step))


def bucket_batch(n: int, batch_size: int) -> int:
    """The smallest power of two >= n, at most `batch_size`."""
    size = 1
    while size < n:
        size *= 2
    return min(size, batch_size)


def pad_batch(features: dict[str, np.ndarray], rows: int, length: int,
              fill_row: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Features [b, T] → [rows, length] (mask positions keep their width); extra rows are
    `fill_row` ([CLS] [SEP]), never read."""
    out = {}
    for key, value in features.items():
        width = value.shape[1] if key == "masked_lm_positions" else length   # its own bucket
        padded = np.zeros((rows, width), value.dtype)
        padded[:len(value), :value.shape[1]] = value
        padded[len(value):, :len(fill_row[key])] = fill_row[key]
        out[key] = padded
    return out


CALL_COST_TOKENS = 32   # a pass's fixed cost per call, in tokens' worth of compute


def plan_batches(lengths: Sequence[int] | np.ndarray, batch_size: int, hidden_size: int,
                 split: bool = True) -> list[np.ndarray]:
    """Index arrays of the batches to run: sorted by length, at most `batch_size` each.

    With `split` (runtimes that run each batch at its own shape), the sorted list is cut where
    padding would cost more than another call: the cuts minimise the modelled cost, for each
    batch `CALL_COST_TOKENS + rows * L * (1 + L / (6 * hidden_size))` with L its longest input
    (the L / 6H term is attention's share against the dense layers' 12H² per token). Without
    it (JAX's bucket shapes, one compilation each), plain slices of `batch_size`.

    >>> [b.tolist() for b in plan_batches([5, 300, 7, 290, 6], 32, 384)]
    [[0, 4, 2], [3, 1]]
    >>> [b.tolist() for b in plan_batches([5, 300, 7, 290, 6], 32, 384, split=False)]
    [[0, 4, 2, 3, 1]]
    """
    order = np.argsort(np.asarray(lengths), kind="stable")       # similar lengths together
    if not split or len(order) <= 1:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    sizes = np.maximum(np.asarray(lengths, float)[order], 1.0)
    per_row = sizes * (1.0 + sizes / (6.0 * hidden_size))         # cost of a row at its length
    n = len(order)
    best = np.full(n + 1, np.inf)
    best[0], cut = 0.0, np.zeros(n + 1, int)
    for end in range(1, n + 1):                  # best[end]: the cheapest plan of the first end
        starts = np.arange(max(0, end - batch_size), end)
        costs = best[starts] + CALL_COST_TOKENS + (end - starts) * per_row[end - 1]
        k = int(np.argmin(costs))
        best[end], cut[end] = costs[k], starts[k]
    batches, end = [], n
    while end > 0:
        batches.append(order[cut[end]:end])
        end = cut[end]
    return batches[::-1]


__all__ = ["CALL_COST_TOKENS", "bucket_batch", "bucket_length", "pad_batch", "plan_batches"]
