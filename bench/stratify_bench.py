"""How evenly shards hold each class when images have several labels: ours, iterative stratification, random.

A COCO-like skewed distribution (references only, no pixels): 80 classes with power-law
frequencies (weight 1 / (c + 1) ** 1.5: the commonest class is in ~80% of images, the
rarest in ~1%), 1-20 boxes per image, each box's class drawn from those weights; an
image's labels are the classes of its boxes.

* ours: `prep.core.annotations.stratify` gives each image its stratum and key; the shards
  are planned by the real layout rule (`prep.core.layout.make_layout` on the (stratum)
  groups, ranks by key, position p of a split to shard p mod N), as
  tests/support/reference_plan.py does with the seeded path hash. "with locate": stratify
  is given the layout's rank -> (split, shard) map for the strata's sizes; "blind": not.
  "rejected after stratify": a seeded fraction of the images is left out after the keys
  are made, as inputs rejected when prepared are, so the ranks after each shift by one.
* iterstrat: the `iterative-stratification` package's MultilabelStratifiedKFold with
  n_splits = shards (shuffle, same seed); fold k's test set is shard k. It is built for
  exactly this N-way partition, and knows N, which ours does not.
* random: a seeded shuffle dealt p mod N (today's single-label planner with one class).

For each shard j and class c, the deviation is |images of c in j - n_c * |j| / n|; the
table gives its largest value over shards and classes, and the mean. Also: the peak
memory of `stratify` (tracemalloc) and the time of each method.

    python bench/stratify_bench.py            # 100,000 images, 64 shards
    python bench/stratify_bench.py --quick    # 5,000 images, 16 shards
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections import Counter
from fractions import Fraction

import numpy as np

from prep.core.annotations import stratify
from prep.core.annotations.strata import strata_of
from prep.core.layout import PlanOptions, make_layout, parse_split_fractions


def make_dataset(
    images: int, classes: int = 80, seed: int = 0, alpha: float = 1.5, boxes: tuple[int, int] = (1, 20)
) -> list[tuple[str, tuple[int, ...]]]:
    """(path, label ids present) per image, COCO-like skewed."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, classes + 1) ** alpha
    weights /= weights.sum()
    # Class ids shuffled so that the commonest class is not id 0 (ties by id must not help).
    ids = rng.permutation(classes)
    counts = rng.integers(boxes[0], boxes[1] + 1, size=images)
    drawn = ids[rng.choice(classes, size=int(counts.sum()), p=weights)]
    out, start = [], 0
    for i, k in enumerate(counts):
        out.append((f"img/{i:07d}.jpg", tuple(sorted(set(drawn[start : start + k].tolist())))))
        start += k
    return out


def plan_ours(
    images,
    classes: int,
    num_shards: int,
    seed: int = 0,
    split: tuple[tuple[str, Fraction], ...] | None = None,
    informed: bool = True,
    trace: bool = True,
    rejected: float = 0.0,
) -> tuple[dict[str, np.ndarray], float, float]:
    """({split: shard of each image, -1 elsewhere}, stratify's peak bytes (traced), its seconds (untraced)).

    `informed`: stratify is given the layout's rank -> (split, shard) map (`locate`), as the
    planner can once the strata's sizes are known; else it plans blind (the dyadic keys).
    `rejected`: this fraction of the images (seeded) is left out after `stratify`, as images
    rejected when prepared are, and the rest planned with their keys (ranks shift).
    """
    options = PlanOptions(seed=seed, num_shards=num_shards, split_fractions=split)

    def group(stratum):  # the planner's group of a stratum: the unlabelled after every class
        return None, classes if stratum is None else stratum

    def run_stratify():
        locate = None
        if informed:
            sizes = Counter(group(s) for s in strata_of(images, classes))
            layout_before = make_layout(dict(sizes), classes + 1, options, 1.0)
            locate = lambda stratum, rank: layout_before.locate(group(stratum), rank)  # noqa: E731
        return stratify(images, classes, seed, locate)

    began = time.perf_counter()
    result = run_stratify()
    seconds = time.perf_counter() - began
    peak = 0.0
    if trace:
        tracemalloc.start()  # a second run, traced: tracing slows it down
        run_stratify()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    kept = np.random.default_rng(seed + 1).random(len(images)) >= rejected
    groups: dict[tuple, list[int]] = {}
    for i, (stratum, _key) in enumerate(result):
        if kept[i]:
            groups.setdefault(group(stratum), []).append(i)
    for members in groups.values():  # rank order: the key, then the path (as the planner sorts)
        members.sort(key=lambda i: (result[i][1], images[i][0]))
    layout = make_layout({g: len(m) for g, m in groups.items()}, classes + 1, options, 1.0)
    shards = {s.name: np.full(len(images), -1) for s in layout.splits}
    for g, members in groups.items():
        for rank, i in enumerate(members):
            name, shard = layout.locate(g, rank)
            shards[name][i] = shard
    return shards, peak, seconds


def plan_iterstrat(images, classes: int, num_shards: int, seed: int = 0) -> np.ndarray:
    from iterstrat.ml_stratifiers import MultilabelStratifiedKFold

    y = indicator(images, classes)
    shard = np.full(len(images), -1)
    folds = MultilabelStratifiedKFold(n_splits=num_shards, shuffle=True, random_state=seed)
    for k, (_, test) in enumerate(folds.split(np.zeros((len(images), 1)), y)):
        shard[test] = k
    return shard


def plan_random(n: int, num_shards: int, seed: int = 0) -> np.ndarray:
    shard = np.empty(n, dtype=np.int64)
    shard[np.random.default_rng(seed).permutation(n)] = np.arange(n) % num_shards
    return shard


def indicator(images, classes: int) -> np.ndarray:
    y = np.zeros((len(images), classes), dtype=np.int8)
    for i, (_, labels) in enumerate(images):
        y[i, list(labels)] = 1
    return y


def deviations(shard: np.ndarray, y: np.ndarray, num_shards: int) -> tuple[float, float, int]:
    """(largest, mean) |count - proportional share| over shards and classes of the images in `shard`
    (those with shard >= 0), and the largest shard size minus the smallest."""
    inside = shard >= 0
    counts = np.zeros((num_shards, y.shape[1]))
    np.add.at(counts, shard[inside], y[inside])
    sizes = np.bincount(shard[inside], minlength=num_shards)
    share = np.outer(sizes / inside.sum(), y[inside].sum(axis=0))
    dev = np.abs(counts - share)
    return float(dev.max()), float(dev.mean()), int(sizes.max() - sizes.min())


def run(
    images: int,
    classes: int,
    num_shards: int,
    seed: int,
    split: str | None,
    iterstrat: bool,
    rejects: tuple[float, ...] = (),
) -> list[dict]:
    data = make_dataset(images, classes, seed)
    y = indicator(data, classes)
    rows = []
    ours, peak, seconds = plan_ours(data, classes, num_shards, seed)
    rows.append(
        dict(
            method="ours (stratify with locate)",
            seconds=seconds,
            peak=peak,
            **_stats(deviations(ours["train"], y, num_shards)),
        )
    )
    blind, peak, seconds = plan_ours(data, classes, num_shards, seed, informed=False)
    rows.append(
        dict(
            method="ours blind (no locate: dyadic keys)",
            seconds=seconds,
            peak=peak,
            **_stats(deviations(blind["train"], y, num_shards)),
        )
    )
    for rejected in rejects:
        late, _, _ = plan_ours(data, classes, num_shards, seed, trace=False, rejected=rejected)
        rows.append(
            dict(
                method=f"ours, {rejected:.1%} rejected after stratify",
                **_stats(deviations(late["train"], y, num_shards)),
            )
        )
    if iterstrat:
        began = time.perf_counter()
        shard = plan_iterstrat(data, classes, num_shards, seed)
        rows.append(
            dict(
                method="iterstrat MultilabelStratifiedKFold",
                seconds=time.perf_counter() - began,
                **_stats(deviations(shard, y, num_shards)),
            )
        )
    rows.append(
        dict(method="random, dealt p mod N", **_stats(deviations(plan_random(images, num_shards, seed), y, num_shards)))
    )
    if split:
        fractions = parse_split_fractions(split)
        planned, _, _ = plan_ours(data, classes, num_shards, seed, fractions, trace=False)
        for name, fraction in fractions:
            member = planned[name] >= 0
            expected = y.sum(axis=0) * float(fraction)
            off = np.abs(y[member].sum(axis=0) - expected)
            rows.append(
                dict(
                    method=f"ours, split {name} ({member.sum()} images)",
                    split_dev=float(off.max()),
                    **_stats(deviations(planned[name], y, num_shards)),
                )
            )
        # random: a seeded shuffle, the first fraction to the first split
        order, begin = np.random.default_rng(seed).permutation(images), 0
        for name, fraction in fractions:
            take = order[begin : begin + round(images * float(fraction))]
            begin += len(take)
            shard = np.full(images, -1)
            shard[take] = np.arange(len(take)) % num_shards
            off = np.abs(y[take].sum(axis=0) - y.sum(axis=0) * float(fraction))
            rows.append(
                dict(
                    method=f"random, split {name}",
                    split_dev=float(off.max()),
                    **_stats(deviations(shard, y, num_shards)),
                )
            )
    return rows


def _stats(values):
    largest, mean, spread = values
    return {"max_dev": largest, "mean_dev": mean, "size_spread": spread}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--split", default="train=0.8,validation=0.2", help="also plan ours with these split fractions ('' for none)"
    )
    parser.add_argument(
        "--rejects",
        default="0.001,0.01",
        help="also plan ours with these fractions of images left out after stratify ('' for none)",
    )
    parser.add_argument("--no-iterstrat", action="store_true", help="leave out iterstrat (slow on large inputs)")
    parser.add_argument("--quick", action="store_true", help="5,000 images, 16 shards")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.shards = 5_000, 16
    rejects = tuple(float(f) for f in args.rejects.split(",") if f.strip())
    rows = run(args.images, args.classes, args.shards, args.seed, args.split or None, not args.no_iterstrat, rejects)
    print(f"{args.images} images, {args.classes} classes, {args.shards} shards, seed {args.seed}")
    print(f"{'method':44} {'max dev':>8} {'mean dev':>9} {'sizes':>6} {'split dev':>9} {'seconds':>8} {'peak MB':>8}")
    for r in rows:
        print(
            f"{r['method']:44} {r['max_dev']:8.2f} {r['mean_dev']:9.3f} {r['size_spread']:6d} "
            f"{_opt(r, 'split_dev', '9.2f')} {_opt(r, 'seconds', '8.2f')} {_opt(r, 'peak', '8.1f', 1e-6)}"
        )
    ours, random = rows[0]["max_dev"], next(r for r in rows if r["method"].startswith("random"))["max_dev"]
    print(
        f"random / ours (max dev): {random / ours:.1f}x"
        + (
            f"; iterstrat / ours: {next(r for r in rows if r['method'].startswith('iterstrat'))['max_dev'] / ours:.2f}x"
            if not args.no_iterstrat
            else ""
        )
    )


def _opt(row, key, fmt, scale=1.0):
    return format(row[key] * scale, fmt) if key in row else " " * int(fmt.split(".")[0])


if __name__ == "__main__":
    main()
