"""TextRunner: the one way every inference method runs the model. Id lists are packed in
length-sorted batches (`kbert.runtime.batching.plan_batches`), each padded to its bucket shape,
and run through the forward pass that `kbert.runtime` chose (precision and runtime, once)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kbert.runtime.batching import bucket_batch, bucket_length, pad_batch, plan_batches

if TYPE_CHECKING:
    from kbert.tokenizer import Tokenizer

Batch = tuple[np.ndarray, dict, Any]     # (example indices, packed features, pass output)


class TextRunner:
    """A checkpoint's tokenizer and runtime runner: ids in, per-batch pass outputs out."""

    def __init__(self, tokenizer: Tokenizer, runner: Any, max_seq_length: int,
                 hidden_size: int) -> None:
        self.tokenizer, self.runner = tokenizer, runner
        self.max_seq_length, self.hidden_size = max_seq_length, hidden_size
        tok = tokenizer
        self._fill_row = {"input_ids": [tok.cls_id, tok.sep_id], "segment_ids": [0, 0],
                          "input_mask": [1, 1], "masked_lm_positions": [0]}

    def encode_pairs(self, first: Sequence[str],
                     second: Sequence[str]) -> tuple[list[list[int]], list[list[int]]]:
        """Id lists of both sides of each pair, tokenized in one graph call."""
        ids = self.tokenizer.encode_batch(list(first) + list(second))
        return ids[:len(first)], ids[len(first):]

    def run(self, kind: object, features: dict, batch_size: int) -> Any:
        """Runs one batch of packed numpy features padded to its bucket shape; returns the
        output rows of the real examples."""
        n, width = features["input_ids"].shape
        length = max(width, bucket_length(width, self.max_seq_length))
        rows = bucket_batch(n, batch_size)
        out = self.runner(kind, features, pad_batch(features, rows, length, self._fill_row))
        return _first_rows(out, n)

    def plan(self, lengths: Sequence[int] | np.ndarray, batch_size: int) -> list[np.ndarray]:
        """Example indices per batch, sorted by length (split where the runtime does not pad)."""
        return plan_batches(lengths, batch_size, self.hidden_size, split=not self.runner.pads)

    def batched(self, kind: object, firsts: Sequence[list[int]],
                seconds: Sequence[list[int] | None], batch_size: int,
                extra: Callable[[np.ndarray, dict], dict] | None = None,
                max_seq_length: int | None = None) -> list[Batch]:
        """Packs id lists in length-sorted batches and runs `kind` on each: [(indices,
        features, output)] in batch order (truncated at `max_seq_length`, default the
        model's)."""
        cap = (max_seq_length or self.max_seq_length) - 3     # what packing keeps
        lengths = [min(cap, len(a) + (len(b) if b is not None else 0))
                   for a, b in zip(firsts, seconds)]
        out = []
        for idx in self.plan(lengths, batch_size):
            features, _ = self.tokenizer.pack(
                [firsts[i] for i in idx],
                None if seconds[0] is None else [seconds[i] for i in idx],
                max_seq_length=max_seq_length or self.max_seq_length)
            if extra is not None:
                features.update(extra(idx, features))
            out.append((idx, features, self.run(kind, features, batch_size)))
        return out


def _first_rows(out: Any, n: int) -> Any:
    """The first `n` rows of each array in a pass's output (an array or a tuple of them)."""
    if isinstance(out, (tuple, list)):
        return type(out)(_first_rows(x, n) for x in out)
    if isinstance(out, dict):
        return {k: _first_rows(v, n) for k, v in out.items()}
    return out[:n]
