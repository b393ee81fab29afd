"""The parts of `manifest.json` as types: shards, splits, the input accounting, provenance.

`prep.core.manifest` re-exports them and owns the document (`Manifest`) and its reading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from fractions import Fraction
from typing import Any


@dataclasses.dataclass(frozen=True)
class IndexFile:
    """A shard's record index (``--index``): its file name, size and SHA-256."""

    file: str
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "sha256": self.sha256}


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file as written: its name, position, records, size, SHA-256 and records per class."""

    file: str
    index: int
    examples: int
    bytes: int
    sha256: str
    # records per class; multilabel and detection: images containing the class. A class not named holds
    # none. None: in the sidecar of a version-2 manifest, not read (`Manifest.with_shard_counts`).
    class_counts: dict[str, int] | None
    index_file: IndexFile | None = None  # only with --index
    box_counts: dict[str, int] | None = None  # detection: objects per class
    stratum_counts: dict[str, int] | None = None  # multilabel, detection: images per stratum (NO_STRATUM: none)

    @property
    def held(self) -> dict[str, int]:
        """`class_counts`, which a version-2 manifest read without shard_counts.jsonl does not have.

        Raises:
            ValueError: (an internal error) the counts were not read: `Manifest.load(..., shard_counts=True)`.
        """
        if self.class_counts is None:
            raise ValueError(
                f"internal error: the counts of {self.file} were not read (Manifest.load(..., shard_counts=True))"
            )
        return self.class_counts

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "index": self.index,
            "examples": self.examples,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }
        if self.class_counts is not None:
            out["class_counts"] = dict(self.class_counts)
        if self.index_file is not None:
            out["index_file"] = self.index_file.to_json()
        for key in ("box_counts", "stratum_counts"):
            if getattr(self, key) is not None:
                out[key] = dict(getattr(self, key))
        return out


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split: its totals and its shards in index order."""

    name: str
    examples: int
    bytes: int
    num_shards: int
    class_counts: dict[str, int]
    shards: tuple[ShardInfo, ...]
    box_counts: dict[str, int] | None = None  # detection: objects per class
    max_boxes: int | None = None  # detection: the most objects one image of the split holds
    # multilabel, detection: the largest |images of a class in a shard - its proportional share| (`deviation`)
    max_deviation: float | None = None
    # --split fractions with groups pinned to splits: {class: records - fraction x the class's records in all
    # splits} (`fraction_deviation`)
    fraction_deviation: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "examples": self.examples,
            "bytes": self.bytes,
            "num_shards": self.num_shards,
            "class_counts": dict(self.class_counts),
            "shards": [s.to_json() for s in self.shards],
        }
        if self.box_counts is not None:
            out["box_counts"] = dict(self.box_counts)
        if self.max_boxes is not None:
            out["max_boxes"] = self.max_boxes
        if self.max_deviation is not None:
            out["max_deviation"] = self.max_deviation
        if self.fraction_deviation is not None:
            out["fraction_deviation"] = dict(self.fraction_deviation)
        return out


def fraction_deviation(
    class_counts: dict[str, int], fraction: float | Fraction, totals: dict[str, int]
) -> dict[str, float]:
    """{class: the split's count of it - `fraction` x its count over all splits}, to 1/1000: how far a split is
    from its fraction, per class, once groups are kept whole."""
    return {name: round(float(n - fraction * totals.get(name, 0)), 3) or 0.0 for name, n in class_counts.items()}


@dataclasses.dataclass(frozen=True)
class GroupCounts:
    """The manifest's `groups`: duplicate groups found while converting, and images whose split a group decided.

    `rejected` counts the inputs the group policies rejected, which `inputs.rejected_by_reason` holds as
    `duplicate_of`, `label_conflict` and `cross_split_duplicate` (`REASONS`): they always agree.
    """

    duplicate_groups: int = 0
    duplicate_images: int = 0  # images in duplicate groups
    exact_groups: int = 0  # groups of identical stored bytes
    near_groups: int = 0
    conflict_groups: int = 0  # groups whose images carry different labels
    cross_split_groups: int = 0  # groups across the splits SOURCE gives
    cross_split_images: int = 0  # their images outside the group's first split
    rejected: int = 0
    pinned_images: int = 0  # images sent to their group's split (--split), duplicate and user groups
    refused_unions: int = 0  # unions the group size bound refused
    skipped_comparisons: int = 0  # pairs of oversized hash buckets not compared

    REASONS = ("duplicate_of", "label_conflict", "cross_split_duplicate")

    def plus(self, counts: Iterable[tuple[str, int]]) -> GroupCounts:
        """These counts with `counts` ((name, n), ...) added."""
        out = dataclasses.asdict(self)
        for name, n in counts:
            out[name] += n
        return GroupCounts(**out)

    def __bool__(self) -> bool:
        return any(dataclasses.astuple(self))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def deviation(split_counts: dict[str, int], examples: int, shards: Iterable[ShardInfo]) -> float:
    """The largest deviation of a shard's count of a class from its proportional share of the split's
    (class count x shard examples / split examples), over shards and classes, rounded to 1/1000.

    Sparse: a shard's deviation is exact for the classes it holds; for all the classes it lacks
    (count 0) it is their share, largest for the class with most records, so one is enough. The
    shares are computed as `total * examples / split examples`, so the float is the dense one's.
    """
    ranked = sorted(((total, name) for name, total in split_counts.items() if total), reverse=True)
    worst = 0.0
    for shard in shards:
        held = shard.class_counts
        if held is None:
            held = shard.held  # raises: the counts were not read
        for name, n in held.items():
            if name in split_counts:
                share = split_counts[name] * shard.examples / examples if examples else 0.0
                worst = max(worst, abs(n - share))
        for total, name in ranked:  # the largest share among the classes this shard lacks
            if not held.get(name):
                worst = max(worst, total * shard.examples / examples if examples else 0.0)
                break
    return round(worst, 3)


@dataclasses.dataclass(frozen=True)
class BoxAccounting:
    """Detection's boxes: ``read = written + dropped``; clipped boxes are written, and counted as clipped too."""

    read: int
    written: int
    dropped: int
    clipped: int
    dropped_by_reason: dict[str, int]

    @property
    def reconciles(self) -> bool:
        return self.read == self.written + self.dropped

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Category:
    """A detection class: its id in the records (from 1), name, and the source's id for it (None if none)."""

    id: int
    name: str
    source_id: int | str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "source_id": self.source_id}


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The accounting: ``found = written + rejected + capped``. The last three fields are
    optional in a version-1 manifest (a reader must not need them); None when absent."""

    found: int
    written: int
    rejected: int
    capped: int
    converted: int | None = None  # written after re-encoding
    rejected_by_reason: dict[str, int] | None = None
    capped_by_class: dict[str, int] | None = None
    empty_classes: tuple[str, ...] | None = None  # only when a class was left with no example (--empty-classes)
    boxes: BoxAccounting | None = None  # detection

    @property
    def reconciles(self) -> bool:
        return self.found == self.written + self.rejected + self.capped

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "found": self.found,
            "written": self.written,
            "rejected": self.rejected,
            "capped": self.capped,
        }
        for key in ("converted", "rejected_by_reason", "capped_by_class"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.empty_classes is not None:
            out["empty_classes"] = list(self.empty_classes)
        if self.boxes is not None:
            out["boxes"] = self.boxes.to_json()
        return out


@dataclasses.dataclass(frozen=True)
class InFlight:
    """After `--resume`: the inputs the killed run was reading, prepared again in the sandbox, and their rejects."""

    inputs: int
    rejected_by_reason: dict[str, int]


@dataclasses.dataclass(frozen=True)
class Resumed:
    """After `--resume`: the prepared chunks and shard files reused from the interrupted run."""

    chunks: int
    chunks_reused: int
    shards: int
    shards_reused: int
    in_flight: InFlight | None = None  # only when the killed run was reading some inputs

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resumed:
        in_flight = data.get("in_flight")
        return cls(
            data["chunks"],
            data["chunks_reused"],
            data["shards"],
            data["shards_reused"],
            InFlight(**in_flight) if isinstance(in_flight, dict) else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "chunks": self.chunks,
            "chunks_reused": self.chunks_reused,
            "shards": self.shards,
            "shards_reused": self.shards_reused,
        }
        if self.in_flight is not None:
            out["in_flight"] = dataclasses.asdict(self.in_flight)
        return out


@dataclasses.dataclass(frozen=True)
class Run:
    """What differs between two runs of the same conversion: runner, workers, times."""

    runner: str | None = None
    workers: int | None = None
    source: str | None = None
    started: float | None = None
    created: str | None = None  # UTC, ISO 8601
    seconds: float | None = None
    resumed: Resumed | None = None

    @classmethod
    def from_json(cls, data: object) -> Run:
        """Lenient: `run` is provenance, which no reader relies on."""
        if not isinstance(data, dict):
            return cls()
        resumed = data.get("resumed")
        try:
            resumed = Resumed.from_json(resumed) if isinstance(resumed, dict) else None
        except (KeyError, TypeError):
            resumed = None
        return cls(
            **{k: data.get(k) for k in ("runner", "workers", "source", "started", "created", "seconds")},
            resumed=resumed,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k) for k in ("runner", "workers", "source", "started", "created", "seconds")
        }
        if self.resumed is not None:
            out["resumed"] = self.resumed.to_json()
        return out
