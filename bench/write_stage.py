"""The write stage alone (`beam_jobs.write.WriteParts`), its CPU per record, for two checkouts side by side.

    PYTHONPATH=$PWD python bench/write_stage.py --count 20000 --other /work/main --repeats 5
    PYTHONPATH=$PWD python bench/write_stage.py --count 2000 --other /work/main -- --resize 128

Each checkout, in a fresh process of its own (`PYTHONPATH` set to it), converts bench/data/jpeg<count>
once (`prep convert SRC OUT --num-shards 8 --duplicates off --no-progress [ARGS after --]`, the embedded
runner) keeping its work directory and the elements its write step was given; then runs that write step
again on them, `--repeats` times, each a fresh `WriteParts` (setup, process, teardown) writing the same
shards again, timed by the process's CPU (user + system of every thread: `time.process_time`) and wall
clock. The two checkouts' processes run at once, their repeats in lock step (each waits for the other's
before the next), so that a machine shared with other work slows both alike. Prints the medians, the
ratio and CPU microseconds per record, and whether both wrote the same shard bytes. Only the write step
is timed: not the rest of the conversion, nor `ConcatParts` (a shard of more than
`plan.GROUP_TARGET` records).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)


def capture(src: str, out: str, argv: list[str]) -> tuple:
    """Runs `prep convert SRC OUT ARGV` once in this process, keeping its work directory; gives the
    elements its write step was given and that step (`WriteParts`). bench/write_parts.py uses it too."""
    from beam_jobs import write
    from prep.cli import main
    from prep.core.run import checkpoints

    captured: list = []
    made: list = []
    process, delete = write.WriteParts.process, checkpoints.delete_work

    def keep(self, element):
        captured.append(element)
        made.append(self)
        return process(self, element)

    write.WriteParts.process = keep
    checkpoints.delete_work = lambda work: None
    shutil.rmtree(out, ignore_errors=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its summary: stdout may carry a caller's JSON lines
            main(["convert", src, out, *argv], standalone_mode=False)
    finally:
        write.WriteParts.process, checkpoints.delete_work = process, delete
    return captured, made[0]


def part_entries(work, captured) -> list:
    """The planned entries of each part the write step was given, in write order."""
    from beam_jobs.plan import read_section

    parts: dict = {}
    for _, items in captured:
        for key, section in items:
            parts.setdefault(key, []).extend(read_section(work, section))
    return [sorted(parts[key]) for key in sorted(parts)]


def all_kept(parts: list) -> bool:
    """Whether every record is a kept image whose spilled bytes came with it (pass-through): what
    `bare_part` copies."""
    return all(e.image and e.rest and e.relabel < 0 for p in parts for e in p)


def bare_part(entries, source: str, f, digest) -> None:
    """The least the write step does for a part of kept images: each image read from its file into place
    between its spilled bytes, in blocks of 512 KiB written to `f` and hashed into `digest`; no check."""
    buffer = bytearray(1 << 20)
    view, prefix = memoryview(buffer), os.fsencode(os.path.join(source, ""))
    pos = 0
    for e in entries:
        if pos + e.length > 512 << 10 and pos:
            f.write(view[:pos])
            digest.update(view[:pos])
            pos = 0
        if e.length > len(buffer):
            buffer = bytearray(e.length)
            view = memoryview(buffer)
        view[pos : pos + e.cut] = e.rest[: e.cut]
        fd = os.open(prefix + e.source, os.O_RDONLY)
        os.readv(fd, (view[pos + e.cut : pos + e.cut + e.image],))
        os.close(fd)
        view[pos + e.cut + e.image : pos + e.length] = e.rest[e.cut :]
        pos += e.length
    f.write(view[:pos])
    digest.update(view[:pos])


def bare_copy(parts: list, source: str, path: str) -> tuple[float, float]:
    """(wall s, CPU s) of `bare_part` for every part into one file, on one thread: no thread hand-off, no
    part files, no rename."""
    wall, cpu = time.perf_counter(), time.process_time()
    digest = hashlib.sha256()
    with open(path, "wb", buffering=0) as f:
        for entries in parts:
            bare_part(entries, source, f, digest)
    os.unlink(path)
    return time.perf_counter() - wall, time.process_time() - cpu


def child(src: str, out: str, repeats: int, extra: list[str], floor: bool) -> None:
    """Converts once keeping the write step's elements, then times the write step `repeats` times, each
    after a line on stdin; prints one JSON line a repeat, then the shards' digest."""
    from beam_jobs import write

    captured, first = capture(src, out, ["--num-shards", "8", "--duplicates", "off", "--no-progress", *extra])
    parts = part_entries(first._work, captured) if floor else []
    parts = parts if all_kept(parts) else []
    print(json.dumps({"ready": len(captured)}), flush=True)
    for _ in range(repeats):
        sys.stdin.readline()
        for path in pathlib.Path(out).glob("*.tfrecord"):  # written anew, as a conversion does, not replaced
            path.unlink()
        step = write.WriteParts(first._work, first._options, first._workers, first._width)
        wall, cpu = time.perf_counter(), time.process_time()
        step.setup()
        records = 0
        for element in captured:
            for output in step.process(element):
                records += output.info.examples if hasattr(output, "info") else output.examples
        step.teardown()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        run = {"wall": wall, "cpu": cpu, "records": records}
        if parts:
            run["floor_wall"], run["floor_cpu"] = bare_copy(parts, first._options.source, f"{out}/floor.bin")
        print(json.dumps(run), flush=True)
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(out).glob("*.tfrecord")):
        digest.update(path.name.encode() + path.read_bytes())
    print(json.dumps({"digest": digest.hexdigest()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--other", type=pathlib.Path, help="the other checkout's root")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/prep-write-stage"))
    parser.add_argument("--data", type=pathlib.Path, help="convert this folder instead of bench/data/jpeg<count>")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("extra", nargs="*", help="after --: more `prep convert` options, for both")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.repeats, args.extra, args.floor)
        return
    if args.other is None:
        parser.error("--other is required")
    src = args.data or ensure_data(args.count)
    codes = {"this": ROOT, "other": args.other.resolve()}
    procs = {}
    for name, code in codes.items():
        cmd = [sys.executable, __file__, "--repeats", str(args.repeats), "--child", str(src), str(args.out / name)]
        cmd += ["--floor"] if name == "this" else []
        procs[name] = subprocess.Popen(
            [*cmd, "--", *args.extra],
            env=dict(os.environ, PYTHONPATH=str(code)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=args.out.parent if args.out.parent.exists() else "/",
        )
    for proc in procs.values():  # both converted before any repeat is timed
        assert proc.stdout is not None
        json.loads(proc.stdout.readline())["ready"]
    runs: dict[str, list[dict]] = {name: [] for name in codes}
    for repeat in range(args.repeats):
        # one at a time, alternating which goes first: the two never run at once
        for name in sorted(codes, reverse=repeat % 2 == 1):
            proc = procs[name]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
            runs[name].append(json.loads(proc.stdout.readline()))
    digests = {}
    for name, proc in procs.items():
        assert proc.stdout is not None
        digests[name] = json.loads(proc.stdout.readline())["digest"]
        if proc.wait() != 0:
            raise SystemExit(f"{name}'s process failed")
    shutil.rmtree(args.out, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    records = runs["this"][0]["records"]
    print(f"write stage, {records:,} records {' '.join(args.extra)}, median of {args.repeats}; load {load}")
    print(f"{'':5} {'this s':>7} {'other s':>8} {'this/other':>10} {'this us/rec':>11} {'other us/rec':>12}  runs")
    for what in ("wall", "cpu"):
        this = statistics.median(r[what] for r in runs["this"])
        other = statistics.median(r[what] for r in runs["other"])
        each = (
            " ".join(f"{r[what]:.2f}" for r in runs["this"]) + " | " + " ".join(f"{r[what]:.2f}" for r in runs["other"])
        )
        print(
            f"{what:5} {this:>7.2f} {other:>8.2f} {this / other:>10.3f} {this / records * 1e6:>11.1f} "
            f"{other / records * 1e6:>12.1f}  {each}"
        )
    if "floor_cpu" in runs["this"][0]:
        for what in ("wall", "cpu"):
            floor = statistics.median(r[f"floor_{what}"] for r in runs["this"])
            each = " ".join(f"{r[f'floor_{what}']:.2f}" for r in runs["this"])
            print(f"floor {what}: {floor:.2f} s, {floor / records * 1e6:.1f} us/rec  {each}  (`bare_copy`)")
    print("same shard bytes" if digests["this"] == digests["other"] else "SHARD BYTES DIFFER")


if __name__ == "__main__":
    main()
