"""A conversion from and to the simulated object store (`simfs://`, tests/support/simfs.py): it succeeds,
its output verifies, and every request it made is counted and reconciles with what the store holds; the
requests per kept image stay within issue 37's budget (bench/scale_sim.py measures them at scale)."""

import collections
import json
import os

import pytest
from click.testing import CliRunner

from prep.cli import main
from tests.support import simfs

CLASSES, PER_CLASS, DUP_EVERY = 3, 20, 10  # 6 exact duplicates (keep: all written)
SOURCE = simfs.source_url(CLASSES, PER_CLASS, DUP_EVERY)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMFS_STORE", str(tmp_path / "store"))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    return tmp_path / "store"


def _converted(store, out, *options, source=SOURCE):
    """Runs `prep convert` in this process (the embedded runner's threads are here too); its requests."""
    before, _ = simfs.local_counts()
    result = CliRunner().invoke(
        main,
        [
            "convert",
            source,
            out,
            "--split",
            "train=0.8,validation=0.2",
            "--num-shards",
            "2",
            "--no-progress",
            *options,
        ],
    )
    assert result.exit_code == 0, result.output
    after, _ = simfs.local_counts()
    return after - before


def test_a_conversion_through_the_simulated_store(store):
    out = "simfs://out/converted"
    counts = _converted(store, out)
    local = store / "out" / "converted"

    verified = CliRunner().invoke(main, ["verify", str(local), "--deep"])
    assert verified.exit_code == 0, verified.output
    manifest = json.loads((local / "manifest.json").read_text())
    kept = manifest["inputs"]["written"]
    assert kept == CLASSES * PER_CLASS and manifest["inputs"]["found"] == kept
    summary = json.loads((local / "duplicates.jsonl").read_text().splitlines()[0])
    # the source's exact duplicates were found, and no two other generated pictures look alike
    assert (summary["exact_groups"], summary["near_groups"]) == (CLASSES * PER_CLASS // DUP_EVERY, 0)

    by_kind = collections.Counter()
    for (kind, _, _), n in counts.items():
        by_kind[kind] += n
    src_reads = sum(n for (kind, obj, _), n in counts.items() if kind == "read" and obj == "src")
    print(
        f"\n{kept} kept images; requests per kept image: "
        + ", ".join(f"{k} {by_kind[k] / kept:.2f}" for k in simfs.KINDS)
        + f"; all told {simfs.requests(counts) / kept:.2f} (a rename counted as a copy and a delete)"
    )
    for kind in ("list", "stat", "read", "write", "rename", "delete"):
        assert by_kind[kind] > 0, kind
    assert src_reads >= kept  # each kept image is read at least once (to check it)
    assert not any(obj == "src" for (kind, obj, _), n in counts.items() if kind in ("write", "rename", "delete"))
    # Every object the store holds was written (or copied) and not deleted since: renames move, creates add.
    objects = [os.path.join(d, f) for d, _, fs in os.walk(store) if ".incoming" not in d for f in fs]
    assert len(objects) == by_kind["write"] + by_kind["copy"] - by_kind["delete"]
    assert not any(".part" in o for o in objects)  # every temporary name was renamed or deleted
    assert "other" not in {caller for (_, _, caller) in counts}  # each request is traced to project code


def test_counts_reach_the_counts_folder_from_a_child_process(store, tmp_path, monkeypatch):
    # What bench/scale_sim.py relies on: a `prep` process (or a Dask worker) leaves its counts in $SIMFS_COUNTS.
    import subprocess
    import sys

    folder = tmp_path / "counts"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, SIMFS_COUNTS=str(folder), PYTHONPATH=root)
    code = (
        "import sys; from tests.support import simfs; from prep.cli import main; "
        "sys.argv = ['prep', *sys.argv[1:]]; main()"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "convert",
            simfs.source_url(2, 5),
            "simfs://out/child",
            "--no-progress",
            "--duplicates",
            "off",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    counts, nbytes = simfs.load_counts(str(folder))
    assert sum(n for (kind, obj, _), n in counts.items() if kind == "read" and obj == "src") >= 10
    assert nbytes[("read", "src")] >= 10 * simfs.IMAGE_BYTES
    assert nbytes[("write", "src")] == 0


@pytest.mark.parametrize("duplicates", ["off", "keep"])
def test_a_kept_image_costs_at_most_three_requests_all_told(store, duplicates):
    # Issue 37's budget: the two reads of each source image (to check it, to write it) and its share of
    # everything else. Spill files and in-flight records per 16 images, and the writer's ranged read of
    # each record's spilled bytes, took about 3.8 at scale and 3.9 here. 2,000 images are staged in 32
    # chunks of 63 (ordering.chunk_size), so a chunk's files weigh more here than at scale (1,024 a chunk).
    classes, per_class = 4, 500
    counts = _converted(
        store, "simfs://out/budget", "--duplicates", duplicates, source=simfs.source_url(classes, per_class, 50)
    )
    manifest = json.loads((store / "out" / "budget" / "manifest.json").read_text())
    kept = manifest["inputs"]["written"]
    assert kept == classes * per_class
    src = sum(n for (kind, obj, _), n in counts.items() if obj == "src" and kind != "list")
    assert src == 2 * kept  # each image read to check it and again to write it: nothing else asks for it
    print(f"\n{duplicates}: {simfs.requests(counts) / kept:.2f} requests per kept image")
    assert simfs.requests(counts) / kept <= 3.0, simfs.requests(counts) / kept
