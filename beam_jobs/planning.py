"""`PlanShards`: the planner of `prep.plan`, computed with bounded groups.

The reference planner sorts each class whole. Here no key ever holds more
than about `GROUP_TARGET` references, even for one class of 5 million:

    refs      # [PreparedRef fields]: the good inputs of one chunk, as plain tuples
    keyed     = FlatMap              # ((split, label, bucket), [PreparedRef fields]); bucket = top bits of the sort key
    sizes     = CombinePerKey(sum)   # ((split, label, bucket), (refs, bytes))
    infos     = GroupByKey(one key) | FlatMap(layout)
                                     # ((split, label, bucket), BucketInfo): the bucket's first rank in its
                                     # class and the class's segments; the one group holds only counts
    ranked    = CoGroupByKey(keyed, infos) | FlatMap(rank)
                                     # (ENTRY, (split, shard, num_shards, part, num_parts), [Entry fields])
                                     # or (CAPPED, label, count)

References travel in lists (a chunk's refs of one bucket; a bucket's entries
of one part): Beam's cost per element is paid on the runner's thread, so per
reference it would be a serial cost per image on a laptop. No list is longer
than the group it ends up in.

A bucket is a prefix of the sort key, so ranks inside a bucket, offset by the
sizes of the class's earlier buckets, are exact class ranks; `Layout.locate`
then gives split and shard exactly as `make_plan` does. A shard's entries are
further cut into `num_parts` parts by a prefix of the order key, so that no
group holds more than about `GROUP_TARGET` entries either; parts concatenated
in order are the shard in order-key order.

Only Create, ParDo, GroupByKey and Flatten (and composites of them) are used:
no side inputs, no tagged outputs, nothing emitted from finish_bundle, so the
DaskRunner, which translates only those four, runs it too.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import typing

import apache_beam as beam

from beam_jobs import storage
from beam_jobs.prepare import PreparedRef
from prep.plan import Layout, PlanOptions, make_layout, sort_key

GROUP_TARGET = 20_000
ENTRY, CAPPED = "entry", "capped"


def prefix_bits(count: int, target: int = GROUP_TARGET) -> int:
    """Bits of hash prefix so that `count` items split into groups of about `target`."""
    return 0 if count <= target else math.ceil(math.log2(count / target))


def prefix(key: bytes, bits: int) -> int:
    return int.from_bytes(key[:8], "big") >> (64 - bits) if bits else 0


class Entry(typing.NamedTuple):
    """A record's place: its order key inside the shard and where its bytes are.

    It travels as a plain tuple, like PreparedRef (see there); `Entry._make` names the fields.
    """

    order: bytes
    spill: int  # spill file (prepare.spill_id), offset and length of its framed record
    offset: int
    length: int
    label: int
    converted: bool
    source: bytes  # the input's path when the image is read from it again (see PreparedRef), else b""
    cut: int
    image: int


@dataclasses.dataclass(frozen=True)
class BucketInfo:
    start: int  # rank of the bucket's first ref within its (split, label) group
    layout: Layout  # trimmed to the bucket's group
    part_bits: dict  # split -> bits of order-key prefix for parts


def _sum_pairs(pairs):
    refs = size = 0
    for n, b in pairs:
        refs += n
        size += b
    return refs, size


def layout_infos(element, num_classes: int, options: PlanOptions, tmp_dir: str | None, group_target: int):
    """(None, [((split, label, bucket), (refs, bytes))]) -> ((split, label, bucket), BucketInfo) per bucket."""
    _, sizes = element
    sizes = sorted(sizes)
    groups: dict[tuple, int] = {}
    total_refs = total_bytes = 0
    for (split, label, _), (refs, size) in sizes:
        groups[(split or None, label)] = groups.get((split or None, label), 0) + refs
        total_refs += refs
        total_bytes += size
    layout = make_layout(groups, num_classes, options, total_bytes / max(1, total_refs))
    if tmp_dir is not None:
        storage.write_atomic(storage.join(tmp_dir, "plan.json"),
                             json.dumps({"shards": sum(s.num_shards for s in layout.splits)}).encode())
    part_bits = {s.name: prefix_bits(math.ceil(s.examples / s.num_shards), group_target) for s in layout.splits}
    starts: dict[tuple, int] = {}
    for (split, label, bucket), (refs, _) in sizes:
        group = (split or None, label)
        start = starts.get(group, 0)
        starts[group] = start + refs
        trimmed = Layout({group: layout.segments[group]}, {group: layout.kept[group]}, layout.splits)
        yield (split, label, bucket), BucketInfo(start, trimmed, part_bits)


def key_by_bucket(refs, seed: int, bits: int):
    """[PreparedRef fields] -> ((split, label, bucket), [PreparedRef fields]) for each bucket the refs fall in."""
    buckets: dict[tuple, list] = {}
    for fields in refs:
        r = PreparedRef._make(fields)
        buckets.setdefault((r.split, r.label, prefix(sort_key(seed, r.path), bits)), []).append(fields)
    return buckets.items()


def bucket_size(element):
    """((split, label, bucket), [PreparedRef fields]) -> (same key, (refs, bytes))."""
    key, refs = element
    return key, (len(refs), sum(PreparedRef._make(r).length for r in refs))


def rank_bucket(element, seed: int):
    """((split, label, bucket), {"refs": [[...]], "info": [BucketInfo]})
    -> (ENTRY, part key, [Entry fields]) per part the bucket sends entries to, and (CAPPED, label, count)."""
    (split, label, _), joined = element
    (info,) = joined["info"]
    group = (split or None, label)
    refs = sorted(map(PreparedRef._make, itertools.chain.from_iterable(joined["refs"])),
                  key=lambda r: (sort_key(seed, r.path), r.path))
    parts: dict[tuple, list] = {}
    capped = 0
    for rank, ref in enumerate(refs, start=info.start):
        where = info.layout.locate(group, rank)
        if where is None:
            capped += 1
            continue
        split_name, shard = where
        bits = info.part_bits[split_name]
        order = sort_key(seed, ref.path, "order")
        key = (split_name, shard, info.layout.split(split_name).num_shards, prefix(order, bits), 1 << bits)
        parts.setdefault(key, []).append((order, ref.spill, ref.offset, ref.length, ref.label, ref.converted,
                                          ref.path if ref.image else b"", ref.cut, ref.image))
    for key, entries in parts.items():
        yield ENTRY, key, entries
    if capped:
        yield CAPPED, label, capped


class PlanShards(beam.PTransform):
    """[PreparedRef fields] -> (ENTRY, part key, [Entry fields]) and (CAPPED, label, count), exactly as
    `prep.plan.make_plan` decides."""

    def __init__(self, num_classes: int, options: PlanOptions, total_refs: int, tmp_dir: str | None = None,
                 group_target: int = GROUP_TARGET):
        super().__init__()
        self._num_classes = num_classes
        self._options = options
        self._bits = prefix_bits(total_refs, group_target)
        self._tmp_dir = tmp_dir
        self._group_target = group_target

    def expand(self, refs):
        seed, bits = self._options.seed, self._bits
        keyed = refs | "KeyByBucket" >> beam.FlatMap(key_by_bucket, seed, bits)
        infos = (
            keyed
            | "BucketSize" >> beam.Map(bucket_size)
            | "SumBuckets" >> beam.CombinePerKey(_sum_pairs)
            | "OneKey" >> beam.Map(lambda kv: (None, kv))
            | "GatherSizes" >> beam.GroupByKey()
            | "Layout" >> beam.FlatMap(layout_infos, self._num_classes, self._options, self._tmp_dir,
                                         self._group_target)
        )
        return (
            {"refs": keyed, "info": infos}
            | "JoinBuckets" >> beam.CoGroupByKey()
            | "Rank" >> beam.FlatMap(rank_bucket, seed)
        )
