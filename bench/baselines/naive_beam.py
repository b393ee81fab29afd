"""A naive Beam pipeline: Create(paths) | Map(convert) | WriteToTFRecord(num_shards=N).

    python -m bench.baselines.naive_beam SOURCE OUTPUT [--resize 256] [--shards N]

The first thing one writes with Beam: every image converted in a Map (the same
`prep.core.image_rules.prepare_image` work and Example bytes as `prep convert`), written
with Beam's own `WriteToTFRecord`, on the embedded runner. No balancing.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from prep.core.image_rules import ImageOptions, ImageRejected, prepare_image
from prep.core.schema import ImageRecord


def convert(rel, source, resize):
    try:
        image = prepare_image(pathlib.Path(source, rel).read_bytes(), ImageOptions(resize=resize))
    except ImageRejected:
        return []
    return [
        ImageRecord.build(
            image.encoded, image.format, image.height, image.width, image.channels, 0, rel.split("/")[0], rel
        ).to_bytes()
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--resize", type=int)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args(argv)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    files = sorted(str(p.relative_to(args.source)) for p in pathlib.Path(args.source).rglob("*") if p.is_file())
    os.makedirs(args.output, exist_ok=True)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        (
            p
            | "Paths" >> beam.Create(files)
            | "Convert" >> beam.FlatMap(convert, args.source, args.resize)
            | "Write" >> beam.io.WriteToTFRecord(os.path.join(args.output, "train"), num_shards=args.shards)
        )
    print(len(files))


if __name__ == "__main__":
    main()
