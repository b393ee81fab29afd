"""The dedupe scan in one task and spread over band parts, and the union-find, without Beam: what each
costs per image, per candidate and per pair, and what the largest task holds (docs/benchmarks.md, "Duplicates
while converting"; the arithmetic at 14 M and 2 B images is made from these).

    PYTHONPATH=$PWD python bench/dedupe_parts.py --count 100000 --part-target 25000
    PYTHONPATH=$PWD python bench/dedupe_parts.py --count 1000000 --part-target 250000 --pairs 2000000
    PYTHONPATH=$PWD python bench/dedupe_parts.py --keys-from OUTPUT --whole-only  # a conversion's own keys

With `--keys-from OUTPUT`, the keys are a conversion's: the chunk key files its prepare stage wrote in
OUTPUT's work directory (`.prep-tmp/groups/keys-*.npy`, kept while it runs: copy them aside), e.g. of
`bench/scale_sim.py`'s simulated pictures; `--whole-only` times the one scan task and the union-find alone.

Keys: `--count` images of 5 random 64-bit hashes (32 one bits, as `content_keys.comparable` keeps),
1% of them an exact copy of another and 1% a copy 2 bits away at one crop scale, written as the prepare stage
writes them (chunk key files of 1,024, dedupe_files.write_chunk_keys). Random hashes spread evenly over the
band values; photos' hashes do not (docs/leakage.md: 42.0 M candidates for 86,238 photos, 2.2 times as
many as even values give), so candidates per n² are printed for both.

Runs, each on one thread (CPU time of this process):
- whole: the one ScanTask (`beam_jobs.dedupe_scan.Scan`, a pool of 1 thread), as up to `part_target` images;
- parts: `scan_tasks` with `--part-target`, every BucketTask's `bucket`, the parts gathered as the GroupByKey
  would, and every part's `scan_part`; its pairs are checked equal to the whole scan's;
- components: `beam_jobs.dedupe.components` on the pairs found plus random ones up to `--pairs`, timed,
  then run again under tracemalloc for its peak.
Candidates are counted from the band values (each pair of distinct hashes the probes meet).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beam_jobs.dedupe import components  # noqa: E402
from beam_jobs.dedupe_scan import BucketTask, Scan, ScanTask, bucket, scan_part, scan_tasks  # noqa: E402
from prep.core import near_bands, storage  # noqa: E402
from prep.core.run import dedupe_files  # noqa: E402
from prep.core.run.dedupe_types import BandPairs, KeyFile  # noqa: E402
from prep.core.workdir import WorkDir, parse_scan_keys_name  # noqa: E402

CHUNK = 1024
PHOTO_CANDIDATES = 42.0e6 / 86_238**2  # per n², measured on the bench photos' hashes (docs/leakage.md)


def balanced(rnd: np.random.Generator, count: int) -> np.ndarray:
    """`count` random 64-bit hashes of 32 one bits each (`content_keys.comparable`)."""
    out = []
    for first in range(0, count, 1 << 16):
        ones = rnd.random((min(1 << 16, count - first), 64)).argsort(axis=1) < 32
        out.append(np.packbits(ones, axis=1).view(">u8").astype(np.uint64).ravel())
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


def make_keys(work: WorkDir, count: int, seed: int) -> list[KeyFile]:
    rnd = np.random.default_rng(seed)
    scales = dedupe_files.NUM_HASHES
    hashes = balanced(rnd, count * scales).reshape(count, scales)
    copies = rnd.choice(count, count // 50, replace=False)
    hashes[copies] = hashes[rnd.choice(count, len(copies))]  # exact, and (the second half) 2 bits away
    for row in copies[len(copies) // 2 :].tolist():
        column = int(rnd.integers(scales))
        h = int(hashes[row, column])
        one = int(rnd.choice([b for b in range(64) if h >> b & 1]))
        zero = int(rnd.choice([b for b in range(64) if not h >> b & 1]))
        hashes[row, column] = h ^ (1 << one) ^ (1 << zero)
    files = []
    for chunk, first in enumerate(range(0, count, CHUNK)):
        rows = np.arange(first, min(first + CHUNK, count))
        items = np.array([dedupe_files.item_id(chunk, p) for p in range(len(rows))], np.int64)
        files.append(KeyFile(chunk, dedupe_files.write_chunk_keys(work, chunk, items, hashes[rows])))
    return files


def candidates(work: WorkDir, files: list[KeyFile]) -> int:
    """Pairs of distinct hashes whose band values are equal or one bit apart, over every scale and band."""
    _, hashes = dedupe_files.read_scales(work, [f.chunk for f in files], range(dedupe_files.NUM_HASHES))
    hashes = near_bands.spread_bits(hashes)
    total = 0
    for scale in range(hashes.shape[1]):
        distinct = np.unique(hashes[:, scale])
        for band in range(near_bands.BANDS):
            sizes = np.bincount(near_bands.band_fields(distinct, band).astype(np.int64), minlength=1 << 16)
            total += int((sizes * (sizes - 1) // 2).sum())
            values = np.arange(1 << 16)
            for k in range(near_bands.WIDTH):
                low = values[(values >> k) & 1 == 0]
                total += int((sizes[low] * sizes[low | 1 << k]).sum())
    return total


def pairs_of(bands) -> list[tuple[int, int, int]]:
    return sorted(tuple(p) for b in bands for p in b.pairs.tolist())


def timed(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--part-target", type=int, default=25_000)
    parser.add_argument("--pairs", type=int, default=0, help="pairs for the union-find (random ones added)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keys-from", help="a conversion's OUTPUT whose work directory holds chunk key files")
    parser.add_argument("--whole-only", action="store_true", help="no band parts: the one scan task alone")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="dedupe-parts-")
    try:
        run(args, WorkDir(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def found_keys(work: WorkDir) -> list[KeyFile]:
    """The chunk key files a conversion wrote in its work directory."""
    chunks = sorted(c for c in map(parse_scan_keys_name, storage.list_names(work.groups_folder)) if c is not None)
    return [KeyFile(c, dedupe_files.chunk_keys_count(work, c) or 0) for c in chunks]


def run(args: argparse.Namespace, work: WorkDir) -> None:
    if args.keys_from:
        work = WorkDir(args.keys_from)
        files = found_keys(work)
    else:
        files = make_keys(work, args.count, args.seed)
    n = sum(f.items for f in files)
    cands = candidates(work, files)

    scan = Scan(work, near_bands.SCAN_CAP, workers=1)
    scan.setup()
    (task,) = scan_tasks((None, files), n)
    assert isinstance(task, ScanTask)
    whole, whole_cpu = timed(lambda: list(scan.process(task)))
    scan.teardown()
    if args.whole_only:
        found = [b for b in whole if len(b.pairs)]
        groups, union_cpu = timed(lambda: list(components((None, found), 1000)))
        print(f"\n{n:,} images in {len(files)} chunk key files, 5 crop scales x {near_bands.BANDS} bands; one thread")
        print(f"candidates: {cands:,} ({cands / n**2:.2e} n²); pairs found: {sum(len(b.pairs) for b in whole):,}")
        print(f"one scan task: {whole_cpu:.1f} s CPU, {whole_cpu / max(cands, 1) * 1e9:.1f} ns a candidate")
        print(f"components: {union_cpu:.2f} s CPU, {len(groups) - 1:,} chunks with grouped items")
        return

    tasks = list(scan_tasks((None, files), args.part_target))
    assert all(isinstance(t, BucketTask) for t in tasks)
    parts: dict[tuple, list[np.ndarray]] = {}

    def cut():
        for t in tasks:
            for key, rows in bucket(t, work):
                parts.setdefault(key, []).append(rows)

    _, bucket_cpu = timed(cut)
    shuffled = sum(r.nbytes for blocks in parts.values() for r in blocks)
    largest = max(sum(map(len, blocks)) for blocks in parts.values())
    found, part_cpu, slowest = [], 0.0, 0.0
    for key, blocks in parts.items():
        out, cpu = timed(lambda element=(key, blocks): list(scan_part(element, near_bands.SCAN_CAP)))
        found += out
        part_cpu += cpu
        slowest = max(slowest, cpu)
    assert pairs_of(found) == pairs_of(whole), "the parts' pairs differ from the whole scan's"
    bits = tasks[0].bits

    pairs = np.array(pairs_of(whole), np.int64).reshape(-1, 3)
    extra = max(0, args.pairs - len(pairs))
    rnd = np.random.default_rng(args.seed + 1)
    ids = np.array([dedupe_files.item_id(f.chunk, p) for f in files for p in range(f.items)], np.int64)
    a, b = rnd.choice(ids, extra), rnd.choice(ids, extra)
    keep = a != b
    more = np.c_[rnd.integers(1, 8, keep.sum()), np.minimum(a, b)[keep], np.maximum(a, b)[keep]]
    union_pairs = len(pairs) + len(more)
    found_pairs = [BandPairs(pairs, 0), BandPairs(more, 0)]
    groups, union_cpu = timed(lambda: list(components((None, found_pairs), 1000)))
    tracemalloc.start()  # numpy's arrays are traced too; the second run, for its peak alone
    list(components((None, found_pairs), 1000))
    union_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    print(f"\n{n:,} images ({args.count:,} made), 5 crop scales x {near_bands.BANDS} bands; CPU of one thread\n")
    print(
        f"candidates: {cands:,} ({cands / n**2:.2e} n², even values; photos: {PHOTO_CANDIDATES:.2e} n²); "
        f"pairs found: {len(pairs):,}\n"
    )
    print("| scan | tasks | bits | largest task, images | held by it, MB | shuffled, MB | CPU s | ns a candidate |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| one task | 1 | 0 | {n:,} | {n * 48 / 1e6:.0f} | 0 | {whole_cpu:.1f} | {whole_cpu / cands * 1e9:.1f} |")
    print(
        f"| band parts (--part-target {args.part_target:,}) | {len(tasks)} bucket + {len(parts):,} part | {bits} "
        f"| {largest:,} | {largest * 16 / 1e6:.1f} | {shuffled / 1e6:.0f} | {bucket_cpu:.1f} bucket + "
        f"{part_cpu:.1f} parts (slowest part {slowest:.2f}) | {(bucket_cpu + part_cpu) / cands * 1e9:.1f} |"
    )
    print(
        f"\nbucket: {bucket_cpu / n * 1e6:.2f} us an image ({len(near_bands.families(bits))} families a band, "
        f"{shuffled / n:.0f} bytes an image shuffled)"
    )
    print(
        f"components: {union_pairs:,} pairs, {len(groups) - 1:,} chunks with grouped items, {union_cpu:.1f} s CPU, "
        f"{union_cpu / max(union_pairs, 1) * 1e6:.2f} us a pair; peak {union_peak / 1e6:.0f} MB above its input "
        f"({union_peak / max(union_pairs, 1):.0f} bytes a pair)"
    )


if __name__ == "__main__":
    main()
