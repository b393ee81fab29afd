"""The work directory's paths (prep/core/workdir.py): every one under .prep-tmp, names parsed back, and no
product code building a path under .prep-tmp but WorkDir."""

from __future__ import annotations

import ast
import pathlib

import pytest

from prep.core import storage
from prep.core.workdir import TMP_DIR, WorkDir, parse_scan_keys_name, parse_spill_name, spill_id

ROOT = pathlib.Path(__file__).resolve().parents[4]
PRODUCT = ("prep", "beam_jobs", "loaders")
# (file, function) that may join a name onto the work directory's root: deleting all of it
ALLOWED = {("prep/core/run/checkpoints.py", "delete_work")}


def every_path(work: WorkDir) -> list[str]:
    return [
        work.run_record,
        work.listing_chunk(3),
        work.listing_rejects,
        work.listing_boxes,
        work.listed_folder,
        work.listed_group(2, 3),
        work.listed_rejects(2),
        work.listed_summary,
        work.spill_folder,
        work.spill(spill_id(3, 7)),
        work.in_flight_folder,
        work.in_flight(5),
        work.chunk_index(3),
        work.plan,
        work.entries(2),
        work.shard_sidecar("a.tfrecord"),
        work.part("a.tfrecord", 1),
        work.part_sidecar("a.tfrecord", 1),
        work.groups_folder,
        work.key_rows(3),
        work.scan_keys(3),
        work.members(3),
        work.decisions(4),
        work.report_lines(4),
        work.policy_rejects(4),
        work.units,
        work.pins("users"),
        work.placements(3),
        work.part_order("a.tfrecord", 2),
        work.shard_parts("a.tfrecord"),
        work.join_folder,
        work.join_run("places", 1),
    ]


@pytest.mark.parametrize("output", ["/data/out", "gs://bucket/out"])
def test_every_path_is_under_the_work_directory_and_distinct(output):
    work = WorkDir(output)
    paths = every_path(work)
    assert work.root == storage.join(output, TMP_DIR)
    assert all(p.startswith(work.root + "/") for p in paths)
    assert len(set(paths)) == len(paths)
    assert storage.temp_path(work.shard_temp("a.tfrecord")) != work.shard_temp("a.tfrecord")


def test_names_parse_back():
    work = WorkDir("/out")
    assert parse_spill_name(work.spill(spill_id(12, 34)).rsplit("/", 1)[1]) == 12
    assert parse_scan_keys_name(work.scan_keys(42).rsplit("/", 1)[1]) == 42
    for other in (work.key_rows(42), work.members(42), work.scan_keys(42) + ".0a1b2c3d.part"):
        assert parse_scan_keys_name(other.rsplit("/", 1)[1]) is None


def _work_root_joins(path: pathlib.Path) -> list[str]:
    """`storage.join(<x>.root, ...)` (or a join with TMP_DIR) in a product file, outside the allowed functions."""
    tree = ast.parse(path.read_text(), str(path))
    name = path.relative_to(ROOT).as_posix()
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and (name, function) not in ALLOWED:
                func = child.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                root = any(isinstance(a, ast.Attribute) and a.attr == "root" for a in child.args)
                tmp = any(isinstance(a, ast.Name) and a.id == "TMP_DIR" for a in child.args)
                if called == "join" and (root or tmp):
                    found.append(f"{name}:{child.lineno}")
            visit(child, inner)

    visit(tree, None)
    return found


def test_no_path_under_the_work_directory_is_built_outside_workdir():
    files = [p for root in PRODUCT for p in sorted((ROOT / root).rglob("*.py"))]
    assert files
    found = [hit for p in files if p != ROOT / "prep" / "core" / "workdir.py" for hit in _work_root_joins(p)]
    assert found == [], "paths under .prep-tmp built outside prep/core/workdir.py (add a WorkDir method)"


def test_a_chunks_files_are_spread_over_key_ranges_not_one_sequential_range():
    # An object store serves key ranges separately: sequential names all fall in one while it splits.
    work = WorkDir("gs://bucket/out")
    names = [work.spill(spill_id(chunk, 0)).rsplit("/", 1)[1] for chunk in range(512)]
    assert len({name[:3] for name in names}) > 300  # of 4,096 prefixes, hashed
    assert sorted(names) != names
    for chunk in (0, 7, 511):  # every file of a chunk shares its prefix: the same on every run
        prefix = work.spill(spill_id(chunk, 0)).rsplit("/", 1)[1][:3]
        for path in (work.chunk_index(chunk), work.in_flight(chunk), work.listing_chunk(chunk)):
            assert path.rsplit("/", 1)[1].startswith(prefix + f"-chunk-{chunk:06d}.")
