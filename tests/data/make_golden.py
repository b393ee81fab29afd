"""Writes tests/data/golden/, the fixed input of tests' golden test (run once; the files are committed).

    python tests/data/make_golden.py

Committed rather than generated at test time because Pillow's encoders may change bytes
between versions, and the golden digests must not. Three classes of small images, 2.5 KB at
most each: kept as they are (RGB and grayscale JPEG and PNG, a PNG named .jpg), converted
(an EXIF-rotated JPEG, an RGBA PNG, a palette GIF, a 16-bit PNG), and rejected (a truncated
JPEG, an empty file, a hidden file).
"""

from __future__ import annotations

import pathlib
import shutil
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.support.imagegen import encode, image_bytes, marker_image, oriented, png_raw  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent / "golden"


def main() -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    files = {}
    for i in range(5):
        files[f"bird/b{i}.jpg"] = image_bytes("JPEG", size=(16, 12), seed=100 + i, quality=75)
    files["bird/gray.png"] = image_bytes("PNG", size=(12, 12), mode="L", seed=7)
    files["bird/rotated.jpg"] = oriented(marker_image(32, 16), 6)  # converted: turned upright
    for i in range(4):
        files[f"cat/c{i}.png"] = image_bytes("PNG", size=(12, 10), seed=200 + i)
    files["cat/alpha.png"] = image_bytes("PNG", size=(10, 10), mode="RGBA", seed=8)  # converted: onto white
    files["cat/named_wrong.jpg"] = image_bytes("PNG", size=(10, 8), seed=9)  # a PNG kept, format says png
    files["cat/broken.jpg"] = image_bytes("JPEG", size=(32, 32), seed=10)[:200]  # rejected: undecodable
    for i in range(4):
        files[f"fish/f{i}.jpg"] = image_bytes("JPEG", size=(14, 14), mode="L", seed=300 + i, quality=80)
    files["fish/palette.gif"] = image_bytes("GIF", size=(10, 10), mode="P", seed=11)  # converted: PNG
    rng = np.random.default_rng(12)
    files["fish/deep.png"] = png_raw(rng.integers(0, 65535, (8, 8, 3)), 16, 2)  # converted: 16 -> 8 bits
    files["fish/empty.jpg"] = b""  # rejected: empty
    files["fish/.hidden.jpg"] = encode(Image.new("RGB", (4, 4)), "JPEG")  # rejected: hidden
    for name, data in sorted(files.items()):
        path = ROOT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"{len(data):6d}  {name}")


if __name__ == "__main__":
    main()
