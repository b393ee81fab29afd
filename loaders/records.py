"""A shard's range of serialized records as a `tf.data.Dataset`, whatever its file format.

TFRecord shards are read by TensorFlow's own reader. Other formats are read through their
owner (`prep.core.formats`): a range is cut into batches of positions, each read in one
call (`RecordSource.read_range`) inside a `tf.numpy_function`, then unbatched, so the rest
of the pipeline sees the same string records in the same order.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from prep.core import formats

_BATCH = 64  # records per call into a random-access reader


@functools.lru_cache(maxsize=64)
def _source(file_format: str, path: str) -> formats.RecordSource:
    """One open reader per shard and process, shared by tf.data's threads (its reads are thread-safe)."""
    return formats.get(file_format).open(path)


def _read(file_format: bytes, path: bytes, start: np.int64, stop: np.int64) -> np.ndarray:
    source = _source(file_format.decode(), path.decode())
    return np.array(source.read_range(int(start), int(stop)), dtype=object)


def range_dataset(file_format: str, file: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
    """Records `skip` .. `skip + take` of shard `file`, in order."""
    if file_format == formats.TFRECORD.name:
        return tf.data.TFRecordDataset(file).skip(skip).take(take)
    starts = tf.data.Dataset.range(skip, skip + take, _BATCH)

    def batch(start):
        stop = tf.minimum(start + _BATCH, skip + take)
        records = tf.numpy_function(_read, [file_format, file, start, stop], tf.string, stateful=False)
        records.set_shape([None])
        return tf.data.Dataset.from_tensor_slices(records)

    return starts.flat_map(batch)
