"""Multi-label datasets from WebDataset shards (a json list of labels) and from Parquet (a list column):
listed on workers as on the driver, every record holding the sample's names and image bytes, rejects with
their reasons, and the same shard bytes on the embedded runner, the DirectRunner and Dask."""

from __future__ import annotations

import json

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.support.shards import assert_same_dataset
from tests.support.wds_data import photo, write_shards

TAGS = [["cat", "dog"], ["dog"], ["bird", "cat"], ["cat"], [], ["cat", "fish"], ["bird", "dog", "cat"], ["bird"]]


def records(out) -> dict[str, tuple[list[str], bytes]]:
    """{image/filename up to '#': (its class names, its image bytes)} of every record written."""
    import tensorflow as tf

    got = {}
    for shard in sorted(out.rglob("*.tfrecord*")):
        for raw in tf.data.TFRecordDataset(str(shard)).as_numpy_iterator():
            f = tf.train.Example.FromString(raw).features.feature
            name = f["image/filename"].bytes_list.value[0].decode()
            texts = [x.decode() for x in f["image/class/text"].bytes_list.value]
            got[name.partition("#bytes=")[0]] = (texts, f["image/encoded"].bytes_list.value[0])
    return got


def rejects(out) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["path"].partition("#bytes=")[0]: r["reason"] for r in map(json.loads, lines)}


def _wds(root):
    samples = [{"__key__": f"s{i:02d}", "jpg": photo(i), "json": {"tags": t}} for i, t in enumerate(TAGS * 3)]
    samples.append({"__key__": "bad", "jpg": photo(99), "json": {"tags": ["cat", None]}})
    write_shards(root, {"train/a.tar": samples[:10], "train/b.tar": samples[10:20], "validation/c.tar": samples[20:]})


def _convert(source, out, runner="local", listing=False, beam_args=None, **options):
    config = build_config(str(source), str(out), {"num_shards": 2, "seed": 4, **options})
    conversion.convert(config, list_inputs(config) if listing else None, runner=runner, beam_args=beam_args)
    return out


@pytest.fixture(scope="module")
def wds(tmp_path_factory):
    """(the WebDataset source, its conversion listed on workers by the embedded runner): both tests read it."""
    tmp = tmp_path_factory.mktemp("wds")
    _wds(tmp / "src")
    return tmp / "src", _convert(tmp / "src", tmp / "out", label_key="tags")


def test_wds_json_lists_on_workers_write_every_sample_with_its_names(wds):
    _, out = wds
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "multilabel" and manifest["labels"] == ["bird", "cat", "dog", "fish"]
    assert set(manifest["splits"]) == {"train", "validation"}
    got = records(out)
    for i, tags in enumerate(TAGS * 3):
        shard = "train/a.tar" if i < 10 else "train/b.tar" if i < 20 else "validation/c.tar"
        name = f"{shard}/s{i:02d}.jpg"
        if tags:
            assert got.pop(name) == (sorted(tags), photo(i))
        else:
            assert rejects(out)[name] == "empty_label"
    assert not got
    assert rejects(out)["validation/c.tar/bad.jpg"] == "bad_label"
    inputs = manifest["inputs"]
    assert inputs["found"] == 25 == inputs["written"] + inputs["rejected"] + inputs["capped"]


def test_wds_json_lists_give_the_same_bytes_on_the_direct_and_dask_runners(wds, tmp_path, dask_cluster):
    from tests.e2e.test_runners import DASK

    src, embedded = wds
    reference = _convert(src, tmp_path / "ref", listing=True, label_key="tags")  # the driver's
    assert_same_dataset(embedded, reference, shards=4)
    direct = _convert(src, tmp_path / "direct", "DirectRunner", label_key="tags")
    assert_same_dataset(direct, reference, shards=4)
    address = f"--dask_client_address={dask_cluster}"  # the session's cluster (tests/e2e/conftest.py)
    dask = _convert(src, tmp_path / "dask", DASK, beam_args=[address], label_key="tags")
    assert_same_dataset(dask, reference, shards=4)


NAMES = ["cat", "dog", "emu", "owl"]


def _hf_multilabel(root, files: dict[str, list[list[int]]]) -> dict[str, tuple[list[str], bytes]]:
    """Parquet files written by `datasets` with a `List(ClassLabel(NAMES))` column `labels` (a Hub export's
    layout); returns {`file#row=N`: (names, image bytes)} of every row with labels."""
    import datasets

    from tests.support.imagegen import image_bytes

    features = datasets.Features({"image": datasets.Image(), "labels": datasets.List(datasets.ClassLabel(names=NAMES))})
    want = {}
    for n, (name, labels) in enumerate(files.items()):
        images = [image_bytes(size=(20, 14), seed=100 * n + i) for i in range(len(labels))]
        rows = {"image": [{"bytes": b, "path": None} for b in images], "labels": labels}
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_dict(rows, features=features).to_parquet(str(root / name), batch_size=4)
        want.update(
            {f"{name}#row={i}": (sorted(NAMES[x] for x in set(t)), images[i]) for i, t in enumerate(labels) if t}
        )
    return want


def _old_sequence(path, labels: list) -> None:
    """A Parquet file with HF metadata as `datasets` before 4 wrote it (`Sequence(ClassLabel)`), by pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.support.imagegen import image_bytes

    features = {
        "image": {"_type": "Image"},
        "labels": {"_type": "Sequence", "feature": {"_type": "ClassLabel", "names": NAMES}},
    }
    images = [{"bytes": image_bytes(size=(8, 6), seed=500 + i), "path": None} for i in range(len(labels))]
    table = pa.table({"image": images, "labels": pa.array(labels, pa.list_(pa.int64()))})
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path), row_group_size=4)


LISTS = [[0, 1], [1], [2, 0, 3], [3], [], [1, 2]] * 4


def test_parquet_list_of_classlabels_writes_every_row_with_its_names(tmp_path):
    src = tmp_path / "src"
    files = {
        "data/train-00000-of-00002.parquet": LISTS,
        "data/train-00001-of-00002.parquet": LISTS[:10],
        "data/test-00000-of-00001.parquet": LISTS[3:15],
    }
    want = _hf_multilabel(src, files)
    out = _convert(src, tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "multilabel" and manifest["labels"] == NAMES
    assert set(manifest["splits"]) == {"train", "test"}
    assert records(out) == want
    empty = {f"{name}#row={i}" for name, labels in files.items() for i, t in enumerate(labels) if not t}
    assert rejects(out) == dict.fromkeys(empty, "empty_label")
    inputs = manifest["inputs"]
    assert inputs["found"] == 46 == inputs["written"] + inputs["rejected"] and inputs["written"] == len(want)


def test_parquet_lists_give_the_same_bytes_listed_on_the_driver_and_the_direct_runner(tmp_path):
    src = tmp_path / "src"
    _hf_multilabel(src, {"train/a.parquet": LISTS, "validation/b.parquet": LISTS[:9]})
    reference = _convert(src, tmp_path / "ref", listing=True)
    assert_same_dataset(_convert(src, tmp_path / "emb"), reference, shards=4)
    assert_same_dataset(_convert(src, tmp_path / "direct", "DirectRunner"), reference, shards=4)
