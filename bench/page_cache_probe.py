"""What writing a shard's worth of new page cache costs on this machine, hot and after a pause.

    python bench/page_cache_probe.py              # 1 GiB, pauses of 0 and 15 s, 2 rounds
    python bench/page_cache_probe.py --mib 256 --pauses 0,5,15

Each row deletes the previous file, syncs, waits `pause` seconds and times one
buffered write of the whole size from a reused 4 MiB buffer. In a virtual
machine whose balloon driver reports freed memory to the host (virtio_balloon
free page reporting), pages freed by the delete go back to the host within
seconds, and writing into new page cache then costs a host page fault per
page: "after 0 s" reuses the pages just freed, "after 15 s" gets new ones.
On this project's 2-core VM: 0.17 s hot against 1.3-2.6 s per GiB after a
pause, the same on one thread or two. A conversion's shard-writing stage
writes every output byte into new pages, so there it is bound by this, not
by cores.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time

BLOCK = 4 << 20


def write_once(path: str, size: int, block: mmap.mmap) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(size // BLOCK):
            os.write(fd, block)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="bytes written per row, in MiB")
    parser.add_argument("--pauses", default="0,15", help="seconds to wait after the delete, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write (the output's file system)")
    args = parser.parse_args(argv)
    pauses = [float(p) for p in args.pauses.split(",")]
    size = args.mib << 20
    block = mmap.mmap(-1, BLOCK)
    block.write(os.urandom(BLOCK))
    path = os.path.join(args.dir, f"page-cache-probe-{os.getpid()}.bin")
    times: dict[float, list[float]] = {p: [] for p in pauses}
    try:
        write_once(path, size, block)  # the first write of a run meets whatever state the machine is in
        for _ in range(args.rounds):
            for pause in pauses:
                os.unlink(path)
                os.sync()
                time.sleep(pause)
                times[pause].append(write_once(path, size, block))
    finally:
        if os.path.exists(path):
            os.unlink(path)
    print(f"buffered write of {args.mib} MiB into new page cache, {args.rounds} rounds, in {args.dir}")
    print(f"{'pause after delete':>20}{'median s':>10}{'s per GiB':>11}  runs")
    for pause in pauses:
        med = statistics.median(times[pause])
        print(f"{pause:>18.0f} s{med:>10.2f}{med * 1024 / args.mib:>11.2f}  {[round(t, 2) for t in times[pause]]}")


if __name__ == "__main__":
    main()
