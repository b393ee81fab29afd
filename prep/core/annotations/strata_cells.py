"""Ranks with the layout: each stratum's images dealt to the (split, shard) cells its ranks reach.

Used by `strata.stratify` when the caller passes `locate` (the layout's rank -> cell map).
Every rank of a stratum is a slot of a known cell, so choosing an image's rank is choosing
its cell. As in iterative stratification (Sechidis et al., 2011), each cell wants its share
of every label (the label's images times the cell's share of all slots), and an image goes
to the cell with free slots in its stratum that lacks its labels most (the sum over its
labels of wanted minus placed, per slot of the cell, so that cells of unequal sizes, a
training split's and a test split's, compare; ties: the cell with the most free slots of the stratum, then
the first). The stratum's own label needs no greedy: the slots fix it exactly. A cell that is a
tuple (split, shard) also counts toward its split (the sum of both lacks), so that the
small errors of a split's shards do not add up in the split's total.

Strata are dealt smallest first, and inside a stratum the images with the most labels
first: the last images of a stratum must take the slots left, and an image with few
labels costs least where it lands.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np


def cell_ranks(
    groups: dict[int | None, list[int]],
    labels: Sequence[tuple[int, ...]],
    num_classes: int,
    coins: Sequence[bytes],
    locate: Callable[[int | None, int], Hashable],
) -> dict[int, int]:
    """{image: rank} for the images of every group ({stratum: [image]}), `labels[i]` the image's
    labels but its stratum."""
    slots: dict[int | None, dict[Hashable, list[int]]] = {}  # stratum -> {cell: [ranks]}
    cells: dict[Hashable, int] = {}
    for stratum, members in groups.items():
        per_cell: dict[Hashable, list[int]] = {}
        for rank in range(len(members)):
            cell = locate(stratum, rank)
            per_cell.setdefault(cell, []).append(rank)
            cells.setdefault(cell, len(cells))
        slots[stratum] = per_cell
    size = np.zeros(len(cells))
    for per_cell in slots.values():
        for cell, ranks in per_cell.items():
            size[cells[cell]] += len(ranks)
    totals = np.zeros(num_classes)
    for members in groups.values():
        for i in members:
            totals[list(labels[i])] += 1
    # wanted[cell, label]: the label's images the cell should still get, per slot of the cell
    # (per slot: a cell four times the size of another must not look four times as lacking)
    wanted = np.outer(size / max(1.0, size.sum()), totals) / np.maximum(size, 1.0)[:, None]
    step = 1.0 / np.maximum(size, 1.0)
    # The same per split: a cell (split, shard) also counts toward its split, so that the errors
    # of a split's shards, each small, do not add up in the split's total.
    coarse: dict[Hashable, int] = {}
    coarse_of = np.array([coarse.setdefault(c[0] if isinstance(c, tuple) and c else c, len(coarse)) for c in cells])
    coarse_size = np.bincount(coarse_of, weights=size, minlength=len(coarse))
    coarse_wanted = np.outer(coarse_size / max(1.0, size.sum()), totals) / np.maximum(coarse_size, 1.0)[:, None]
    coarse_step = 1.0 / np.maximum(coarse_size, 1.0)
    rank_of: dict[int, int] = {}
    for stratum in sorted(groups, key=lambda s: (len(groups[s]), s is None, s or 0)):
        per_cell = slots[stratum]
        index = np.array([cells[c] for c in per_cell])
        queues = [list(reversed(per_cell[c])) for c in per_cell]  # ranks of each cell, lowest popped first
        free = np.array([len(q) for q in queues], dtype=np.float64)
        members = sorted(groups[stratum], key=lambda i: (-len(labels[i]), coins[i]))
        # Ties on lack go to the most free slots, then the first cell: a small tilt that never outweighs one label.
        tilt = 1e-9 / (1.0 + len(members))
        lack, steps = wanted[index], step[index]  # this stratum's cells, written back after it
        up = coarse_of[index]
        # Per image, as few array operations as give the same floats: each cell's copy of its split's row of
        # wants (copied again into the cells of the split whose row changed), and the tilt with -inf for a
        # full cell, added at once.
        near = coarse_wanted[up]
        same = [np.flatnonzero(up == up[k]) for k in range(len(index))]
        tilted = tilt * free
        tilted[free == 0] = -np.inf
        score = np.zeros(len(index))
        for i in members:
            own = labels[i]
            if own:
                columns = np.array(own)
                np.sum(lack[:, columns], axis=1, out=score)
                score += near[:, columns].sum(axis=1)
            else:
                score[:] = 0.0
            score += tilted
            k = int(np.argmax(score))
            rank_of[i] = queues[k].pop()
            free[k] -= 1
            tilted[k] = tilt * free[k] if free[k] else -np.inf
            if own:
                lack[k, columns] -= steps[k]
                coarse_wanted[up[k], columns] -= coarse_step[up[k]]
                near[same[k]] = coarse_wanted[up[k]]
        wanted[index] = lack
    return rank_of
