"""Writes samples/shapes as a small WebDataset (tar shards, `webdataset`'s TarWriter) and converts it.

    python samples/webdataset_sample.py [--out out/shapes-webdataset]

OUT/shards/{train,validation}/0000N.tar hold one sample per image (`key.jpg` or `key.png`, and `key.cls`
with the class index); `prep convert OUT/shards OUT/tfrecords` then takes the splits from the folders and
the labels from `cls`, and each record's image/filename names its shard and member.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def write(out: pathlib.Path, per_shard: int = 50) -> dict[str, int]:
    """The shards under `out`; returns the samples per split. A file's split follows a hash of its name."""
    import webdataset as wds

    classes = sorted(p.name for p in (HERE / "shapes").iterdir() if p.is_dir())
    by_split: dict[str, list[tuple[str, pathlib.Path, int]]] = {"train": [], "validation": []}
    for label, name in enumerate(classes):
        for path in sorted((HERE / "shapes" / name).iterdir()):
            split = "validation" if hashlib.sha256(path.name.encode()).digest()[0] < 52 else "train"
            by_split[split].append((f"{name}-{path.stem}", path, label))
    for split, samples in by_split.items():
        (out / split).mkdir(parents=True, exist_ok=True)
        for start in range(0, len(samples), per_shard):
            with open(out / split / f"{start // per_shard:05d}.tar", "wb") as f, wds.TarWriter(f) as sink:
                for key, path, label in samples[start : start + per_shard]:
                    sink.write({"__key__": key, path.suffix.lstrip(".").lower(): path.read_bytes(), "cls": label})
    return {split: len(samples) for split, samples in by_split.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/shapes-webdataset")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    counts = write(out / "shards")
    print("wrote " + ", ".join(f"{n} {split} samples" for split, n in counts.items()) + f" under {out / 'shards'}")
    command = ["convert", str(out / "shards"), str(out / "tfrecords"), "--num-shards", "2", "--overwrite"]
    code = "import sys; from prep.cli import run; sys.argv = ['prep', *sys.argv[1:]]; run()"
    subprocess.run([sys.executable, "-c", code, *command], check=True)


if __name__ == "__main__":
    main()
