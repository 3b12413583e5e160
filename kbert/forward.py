"""Kept for scripts written against earlier versions: the forward pass now lives in
`kbert.runtime` (precision and runtime are chosen there)."""

from kbert.runtime.keras_runner import ForwardPasses, bucket_batch, bucket_length, pad_batch

__all__ = ["ForwardPasses", "bucket_batch", "bucket_length", "pad_batch"]
