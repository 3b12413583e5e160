"""TensorFlow checkpoints (name-based TF1 or object-based TF2) read as numpy arrays.

Shared by the google-research and Model Garden importers. Reading needs TensorFlow's checkpoint
reader only, whatever the Keras backend.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

import numpy as np

_SUFFIXES = (".index", ".meta")
_OBJECT_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def find_checkpoint(src: str, preferred: Sequence[str] = ()) -> str:
    """The checkpoint prefix for `src`: a prefix, one of its files, or a directory holding one.

    In a directory: the one its `checkpoint` file points at, else a `preferred` prefix name,
    else the only `*.index` there.
    """
    import tensorflow as tf  # on use: the other importers and the core need no TensorFlow

    if os.path.isdir(src):
        if os.path.isfile(os.path.join(src, "checkpoint")):
            latest = tf.train.latest_checkpoint(src)
            if latest and os.path.isfile(latest + ".index"):
                return latest
        for name in preferred:
            if os.path.isfile(os.path.join(src, name + ".index")):
                return os.path.join(src, name)
        found = sorted(glob.glob(os.path.join(src, "*.index")))
        if not found:
            raise FileNotFoundError(f"{src}: no TensorFlow checkpoint (*.index) in the directory")
        if len(found) > 1:
            names = ", ".join(os.path.basename(f)[:-6] for f in found)
            raise ValueError(f"{src}: several checkpoints ({names}); pass the prefix of one")
        return found[0][:-len(".index")]
    prefix = src
    for suffix in _SUFFIXES:
        if prefix.endswith(suffix):
            prefix = prefix[:-len(suffix)]
    if ".data-" in os.path.basename(prefix):
        prefix = prefix[:prefix.rindex(".data-")]
    if not os.path.isfile(prefix + ".index"):
        raise FileNotFoundError(f"{src}: not a TensorFlow checkpoint (no {prefix}.index)")
    return prefix


class CheckpointReader:
    """Variable shapes up front, values on demand (optimizer slots are never read).

    Object-based (TF2) names lose their `/.ATTRIBUTES/VARIABLE_VALUE` suffix.
    """

    def __init__(self, prefix: str) -> None:
        import tensorflow as tf

        self.prefix = prefix
        try:
            self._reader = tf.train.load_checkpoint(prefix)
            raw = self._reader.get_variable_to_shape_map()
        except (tf.errors.OpError, ValueError) as e:
            message = str(getattr(e, "message", e)).strip().splitlines()[0]
            raise ValueError(f"{prefix}: unreadable TensorFlow checkpoint ({message})") from None
        self._raw_names: dict[str, str] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for raw_name, shape in raw.items():
            name = raw_name.removesuffix(_OBJECT_SUFFIX)
            self._raw_names[name] = raw_name
            self.shapes[name] = tuple(shape)

    def __contains__(self, name: str) -> bool:
        return name in self.shapes

    def get(self, name: str) -> np.ndarray:
        """The value of variable `name` as float32; a ValueError naming it when absent."""
        if name not in self.shapes:
            raise ValueError(f"{self.prefix}: missing variable {name}")
        return np.asarray(self._reader.get_tensor(self._raw_names[name]), dtype=np.float32)
