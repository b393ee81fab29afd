"""`on_corrupt="skip"`: find the readable records of a split's shards, and read repaired copies.

TFRecord framing lets a reader step over a record whose data CRC fails (its
length is still trusted), but not past a record whose length CRC fails or that
is cut short: everything from there to the end of the shard is lost. TensorFlow's
own reader stops at the first bad record either way, so shards with bad records
are copied, good records only, to a cache folder and read from there, with their
real record counts, so that every input pipeline still gets an equal share.

Pure Python: the framing is `prep.core.tfrecord.frames`, files go through `prep.core.storage`.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import shutil
import tempfile

from loaders.source import SplitSource
from prep.core import formats, storage
from prep.core.errors import LoaderError, RecordError
from prep.core.naming import ShardName
from prep.core.tfrecord import frames

log = logging.getLogger("loaders")


@dataclasses.dataclass(frozen=True)
class ShardDamage:
    """What `scan` found in one shard."""

    file: str
    expected: int  # records the manifest promises
    readable: tuple[tuple[int, int], ...]  # (offset, framed length) of each good record
    first_bad: int | None  # index of the first record that could not be read, if any

    @property
    def skipped(self) -> int:
        return self.expected - len(self.readable)


def scan(path: str, expected: int) -> ShardDamage:
    """The readable records of one shard file (local or remote, through `storage`)."""
    readable, first_bad, index = [], None, 0
    with storage.open_read(path) as f:
        try:
            for frame in frames(f, path):
                index = frame.index + 1
                if frame.intact:
                    readable.append((frame.offset, frame.size))
                elif first_bad is None:
                    first_bad = frame.index
        except RecordError:  # the length cannot be trusted, or the file ends: the rest of the shard is lost
            first_bad = index if first_bad is None else first_bad
    if len(readable) < expected and first_bad is None:
        first_bad = len(readable)
    return ShardDamage(path, expected, tuple(readable), first_bad)


def _check_tfrecord(source: SplitSource) -> None:
    if source.file_format != formats.TFRECORD.name:
        raise LoaderError(
            f'on_corrupt="skip" steps over damaged TFRecord records; {source.root} holds '
            f"{source.file_format} shards: run `prep verify` to find the damaged ones"
        )


def _check_not_more(damage: ShardDamage) -> None:
    if len(damage.readable) > damage.expected:
        raise LoaderError(
            f"shard {damage.file} holds {len(damage.readable)} readable records, but the manifest "
            f"records {damage.expected}: it is not the shard that was converted"
        )


def readable_counts(source: SplitSource) -> SplitSource:
    """`source` with each shard's count replaced by its readable records, as `skip_corrupt`
    would read them, without copying anything (for `epoch_size`)."""
    _check_tfrecord(source)
    counts = []
    for path, expected in zip(source.files, source.counts):
        damage = scan(path, expected)
        _check_not_more(damage)
        counts.append(len(damage.readable))
    return dataclasses.replace(source, counts=tuple(counts))


def skip_corrupt(source: SplitSource, cache_dir: str | None = None) -> tuple[SplitSource, list[ShardDamage]]:
    """`source` with every damaged shard replaced by a copy of its readable records.

    Logs one warning per damaged shard, naming it, the first bad record and how
    many records were skipped. Returns the new source and the damage found.
    """
    _check_tfrecord(source)
    files, counts, damaged = list(source.files), list(source.counts), []
    for i, (path, expected) in enumerate(zip(source.files, source.counts)):
        damage = scan(path, expected)
        _check_not_more(damage)
        if damage.skipped == 0 and damage.first_bad is None:
            continue
        damaged.append(damage)
        if cache_dir is None:
            cache_dir = tempfile.mkdtemp(prefix="loaders-repaired-")
            atexit.register(shutil.rmtree, cache_dir, True)  # read lazily by the dataset, so kept until exit
        name = ShardName.parse(os.path.basename(path))
        assert name is not None  # a split's files all have shard names
        copy = os.path.join(cache_dir, name.filename)
        with storage.open_read(path) as src, open(copy, "wb") as dst:
            for offset, length in damage.readable:
                src.seek(offset)
                dst.write(src.read(length))
        files[i], counts[i] = copy, len(damage.readable)
        log.warning(
            "skipping %d corrupt or unreadable record(s) of shard %s, from record %s on; "
            "reading the %d good ones from %s",
            damage.skipped,
            path,
            damage.first_bad,
            len(damage.readable),
            copy,
        )
    if not damaged:
        return source, []
    return dataclasses.replace(source, files=tuple(files), counts=tuple(counts)), damaged
