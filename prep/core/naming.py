"""Shard file names: the one place that builds and parses them.

A shard is named ``{split}-{index:05d}-of-{count:05d}{suffix}``, the suffix its file
format's (`prep.core.formats`: ``.tfrecord``, ``.array_record``), e.g.
``train-00003-of-00016.tfrecord``; its record index (``--index``, the
``offset size`` lines NVIDIA DALI's TFRecord reader takes) is the shard's name
plus ``.idx``. The writer, `verify`, `inspect` and the loaders all go through
`ShardName`. `tfds_template` tells tensorflow-datasets the same names in its
own template language (`tfds.core.ShardedFileTemplate`).
"""

from __future__ import annotations

import dataclasses
import re

from prep.core.formats import SUFFIXES, TFRECORD

SUFFIX = TFRECORD.suffix  # the default format's
INDEX_SUFFIX = ".idx"
# tfds pads SHARD_X_OF_Y to max(5, digits of the count) for both numbers; we pad
# each to 5. They agree below 100,000 shards per split (tests/test_tfds.py).
TFDS_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}" + SUFFIX
_SPLIT_RE = re.compile(r"[A-Za-z0-9_]+")  # fullmatch: "$" would let a trailing newline through
_NAME_RE = re.compile(
    r"^(?P<split>[A-Za-z0-9_]+)-(?P<index>\d{5,})-of-(?P<count>\d{5,})"
    rf"(?P<suffix>{'|'.join(map(re.escape, SUFFIXES))})$"
)


def tfds_template(suffix: str = SUFFIX) -> str:
    """Our shard names of a format's `suffix` in tensorflow-datasets' template language."""
    return "{SPLIT}-{SHARD_X_OF_Y}" + suffix


def check_split_name(split: str) -> str:
    """Returns `split` if it can appear in a shard name, else raises ValueError."""
    if not _SPLIT_RE.fullmatch(split):
        raise ValueError(f"split name {split!r} must be letters, digits or '_'")
    return split


@dataclasses.dataclass(frozen=True, order=True)
class ShardName:
    """Identity of one shard file: split, 0-based index and shard count."""

    split: str
    index: int
    count: int
    suffix: str = SUFFIX  # of the file format (`prep.core.formats`)

    def __post_init__(self) -> None:
        check_split_name(self.split)
        if self.suffix not in SUFFIXES:
            raise ValueError(f"shard suffix must be one of {', '.join(SUFFIXES)}, got {self.suffix!r}")
        if self.count < 1:
            raise ValueError(f"shard count must be >= 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index must be in [0, {self.count}), got {self.index}")

    @property
    def filename(self) -> str:
        return f"{self.split}-{self.index:05d}-of-{self.count:05d}{self.suffix}"

    @property
    def index_filename(self) -> str:
        """The name of this shard's record index file (DALI's ``offset size`` lines)."""
        return self.filename + INDEX_SUFFIX

    def __str__(self) -> str:
        return self.filename

    @classmethod
    def parse(cls, filename: str) -> ShardName | None:
        """Parses a shard file name; returns None if it is not one."""
        match = _NAME_RE.match(filename)
        if match is None:
            return None
        try:
            return cls(match["split"], int(match["index"]), int(match["count"]), match["suffix"])
        except ValueError:
            return None

    @classmethod
    def parse_index(cls, filename: str) -> ShardName | None:
        """Parses a record index file name (a shard name plus ``.idx``); None if it is not one."""
        if not filename.endswith(INDEX_SUFFIX):
            return None
        return cls.parse(filename[: -len(INDEX_SUFFIX)])
