"""Kept for scripts written against earlier versions: the forward pass now lives in
`kbert.runtime` (precision and runtime are chosen there)."""

from kbert.runtime.batching import bucket_batch, bucket_length, pad_batch
from kbert.runtime.keras_runner import ForwardPasses

__all__ = ["ForwardPasses", "bucket_batch", "bucket_length", "pad_batch"]
