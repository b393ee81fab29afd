"""The machine's limit: every core runs the same image work and writes TFRecords, no framework.

    python -m bench.baselines.bare_loop SOURCE OUTPUT [--resize 256] [--processes N]

One process per core, each taking every Nth image (sorted paths), running
`prep.core.image_rules.prepare_image` (the exact check/convert work `prep convert` does),
building the same Example bytes and appending framed records to its own file.
No planning, balancing, manifest or atomic renames.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pathlib

from prep.core.image_rules import ImageOptions, ImageRejected, prepare_image
from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame


def _work(args):
    index, count, files, source, output, resize = args
    options = ImageOptions(resize=resize)
    written = 0
    with open(os.path.join(output, f"part-{index:05d}-of-{count:05d}.tfrecord"), "wb") as out:
        for rel in files[index::count]:
            data = pathlib.Path(source, rel).read_bytes()
            try:
                image = prepare_image(data, options)
            except ImageRejected:
                continue
            record = ImageRecord.build(
                image.encoded, image.format, image.height, image.width, image.channels, 0, rel.split("/")[0], rel
            )
            out.write(frame(record.to_bytes()))
            written += 1
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--resize", type=int)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    files = sorted(str(p.relative_to(args.source)) for p in pathlib.Path(args.source).rglob("*") if p.is_file())
    os.makedirs(args.output, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        written = sum(
            pool.map(
                _work,
                [(i, args.processes, files, args.source, args.output, args.resize) for i in range(args.processes)],
            )
        )
    print(written)
    return written


if __name__ == "__main__":
    main()
