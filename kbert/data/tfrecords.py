"""The shards' records: `tf.train.Example`s encoded in bulk in NumPy (`serialize_examples`, the
bytes TensorFlow writes), the shard names, and the output directory they go to. The reader is
`kbert.data.inputs` (tf.data)."""

from __future__ import annotations

import os

import numpy as np

from kbert import outputs
from kbert.data.instances import FEATURES


def _varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Non-negative ints [N, L] → the protobuf varint bytes of each row, concatenated, and the
    end offset of each row in them."""
    values = np.asarray(values, np.int64)
    width = max(1, (int(values.max(initial=0)).bit_length() + 6) // 7)
    # Byte i of a value is there when the value has more than 7 * i bits (byte 0 always).
    used = [np.ones(values.shape, bool)] + [values >= 1 << 7 * i for i in range(1, width + 1)]
    data = np.stack([(values >> 7 * i) & 0x7F | used[i + 1] * 0x80 for i in range(width)], -1)
    keep = np.stack(used[:width], -1)
    return data[keep].astype(np.uint8).tobytes(), np.cumsum(keep.sum(axis=(1, 2)))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, length: int) -> bytes:
    """The tag and length of a length-delimited protobuf field."""
    return bytes([field << 3 | 2]) + _varint(length)


class _Column:
    """One feature of every row: its packed values and, per payload length, the bytes that come
    before them in the `Features` map entry (key, `Feature`, `Int64List`/`FloatList` headers)."""

    def __init__(self, name: str, values: np.ndarray) -> None:
        if name == "masked_lm_weights":                      # FloatList: little-endian float32
            self.kind, self.data = 2, np.ascontiguousarray(values, "<f4").tobytes()
            self.ends = (np.arange(1, len(values) + 1) * values.shape[1] * 4).tolist()
        else:                                                # Int64List: packed varints
            self.kind, (self.data, ends) = 3, _varints(values)
            self.ends = ends.tolist()
        self.key = _tag(1, len(name)) + name.encode()
        self.headers: dict[int, bytes] = {}

    def entry(self, r: int) -> bytes:
        start, end = (self.ends[r - 1] if r else 0), self.ends[r]
        header = self.headers.get(end - start)
        if header is None:
            values = _tag(1, end - start)                    # the packed list
            feature = _tag(self.kind, len(values) + end - start) + values
            entry = self.key + _tag(2, len(feature) + end - start) + feature
            header = self.headers[end - start] = _tag(1, len(entry) + end - start) + entry
        return header + self.data[start:end]


def serialize_examples(features: dict[str, np.ndarray]) -> list[bytes]:
    """Feature arrays (rows of `FEATURES`) → serialized `tf.train.Example`s, one a row, the
    bytes `SerializeToString(deterministic=True)` gives (map entries in key order).

    >>> f = {k: np.zeros((1, 2), np.int64) for k in FEATURES}
    >>> f["input_ids"][0] = [101, 30000]
    >>> len(serialize_examples(f)[0])
    194
    """
    columns = [_Column(name, features[name]) for name in sorted(FEATURES)]
    records = []
    for r in range(len(features["input_ids"])):
        entries = b"".join([column.entry(r) for column in columns])
        records.append(_tag(1, len(entries)) + entries)
    return records


def remove_file(path: str) -> None:
    """Removes `path` if it exists."""
    if os.path.exists(path):
        os.remove(path)


SHARD_NAME = "shard-{:05d}.tfrecord"


def is_shard(name: str) -> bool:
    """A shard this module writes, or a temporary one an interrupted run left behind."""
    return name.startswith("shard-") and (name.endswith(".tfrecord") or ".tfrecord.tmp" in name)


def check_output(output_dir: str, overwrite: bool = False) -> None:
    """Refuses an `output_dir` whose other TFRecord files the reader would mix with the new
    shards (it reads every `*.tfrecord` of a directory); the rest is `kbert.outputs.check`'s
    (a data set already there needs `overwrite`, anything else is refused)."""
    outputs.check(output_dir, "pretraining_data", overwrite)
    if os.path.isdir(output_dir):
        foreign = [n for n in sorted(os.listdir(output_dir))
                   if n.endswith(".tfrecord") and not is_shard(n)]
        if foreign:
            raise outputs.OutputError(f"{output_dir} holds other TFRecord files ({foreign[0]}) "
                                      f"that the reader would mix with the new shards; remove "
                                      f"them first")
