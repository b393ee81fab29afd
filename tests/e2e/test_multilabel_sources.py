"""Multi-label datasets from WebDataset shards (a json list of labels) and from Parquet (a list column):
listed on workers as on the driver, every record holding the sample's names and image bytes, rejects with
their reasons, and the same shard bytes on the embedded runner, the DirectRunner and Dask."""

from __future__ import annotations

import json

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


def test_wds_json_lists_on_workers_write_every_sample_with_its_names(tmp_path):
    _wds(tmp_path / "src")
    out = _convert(tmp_path / "src", tmp_path / "out", label_key="tags")
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


def test_wds_json_lists_give_the_same_bytes_on_the_direct_and_dask_runners(tmp_path):
    import logging

    from dask import distributed

    from tests.e2e.test_runners import DASK

    _wds(tmp_path / "src")
    reference = _convert(tmp_path / "src", tmp_path / "ref", listing=True, label_key="tags")  # the driver's
    embedded = _convert(tmp_path / "src", tmp_path / "emb", label_key="tags")
    assert_same_dataset(embedded, reference, shards=4)
    direct = _convert(tmp_path / "src", tmp_path / "direct", "DirectRunner", label_key="tags")
    assert_same_dataset(direct, reference, shards=4)
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = f"--dask_client_address={cluster.scheduler_address}"
        dask = _convert(tmp_path / "src", tmp_path / "dask", DASK, beam_args=[address], label_key="tags")
    assert_same_dataset(dask, reference, shards=4)
