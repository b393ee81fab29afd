"""Listing WebDataset shards: labels from cls, json (--label-key) or txt; --classes; what is not a sample."""

import pytest

from prep.core.errors import SourceError
from prep.core.sources import tar_read, webdataset
from tests.support.wds_data import png, write_shards


def _list(root, shards, classes=None, label_key=None):
    write_shards(root, shards)
    return webdataset.list_webdataset(str(root), sorted(shards), "auto", classes, label_key)


def test_labels_from_json_txt_and_a_named_json_field(tmp_path):
    listing = _list(
        tmp_path,
        {
            "a.tar": [
                {"__key__": "j", "png": png(1), "json": {"label": "cat"}},
                {"__key__": "t", "png": png(2), "txt": "dog"},
                {"__key__": "both", "png": png(3), "json": {"label": "cat"}, "txt": "a caption"},
            ]
        },
    )
    assert {r.path.partition("#")[0]: r.label for r in listing.refs} == {
        "a.tar/j.png": "cat",
        "a.tar/t.png": "dog",
        "a.tar/both.png": "cat",  # json before txt
    }
    listing = _list(
        tmp_path / "k", {"a.tar": [{"__key__": "x", "png": png(1), "json": {"species": "owl"}}]}, None, "species"
    )
    assert [r.label for r in listing.refs] == ["owl"]


def test_integer_labels_are_ordered_numerically_and_index_classes(tmp_path):
    shards = {"a.tar": [{"__key__": f"k{i}", "png": png(i), "cls": i} for i in (10, 2, 0, 1)]}
    assert _list(tmp_path, shards).classes == ("0", "1", "2", "10")
    listing = _list(tmp_path / "c", shards, classes=("a", "b", "c"))
    assert sorted(r.label for r in listing.refs) == ["a", "b", "c"]
    assert [(r.path.partition("#")[0], r.reason) for r in listing.rejects] == [("a.tar/k10.png", "unknown_label")]


def test_bad_labels_and_list_labels_are_rejects_with_reasons(tmp_path):
    listing = _list(
        tmp_path,
        {
            "a.tar": [
                {"__key__": "ok", "png": png(0), "cls": 1},
                {"__key__": "word", "png": png(1), "cls": "one"},
                {"__key__": "many", "png": png(2), "json": {"label": {"a": 1}}},
                {"__key__": "nokey", "png": png(3), "json": {"other": 1}},
            ]
        },
    )
    assert {r.path.partition("#")[0]: r.reason for r in listing.rejects} == {
        "a.tar/word.png": "bad_label",
        "a.tar/many.png": "bad_label",
        "a.tar/nokey.png": "no_label",
    }
    assert listing.found == 4


def test_split_folders_give_splits_and_only_tar_folders_are_shard_sets(tmp_path):
    listing = _list(
        tmp_path,
        {
            "train/a.tar": [{"__key__": "x", "png": png(0), "cls": 0}],
            "validation/b.tar": [{"__key__": "y", "png": png(1), "cls": 0}],
        },
    )
    assert sorted((r.split, r.path.partition("/")[0]) for r in listing.refs) == [
        ("train", "train"),
        ("validation", "validation"),
    ]
    assert webdataset.is_shard_set(["a.tar", "sub/b.tar", ".hidden/x.jpg"])
    assert not webdataset.is_shard_set(["a.tar", "cat/x.jpg"]) and not webdataset.is_shard_set([])
    assert webdataset.is_shard_set(["a.tar", "b.tar.gz", "c.tgz"])


def test_member_paths_round_trip_and_read_by_range(tmp_path):
    write_shards(tmp_path, {"a.tar": [{"__key__": "x.y", "png": png(7), "cls": 0}]})
    refs, rejects = webdataset.list_shard(str(tmp_path), "a.tar", None)
    assert refs == [] and [(r.path, r.reason) for r in rejects] == [("a.tar/x", "no_image")]  # key x, suffix y.png
    write_shards(tmp_path, {"a.tar": [{"__key__": "x", "png": png(7), "cls": 0}]})
    (ref,) = webdataset.list_shard(str(tmp_path), "a.tar", None)[0]
    assert ref.path.startswith("a.tar/x.png#bytes=")
    shard, offset, length = webdataset.parse_member(str(tmp_path / ref.path))
    assert webdataset.read_member(str(tmp_path / ref.path)) == png(7)
    assert webdataset.parse_member("cat/x.jpg") is None and webdataset.read_member("cat/x.jpg") is None
    short = webdataset.member_path(shard, "x.y.png", offset, length + 10**6)
    assert webdataset.read_member(short)[0] == "truncated_member"


def test_no_class_is_an_error(tmp_path):
    with pytest.raises(SourceError, match="1 no_label"):
        _list(tmp_path, {"a.tar": [{"__key__": "x", "png": png(0)}]})


def test_label_key_without_shards_is_an_error(tmp_path):
    from prep.core.convert_options import build_config
    from prep.core.inputs import list_inputs

    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "x.png").write_bytes(png(0))
    with pytest.raises(SourceError, match="--label-key"):
        list_inputs(build_config(str(tmp_path / "src"), str(tmp_path / "out"), {"label_key": "species"}))
    assert list_inputs(build_config(str(tmp_path / "src"), str(tmp_path / "out"), {})).found == 1


def test_the_fast_header_pass_lists_what_tarfile_lists(tmp_path, monkeypatch):
    long_key = "deep/" * 30 + "k"  # a name past ustar's 100 bytes: a pax path
    shards = {
        "a.tar": [
            {"__key__": long_key, "png": png(0), "cls": 1},
            {"__key__": "é-name", "png": png(1), "json": {"label": "x"}},
            {"__key__": "plain", "png": png(2), "txt": "y"},
        ]
    }
    write_shards(tmp_path, shards)
    fast = webdataset.list_shard(str(tmp_path), "a.tar", None)
    assert [r.label for r in fast[0]] == ["1", "x", "y"] and fast[0][0].path.startswith(f"a.tar/{long_key}.png#")
    monkeypatch.setattr(tar_read, "fast_members", lambda f, size, wanted: None)
    assert webdataset.list_shard(str(tmp_path), "a.tar", None) == fast


def test_held_members_are_read_a_batch_at_a_time_across_files(tmp_path):
    from prep.core.listing import InputRef
    from prep.core.sources import held
    from prep.core.workdir import WorkDir

    work = WorkDir(str(tmp_path / "out"))
    blobs = [bytes([i]) * (i + 1) for i in range(7)]
    files = [work.members_data(0, 1), work.members_data(0, 2)]
    (tmp_path / "out" / ".prep-tmp" / "members").mkdir(parents=True)
    # the chunk's first 3 members end file 0 (after 5 bytes of another chunk's), the other 4 start file 1
    with open(files[0], "wb") as f:
        f.write(b"x" * 5 + b"".join(blobs[:3]))
    with open(files[1], "wb") as f:
        f.write(b"".join(blobs[3:]) + b"y" * 9)
    first = sum(map(len, blobs[:3]))
    held.write_chunk_ranges(work, 4, [(files[0], 5, 5 + first), (files[1], 0, sum(map(len, blobs[3:])))])
    refs = [
        InputRef(webdataset.member_path("a.tar", f"k{i}.jpg", 1000 * i, len(b)), "0", None) for i, b in enumerate(blobs)
    ]
    batches = held.batches_held(work, 4, refs, 2)
    assert [len(b.ranges) for b in batches] == [1, 2, 1, 1]  # the second batch straddles the two files
    assert [data for b in batches for data in held.read_held(b)] == blobs
    assert held.batches_held(work, 5, refs, 2) == [None] * 4  # a chunk without held members reads the shards
    folder = [InputRef("cat/a.jpg", "cat", None)]
    assert held.batches_held(work, 4, folder, 2) == [None]  # nor inputs that are no members


def test_a_pattern_is_cut_under_its_folder_and_expands_as_webdataset_expands_it():
    from prep.core.sources.shard_set import match_shards, split_pattern

    assert split_pattern("/d/shards/{00000..00002}.tar") == ("/d/shards", "{00000..00002}.tar")
    assert split_pattern("s3://b/x/*/part-*.tar") == ("s3://b/x", "*/part-*.tar")
    assert split_pattern("/d/shards") == ("/d/shards", None)
    files = ["00000.tar", "00001.tar", "00002.tar", "train/a.tar", "train/b.tgz", "notes.txt"]
    assert match_shards("/d", "{00000..00001}.tar", files) == ["00000.tar", "00001.tar"]  # zero padding kept
    assert match_shards("/d", "*.tar", files) == ["00000.tar", "00001.tar", "00002.tar"]  # `*` stays in its folder
    assert match_shards("/d", "{train/*,00002.tar}", files) == ["00002.tar", "train/a.tar", "train/b.tgz"]
    with pytest.raises(SourceError, match="shard 00003.tar of SOURCE pattern"):
        match_shards("/d", "{00000..00003}.tar", files)
    with pytest.raises(SourceError, match="matches notes.txt under /d, which is no WebDataset shard"):
        match_shards("/d", "*", files)


def test_a_gzipped_shard_lists_as_its_tar_does_and_its_members_read_decompressed(tmp_path):
    import gzip

    write_shards(tmp_path, {"a.tar": [{"__key__": f"k{i}", "png": png(i), "cls": i % 2} for i in range(5)]})
    (tmp_path / "a.tgz").write_bytes(gzip.compress((tmp_path / "a.tar").read_bytes()))
    plain, gz = webdataset.list_shard(str(tmp_path), "a.tar", None), webdataset.list_shard(str(tmp_path), "a.tgz", None)
    assert [r.path.replace("a.tar/", "a.tgz/") for r in plain[0]] == [r.path for r in gz[0]] and not gz[1]
    assert [r.label for r in gz[0]] == ["0", "1", "0", "1", "0"]
    assert webdataset.read_member(str(tmp_path / gz[0][3].path)) == png(3)


def test_a_json_list_makes_the_listing_multilabel_with_its_own_rejects(tmp_path):
    listing = _list(
        tmp_path,
        {
            "a.tar": [
                {"__key__": "two", "png": png(1), "json": {"label": [3, 10]}},
                {"__key__": "one", "png": png(2), "json": {"label": 3}},  # one name: that one class
                {"__key__": "none", "png": png(3), "json": {"label": []}},
                {"__key__": "bad", "png": png(4), "json": {"label": [3, {"x": 1}]}},
            ]
        },
    )
    assert listing.task == "multilabel" and listing.classes == ("3", "10")  # integer names in numeric order
    assert {r.path.partition("#")[0]: r.label for r in listing.refs} == {"a.tar/two.png": "10|3", "a.tar/one.png": "3"}
    assert {r.path.partition("#")[0]: r.reason for r in listing.rejects} == {
        "a.tar/none.png": "empty_label",
        "a.tar/bad.png": "bad_label",
    }


def test_the_writer_joins_the_smallest_gaps_of_spill_reads_up_to_its_waste():
    from prep.core.run.shard_copy import runs

    wanted = {"7": [(0, 10, 0), (12, 10, 1), (100, 10, 2)], "8": [(0, 5, 3), (9, 5, 4)]}
    # gaps: 2 and 78 in file 7, 4 in file 8; a waste of 6 joins the two smallest
    assert runs(wanted, 6) == {"7": [[(0, 10, 0), (12, 10, 1)], [(100, 10, 2)]], "8": [[(0, 5, 3), (9, 5, 4)]]}
    assert runs(wanted, 0) == {"7": [[r] for r in wanted["7"]], "8": [[r] for r in wanted["8"]]}
    assert runs(wanted, 100) == {"7": [wanted["7"]], "8": [wanted["8"]]}
