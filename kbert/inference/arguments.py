"""The inference methods' input checks: each bad argument is one `ValueError` line naming the
method and the argument; a missing head is a `MissingHeadError` naming the head."""

from __future__ import annotations

import numpy as np

from kbert.checkpoint.files import Contents, MissingHeadError
from kbert.inference.protocol import Texts  # noqa: F401  (the methods' hint, re-exported)

# one check of the texts for every entry point (`Index` too): the tokenizer's
from kbert.tokenizer import check_texts as texts


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Probabilities along `axis` (numerically stable)."""
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def positive_int(method: str, name: str, value: object, minimum: int = 1) -> int:
    """`value` as an int >= minimum, or a one-line ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{method}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def pairs(method: str, first: object, second: object,
          what: tuple[str, str] = ("sentence_a", "sentence_b"),
          allow_empty: bool = False) -> tuple[list[str], list[str], bool]:
    """Two parallel lists of texts (both single strings or both lists of the same length)."""
    a, single_a = texts(method, first, what[0], allow_empty)
    b, single_b = texts(method, second, what[1], allow_empty)
    if single_a != single_b or len(a) != len(b):
        raise ValueError(f"{method}: {what[0]} and {what[1]} must both be strings or lists of "
                         f"the same length (got {len(a)} and {len(b)})")
    return a, b, single_a


def require_head(ckpt: Contents, head: str, method: str) -> None:
    """A MissingHeadError naming `head` and what there is, where the checkpoint lacks it."""
    if head not in ckpt.heads:
        raise MissingHeadError(
            f"{method} needs a '{head}' head, but checkpoint {ckpt.path} has "
            f"{', '.join(ckpt.heads) or 'no heads'}")
