"""The preprocessors' helpers: raw inputs (lists, arrays, tensors) → tensors, their checks, and
padding features to a multiple of a width (`kbert.tasks.preprocessing`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from kbert.hints import Tensor

# Raw inputs: lists or arrays of strings (a tuple of them for pairs), tensors, or features.
Raw = Any


def pad_to_multiple(features: dict[str, Tensor], multiple: int, max_width: int,
                    pad_id: int) -> dict[str, Tensor]:
    """Pads [.., T] features on the right to a multiple of `multiple` (at most `max_width`)."""
    if multiple <= 1:
        return features
    as_numpy = isinstance(features["input_ids"], np.ndarray)
    width = np.shape(features["input_ids"])[-1] if as_numpy else tf.shape(
        features["input_ids"])[-1]
    target = (width + multiple - 1) // multiple * multiple
    target = min(target, max(max_width, width)) if as_numpy else tf.minimum(
        target, tf.maximum(max_width, width))
    out = {}
    for key, value in features.items():
        fill = pad_id if key == "input_ids" else (-100 if key == "label_ids" else 0)
        rank = len(np.shape(value)) if as_numpy else value.shape.rank
        if rank < 2:
            out[key] = value
            continue
        pads = [[0, 0]] * (rank - 1) + [[0, target - width]]
        out[key] = (np.pad(value, pads, constant_values=fill) if as_numpy
                    else tf.pad(value, pads, constant_values=tf.cast(fill, value.dtype)))
    return out


def _ragged(values: Raw, dtype: Any = None) -> Tensor:
    if isinstance(values, tf.RaggedTensor):
        return values
    values = tf.convert_to_tensor(values, dtype)
    return tf.RaggedTensor.from_tensor(values)


def _all_strings(values: Raw) -> bool:
    return all(isinstance(v, (str, bytes)) for v in values)


def _check_lengths(*columns: Raw) -> None:
    sizes = {len(c) for c in columns if c is not None}
    if len(sizes) > 1:
        raise ValueError(f"inputs and labels have different numbers of examples: {sorted(sizes)}")


def _is_features(x: Raw) -> bool:
    if isinstance(x, dict):
        return "input_ids" in x
    return isinstance(x, np.ndarray) and x.dtype.kind in "iu"


def _to_tf(value: Raw) -> Any:
    """Lists (ragged ones included) → tensors; tuples stay structure, as in tf.data."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(_to_tf(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_tf(v) for k, v in value.items()}
    if isinstance(value, (tf.Tensor, tf.RaggedTensor)):
        return value
    if len(value) and isinstance(value[0], (list, tuple, np.ndarray)) and \
            len({len(v) for v in value}) > 1:
        return tf.ragged.constant([list(v) for v in value])
    array = np.asarray(value)
    if array.dtype.kind in "US" or array.dtype == object:
        return tf.constant(array.astype(str) if array.dtype.kind != "S" else array)
    if array.dtype == np.float64:
        array = array.astype("float32")
    elif array.dtype == np.int64:
        array = array.astype("int32")
    return tf.constant(array)
