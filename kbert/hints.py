"""Names for what kbert's type hints speak of that Python has no name for."""

import os
from typing import Any, Union

# A backend tensor (TensorFlow, JAX or PyTorch), a Keras symbolic tensor or a NumPy array: the
# Keras backends share no tensor type, so this is `Any` to the type checker.
Tensor = Any
# A layer's input shape as Keras passes it to `build`.
Shape = tuple[Union[int, None], ...]
# BERT features: a dict of `input_ids`, `segment_ids`, `input_mask` (...), or `input_ids` alone.
Inputs = Union[Tensor, dict[str, Tensor]]
PathLike = Union[str, os.PathLike]
