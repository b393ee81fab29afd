"""What the report says, as plain data: pure functions of the manifest (no I/O, no HTML).

Everything here stays small at 1,000,000 examples and 1,000 classes: the class
chart shows the largest and smallest classes and one bar for the rest, heat maps
are binned to at most `Limits.heat_rows` x `Limits.heat_columns` cells, and the
sample grid shares a fixed thumbnail budget among the classes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from prep.core.class_weights import balanced_weights
from prep.verify import balance_problems


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much of a large dataset the page shows (the rest is aggregated, binned or counted)."""

    thumbnails: int = 2000  # sample-grid thumbnails in all (~1.5 KB each)
    per_class: int = 8  # sample-grid thumbnails per class, at most
    tile: int = 64  # thumbnail side in pixels
    chart_classes: int = 40  # more classes than this: the largest and smallest, and one bar for the others
    heat_rows: int = 60  # heat map cells (classes) ...
    heat_columns: int = 100  # ... by shards; more are binned
    rejects_listed: int = 200  # paths listed per reason (all are counted)
    reject_thumbnails: int = 12  # of them, decoded for a thumbnail
    problems_listed: int = 200  # verify problems listed (all are counted)
    max_records: int = 20_000  # records read from the shards for samples, at most

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{field.name} must be an int >= 1, got {value!r}")
        if not 16 <= self.tile <= 512:
            raise ValueError(f"Limits.tile must be in [16, 512], got {self.tile}")


def weight_split(manifest) -> str | None:
    """The split whose class weights the page shows: train if there is one, else the largest."""
    if "train" in manifest.splits:
        return "train"
    return max(manifest.splits, key=lambda s: manifest.splits[s].examples, default=None)


def class_weights(manifest, split: str) -> list[float]:
    """The "balanced" weights `loaders.class_weights(DATASET, split)` gives, in label order."""
    counts = manifest.splits[split].class_counts
    weights = balanced_weights([counts.get(name, 0) for name in manifest.labels])
    return [weights[i] for i in range(len(manifest.labels))]


def class_rows(manifest) -> list[dict]:
    """One row per class in label order: id, name, records per split, total, share, weight."""
    split = weight_split(manifest)
    weights = class_weights(manifest, split) if split else [0.0] * len(manifest.labels)
    total = manifest.examples
    rows = []
    for label, name in enumerate(manifest.labels):
        counts = {s: info.class_counts.get(name, 0) for s, info in manifest.splits.items()}
        n = sum(counts.values())
        rows.append(
            {
                "id": label,
                "name": name,
                "counts": counts,
                "total": n,
                "share": n / total if total else 0.0,
                "weight": weights[label],
            }
        )
    return rows


@dataclasses.dataclass(frozen=True)
class ChartBars:
    """Bars of the class chart: names, and per split the value of each bar; `others` is the
    index of the aggregated bar (the mean of the classes it stands for), if any."""

    names: list[str]
    values: dict[str, list[float]]
    others: int | None = None
    others_count: int = 0


def chart_bars(manifest, limit: int) -> ChartBars:
    """Every class when there are at most `limit`; else the largest and smallest `limit // 2`
    halves by total records, and between them one bar: the mean of the others."""
    rows = class_rows(manifest)
    splits = list(manifest.splits)
    if len(rows) <= limit:
        return ChartBars([r["name"] for r in rows], {s: [r["counts"][s] for r in rows] for s in splits})
    ranked = sorted(rows, key=lambda r: (-r["total"], r["id"]))
    top, rest, bottom = ranked[: limit // 2], ranked[limit // 2 : len(ranked) - limit // 2], ranked[-(limit // 2) :]
    values = {
        s: [r["counts"][s] for r in top]
        + [sum(r["counts"][s] for r in rest) / len(rest)]
        + [r["counts"][s] for r in bottom]
        for s in splits
    }
    names = [r["name"] for r in top] + [f"{len(rest)} others (mean)"] + [r["name"] for r in bottom]
    return ChartBars(names, values, others=len(top), others_count=len(rest))


def count_matrix(manifest, split: str) -> np.ndarray:
    """Records per class (rows, label order) and shard (columns, index order) of a split."""
    shards = manifest.splits[split].shards
    matrix = np.zeros((len(manifest.labels), len(shards)), dtype=np.int64)
    row = {name: i for i, name in enumerate(manifest.labels)}
    for column, shard in enumerate(shards):
        for name, n in shard.class_counts.items():
            if name in row:
                matrix[row[name], column] = n
    return matrix


def bin_edges(n: int, bins: int) -> np.ndarray:
    """Edges of min(n, bins) contiguous, near-equal groups of n items."""
    return np.linspace(0, n, min(n, bins) + 1).round().astype(np.int64)


@dataclasses.dataclass(frozen=True)
class HeatMap:
    """A split's balance as cells: each cell is how far a class's records in a shard are from
    that class's mean per shard (the balance rule keeps it inside (-1, 1)). When binned, a
    cell is a block of classes and shards and holds the largest such distance in it."""

    cells: np.ndarray
    row_edges: np.ndarray  # block i covers label ids row_edges[i]:row_edges[i + 1]
    column_edges: np.ndarray  # and shard indexes column_edges[j]:column_edges[j + 1]
    counts: np.ndarray | None  # records per class and shard, when not binned

    @property
    def binned(self) -> bool:
        return self.counts is None


def heat_map(matrix: np.ndarray, rows: int, columns: int) -> HeatMap:
    """The heat map of a class x shard count matrix, in at most rows x columns cells."""
    deviation = matrix - matrix.sum(axis=1, keepdims=True) / max(1, matrix.shape[1])
    r, c = bin_edges(matrix.shape[0], rows), bin_edges(matrix.shape[1], columns)
    if len(r) - 1 == matrix.shape[0] and len(c) - 1 == matrix.shape[1]:
        return HeatMap(deviation, r, c, matrix)
    high = np.maximum.reduceat(np.maximum.reduceat(deviation, r[:-1], axis=0), c[:-1], axis=1)
    low = np.minimum.reduceat(np.minimum.reduceat(deviation, r[:-1], axis=0), c[:-1], axis=1)
    return HeatMap(np.where(-low > high, low, high), r, c, None)


@dataclasses.dataclass(frozen=True)
class SplitHeat:
    """A split's heat map with what its title and legend say: classes x shards, fewest and most records
    of a class in a shard."""

    heat: HeatMap
    classes: int
    shards: int
    low: int
    high: int


def split_heat_map(manifest, split: str, rows: int, columns: int) -> SplitHeat | None:
    """The heat map of a split (`heat_map` of its `count_matrix`; None without shards), built from the
    non-zero counts when binned, so that memory and time grow with classes x `columns` and the counts the
    manifest holds, never with classes x shards."""
    shards = manifest.splits[split].shards
    classes, width = len(manifest.labels), len(shards)
    if not width:
        return None
    row = {name: i for i, name in enumerate(manifest.labels)}
    cells = [(row[name], j, n) for j, s in enumerate(shards) for name, n in s.class_counts.items() if n and name in row]
    label, column, value = np.array(cells, dtype=np.int64).reshape(-1, 3).T
    low = int(value.min()) if len(value) == classes * width else 0
    high = int(value.max(initial=0))
    r, c = bin_edges(classes, rows), bin_edges(width, columns)
    if len(r) - 1 == classes and len(c) - 1 == width:  # small: the matrix itself, exact
        matrix = np.zeros((classes, width), np.int64)
        matrix[label, column] = value
        return SplitHeat(heat_map(matrix, rows, columns), classes, width, low, high)
    mean = np.bincount(label, weights=value, minlength=classes) / width
    row_block, column_block = np.repeat(np.arange(len(r) - 1), np.diff(r)), np.repeat(np.arange(len(c) - 1), np.diff(c))
    top, bottom = np.full((len(r) - 1, len(c) - 1), -np.inf), np.full((len(r) - 1, len(c) - 1), np.inf)
    deviation = value - mean[label]
    np.maximum.at(top, (row_block[label], column_block[column]), deviation)
    np.minimum.at(bottom, (row_block[label], column_block[column]), deviation)
    # A cell the manifest does not name holds 0, so its deviation is -mean: for each class and column block
    # that has such cells (fewer named than the block's width), fold -mean into the block's extremes.
    named = np.zeros((classes, len(c) - 1), np.int64)
    np.add.at(named, (label, column_block[column]), 1)
    zero = np.where(named < np.diff(c)[None, :], -mean[:, None], np.nan)
    top = np.maximum(top, np.fmax.reduceat(np.where(np.isnan(zero), -np.inf, zero), r[:-1], axis=0))
    bottom = np.minimum(bottom, np.fmin.reduceat(np.where(np.isnan(zero), np.inf, zero), r[:-1], axis=0))
    return SplitHeat(HeatMap(np.where(-bottom > top, bottom, top), r, c, None), classes, width, low, high)


def balance_verdict(manifest, split: str) -> list[str]:
    """Where the manifest's per-shard counts break the balance rule (empty: balanced)."""
    shards = manifest.splits[split].shards
    return [str(p) for p in balance_problems(split, [s.file for s in shards], [s.class_counts for s in shards])]


def grid_plan(manifest, limits: Limits) -> dict[int, int]:
    """Thumbnails wanted per label id: up to `per_class` each, within the `thumbnails` budget
    (at least one per class while the budget lasts, classes in label order)."""
    totals = {
        i: sum(s.class_counts.get(name, 0) for s in manifest.splits.values()) for i, name in enumerate(manifest.labels)
    }
    each = max(1, min(limits.per_class, limits.thumbnails // max(1, len(totals))))
    wanted, budget = {}, limits.thumbnails
    for label, available in totals.items():
        if budget <= 0:
            break
        n = min(each, available, budget)
        wanted[label] = n
        budget -= n
    return wanted


def warnings(manifest, rejects_note: str | None = None) -> list[str]:
    """What a user should not miss: empty or capped classes, rejects, an accounting that does not add up."""
    out = []
    inputs = manifest.inputs
    empty = list(inputs.empty_classes or [])
    if empty:
        shown = ", ".join(empty[:20]) + (f" and {len(empty) - 20} more" if len(empty) > 20 else "")
        if manifest.options.get("empty_classes") == "drop":
            out.append(
                f"{len(empty)} class(es) with no example dropped from labels: {shown}; the label ids of "
                "the classes after them moved down"
            )
        else:
            out.append(
                f"{len(empty)} class(es) with no example (every input rejected, or none listed), kept in "
                f"labels with their label id: {shown}"
            )
    if inputs.rejected:
        out.append(f"{inputs.rejected} input(s) rejected: see Rejects")
    if inputs.capped:
        out.append(f"{inputs.capped} input(s) left out by --max-per-class {manifest.options.get('max_per_class')}")
    if inputs.found != inputs.written + inputs.rejected + inputs.capped:
        out.append(
            f"the accounting does not add up: found {inputs.found} != written {inputs.written} + rejected "
            f"{inputs.rejected} + capped {inputs.capped}"
        )
    if rejects_note:
        out.append(rejects_note)
    return out
