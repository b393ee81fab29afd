"""Converting from WebDataset tar shards vs the same photos one file each, and requests per image from shards
on the simulated object store (`simfs://`, tests/support/simfs.py).

    python bench/wds_bench.py --count 20000 [--repeat 2] [--resize-repeat 1] [--simfs-count 0]

Writes the photos of bench/make_data.py as shards of --per-shard samples (jpg + cls, seeded order) with
webdataset's TarWriter, and the same shards gzipped (`.tar.gz`), converts the three SOURCEs pass-through
and with --resize 256 (`prep` in a child process: wall seconds and its peak RSS), --repeat rounds with the
SOURCEs interleaved in each (the machine is shared: a round's ratios to files are what to compare); times
reading a gzipped shard's members again one by one (what holding them spares); then converts --simfs-count
of them from shards in simfs:// and prints the requests per image by kind. Figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import random
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.convert_compare import timed  # noqa: E402
from bench.make_data import ensure_data, prep_command  # noqa: E402


def gzip_shards(shards: pathlib.Path, out: pathlib.Path) -> None:
    import gzip

    out.mkdir(parents=True, exist_ok=True)
    for tar in sorted(shards.glob("*.tar")):
        (out / f"{tar.name}.gz").write_bytes(gzip.compress(tar.read_bytes(), compresslevel=6))


def read_again(shard: pathlib.Path, members: int) -> tuple[float, float]:
    """Seconds to list a gzipped shard (one streamed pass), and to read its first `members` images again
    each by decompressing the shard up to it (`webdataset.read_member` of a compressed shard)."""
    import time

    from prep.core.sources import webdataset

    start = time.perf_counter()
    refs, _ = webdataset.list_shard(str(shard.parent), shard.name, None)
    listed = time.perf_counter() - start
    start = time.perf_counter()
    for ref in refs[:members]:
        data = webdataset.read_member(str(shard.parent / ref.path))
        assert isinstance(data, bytes)
    return listed, time.perf_counter() - start


def write_shards(folder: pathlib.Path, out: pathlib.Path, per_shard: int, limit: int | None = None) -> int:
    """The photos under `folder` (class folders) as shards in `out`; returns the samples written."""
    import webdataset as wds

    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    photos = [(i, p) for i, c in enumerate(classes) for p in sorted((folder / c).iterdir())]
    random.Random(0).shuffle(photos)
    photos = photos[:limit] if limit else photos
    out.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(photos), per_shard):
        with open(out / f"{start // per_shard:05d}.tar", "wb") as f, wds.TarWriter(f) as sink:
            for label, path in photos[start : start + per_shard]:
                sink.write({"__key__": f"{path.parent.name}-{path.stem}", "jpg": path.read_bytes(), "cls": label})
    return len(photos)


def simfs_requests(folder: pathlib.Path, scratch: pathlib.Path, count: int, per_shard: int) -> dict[str, float]:
    """Requests per image, by kind, to the shards of a conversion of `count` photos from simfs://, and all told."""
    os.environ["SIMFS_STORE"] = str(scratch / "store")
    os.environ.pop("SIMFS_LATENCY_MS", None)
    from click.testing import CliRunner

    from prep.cli import main
    from tests.support import simfs

    n = write_shards(folder, scratch / "store" / "wds", per_shard, count)
    before, _ = simfs.local_counts()
    result = CliRunner().invoke(main, ["convert", "simfs://wds", "simfs://out/x", "--num-shards", "4", "--no-progress"])
    if result.exit_code != 0:
        raise SystemExit(result.output)
    counts = simfs.local_counts()[0] - before
    by_kind: collections.Counter = collections.Counter()
    for (kind, what, _), k in counts.items():
        if what.startswith("wds/"):
            by_kind[kind] += k
    to_shards = {kind: k / n for kind, k in sorted(by_kind.items())} | {"all": sum(by_kind.values()) / n}
    return to_shards | {"every request": simfs.requests(counts) / n}  # the work directory's and OUTPUT's too


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--per-shard", type=int, default=1000)
    parser.add_argument("--simfs-count", type=int, default=2000, help="0: none")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each source once a round")
    parser.add_argument("--resize-repeat", type=int, default=None, help="rounds of --resize 256 (default: --repeat)")
    parser.add_argument("--scratch", default="/tmp/prep-wds-bench")
    args = parser.parse_args(argv)
    folder = ensure_data(args.count)
    scratch = pathlib.Path(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    write_shards(folder, scratch / "shards", args.per_shard)
    gzip_shards(scratch / "shards", scratch / "gz")
    print(f"{args.count} photos, shards of {args.per_shard}")
    listed, again = read_again(scratch / "gz" / "00000.tar.gz", 100)
    print(f"one .tar.gz shard: listed in {listed:.2f} s; its first 100 images read again one by one: {again:.2f} s")
    head = f"{'round':>5} {'source':<12} {'options':<14} {'seconds':>8} {'images/s':>9} {'vs files':>9}"
    print(f"{head} {'peak RSS MB':>12}")
    sources = (("files", folder), ("tar shards", scratch / "shards"), ("tar.gz", scratch / "gz"))
    for options in ((), ("--resize", "256")):
        label = " ".join(options) or "pass-through"
        rounds = args.repeat if not options or args.resize_repeat is None else args.resize_repeat
        for round_ in range(rounds):
            got = {}
            for name, source in sources if round_ % 2 == 0 else sources[::-1]:  # interleaved: the load varies
                out = scratch / "out"
                cmd = [prep_command(), "convert", str(source), str(out), "--overwrite", "--no-progress", *options]
                got[name] = timed(cmd)
            for name, _ in sources:
                seconds, rss = got[name]
                ratio = seconds / got["files"][0]
                row = f"{round_ + 1:>5} {name:<12} {label:<14} {seconds:8.1f} {args.count / seconds:9.0f} {ratio:9.2f}"
                print(f"{row} {rss:12.0f}", flush=True)
    if not args.simfs_count:
        return
    per_image = simfs_requests(folder, scratch / "simfs", args.simfs_count, args.per_shard // 10)
    print(
        f"simfs://, {args.simfs_count} photos from shards: requests per image to the shards, then all told: "
        + ", ".join(f"{k} {v:.3f}" for k, v in per_image.items())
    )


if __name__ == "__main__":
    main()
