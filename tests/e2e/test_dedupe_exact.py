"""`--near off`: exact duplicates alone (same stored bytes), grouped by a shuffle on their sha256
(beam_jobs/dedupe_exact.py): the byte copies found, no re-encode, resize or crop; an exact copy under
another label rejected by the default policy; the same bytes whether one bucket or many."""

from __future__ import annotations

import functools
import json
import shutil

from prep.core.run.dedupe_types import DedupeSettings
from tests.e2e.test_dedupe_convert import planted_tree, reconciles, rejects
from tests.support import datasets
from tests.support.shards import shard_bytes


def test_near_off_groups_the_byte_copies_alone_in_one_bucket_or_many(tmp_path, monkeypatch):
    src = tmp_path / "src"
    planted_tree(src, photos=12, planted=2)
    shutil.copy(src / "cat" / "p005.jpg", src / "dog" / "y_copy_of_cat.jpg")  # another label, same bytes
    args = ("--near", "off", "--split", "train=0.5,test=0.5", "--num-shards", "2")
    out = datasets.convert(src, tmp_path / "one", *args)
    lines = [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]
    groups = sorted(sorted(m["path"] for m in line["members"]) for line in lines[1:])
    assert groups == [
        ["cat/p000.jpg", "cat/z_copy_0.jpg"],
        ["cat/p001.jpg", "cat/z_copy_1.jpg"],
        ["cat/p005.jpg", "dog/y_copy_of_cat.jpg"],
        ["dog/p000.jpg", "dog/z_copy_0.jpg"],
        ["dog/p001.jpg", "dog/z_copy_1.jpg"],
    ]
    assert all(line["kind"] == "exact" for line in lines[1:])
    assert (lines[0]["groups"], lines[0]["near_groups"], lines[0]["conflict_groups"]) == (5, 0, 1)
    assert sorted((r["path"], r["reason"]) for r in rejects(out)) == [
        ("cat/p005.jpg", "label_conflict"),
        ("dog/y_copy_of_cat.jpg", "label_conflict"),
    ]
    assert reconciles(out)["written"] == 2 * (12 + 2 * 4) + 1 - 2

    # part_target 8: a run of one chunk a task, and the hashes cut into many buckets
    monkeypatch.setattr("beam_jobs.graph.DedupeSettings", functools.partial(DedupeSettings, part_target=8))
    many = datasets.convert(src, tmp_path / "many", *args)
    assert shard_bytes(many) == shard_bytes(out)
    for name in ("duplicates.jsonl", "rejects.jsonl"):
        assert (many / name).read_bytes() == (out / name).read_bytes()


def test_near_off_acts_on_duplicate_groups(tmp_path, run_cli):
    src = tmp_path / "src"
    planted_tree(src, photos=2, planted=0)
    result = run_cli("convert", src, tmp_path / "out", "--duplicates", "off", "--near", "off")
    assert result.exit_code != 0
    assert "Error: --near acts on duplicate groups: it cannot be used with --duplicates off" in result.output
