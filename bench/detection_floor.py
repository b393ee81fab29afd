"""What detection must spend beyond classification on the same images: each extra step alone, CPU.

    python bench/detection_floor.py                  # bench/detection_bench.py's 2,000 images, min of 7
    python bench/detection_floor.py --repeats 15

On the set bench/detection_bench.py makes (2,000 JPEGs, 20,929 COCO boxes), in this process, CPU
seconds (`time.process_time`, min of --repeats), the extra work of a detection conversion, step by
step, each beside its classification counterpart or its floor:

* listing: `prep.core.inputs.list_inputs` of the label file and of the COCO file, with Beam imported
  first as the console script does (its objects are what the collector walks);
* the COCO parse alone: `json.loads` of the whole file (the floor of any reader), the one pass a
  one-bucket file costs now (`json_stream.read_arrays`: `json.loads` when it reads what ijson would,
  else ijson's one pass) and ijson's pass a key (`iter_arrays`);
* records: per image, the record built around the same prepared bytes and encoded as the spill writes
  it (`encode_example_around`), classification's `ImageRecord` against detection's `build_record`
  (JSON of the listing's extra, boxes placed, `TaskRecord`), and the encoding of the detection features
  alone; the bytes of both.

Then the ratio a conversion's CPU would reach if detection cost only these floors on top of
classification's CPU (--clf-cpu, from bench/detection_bench.py's table).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from detection_bench import make_set  # noqa: E402  (bench/ scripts run as files)


def best(fn, repeats: int) -> float:
    """Least CPU seconds of `repeats` calls of fn()."""
    out = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        fn()
        out = min(out, time.process_time() - started)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data", default=str(HERE / "data"))
    parser.add_argument("--clf-cpu", type=float, default=None, help="classification's CPU s per conversion")
    args = parser.parse_args(argv)
    root = pathlib.Path(args.data) / f"detection-{args.count}"
    boxes = make_set(root, args.count)
    import apache_beam  # noqa: F401  (as the console script, before the listing)

    from prep.core.annotations.coco import SECTIONS
    from prep.core.annotations.json_stream import iter_arrays, read_arrays
    from prep.core.convert_options import build_config
    from prep.core.image_rules import PreparedImage
    from prep.core.inputs import list_inputs
    from prep.core.run.task_build import TaskSpec, build_record
    from prep.core.schema import ENCODED, ImageRecord
    from prep.core.wire import encode_example_around

    def encoded(record) -> int:  # as the spill writes a record: its fields around the image's bytes
        head, tail = encode_example_around(record.features(), ENCODED)
        return len(head) + len(tail)

    images, coco = str(root / "images"), str(root / "instances.json")
    clf = build_config(images, "/tmp/prep-detection-floor", {"labels": str(root / "labels.csv")})
    det = build_config(images, "/tmp/prep-detection-floor", {"annotations": coco})
    rows: list[tuple[str, float, float]] = []
    t_clf, t_det = best(lambda: list_inputs(clf), args.repeats), best(lambda: list_inputs(det), args.repeats)
    rows.append(("listing (list_inputs)", t_clf, t_det))
    parse_floor = best(lambda: json.loads(pathlib.Path(coco).read_bytes()), args.repeats)
    rows.append(("COCO parse: json.loads whole (floor)", 0.0, parse_floor))
    rows.append(("COCO parse: read_arrays, one pass", 0.0, best(lambda: read_arrays(coco, SECTIONS), args.repeats)))
    rows.append(
        ("COCO parse: ijson, a pass a key", 0.0, best(lambda: list(iter_arrays(coco, SECTIONS, {})), args.repeats))
    )

    listing = list_inputs(det)
    spec = TaskSpec("detection", listing.classes)
    prepared = []
    for ref in listing.refs:
        data = (root / "images" / ref.path).read_bytes()
        prepared.append((ref, PreparedImage(data, "jpeg", 240, 320, 3, False, (320, 240), 1)))

    def classification() -> int:
        return sum(
            encoded(ImageRecord.build(p.encoded, "jpeg", 240, 320, 3, 0, "circle", ref.path)) for ref, p in prepared
        )

    def detection() -> int:
        return sum(encoded(build_record(spec, ref, p, bytes)[0]) for ref, p in prepared)

    built = [build_record(spec, ref, p, bytes)[0] for ref, p in prepared]
    rows.append(("records: built and encoded", best(classification, args.repeats), best(detection, args.repeats)))
    rows.append(
        (
            "records: detection's encoding alone",
            0.0,
            best(lambda: [encoded(r) for r in built], args.repeats),
        )
    )
    extra_bytes = (detection() - classification()) / len(prepared)

    print(f"{args.count} images, {boxes} boxes, CPU s, min of {args.repeats} (Beam imported)")
    print(f"{'step':<40} {'classification':>14} {'detection':>10} {'extra':>8}")
    for name, a, b in rows:
        print(f"{name:<40} {a:>14.3f} {b:>10.3f} {b - a:>8.3f}")
    print(f"extra bytes per record: {extra_bytes:.0f}")
    if args.clf_cpu:
        c = args.clf_cpu
        extra_record, encoding = rows[-2][2] - rows[-2][1], rows[-1][2]
        print(f"classification/detection CPU ratio on top of classification's {c:.2f} CPU s, if detection added:")
        print(f"  today's listing and records: {c / (c + (t_det - t_clf) + extra_record):.3f}")
        print(f"  the parse floor and today's records: {c / (c + parse_floor + extra_record):.3f}")
        print(f"  the parse floor and the encoding of its features alone: {c / (c + parse_floor + encoding):.3f}")


if __name__ == "__main__":
    main()
