"""Parquet and Arrow files listed on workers, a task a file (beam_jobs/list_tables.py), stage exactly what the
driver's listing (`parquet.list_tables`) does: the same chunk files, early rejects and run record, as a Beam
pipeline and with its steps run in this process; the images they copy are the rows' bytes, in each chunk's
order; what they cannot decide alone falls back to the driver."""

from __future__ import annotations

import json
import pathlib

import pytest

from beam_jobs import list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import folder_source, list_inputs, shard_source, table_source
from prep.core.run import checkpoints
from prep.core.run.start import clear_output, ready_listed, ready_output
from prep.core.sources import table_files, table_held
from prep.core.sources.held import read_held
from prep.core.workdir import BATCH, WorkDir
from tests.e2e.test_list_source import staged
from tests.support.imagegen import image_bytes
from tests.support.table_data import damage_row_group, hf_rows, write_hub, write_plain


@pytest.fixture(params=[True, False], ids=["pipeline", "in-process"])
def pipeline(request):
    return request.param


def on_workers(source, out, pipeline, **options):
    config = build_config(str(source), str(out), options)
    assert folder_source(config) is None and shard_source(config) is None
    tables = table_source(config)
    assert tables is not None
    clear_output(config)
    summary = list_on_workers(config, tables, pipeline=pipeline)
    list_source.delete_listed(str(out))
    if summary["fallback"] is not None:
        return summary["fallback"]
    ready = ready_listed(config, summary)
    assert not (pathlib.Path(out) / ".prep-tmp" / "listed").exists()
    return ready


def assert_same_staging(source, tmp_path, pipeline, **options):
    workers, driver = tmp_path / "w", tmp_path / "d"
    a = on_workers(source, workers, pipeline, **options)
    config = build_config(str(source), str(driver), options)
    b = ready_output(config, list_inputs(config))
    assert (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    assert staged(str(workers)) == staged(str(driver))
    return a


def held_images(out, source, chunks: int, column=None) -> tuple[int, int]:
    """Checks that every row's image the listing copied is the row's own, in its chunk's order; returns
    (rows whose batch is held, rows whose batch is not)."""
    work, held, not_held = WorkDir(str(out)), 0, 0
    for chunk in range(chunks):
        refs = checkpoints.read_listing(work, chunk)
        batches = table_held.batches_held(work, chunk, refs, BATCH)
        for b, where in enumerate(batches):
            batch = refs[b * BATCH : (b + 1) * BATCH]
            if where is None:
                not_held += len(batch)
                continue
            datas = read_held(where)
            assert datas is not None
            for ref, data in zip(batch, datas):
                assert data == table_files.read_row(f"{source}/{ref.path}", column), ref.path
            held += len(batch)
    return held, not_held


def test_many_files_with_splits_and_damage_stage_the_driver_listing(tmp_path, pipeline):
    root = tmp_path / "src"
    files = {f"data/train-{i:05d}-of-00004.parquet": hf_rows(60, start=60 * i, size=(4, 3)) for i in range(4)}
    files["data/train-00001-of-00004.parquet"]["label"][7] = -1
    files["data/train-00002-of-00004.parquet"]["image"][3] = {"bytes": None, "path": "lost.jpg"}
    files["data/test-00000-of-00001.parquet"] = hf_rows(30, start=500, size=(4, 3))
    write_hub(root, files, rows_per_group=8)
    damage_row_group(root / "data/train-00000-of-00004.parquet", 2, "image.bytes")  # listed, images not read
    damage_row_group(root / "data/train-00003-of-00004.parquet", 1, "label")  # rejected by the listing
    ready = assert_same_staging(root, tmp_path, pipeline, seed=5)
    assert ready.staged.splits == ("test", "train")
    held, not_held = held_images(tmp_path / "w", root, len(ready.chunk_sizes))
    # 270 rows, 9 rejected; a batch with a row not copied (8 of a row group whose images do not read, a null
    # image) is read from the files
    assert held + not_held == 261 and 9 <= not_held <= 9 * BATCH
    rejects = json.loads((tmp_path / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    assert sorted({r[1] for r in rejects}) == ["damaged_table", "no_label"]


def test_integer_labels_index_classes_and_those_past_its_end_are_rejects(tmp_path, pipeline):
    root = tmp_path / "src"
    for i in range(3):
        images = [image_bytes("PNG", size=(4, 3), seed=30 * i + j) for j in range(30)]
        write_plain(root / f"part-{i}.parquet", {"img": images, "label": [(30 * i + j) % 5 for j in range(30)]})
    names = tmp_path / "classes.txt"
    names.write_text("ant\nbee\ncat\n")
    ready = assert_same_staging(root, tmp_path, pipeline, classes=str(names))
    assert ready.staged.classes == ("ant", "bee", "cat")
    rejects = json.loads((tmp_path / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    assert {r[1] for r in rejects} == {"unknown_label"} and len(rejects) == 36
    assert rejects[0][2] == "label 3 is past the 3 names"
    assert held_images(tmp_path / "w", root, len(ready.chunk_sizes)) == (54, 0)


def test_a_split_column_string_labels_and_an_arrow_dataset(tmp_path, pipeline):
    images = [image_bytes("PNG", size=(6, 5), seed=i) for i in range(40)]
    columns = {"photo": images, "species": ["owl", "emu", "kea", None] * 10, "part": ["train", "eval"] * 20}
    write_plain(tmp_path / "src" / "birds.parquet", columns, rows_per_group=6)
    options = {"image_column": "photo", "label_column": "species", "split_column": "part"}
    ready = assert_same_staging(tmp_path / "src" / "birds.parquet", tmp_path, pipeline, **options)
    assert ready.staged.splits == ("eval", "train")
    assert held_images(tmp_path / "w", tmp_path / "src" / "birds.parquet", len(ready.chunk_sizes), "photo") == (30, 0)

    import datasets

    from tests.support.table_data import hf_dataset

    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": hf_dataset(hf_rows(9)), "validation": hf_dataset(hf_rows(5, start=9))}).save_to_disk(
        str(saved)
    )
    ready = assert_same_staging(saved, tmp_path / "arrow", pipeline)
    assert held_images(tmp_path / "arrow" / "w", saved, len(ready.chunk_sizes)) == (14, 0)


def test_integer_labels_written_two_ways_fall_back_to_the_driver(tmp_path, pipeline):
    root = tmp_path / "src"
    images = [image_bytes("PNG", size=(4, 3), seed=j) for j in range(8)]
    write_plain(root / "a.parquet", {"img": images, "label": ["1", "01", "0", "00"] * 2})
    names = tmp_path / "classes.txt"
    names.write_text("ant\nbee\n")
    assert on_workers(root, tmp_path / "w", pipeline, classes=str(names)).startswith("integer labels written two")


def test_no_row_with_a_label_names_the_reasons(tmp_path, pipeline):
    root = tmp_path / "src"
    rows = hf_rows(4)
    rows["label"] = [-1, -1, None, -1]
    write_hub(root, {"a.parquet": rows})
    data = (root / "a.parquet").read_bytes()
    (root / "b.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=r"no row of the 2 file\(s\) .*\(1 damaged_table, 4 no_label\)"):
        on_workers(root, tmp_path / "w", pipeline)


def test_list_columns_stage_the_driver_multilabel_listing(tmp_path, pipeline):
    """`Sequence(ClassLabel)` as `datasets` before 4 wrote it, and a list of strings: multi-label, the rows'
    rejects (empty list, a null in the list, an id past the names, a name --classes lacks) the driver's; the
    rows' images held in each chunk's order."""
    from tests.e2e.test_multilabel_sources import LISTS, _old_sequence

    root = tmp_path / "src"
    _old_sequence(root / "train/a.parquet", LISTS + [[0, None], [7], None])
    _old_sequence(root / "validation/b.parquet", LISTS[:9])
    ready = assert_same_staging(root, tmp_path, pipeline, seed=2, num_shards=2)
    assert ready.staged.task == "multilabel" and ready.staged.classes == ("cat", "dog", "emu", "owl")
    assert ready.staged.splits == ("train", "validation")
    assert held_images(tmp_path / "w", root, len(ready.chunk_sizes)) == (sum(ready.chunk_sizes), 0)
    rejects = json.loads((tmp_path / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    assert {r[0]: r[1] for r in rejects if not r[1] == "empty_label"} == {
        "train/a.parquet#row=24": "bad_label",
        "train/a.parquet#row=25": "unknown_label",
        "train/a.parquet#row=26": "no_label",
    }
    strings = tmp_path / "strings"
    tags = [["cat", "dog"], ["emu"], [], ["cat", "a|b"], ["yak", "cat"], ["owl", "dog"]] * 3
    write_plain(strings / "t.parquet", {"image": [image_bytes(seed=i) for i in range(18)], "tags": tags})
    classes = tmp_path / "classes.txt"
    classes.write_text("owl\ncat\ndog\nemu\n")
    ready = assert_same_staging(strings, tmp_path / "s", pipeline, label_column="tags", classes=str(classes))
    assert ready.staged.classes == ("owl", "cat", "dog", "emu")
    rejects = json.loads((tmp_path / "s" / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    assert sorted({r[1] for r in rejects}) == ["bad_label", "empty_label", "unknown_label"] and len(rejects) == 9
