"""The write stage's copy, piece by piece, and on 1 and 2 threads against a bare copy of the same bytes.

    PYTHONPATH=$PWD python bench/write_parts.py --count 20000 --repeats 5
    PYTHONPATH=/work/main python bench/write_parts.py --count 20000 --repeats 5   # another checkout's code

Converts bench/data/jpeg<count> once (`prep convert SRC OUT --duplicates off --no-progress`, pass-through,
the embedded runner), keeping its work directory and the parts its write step was given. Then, in this
process, times (CPU of this thread, medians of `--repeats`) each piece the write step does for every record
of every part, alone: the source file read again (open, readv, close), the CRC check, SHA-256 and the write of
the framed bytes, and `shard_copy`'s whole fill of the blocks (read, check, Python). Last, the parts copied by
`shard_copy.copy_records` and by `bare`, the least that work takes (each image read into place between its
spilled bytes, blocks of 512 KiB written and hashed; no check), each on 1 thread and on 2 threads taking every
other part, as the write step's threads do: wall and CPU (the process's), medians, in turn in each repeat.
The ratio of 1 thread's wall to 2 threads' is how well each scales; `bare`'s is what this machine allows.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
import write_stage  # noqa: E402
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)


def capture(src: str, out: str):
    """Converts `src` once; returns (WriteParts of the run, its parts' entries in write order)."""
    captured, step = write_stage.capture(src, out, ["--duplicates", "off", "--no-progress"])
    return step, write_stage.part_entries(step._work, captured)


def bare(entries, source: str, path: str) -> None:
    """The least the write step does for a part of kept images (write_stage.bare_part), into its own file."""
    with open(path, "wb", buffering=0) as f:
        write_stage.bare_part(entries, source, f, hashlib.sha256())
    os.unlink(path)


def on_threads(copy, parts, threads: int, folder: str) -> None:
    """`copy(entries, path)` of every part, on `threads` threads each taking every `threads`-th part."""

    def run(i: int) -> None:
        for entries in parts[i::threads]:
            copy(entries, f"{folder}/part{i}")

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/prep-write-parts"))
    args = parser.parse_args()
    src = str(ensure_data(args.count))
    shutil.rmtree(args.out, ignore_errors=True)
    step, parts = capture(src, str(args.out / "out"))
    from prep.core.run import shard_copy
    from prep.core.tfrecord import masked_crc32c

    work, source = step._work, step._options.source
    records = sum(map(len, parts))
    if not write_stage.all_kept(parts):
        raise SystemExit("not every record is a kept image with its spilled bytes: pass-through only")
    blocks = [b for p in parts for b in shard_copy.blocks(p, shard_copy._BLOCK)]
    sizes = [sum(e.length for e in b) for b in blocks]
    buffer = bytearray(max(sizes) + 1)
    view = memoryview(buffer)
    prefix = os.fsencode(os.path.join(source, ""))
    folder = tempfile.mkdtemp(dir=args.out)

    def read_files():
        for p in parts:
            for e in p:
                fd = os.open(prefix + e.source, os.O_RDONLY)
                os.readv(fd, (view[: e.image + 1],))
                os.close(fd)

    def crc():
        for p in parts:
            for e in p:
                masked_crc32c(view[: e.length - 16])

    def sha():
        digest = hashlib.sha256()
        for size in sizes:
            digest.update(view[:size])

    def write():
        with open(f"{folder}/written", "wb", buffering=0) as f:
            for size in sizes:
                f.write(view[:size])
        os.unlink(f"{folder}/written")

    def fill():
        reread, reader = shard_copy._Source(source), shard_copy._SpillReader(work)
        for b in blocks:
            reader.fill(b, reread, buffer, None, 0)
        reader.close()

    print(
        f"{records:,} records in {len(parts)} parts, {sum(sizes) / 1e9:.2f} GB; load "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    print(f"{'piece (1 thread, CPU)':36} {'s':>6} {'us/rec':>7}")
    for name, fn in (
        ("source read again (open/readv/close)", read_files),
        ("CRC32C of the records", crc),
        ("SHA-256 of the blocks", sha),
        ("write of the blocks (new file)", write),
        ("shard_copy fill (read, check, Python)", fill),
    ):
        runs = []
        for _ in range(args.repeats):
            cpu = time.thread_time()
            fn()
            runs.append(time.thread_time() - cpu)
        s = statistics.median(runs)
        print(f"{name:36} {s:>6.3f} {s / records * 1e6:>7.1f}")

    def copy_records(entries, path):
        out = step._options.open_shard(path)
        out.finish(*shard_copy.copy_records(entries, out, work, source, None))
        os.unlink(path)

    def bare_copy(entries, path):
        bare(entries, source, path)

    copies = (("copy_records", copy_records), ("bare", bare_copy))
    cases: dict[tuple, list] = {(name, threads): [] for name, _ in copies for threads in (1, 2)}
    for _ in range(args.repeats):
        for name, copy in copies:
            for threads in (1, 2):
                wall, cpu = time.perf_counter(), time.process_time()
                on_threads(copy, parts, threads, folder)
                cases[name, threads].append((time.perf_counter() - wall, time.process_time() - cpu))
    print(f"{'copy':14} {'threads':>7} {'wall s':>7} {'cpu s':>7} {'us/rec':>7}  1/2 threads  wall runs")
    for name, threads in cases:
        runs = cases[name, threads]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        one = statistics.median(r[0] for r in cases[name, 1])
        gain = f"{one / wall:>11.2f}" if threads == 2 else " " * 11
        each = " ".join(f"{r[0]:.2f}" for r in runs)
        print(f"{name:14} {threads:>7} {wall:>7.2f} {cpu:>7.2f} {cpu / records * 1e6:>7.1f}  {gain}  {each}")
    shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
