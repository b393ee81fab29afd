"""WebDataset shards listed on workers, a task a shard (beam_jobs/list_shards.py), stage exactly what the
driver's listing (`webdataset.list_webdataset`) does: the same chunk files, early rejects and run record,
as a Beam pipeline and with its steps run in this process; what they cannot decide alone falls back."""

from __future__ import annotations

import json
import pathlib

import pytest

from beam_jobs import list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import folder_source, list_inputs, shard_source
from prep.core.run.start import clear_output, ready_listed, ready_output
from tests.e2e.test_list_source import staged
from tests.support.wds_data import corrupt_header, labelled, png, write_shards


@pytest.fixture(params=[True, False], ids=["pipeline", "in-process"])
def pipeline(request):
    return request.param


def on_workers(source, out, pipeline, **options):
    config = build_config(str(source), str(out), options)
    assert folder_source(config) is None
    shards = shard_source(config)
    assert shards is not None
    clear_output(config)
    summary = list_on_workers(config, shards, pipeline=pipeline)
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


def _classes(tmp_path, *names):
    path = tmp_path / "classes.txt"
    path.write_text("\n".join(names) + "\n")
    return str(path)


def test_many_shards_with_splits_and_damage_stage_the_driver_listing(tmp_path, pipeline):
    root = tmp_path / "src"
    shards = {f"train/{i:05d}.tar": labelled(150, 4, start=150 * i, size=(4, 3)) for i in range(5)}
    shards["validation/00000.tar"] = labelled(40, 4, start=900, size=(4, 3)) + [
        {"__key__": "nolabel", "jpg": png(1)},
        {"__key__": "noimage", "cls": 1},
    ]
    write_shards(root, shards)
    corrupt_header(root / "train/00002.tar", "s00310.jpg")
    ready = assert_same_staging(root, tmp_path, pipeline, seed=5)
    assert ready.staged.splits == ("train", "validation")
    assert len(ready.chunk_sizes) > 10  # groups cut in buckets across chunks, each chunk from several shards


def test_integer_labels_index_classes_and_those_past_its_end_are_rejects(tmp_path, pipeline):
    root = tmp_path / "src"
    write_shards(root, {f"{i}.tar": labelled(30, 5, start=30 * i, size=(4, 3)) for i in range(3)})
    ready = assert_same_staging(root, tmp_path, pipeline, classes=_classes(tmp_path, "ant", "bee", "cat"))
    assert ready.staged.classes == ("ant", "bee", "cat")
    rejects = json.loads((tmp_path / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    assert {r[1] for r in rejects} == {"unknown_label"} and len(rejects) == 36
    assert rejects[0][2] == "label 3 is past the 3 names of --classes"


def test_labels_from_a_json_field_and_unknown_names(tmp_path, pipeline):
    root = tmp_path / "src"
    names = ("owl", "emu", "kea")
    write_shards(
        root,
        {
            f"{i}.tar": [{"__key__": f"k{i}-{j}", "png": png(j), "json": {"bird": names[j % 3]}} for j in range(20)]
            for i in range(3)
        },
    )
    assert_same_staging(root, tmp_path, pipeline, label_key="bird")
    assert_same_staging(root, tmp_path / "c", pipeline, label_key="bird", classes=_classes(tmp_path, "emu", "kea"))


def test_no_sample_with_a_label_names_the_reasons(tmp_path, pipeline):
    root = tmp_path / "src"
    write_shards(root, {"a.tar": [{"__key__": "x", "png": png(1)}], "b.tar": [{"__key__": "y", "cls": 1}]})
    with pytest.raises(SourceError, match=r"no sample of the 2 shard\(s\) .*\(1 no_image, 1 no_label\)"):
        on_workers(root, tmp_path / "w", pipeline)


def test_integer_labels_written_two_ways_fall_back_to_the_driver(tmp_path, pipeline):
    root = tmp_path / "src"
    write_shards(
        root,
        {
            "a.tar": [{"__key__": "x", "png": png(1), "json": {"label": 1}}],
            "b.tar": [{"__key__": "y", "png": png(2), "txt": "01"}],
        },
    )
    assert "two ways" in on_workers(root, tmp_path / "w", pipeline, classes=_classes(tmp_path, "a", "b"))


def test_remote_shards_stage_the_driver_listing_and_chunk_member_ranges(tmp_path, pipeline, monkeypatch):
    from tests.support import simfs  # noqa: F401  (registers simfs://)

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    write_shards(store / "wds", {f"{i}.tar": labelled(60, 3, start=60 * i, size=(4, 3)) for i in range(4)})
    corrupt_header(store / "wds" / "2.tar", "s00130.jpg")
    workers, driver = "simfs://out/w", "simfs://out/d"
    config = build_config("simfs://wds", workers, {"seed": 2})
    shards = shard_source(config)
    assert shards is not None and len(shards.tasks) == 4
    clear_output(config)
    summary = list_on_workers(config, shards, pipeline=pipeline)
    list_source.delete_listed(workers)
    a = ready_listed(config, summary)
    config_d = build_config("simfs://wds", driver, {"seed": 2})
    b = ready_output(config_d, list_inputs(config_d))
    assert (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    assert staged(str(store / "out" / "w")) == staged(str(store / "out" / "d"))
    members = sorted(p.name for p in (store / "out" / "w" / ".prep-tmp" / "members").iterdir())
    assert sum(name.endswith(".json") for name in members) == len(a.chunk_sizes)  # every chunk's ranges
    from prep.core.run import checkpoints
    from prep.core.sources import held, webdataset
    from prep.core.workdir import WorkDir

    work = WorkDir(workers)
    for chunk in range(len(a.chunk_sizes)):
        refs = checkpoints.read_listing(work, chunk)
        got = [data for h in held.batches_held(work, chunk, refs, 16) for data in held.read_held(h)]
        assert got == [webdataset.read_member(f"simfs://wds/{r.path}") for r in refs]


def _tagged(n: int, start: int = 0) -> list[dict]:
    """Samples of json lists of labels (with a single label, an empty list, a bad name and a list of ints
    among them), in shards of many label combinations."""
    names = ("cat", "dog", "emu", "owl", "yak")
    samples = []
    for i in range(start, start + n):
        tags = [names[j] for j in range(5) if (i * 7 + j * 3) % (j + 2) == 0] or [names[i % 5]]
        samples.append({"__key__": f"m{i:05d}", "png": png(i), "json": {"tags": tags}})
    samples += [
        {"__key__": f"e{start}", "png": png(1), "json": {"tags": []}},
        {"__key__": f"b{start}", "png": png(2), "json": {"tags": ["cat", "a|b"]}},
        {"__key__": f"s{start}", "png": png(3), "json": {"tags": "dog"}},
        {"__key__": f"u{start}", "png": png(4), "json": {"tags": ["cat", "gnu"]}},
    ]
    return samples


def test_json_lists_of_labels_stage_the_driver_multilabel_listing(tmp_path, pipeline):
    root = tmp_path / "src"
    shards = {f"train/{i}.tar": _tagged(60, 100 * i) for i in range(3)}
    shards["validation/0.tar"] = _tagged(30, 900)
    write_shards(root, shards)
    ready = assert_same_staging(root, tmp_path, pipeline, label_key="tags", seed=3, num_shards=3)
    assert ready.staged.task == "multilabel" and ready.staged.splits == ("train", "validation")
    assert ready.staged.classes == ("cat", "dog", "emu", "gnu", "owl", "yak")  # found on workers
    assert ready.staged.groups == ready.staged.classes + ("(none)",)
    rejects = json.loads((tmp_path / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    assert sorted({r[1] for r in rejects}) == ["bad_label", "empty_label"] and len(rejects) == 8


def test_json_lists_with_classes_reject_unknown_names_as_the_driver(tmp_path, pipeline):
    root = tmp_path / "src"
    write_shards(root, {f"{i}.tar": _tagged(40, 100 * i) for i in range(3)})
    classes = _classes(tmp_path, "owl", "cat", "dog", "emu", "yak")
    ready = assert_same_staging(root, tmp_path, pipeline, label_key="tags", classes=classes)
    assert ready.staged.classes == ("owl", "cat", "dog", "emu", "yak")
    rejects = json.loads((tmp_path / "w" / ".prep-tmp" / "listing" / "rejects.json").read_bytes())
    unknown = [r for r in rejects if r[1] == "unknown_label"]
    assert len(unknown) == 3 and unknown[0][2] == "label 'gnu' is not in --classes"


def test_json_lists_none_in_classes_names_the_reasons(tmp_path, pipeline):
    root = tmp_path / "src"
    write_shards(root, {"a.tar": _tagged(5)})
    with pytest.raises(SourceError, match=r"\(1 bad_label, 1 empty_label, 7 unknown_label\)"):
        on_workers(root, tmp_path / "w", pipeline, label_key="tags", classes=_classes(tmp_path, "zebra"))


def test_remote_json_lists_stage_the_driver_multilabel_listing(tmp_path, monkeypatch):
    """Remote shards' members are copied as they stream by; a multi-label set's chunks read them by range
    instead, as the driver's listing does (its chunks hold no member ranges)."""
    from tests.support import simfs  # noqa: F401  (registers simfs://)

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    write_shards(store / "wds", {f"{i}.tar": _tagged(20, 100 * i) for i in range(3)})
    options = {"seed": 2, "label_key": "tags"}
    config = build_config("simfs://wds", "simfs://out/w", options)
    shards = shard_source(config)
    assert shards is not None
    clear_output(config)
    summary = list_on_workers(config, shards, pipeline=False)
    list_source.delete_listed("simfs://out/w")
    a = ready_listed(config, summary)
    config_d = build_config("simfs://wds", "simfs://out/d", options)
    b = ready_output(config_d, list_inputs(config_d))
    assert a.staged.task == "multilabel" and (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    assert staged(str(store / "out" / "w")) == staged(str(store / "out" / "d"))
    assert not [p for p in (store / "out" / "w" / ".prep-tmp" / "members").iterdir() if p.suffix == ".json"]
