"""The inference methods' input checks: each bad argument is one `ValueError` line naming the
method and the argument; a missing head is a `MissingHeadError` naming the head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np

from kbert.checkpoint_format import Contents, MissingHeadError
from kbert.tokenizer import unicode_problem

Texts = Union[str, Sequence[str]]


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


def texts(method: str, value: object, what: str = "text",
          allow_empty: bool = False) -> tuple[list[str], bool]:
    """(list of strings, whether one string was given); refuses non-string input, and empty
    text unless `allow_empty` (an empty text still has a [CLS] vector, a class and no entities;
    it has no next sentence and no answer)."""
    single = isinstance(value, str)
    items = [value] if single else value
    if not isinstance(items, Sequence) or isinstance(items, (bytes, dict)):
        raise ValueError(f"{method}: {what} must be a string or a list of strings, "
                         f"got {type(value).__name__}")
    items = list(items)
    if not items:
        raise ValueError(f"{method}: the list of {what}s is empty")
    for i, item in enumerate(items):
        where = f"the {what}" if single else f"{what} {i}"
        if not isinstance(item, str):
            raise ValueError(f"{method}: {where} is a {type(item).__name__}, not a string")
        if not allow_empty and not item.strip():
            raise ValueError(f"{method}: {where} is empty")
        problem = unicode_problem(item)
        if problem:
            raise ValueError(f"{method}: {where} has {problem}")
    return items, single


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
