"""Scale check of the Beam planner alone: N synthetic references, one class holding half.

    python bench/plan_scale.py                   # 1,000,000 refs, 20 classes, 64 shards, 3 splits
    python bench/plan_scale.py --refs 200000
    python bench/plan_scale.py --refs 1000000 --shards 20000 --inline-max 0   # LAION's shape: every section
                                                                             # in entry files (before issue 37)

A child process stages what PrepareChunk leaves for the planner: chunk indexes
in .prep-tmp, in `ordering.listing_order`, chunks of `ordering.MAX_CHUNK`, with one
reference in `--reject-every` rejected. Then `beam_jobs.plan.PlanShards`
runs on the embedded in-memory runner (no images) from the chunks' counts,
the shard parts' sections are grouped as the real pipeline groups them, and
the balance promise is checked exactly from per-(split, shard, label) counts
read back from the entry files. Prints the time and peak RSS of each step and
the most references any rank task or shard part held, and how many sections the
writers read from entry files (one ranged read, a request on an object store, each)
and how many travelled with their entries (`plan.INLINE_MAX`); writes JSON to
bench/results/plan-scale-<refs>.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pathlib
import resource
import shutil
import tempfile
import time

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_jobs import prepare
from beam_jobs.plan import GROUP_TARGET, INLINE_MAX, PartEntries, PlanShards, read_section
from prep.core.layout import PlanOptions, parse_split_fractions
from prep.core.listing import InputRef, Reject
from prep.core.ordering import chunk_size, listing_order, make_chunks
from prep.core.run import checkpoints
from prep.core.workdir import WorkDir

HERE = pathlib.Path(__file__).parent


def class_counts(refs: int, classes: int) -> list[int]:
    half = refs // 2
    rest = refs - half
    return [half] + [rest // (classes - 1) + (1 if i < rest % (classes - 1) else 0) for i in range(classes - 1)]


def stage(tmp_dir: str, counts: list[int], seed: int, reject_every: int, out: str) -> None:
    """Writes the chunk indexes and, to `out`, [(chunk, counts)] and the rejected count (child process)."""
    start = time.perf_counter()
    inputs = [
        InputRef(f"class{label:02d}/img{i:08d}.jpg", f"class{label:02d}", None)
        for label, n in enumerate(counts)
        for i in range(n)
    ]
    chunks = make_chunks(listing_order(inputs, seed), chunk_size(len(inputs)))
    del inputs
    elements, rejected, n = [], 0, 0
    for chunk, refs in enumerate(chunks):
        outcomes = []
        for ref in refs:
            if reject_every and n % reject_every == 0:
                outcomes.append((prepare.REJECT, Reject(ref.path, "corrupt", "")))
                rejected += 1
            else:
                outcomes.append(
                    (
                        prepare.OK,
                        prepare.PreparedRef(
                            path=ref.path.encode(),
                            label=int(ref.label[5:]),
                            split="",
                            spill=n // 256,
                            offset=(n % 256) * 120_000,
                            length=110_000,
                            converted=False,
                            cut=0,
                            image=0,
                        ),
                    )
                )
            n += 1
        checkpoints.write_chunk_index(WorkDir(tmp_dir), chunk, outcomes, {}, [])
        elements.append((chunk, prepare.chunk_counts([v for kind, v in outcomes if kind == prepare.OK])))
        chunks[chunk] = None
    with open(out, "w") as f:
        json.dump(
            {
                "elements": elements,
                "rejected": rejected,
                "seconds": time.perf_counter() - start,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            },
            f,
        )


def count_part(element, work):
    """(part key, [Section]) -> the part's size and its ((split, shard, label), count)s."""
    (split, shard, _, _, _), sections = element
    labels: dict[int, int] = {}
    size = inline = 0
    for section in sections:
        inline += bool(section.data)
        for e in read_section(work, section):
            labels[e.label] = labels.get(e.label, 0) + 1
            size += 1
    reads = ("reads", len(sections) - inline)
    return [("size", size), reads, ("inline", inline)] + [((split, shard, label), n) for label, n in labels.items()]


def summarise(element, out_path):
    counts, largest, sections = {}, 0, {"reads": 0, "inline": 0}
    for key, value in element[1]:
        if key == "size":
            largest = max(largest, value)
        elif key in sections:
            sections[key] += value
        else:
            counts[key] = counts.get(key, 0) + value
    with open(out_path, "w") as f:
        json.dump({"largest_part": largest, "counts": [[list(k), v] for k, v in counts.items()], **sections}, f)
    yield None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refs", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--reject-every", type=int, default=97)
    parser.add_argument("--inline-max", type=int, default=INLINE_MAX, help="bytes: smaller sections travel inline")
    args = parser.parse_args(argv)
    counts = class_counts(args.refs, args.classes)
    options = PlanOptions(
        num_shards=args.shards, seed=1, split_fractions=parse_split_fractions("train=0.8,validation=0.1,test=0.1")
    )
    work = tempfile.mkdtemp(prefix="plan-scale-")
    try:
        staged = f"{work}/staged.json"
        child = multiprocessing.get_context("fork").Process(
            target=stage, args=(work, counts, options.seed, args.reject_every, staged)
        )
        child.start()
        child.join()
        staging = json.loads(pathlib.Path(staged).read_text())
        elements = [
            prepare.ChunkCounts(chunk, tuple(prepare.GroupCount(*c) for c in cs)) for chunk, cs in staging["elements"]
        ]
        del staging["elements"]
        held = {chunk: sum(c[2] for c in cs) for chunk, cs in elements}
        out_path = f"{work}/summary.json"
        start = time.perf_counter()
        with beam.Pipeline(runner=FnApiRunner()) as p:
            ranked = (
                p
                | "Counts" >> beam.Create(elements)
                | "Plan" >> PlanShards(args.classes, options, WorkDir(work), inline_max=args.inline_max)
            )
            (
                ranked
                | "Sections" >> beam.FlatMap(lambda r: [(r.key, r.section)] if isinstance(r, PartEntries) else [])
                | "GroupParts" >> beam.GroupByKey()
                | "Count" >> beam.FlatMap(count_part, WorkDir(work))
                | "OneKey" >> beam.Map(lambda x: (None, x))
                | "Gather" >> beam.GroupByKey()
                | "Summarise" >> beam.FlatMap(summarise, out_path)
            )
        seconds = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = json.loads(pathlib.Path(out_path).read_text())
        from beam_jobs.plan import layout_tasks

        tasks = list(layout_tasks((None, elements), args.classes, options, WorkDir(work), GROUP_TARGET))
        largest_task = max(sum(held[chunk] for chunk, _ in task.chunks) for _, task in tasks)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per = {}
    for (split, shard, label), n in result["counts"]:
        per.setdefault(split, {}).setdefault(shard, {})[label] = n
    ok = True
    for shards in per.values():
        sizes = [sum(c.values()) for c in shards.values()]
        ok &= len(shards) == args.shards and max(sizes) - min(sizes) <= 1
        for label in range(args.classes):
            spread = [c.get(label, 0) for c in shards.values()]
            ok &= max(spread) - min(spread) <= 1
    written = sum(n for _, n in result["counts"])
    ok &= written == args.refs - staging["rejected"] and len(per) == 3
    print(
        f"{'refs':>10}{'rejected':>9}{'classes':>8}{'shards/split':>13}{'stage s':>8}{'stage MB':>9}"
        f"{'plan s':>7}{'plan MB':>8}{'largest task':>13}{'largest part':>13}{'target':>7}{'balanced':>9}"
        f"{'file reads':>11}{'inline':>9}"
    )
    print(
        f"{args.refs:>10}{staging['rejected']:>9}{args.classes:>8}{args.shards:>13}{staging['seconds']:>8.1f}"
        f"{staging['peak_rss_mb']:>9.0f}{seconds:>7.1f}{peak_mb:>8.0f}{largest_task:>13}"
        f"{result['largest_part']:>13}{GROUP_TARGET:>7}{str(ok):>9}{result['reads']:>11}{result['inline']:>9}"
    )
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"plan-scale-{args.refs}.json").write_text(
        json.dumps(
            {
                "refs": args.refs,
                "rejected": staging["rejected"],
                "classes": args.classes,
                "shards": args.shards,
                "stage_seconds": staging["seconds"],
                "stage_peak_rss_mb": staging["peak_rss_mb"],
                "plan_seconds": seconds,
                "plan_peak_rss_mb": peak_mb,
                "largest_task": largest_task,
                "largest_part": result["largest_part"],
                "balanced": ok,
                "written": written,
                "inline_max": args.inline_max,
                "section_reads": result["reads"],
                "inline_sections": result["inline"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
