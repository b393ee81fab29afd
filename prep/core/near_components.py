"""Connected components of the duplicate pairs with no task holding them all: each step's work on one part
of the images, as arrays. Pure: numpy, no Beam, no I/O (beam_jobs/dedupe_components.py runs the steps).

An image belongs to part `item % parts` (`part_of`), and a part's task holds the edges of its images, each
edge (u, v) stored at u's part and at v's. Rounds of the two contractions of Kiveris et al., "Connected
Components in MapReduce and Beyond" (SoCC 2014), alternate: with m(u) the least of u and its neighbours,

- `large_star`: every neighbour v > u of u is joined to m(u) instead;
- `small_star`: u and its neighbours v < u are joined to the least of them.

Both keep every image's component and never add edges beyond one per image met; they end in stars, each
component's images joined to its least image, usually in O(log n) rounds (O(log² n) proven). A part knows
it is done (`settled`) when each of its images has either only larger neighbours (a star's centre) or
exactly one, smaller (a leaf); then each image's label, its component's least image, is `labels`.

The groups themselves are not these components: the bounded union-find (union_find.py) refuses unions past
its size bound, in the order of the pairs, which is sequential. But a component's pairs decide its groups
alone, so the pairs, once labelled, go to a task by their component (`pairs_by_part`) that runs the same
bounded union-find on them: groups and refusals are exactly those of one union-find over all the pairs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

EMPTY = np.zeros((0, 2), np.int64)


def part_of(items: np.ndarray, parts: int) -> np.ndarray:
    """The part each image id belongs to (ids are dense: chunk * MAX_CHUNK + position)."""
    return np.asarray(items, np.int64) % parts


def unique_edges(edges: np.ndarray) -> np.ndarray:
    """Edge rows each once, sorted: packed into one 64-bit key each, as a sort of rows is several times slower."""
    edges = np.asarray(edges, np.int64).reshape(-1, 2)
    if len(edges) and (edges.min() < 0 or edges.max() >= 1 << 32):
        raise ValueError("image ids must be in [0, 2**32)")
    keys = np.unique((edges[:, 0].astype(np.uint64) << np.uint64(32)) | edges[:, 1].astype(np.uint64))
    return np.stack([keys >> np.uint64(32), keys & np.uint64(0xFFFFFFFF)], axis=1).astype(np.int64)


def both_ways(edges: np.ndarray) -> np.ndarray:
    """Edges (x, y) -> each as (x, y) and (y, x), self-loops dropped, each once, sorted."""
    edges = np.asarray(edges, np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] != edges[:, 1]]
    return unique_edges(np.concatenate([edges, edges[:, ::-1]]))


def by_part(edges: np.ndarray, parts: int) -> Iterator[tuple[int, np.ndarray]]:
    """Edges (x, y) -> (part, its images' edges, both ways) for each part with some."""
    directed = both_ways(edges)
    where = part_of(directed[:, 0], parts)
    order = np.argsort(where, kind="stable")
    directed, where = directed[order], where[order]
    starts = np.flatnonzero(np.r_[True, where[1:] != where[:-1]]) if len(where) else np.zeros(0, np.int64)
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(where)]):
        yield int(where[lo]), directed[lo:hi]


def _least(directed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges (u, v) sorted by u -> (each edge's u's m(u), each u once, where each u starts)."""
    u = directed[:, 0]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    least = np.minimum(np.minimum.reduceat(directed[:, 1], starts), u[starts])
    counts = np.diff(np.r_[starts, len(u)])
    return np.repeat(least, counts), u[starts], starts


def large_star(directed: np.ndarray) -> np.ndarray:
    """A part's edges (u, v), both ways and sorted (`both_ways`) -> the edges large-star makes of them:
    (v, m(u)) for each neighbour v > u. Every edge's larger end gets it from its smaller one's part."""
    if not len(directed):
        return EMPTY
    least, _, _ = _least(directed)
    up = directed[:, 1] > directed[:, 0]
    return np.stack([directed[up, 1], least[up]], axis=1)


def small_star(directed: np.ndarray) -> np.ndarray:
    """A part's edges (u, v), both ways and sorted -> the edges small-star makes: u and each neighbour
    v < u joined to the least of them (that least itself left out)."""
    down = directed[directed[:, 1] < directed[:, 0]] if len(directed) else EMPTY
    if not len(down):
        return EMPTY
    least, us, starts = _least(down)  # each edge's u's least neighbour (all are smaller than u)
    keep = down[:, 1] != least
    return np.concatenate([np.stack([down[keep, 1], least[keep]], axis=1), np.stack([us, least[starts]], axis=1)])


def settled(directed: np.ndarray) -> bool:
    """Whether a part's images are each a star's centre (only larger neighbours) or a leaf (one neighbour,
    smaller). When every part is, every component is a star around its least image."""
    if not len(directed):
        return True
    u, v = directed[:, 0], directed[:, 1]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    counts = np.diff(np.r_[starts, len(u)])
    smaller = np.add.reduceat((v < u).astype(np.int64), starts)
    return bool(np.all((smaller == 0) | ((smaller == 1) & (counts == 1))))


def labels(directed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A settled part's edges -> (its images ascending, each one's component label: its least image)."""
    if not len(directed):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    least, us, starts = _least(directed)
    return us, least[starts]


def label_pairs(pairs: np.ndarray, items: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Pair rows (distance, a, b) whose a is among `items` (ascending) -> each pair's component label."""
    at = np.searchsorted(items, pairs[:, 1])
    if len(pairs) and (at.max() >= len(items) or not np.array_equal(items[at], pairs[:, 1])):
        raise ValueError("a pair's image has no label: its part's edges and pairs disagree")
    return label[at]


def pairs_by_part(pairs: np.ndarray, label: np.ndarray, parts: int) -> Iterator[tuple[int, np.ndarray]]:
    """Pair rows and an image each (their component's label, or their first image) -> (that image's part,
    its pairs) for each part with some."""
    where = part_of(label, parts)
    order = np.argsort(where, kind="stable")
    where, pairs = where[order], pairs[order]
    starts = np.flatnonzero(np.r_[True, where[1:] != where[:-1]]) if len(where) else np.zeros(0, np.int64)
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(where)]):
        yield int(where[lo]), pairs[lo:hi]


def local_stars(directed: np.ndarray) -> np.ndarray:
    """A part's edges -> each image met joined to the least image it reaches through them (itself left
    out): the components of the part's own edges, closed at once (min-labels with pointer jumping, in numpy)."""
    if not len(directed):
        return EMPTY
    images, ends = np.unique(directed, return_inverse=True)
    ends = ends.reshape(-1, 2)
    label = np.arange(len(images))
    while True:
        new = label.copy()
        np.minimum.at(new, ends[:, 0], label[ends[:, 1]])  # a part holds its images' side of each edge
        np.minimum.at(new, ends[:, 1], label[ends[:, 0]])
        while True:  # pointer jumping: each image straight to its label's label
            up = new[new]
            if np.array_equal(up, new):
                break
            new = up
        if np.array_equal(new, label):
            break
        label = new
    away = label != np.arange(len(images))
    return np.stack([images[away], images[label[away]]], axis=1)
