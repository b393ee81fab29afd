"""prep.core.near_components: rounds of closing each part's edges into stars end in every component a star
around its least image, whatever the parts, for chains, random graphs and pairs; labels as a union-find's."""

from __future__ import annotations

import numpy as np
import pytest

from prep.core import near_components as nc
from prep.core.union_find import UnionFind


def least_labels(edges: np.ndarray) -> dict[int, int]:
    """{image: the least image of its component}, from a plain union-find."""
    images = np.unique(edges)
    index = {x: i for i, x in enumerate(images.tolist())}
    uf = UnionFind(len(images), len(images) or 1)
    for a, b in edges.tolist():
        uf.union(index[a], index[b])
    least: dict[int, int] = {}
    for x in images.tolist():
        least.setdefault(uf.find(index[x]), x)
    return {x: least[uf.find(index[x])] for x in images.tolist()}


def rounds(edges: np.ndarray, parts: int, most: int = 40) -> tuple[int, dict[int, np.ndarray]]:
    """The Beam steps' rounds in one process: (rounds until every part settled, {part: its edges})."""
    state: dict[int, list] = {}
    for part, e in nc.by_part(edges, parts):
        state.setdefault(part, []).append(e)
    for r in range(most + 1):
        joined = {p: np.unique(np.concatenate(es), axis=0) for p, es in state.items()}
        if all(nc.settled(e) for e in joined.values()):
            return r, joined
        state = {}
        for e in joined.values():
            for part, out in nc.by_part(nc.local_stars(e), parts):
                state.setdefault(part, []).append(out)
    raise AssertionError(f"not settled in {most} rounds")


def graphs():
    rnd = np.random.default_rng(3)
    chain = np.stack([np.arange(300), np.arange(1, 301)], axis=1)
    shuffled = rnd.permutation(400)
    return {
        "chain": chain,
        "chain, ids shuffled": np.stack([shuffled[:-1], shuffled[1:]], axis=1),
        "random, sparse": rnd.integers(0, 3000, (1500, 2)),
        "random, one giant component": rnd.integers(0, 3000, (6000, 2)),
        "pairs": np.stack([np.arange(0, 2000, 2), np.arange(1, 2000, 2)], axis=1),
        "item ids": rnd.integers(0, 4, (800, 2)) * 1024 + rnd.integers(0, 1024, (800, 2)),
    }


@pytest.mark.parametrize("name", list(graphs()))
@pytest.mark.parametrize("parts", [1, 3, 16])
def test_rounds_end_in_stars_labelled_by_the_least_image(name, parts):
    edges = graphs()[name]
    used, state = rounds(edges, parts)
    got = {}
    for part, e in state.items():
        items, labels = nc.labels(e)
        assert (nc.part_of(items, parts) == part).all()
        got.update(zip(items.tolist(), labels.tolist()))
    assert got == least_labels(edges[edges[:, 0] != edges[:, 1]])
    assert used <= 12


def test_a_round_keeps_components_and_at_most_an_edge_an_image_met():
    edges = graphs()["random, one giant component"]
    directed = nc.both_ways(edges)
    stars = nc.local_stars(directed)
    assert len(stars) < len(np.unique(directed))
    assert least_labels(stars) == least_labels(directed)


def test_pairs_are_labelled_and_cut_by_their_component():
    edges = graphs()["random, sparse"]
    edges = edges[edges[:, 0] != edges[:, 1]]
    pairs = np.c_[np.ones(len(edges), np.int64), np.minimum(edges[:, 0], edges[:, 1]), np.maximum(*edges.T)]
    truth = least_labels(edges)
    items = np.array(sorted(truth), np.int64)
    label = nc.label_pairs(pairs, items, np.array([truth[x] for x in items.tolist()], np.int64))
    seen = 0
    for part, chunk in nc.pairs_by_part(pairs, label, 5):
        assert all(truth[a] % 5 == part for a in chunk[:, 1].tolist())
        seen += len(chunk)
    assert seen == len(pairs)
    with pytest.raises(ValueError, match="no label"):
        nc.label_pairs(pairs, items[1:], label[1:])
