"""What the content keys cost the prepare stage's threads, without Beam: `prepare_batch` over a set of
photos on a pool of 2 threads, chunk by chunk as PrepareChunk runs it (a chunk's batches submitted, then
the chunk before it completed on the calling thread, where its waiting pixels are hashed:
`content_keys.hash_waiting`), keys against none, and keys with the hashing swapped for a constant; then
how well two threads run the hashing's matrix products side by side.

    python bench/keys_threads.py                      # 10,000 generated 500x375 photos, 6 repeats
    python bench/keys_threads.py --count 2000 --repeats 4

The set comes from bench/dedupe_scale.py (generated once, cached under --data). Each repeat runs the
three variants in turn (order alternating), each on a fresh work directory; the table gives the median
of each variant's wall and CPU time (this process's, both threads) and the median of its per-repeat ratio
to the run without keys. The second table: one product of each shape run N times on one thread, then
N times on each of two threads at once; "speedup" is 2 x one thread's time / two threads' time (2.0: they
ran side by side; 1.0: one waited for the other). sha256 of bytes of a similar duration is there for
comparison: it releases the GIL.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import numpy as np  # noqa: E402
from dedupe_scale import ensure_data  # noqa: E402  (bench/ scripts run as files)
from threadpoolctl import threadpool_limits  # noqa: E402

from prep.core import content_keys  # noqa: E402
from prep.core.image_rules import ImageOptions, quiet_pillow  # noqa: E402
from prep.core.listing import InputRef  # noqa: E402
from prep.core.run.spill import PrepareOptions, prepare_batch  # noqa: E402
from prep.core.workdir import BATCH, WorkDir  # noqa: E402

VARIANTS = ("no keys", "keys", "keys, constant hashes")


CHUNK = 1024  # inputs per chunk: ordering.MAX_CHUNK, what a large set's chunks hold


def _constant(stack, scales=content_keys.CROP_SCALES):
    return np.full((len(stack), 1 + len(scales)), 0x0123456789ABCDEF, np.uint64)


def _complete(tasks) -> None:
    """Waits for a chunk's batches and hashes their waiting pixels, as PrepareChunk._complete does."""
    keyed = [task.result()[2] for task in tasks]
    if keyed and keyed[0] is not None:
        content_keys.hash_waiting([(keys.hashes, keys.waiting) for keys in keyed])


def prepare_all(source: pathlib.Path, variant: str, pool) -> tuple[float, float]:
    """(wall, CPU) seconds to prepare every image of `source` in batches on `pool`."""
    classes = sorted(p.name for p in source.iterdir() if p.is_dir())
    refs = [InputRef(f"{c}/{f}", c, None) for c in classes for f in sorted(os.listdir(source / c))]
    labels = {c: i for i, c in enumerate(classes)}
    real = content_keys.stack_hashes
    if variant == "keys, constant hashes":
        content_keys.stack_hashes = _constant
    tmp = tempfile.mkdtemp(prefix="keys-threads-")
    try:
        work = WorkDir(tmp)
        wall, cpu = time.perf_counter(), time.process_time()
        earlier = None
        for start in range(0, len(refs), CHUNK):
            chunk = refs[start : start + CHUNK]
            options = PrepareOptions(str(source), ImageOptions(), keys=variant != "no keys")
            tasks = [
                pool.submit(prepare_batch, options, work, start + b, chunk[b : b + BATCH], labels)
                for b in range(0, len(chunk), BATCH)
            ]
            if earlier is not None:
                _complete(earlier)
            earlier = tasks
        _complete(earlier or [])
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        content_keys.stack_hashes = real
        shutil.rmtree(tmp, ignore_errors=True)


def side_by_side(fn, n: int, pool) -> tuple[float, float]:
    """(microseconds a call on one thread, speedup of two threads)."""

    def run(_=None):
        for _ in range(n):
            fn()

    start = time.perf_counter()
    run()
    one = time.perf_counter() - start
    start = time.perf_counter()
    list(pool.map(run, range(2)))
    two = time.perf_counter() - start
    return one / n * 1e6, 2 * one / two


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--data", type=pathlib.Path, default=pathlib.Path("/tmp/dedupe-scale"))
    args = parser.parse_args(argv)
    source = ensure_data(args.count, args.data, 2, (500, 375), 8)
    quiet_pillow()
    limits = threadpool_limits(limits=1, user_api="blas")  # as PrepareChunk does with keys
    pool = concurrent.futures.ThreadPoolExecutor(2)
    runs: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for repeat in range(args.repeats):
        for variant in VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]:
            runs[variant].append(prepare_all(source, variant, pool))
    print(f"prepare_batch over {args.count} generated 500x375 photos, 2 threads, median of {args.repeats}")
    print(f"{'variant':<24}{'wall s':>8}{'cpu s':>8}{'x none wall':>13}{'x none cpu':>12}")
    for variant in VARIANTS:
        wall = statistics.median(w for w, _ in runs[variant])
        cpu = statistics.median(c for _, c in runs[variant])
        xw = statistics.median(a[0] / b[0] for a, b in zip(runs[variant], runs["no keys"]))
        xc = statistics.median(a[1] / b[1] for a, b in zip(runs[variant], runs["no keys"]))
        print(f"{variant:<24}{wall:>8.2f}{cpu:>8.2f}{xw:>13.3f}{xc:>12.3f}")

    rng = np.random.default_rng(0)
    print("\none product (float64, one BLAS thread), one thread against two")
    print(f"{'shape':<24}{'us a call':>10}{'speedup':>9}")
    for m, k, n in [(736, 62, 40), (2944, 62, 40), (11776, 62, 40), (736, 62, 400)]:
        a, b = rng.random((m, k)), rng.random((k, n))
        us, speedup = side_by_side(lambda a=a, b=b: a @ b, max(50, int(2e8 / (m * k * n))), pool)
        print(f"{f'{m}x{k} by {k}x{n}':<24}{us:>10.1f}{speedup:>9.2f}")
    data = bytes(50_000)
    us, speedup = side_by_side(lambda: hashlib.sha256(data).digest(), 3000, pool)
    print(f"{'sha256 of 50 KB':<24}{us:>10.1f}{speedup:>9.2f}")
    limits.restore_original_limits()


if __name__ == "__main__":
    main()
