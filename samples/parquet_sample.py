"""Writes samples/shapes as a small Hugging Face dataset in Parquet (the Hub's `data/` layout) and converts it.

    python samples/parquet_sample.py [--out out/shapes-parquet]

OUT/hub/data/{train,validation}-0000N-of-0000M.parquet hold one row per image, written with `datasets`
(`Dataset.to_parquet`): an `image` column of the `Image()` feature ({bytes, path}) and a `label` column of
the `ClassLabel` feature, whose names Parquet keeps in its schema metadata. `prep convert OUT/hub
OUT/tfrecords` then takes the splits from the file names and the class names from the metadata, and each
record's image/filename names its file and row (`data/train-00000-of-00002.parquet#row=17`).
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def write(out: pathlib.Path, per_file: int = 100) -> dict[str, int]:
    """The Parquet files under `out`; returns the rows per split. A file's split follows a hash of its name."""
    import datasets

    classes = sorted(p.name for p in (HERE / "shapes").iterdir() if p.is_dir())
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    by_split: dict[str, list[tuple[pathlib.Path, int]]] = {"train": [], "validation": []}
    for label, name in enumerate(classes):
        for path in sorted((HERE / "shapes" / name).iterdir()):
            split = "validation" if hashlib.sha256(path.name.encode()).digest()[0] < 52 else "train"
            by_split[split].append((path, label))
    (out / "data").mkdir(parents=True, exist_ok=True)
    for split, rows in by_split.items():
        files = -(-len(rows) // per_file)
        for i in range(files):
            part = rows[i * per_file : (i + 1) * per_file]
            table = {"image": [{"bytes": p.read_bytes(), "path": None} for p, _ in part], "label": [n for _, n in part]}
            dataset = datasets.Dataset.from_dict(table, features=features)
            dataset.to_parquet(str(out / "data" / f"{split}-{i:05d}-of-{files:05d}.parquet"), batch_size=50)
    return {split: len(rows) for split, rows in by_split.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/shapes-parquet")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    counts = write(out / "hub")
    print("wrote " + ", ".join(f"{n} {split} rows" for split, n in counts.items()) + f" under {out / 'hub'}")
    command = ["convert", str(out / "hub"), str(out / "tfrecords"), "--num-shards", "2", "--overwrite"]
    code = "import sys; from prep.cli import run; sys.argv = ['prep', *sys.argv[1:]]; run()"
    subprocess.run([sys.executable, "-c", code, *command], check=True)


if __name__ == "__main__":
    main()
