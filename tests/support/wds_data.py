"""WebDataset shards written with `webdataset`'s own TarWriter, as people write them, for tests and samples."""

from __future__ import annotations

import pathlib

from tests.support.imagegen import image_bytes


def write_shards(root: pathlib.Path, shards: dict[str, list[dict]]) -> dict[str, tuple[bytes, str]]:
    """Writes `{shard path: [sample dict]}` under `root` with TarWriter; returns {key: (image bytes, label)}
    of every sample that has both (cls or json label)."""
    import webdataset as wds

    expected: dict[str, tuple[bytes, str]] = {}
    for name, samples in shards.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f, wds.TarWriter(f) as sink:
            for sample in samples:
                sink.write(sample)
                image = next((sample[k] for k in ("jpg", "png") if k in sample), None)
                label = sample.get("cls", sample.get("json", {}).get("label") if "json" in sample else None)
                if image is not None and label is not None:
                    expected[f"{name}/{sample['__key__']}"] = (image, str(label))
    return expected


def labelled(n: int, classes: int, start: int = 0, size=(20, 14)) -> list[dict]:
    """`n` samples of jpg + cls, labels cycling over `classes` (distinct images by seed)."""
    return [
        {"__key__": f"s{start + i:05d}", "jpg": image_bytes(size=size, seed=start + i), "cls": (start + i) % classes}
        for i in range(n)
    ]


def png(seed: int) -> bytes:
    return image_bytes("PNG", size=(16, 12), seed=seed)


def corrupt_header(path: pathlib.Path, member: str) -> None:
    """Flips a byte of `member`'s tar header (its checksum then fails)."""
    data = bytearray(path.read_bytes())
    at = data.find(member.encode() + b"\0")
    assert at >= 0 and at % 512 == 0
    data[at + 150] ^= 0xFF
    path.write_bytes(bytes(data))


def photo(seed: int) -> bytes:
    return image_bytes(size=(20, 14), seed=seed)
