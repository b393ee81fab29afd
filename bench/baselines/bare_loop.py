"""The machine's limit: every core runs the same image work and writes TFRecords, no framework.

    python -m bench.baselines.bare_loop SOURCE OUTPUT [--resize 256] [--processes N] [--keys]

One process per core, each taking every Nth image (sorted paths), running
`prep.core.image_rules.prepare_image` (the exact check/convert work `prep convert` does),
building the same Example bytes and appending framed records to its own file.
No planning, balancing, manifest or atomic renames. With --keys, each process also
computes every image's content keys (`prep.core.content_keys.KeyBatch`: sha256 and the
pHashes `prep convert` finds duplicates with) the way `prep convert` does (the check's
1/8-scale decode gives the gray pixels; the record's sha256 is reused), a batch of
KEY_BATCH images at a time: the default conversion's key work, without grouping duplicates.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pathlib

from threadpoolctl import threadpool_limits

from prep.core.content_keys import KeyBatch
from prep.core.image_rules import ImageOptions, ImageRejected, prepare_image
from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame

KEY_BATCH = 64  # images hashed together (KeyBatch shares the products of images of one size)


def _work(args):
    with threadpool_limits(limits=1, user_api="blas"):  # a process a core already: as beam_jobs/prepare.py
        return _loop(*args)


def _loop(index, count, files, source, output, resize, keys):
    options = ImageOptions(resize=resize)
    written, batch, pending = 0, KeyBatch(), 0
    with open(os.path.join(output, f"part-{index:05d}-of-{count:05d}.tfrecord"), "wb") as out:
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
            written += 1
            if keys:  # as prep convert does: the check's decode gives the gray pixels, the record the sha256
                batch.add(image.encoded, image.gray, record.sha256)
                pending += 1
                if pending == KEY_BATCH:
                    batch.hashes()
                    batch, pending = KeyBatch(), 0
    if pending:
        batch.hashes()
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--resize", type=int)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--keys", action="store_true", help="also compute every image's content keys")
    args = parser.parse_args(argv)
    files = sorted(str(p.relative_to(args.source)) for p in pathlib.Path(args.source).rglob("*") if p.is_file())
    os.makedirs(args.output, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        written = sum(
            pool.map(
                _work,
                [
                    (i, args.processes, files, args.source, args.output, args.resize, args.keys)
                    for i in range(args.processes)
                ],
            )
        )
    print(written)
    return written


if __name__ == "__main__":
    main()
