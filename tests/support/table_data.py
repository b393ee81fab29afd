"""Parquet and Arrow datasets written as people write them: Hugging Face `datasets` (`to_parquet`, the Hub's
`data/` layout, `save_to_disk`) and plain pyarrow, for tests and samples."""

from __future__ import annotations

import pathlib

from tests.support.imagegen import image_bytes

CLASSES = ["cat", "dog", "fox"]


def hf_rows(n: int, start: int = 0, size=(20, 14)) -> dict[str, list]:
    """`n` rows of a Hugging Face image dataset: distinct JPEGs (by seed), labels cycling over CLASSES."""
    return {
        "image": [{"bytes": image_bytes(size=size, seed=start + i), "path": None} for i in range(n)],
        "label": [(start + i) % len(CLASSES) for i in range(n)],
    }


def hf_dataset(rows: dict[str, list]):
    """A `datasets.Dataset` with the `Image()` and `ClassLabel(CLASSES)` features."""
    import datasets

    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=CLASSES)})
    return datasets.Dataset.from_dict(rows, features=features)


def write_hub(root: pathlib.Path, files: dict[str, dict[str, list]], rows_per_group: int = 4) -> None:
    """`{relative path: rows}` written with `Dataset.to_parquet` (row groups of `rows_per_group` rows)."""
    for name, rows in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        hf_dataset(rows).to_parquet(str(root / name), batch_size=rows_per_group)


def expected(files: dict[str, dict[str, list]]) -> dict[str, tuple[bytes, str]]:
    """{`file#row=N`: (image bytes, class name)} of every row with image bytes and a label in 0..len(CLASSES)."""
    out = {}
    for name, rows in files.items():
        for i, (image, label) in enumerate(zip(rows["image"], rows["label"])):
            data = image.get("bytes") if isinstance(image, dict) else image
            if data is not None and label is not None and 0 <= label < len(CLASSES):
                out[f"{name}#row={i}"] = (data, CLASSES[label])
    return out


def write_plain(path: pathlib.Path, columns: dict[str, list], rows_per_group: int = 4) -> None:
    """A Parquet file written with pyarrow alone (no Hugging Face metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), str(path), row_group_size=rows_per_group)


def damage_row_group(path: pathlib.Path, group: int, column: str) -> None:
    """Overwrites the first page header of a column chunk (`column`: its path, e.g. `image.bytes`) of one row
    group: that group's column no longer reads."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(str(path)).metadata.row_group(group)
    chunk = next(c for c in map(meta.column, range(meta.num_columns)) if c.path_in_schema == column)
    data = bytearray(path.read_bytes())
    at = chunk.dictionary_page_offset or chunk.data_page_offset
    data[at : at + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
