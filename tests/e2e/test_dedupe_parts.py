"""The dedupe scan cut into band parts (beam_jobs/dedupe_scan.py, dedupe_components.py) inside a whole conversion:
the same groups, decisions and shards as the one scan task, on the embedded runner and on a Dask cluster.

Apart from test_dedupe_convert.py so that `--dist loadfile` can run it on another worker: the Dask conversion
is the suite's longest single test (the spread path's GroupByKeys and Flattens make tens of thousands of tiny
Dask tasks even for 78 images)."""

from __future__ import annotations

import functools
import json

import pytest

from prep.core.run.dedupe_types import DedupeSettings
from tests.e2e.test_dedupe_convert import planted_tree
from tests.support import datasets
from tests.support.shards import shard_bytes

ARGS = ("--split", "train=0.5,test=0.5", "--duplicates", "drop", "--conflicts", "reject", "--num-shards", "2")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """(source, its conversion with one scan task): 78 images, 6 planted groups."""
    root = tmp_path_factory.mktemp("parts")
    planted_tree(root / "src")
    out = datasets.convert(root / "src", root / "whole", *ARGS)
    assert json.loads((out / "duplicates.jsonl").read_text().splitlines()[0])["groups"] >= 6
    return root / "src", out


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_a_scan_cut_into_band_parts_gives_the_same_bytes(whole, tmp_path, monkeypatch, runner, request):
    """Past `part_target` images the scan's hashes go through a GroupByKey to one task a band part
    (beam_jobs/dedupe_scan.py): the same groups, decisions and shards as the one scan task."""
    src, reference = whole
    monkeypatch.setattr("beam_jobs.graph.DedupeSettings", functools.partial(DedupeSettings, part_target=8))
    beam_args: tuple[str, ...] = ()
    if runner == "dask":
        address = request.getfixturevalue("dask_cluster")  # the session's cluster (tests/e2e/conftest.py)
        beam_args = ("--runner", "apache_beam.runners.dask.dask_runner.DaskRunner", "--")
        beam_args += (f"--dask_client_address={address}",)
    parts = datasets.convert(src, tmp_path / "parts", *ARGS, *beam_args)  # 78 images: 4 bits, 2 families a band
    assert shard_bytes(parts) == shard_bytes(reference)
    for name in ("duplicates.jsonl", "rejects.jsonl"):
        assert (parts / name).read_bytes() == (reference / name).read_bytes()
