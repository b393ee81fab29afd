"""What the dedupe stage (dedupe.py) is given, and what travels between its steps: one NamedTuple per kind of
element, so that a step with several kinds of output is split by type (`only`), never by a tag. Elements are
small: chunk ids, counts, and `dedupe_files.Slice`s of work files, never images or their members."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from prep.core import near_bands
from prep.core.groups import DedupeOptions
from prep.core.run.dedupe_files import Slice
from prep.core.union_find import DEFAULT_MAX_SIZE

PART_TARGET = 1_000_000  # images per scan task, about (48 bytes each: id and hashes)


@dataclasses.dataclass(frozen=True)
class DedupeSettings:
    """The conversion's options as the dedupe stage's steps need them (graph.py makes it)."""

    labels: tuple[str, ...]  # the planner's groups' names, by label id
    options: DedupeOptions
    seed: int
    fractions: tuple[tuple[str, Fraction], ...] | None  # --split fractions; None when SOURCE names the splits
    single_label: bool  # labels can conflict: single-label classification
    cap: int = near_bands.SCAN_CAP  # distinct hashes of a band value probed into (near_bands)
    max_size: int = DEFAULT_MAX_SIZE  # members of a duplicate group at most (union_find)
    part_target: int = PART_TARGET  # images a scan task takes, about
    workers: int | None = None  # the scan's threads; None: every core
    images: int | None = None  # images at most (the staged chunks' bound); None: not known

    @property
    def spread(self) -> bool:
        """Whether the scan may be cut into band parts, so the graph needs the spread components' steps."""
        return self.images is None or self.images > self.part_target

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))
        for name in ("cap", "max_size", "part_target"):
            if getattr(self, name) < 1:
                raise ValueError(f"DedupeSettings.{name} must be at least 1, got {getattr(self, name)}")

    @property
    def merging(self) -> bool:
        """Whether user groups that duplicates link are merged: user groups, and splits the conversion makes."""
        return bool(self.options.user_groups and self.fractions)


def only(*kinds: type) -> Callable[[object], list[object]]:
    """A FlatMap function keeping the elements of types `kinds`."""
    return lambda item: [item] if isinstance(item, kinds) else []


class KeyFile(typing.NamedTuple):
    """A prepared chunk's key file for the scan (dedupe_files.write_chunk_keys), and how many items it holds."""

    chunk: int
    items: int


class BandPairs(typing.NamedTuple):
    """The near pairs of one crop scale and band (`Scan`), and the comparisons an oversized run left out."""

    pairs: np.ndarray  # int64 rows (distance, item a, item b)
    skipped: int
    parts: int = 1  # past part_target (a band part's pairs), the parts components are spread over


class PartEdges(typing.NamedTuple):
    """Edges of images of component part `part` (near_components: (u, v) rows, u in the part)."""

    part: int
    edges: np.ndarray
    parts: int  # how many parts (the band parts' 2**bits)


class PartPairs(typing.NamedTuple):
    """Pair rows (distance, a, b) whose a is in part `part`, waiting for their components' labels."""

    part: int
    pairs: np.ndarray
    parts: int


class PartState(typing.NamedTuple):
    """Whether part `part`'s edges are settled into stars after the rounds (near_components.settled)."""

    part: int
    settled: bool


class Verdict(typing.NamedTuple):
    """Whether every part settled: then part `part` labels its pairs itself, else the fallback task does."""

    part: int
    settled: bool


class PartLabels(typing.NamedTuple):
    """Part `part`'s images (ascending) and their components' labels (their least images)."""

    part: int
    items: np.ndarray
    labels: np.ndarray


class Unsettled(typing.NamedTuple):
    """A part's edges and pairs, for the fallback task when some part did not settle in the rounds."""

    edges: np.ndarray
    pairs: np.ndarray
    parts: int


class ComponentPairs(typing.NamedTuple):
    """Pairs of components of part `part` (their labels' part), for the bounded union-find there."""

    part: int
    pairs: np.ndarray


class GroupedItems(typing.NamedTuple):
    """A chunk's items in some duplicate group (`components`)."""

    chunk: int
    rows: tuple[tuple[int, int, int], ...]  # ((item, group id, group batch), ...)


class ScanStats(typing.NamedTuple):
    """What the union-find refused and the scan left out (`components`), for the report's header."""

    refused: int
    skipped: int


class MemberSlice(typing.NamedTuple):
    """A chunk's members of group batch `batch` in its members file (`member_info`)."""

    batch: int
    where: Slice


class UserLink(typing.NamedTuple):
    """The user groups of a duplicate group's members in one chunk (`member_info`)."""

    group: int
    batch: int
    users: tuple[str, ...]


class UnitSize(typing.NamedTuple):
    """A chunk's images of a user group and label (`unit_labels`)."""

    unit: str
    label: str
    images: int


class ChunkId(typing.NamedTuple):
    """A prepared chunk: `merge_user_groups` tells each one its merged user groups are recorded."""

    chunk: int


class UnitChoice(typing.NamedTuple):
    """The unit of a duplicate group that links user groups, and the split chosen for it (`merge_user_groups`)."""

    batch: int
    group: int
    unit: str
    split: str | None


class UnitsReady(typing.NamedTuple):
    """Chunk `chunk` may read the merged user groups and their splits (`merge_user_groups`)."""

    chunk: int


class DecidedSlice(typing.NamedTuple):
    """A group batch's decisions about chunk `chunk`'s items in its decisions file (`decide_batch`)."""

    chunk: int
    where: Slice


class BatchLines(typing.NamedTuple):
    """Group batch `batch` recorded its lines of duplicates.jsonl and its policy rejects (`decide_batch`)."""

    batch: int


class ReportWritten(typing.NamedTuple):
    """duplicates.jsonl is written and the duplicate groups' splits recorded (`write_report`): regroup's join
    waits for it under a chunk id no chunk has."""

    chunk: int = -1
