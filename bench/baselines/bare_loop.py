"""The machine's limit: every core runs the same image work and writes TFRecords, no framework.

    python -m bench.baselines.bare_loop SOURCE OUTPUT [--resize 256] [--processes N] [--keys]
    python -m bench.baselines.bare_loop SOURCE OUTPUT --balanced [--shards 8] [--import-beam]

One process per core, each taking every Nth image (sorted paths), running
`prep.core.image_rules.prepare_image` (the exact check/convert work `prep convert` does),
building the same Example bytes and appending framed records to its own file.
No planning, balancing, manifest or atomic renames. With --keys, each process also
computes every image's content keys (`prep.core.content_keys.KeyBatch`: sha256 and the
pHashes `prep convert` finds duplicates with) the way `prep convert` does (the check's
1/8-scale decode gives the gray pixels; the record's sha256 is reused), a batch of
KEY_BATCH images at a time: the default conversion's key work, without grouping duplicates.

--balanced adds the least that shards of equal size with a digest each must cost on top
(bench/speed_ceiling.py's floor): a shard's size depends on every input, so no shard can be
finished before all inputs are read. The records therefore go first to a spill file per
process, as above; after that barrier, one task per shard copies its share of every spill file
(record-aligned slices, read in large blocks) into the shard, hashing it with SHA-256, and
renames it into place; the digests go to a small manifest. Nothing is sorted by class, so this
is a floor, not a balanced conversion. --import-beam imports Beam first as `prep convert` does
(beam_jobs/lean_import.py), the fixed cost of running inside Beam.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import pathlib

from threadpoolctl import threadpool_limits

from prep.core.content_keys import KeyBatch
from prep.core.image_rules import ImageOptions, ImageRejected, prepare_image
from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame

KEY_BATCH = 64  # images hashed together (KeyBatch shares the products of images of one size)
COPY_BLOCK = 1 << 20  # bytes read, hashed and written at a time by --balanced


def _work(args):
    with threadpool_limits(limits=1, user_api="blas"):  # a process a core already: as beam_jobs/prepare.py
        return _loop(*args)


def _part(output: str, index: int, count: int) -> str:
    return os.path.join(output, f"part-{index:05d}-of-{count:05d}.tfrecord")


def _loop(index, count, files, source, output, resize, keys):
    """Writes this process's share of the records to its part file; gives the offset after each record."""
    options = ImageOptions(resize=resize)
    batch, pending, ends = KeyBatch(), 0, []
    with open(_part(output, index, count), "wb") as out:
        for rel in files[index::count]:
            data = pathlib.Path(source, rel).read_bytes()
            try:
                image = prepare_image(data, options, keys=keys)
            except ImageRejected:
                continue
            record = ImageRecord.build(
                image.encoded, image.format, image.height, image.width, image.channels, 0, rel.split("/")[0], rel
            )
            out.write(frame(record.to_bytes()))
            ends.append(out.tell())
            if keys:  # as prep convert does: the check's decode gives the gray pixels, the record the sha256
                batch.add(image.encoded, image.gray, record.sha256)
                pending += 1
                if pending == KEY_BATCH:
                    batch.hashes()
                    batch, pending = KeyBatch(), 0
    if pending:
        batch.hashes()
    return ends


def _slice(ends: list[int], shard: int, shards: int) -> tuple[int, int]:
    """Byte range of a spill file's `shard`-th share of its records, cut at record ends."""

    def edge(k):
        i = len(ends) * k // shards
        return ends[i - 1] if i else 0

    return edge(shard), edge(shard + 1)


def _copy_shard(args) -> str:
    """Shard `shard`: its slice of every spill file, copied in blocks and hashed; renamed into place."""
    shard, shards, spills, output = args
    final = os.path.join(output, f"train-{shard:05d}-of-{shards:05d}.tfrecord")
    digest = hashlib.sha256()
    with open(final + ".tmp", "wb") as out:
        for path, ends in spills:
            start, stop = _slice(ends, shard, shards)
            with open(path, "rb") as f:
                f.seek(start)
                while start < stop:
                    block = f.read(min(COPY_BLOCK, stop - start))
                    digest.update(block)
                    out.write(block)
                    start += len(block)
    os.replace(final + ".tmp", final)
    return digest.hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--resize", type=int)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--keys", action="store_true", help="also compute every image's content keys")
    parser.add_argument("--balanced", action="store_true", help="spill, then copy and hash shards after a barrier")
    parser.add_argument("--shards", type=int, default=8, help="shards written by --balanced")
    parser.add_argument("--import-beam", action="store_true", help="import Beam first, as prep convert does")
    args = parser.parse_args(argv)
    if args.import_beam:
        from beam_jobs.lean_import import import_beam

        import_beam()
    files = sorted(str(p.relative_to(args.source)) for p in pathlib.Path(args.source).rglob("*") if p.is_file())
    spill = os.path.join(args.output, ".spill") if args.balanced else args.output
    os.makedirs(spill, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        jobs = [(i, args.processes, files, args.source, spill, args.resize, args.keys) for i in range(args.processes)]
        ends = pool.map(_work, jobs)
        if args.balanced:
            spills = [(_part(spill, i, args.processes), e) for i, e in enumerate(ends)]
            digests = pool.map(_copy_shard, [(j, args.shards, spills, args.output) for j in range(args.shards)])
    written = sum(len(e) for e in ends)
    if args.balanced:
        for path, _ in spills:
            os.remove(path)
        os.rmdir(spill)
        manifest = {"records": written, "sha256": digests}
        pathlib.Path(args.output, "manifest.json").write_text(json.dumps(manifest))
    print(written)
    return written


if __name__ == "__main__":
    main()
