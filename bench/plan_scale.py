"""Scale check of the Beam planner alone: N synthetic references, one class holding half.

    python bench/plan_scale.py                   # 1,000,000 refs, 20 classes, 64 shards, 3 splits
    python bench/plan_scale.py --refs 200000

Runs `beam_jobs.planning.PlanShards` on the embedded in-memory runner (no
images), groups the planned entries by shard part as the real pipeline does,
and checks the balance promise exactly from per-(split, shard, label) counts.
Prints time, peak RSS and the largest group any key held; writes JSON to
bench/results/plan-scale-<refs>.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import tempfile
import time

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_jobs.planning import ENTRY, GROUP_TARGET, Entry, PlanShards
from beam_jobs.prepare import PreparedRef
from prep.plan import PlanOptions, parse_split_fractions

HERE = pathlib.Path(__file__).parent


def synthetic(index_range, counts):
    """PreparedRef for refs in index_range; class c holds counts[c] refs."""
    bounds, total = [], 0
    for n in counts:
        total += n
        bounds.append(total)
    label = 0
    for i in index_range:
        while i >= bounds[label]:
            label += 1
        yield PreparedRef(f"class{label:02d}/img{i:08d}.jpg", label, "", i // 256, (i % 256) * 120_000, 110_000, False, 0, 0)


def summarise(element, out_path):
    counts = {}
    largest = 0
    for key, value in element[1]:
        if key == "size":
            largest = max(largest, value)
        else:
            counts[key] = counts.get(key, 0) + value
    with open(out_path, "w") as f:
        json.dump({"largest_group": largest, "counts": [[list(k), v] for k, v in counts.items()]}, f)
    yield None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--shards", type=int, default=64)
    args = parser.parse_args(argv)
    half = args.refs // 2
    rest = args.refs - half
    counts = [half] + [rest // (args.classes - 1) + (1 if i < rest % (args.classes - 1) else 0)
                       for i in range(args.classes - 1)]
    options = PlanOptions(num_shards=args.shards, seed=1,
                          split_fractions=parse_split_fractions("train=0.8,validation=0.1,test=0.1"))
    slices = [range(s, min(s + 10_000, args.refs)) for s in range(0, args.refs, 10_000)]
    out_path = tempfile.mktemp(suffix=".json")
    start = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        parts = (
            p
            | "Slices" >> beam.Create([(r.start, r.stop) for r in slices])
            | "Refs" >> beam.FlatMap(lambda se: _chunks(list(synthetic(range(*se), counts))))  # [PreparedRef]
            | "Plan" >> PlanShards(args.classes, options, args.refs)
            | "Entries" >> beam.FlatMap(lambda r: [(r[1], r[2])] if r[0] == ENTRY else [])
            | "GroupParts" >> beam.GroupByKey()
        )
        (
            parts
            | "Flat" >> beam.Map(lambda kv: (kv[0], [e for entries in kv[1] for e in entries]))
            | "Count" >> beam.FlatMap(lambda kv: [(("size"), len(kv[1]))] + [
                ((kv[0][0], kv[0][1], label), n) for label, n in _by_label(kv[1]).items()])
            | "OneKey" >> beam.Map(lambda x: (None, x))
            | "Gather" >> beam.GroupByKey()
            | "Summarise" >> beam.FlatMap(summarise, out_path)
        )
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = json.loads(pathlib.Path(out_path).read_text())
    per = {}
    for (split, shard, label), n in result["counts"]:
        per.setdefault(split, {}).setdefault(shard, {})[label] = n
    ok = True
    for split, shards in per.items():
        sizes = [sum(c.values()) for c in shards.values()]
        ok &= len(shards) == args.shards and max(sizes) - min(sizes) <= 1
        for label in range(args.classes):
            spread = [c.get(label, 0) for c in shards.values()]
            ok &= max(spread) - min(spread) <= 1
    written = sum(n for _, n in result["counts"])
    print(f"{'refs':>10}{'classes':>9}{'shards/split':>14}{'seconds':>9}{'peak RSS MB':>13}"
          f"{'largest group':>15}{'group target':>14}{'balanced':>10}")
    print(f"{args.refs:>10}{args.classes:>9}{args.shards:>14}{seconds:>9.1f}{peak_mb:>13.0f}"
          f"{result['largest_group']:>15}{GROUP_TARGET:>14}{str(ok and written == args.refs):>10}")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"plan-scale-{args.refs}.json").write_text(json.dumps({
        "refs": args.refs, "classes": args.classes, "shards": args.shards, "seconds": seconds,
        "peak_rss_mb": peak_mb, "largest_group": result["largest_group"], "balanced": ok,
        "written": written}, indent=2))


def _chunks(refs, size=256):
    """Lists of refs as PrepareChunk emits them (plain tuples), one per chunk."""
    return [[(r.path.encode(), *r[1:]) for r in refs[i:i + size]] for i in range(0, len(refs), size)]


def _by_label(entries):
    counts = {}
    for e in map(Entry._make, entries):
        counts[e.label] = counts.get(e.label, 0) + 1
    return counts


if __name__ == "__main__":
    main()
