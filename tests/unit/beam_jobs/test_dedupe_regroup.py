"""Regroup (beam_jobs/dedupe_decide.py): the run-wide pins file read once a bundle, the placements unchanged."""

from __future__ import annotations

from fractions import Fraction

import pytest

from beam_jobs import dedupe_decide
from beam_jobs.prepare import ChunkCounts, GroupCount, PreparedRef
from prep.core.groups import Decision, DedupeOptions
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import DecidedSlice, DedupeSettings
from prep.core.workdir import WorkDir


def _ref(chunk: int, n: int) -> PreparedRef:
    return PreparedRef(f"c{chunk}/{n}.jpg".encode(), 0, "", chunk * 64, n * 100, 100, False, 0, 0)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """Three chunks of 4 refs, each with its first ref in a movable duplicate group pinned by the pins file."""
    work = WorkDir(str(tmp_path))
    refs = {c: [_ref(c, n) for n in range(4)] for c in range(3)}
    monkeypatch.setattr(dedupe_decide, "read_prepared", lambda _, chunk: refs[chunk])
    pins = {f"c{c}/0.jpg": ("validation" if c == 1 else "train") for c in range(3)}
    dedupe_files.write_choices(work, "duplicates", pins)
    decided = dedupe_files.write_decisions(
        work, 0, {c: [Decision(dedupe_files.item_id(c, 0), None, "train", f"c{c}/0.jpg")] for c in range(3)}
    )
    reads = []
    real = dedupe_files.read_choices
    monkeypatch.setattr(dedupe_files, "read_choices", lambda w, kind: reads.append(kind) or real(w, kind))
    settings = DedupeSettings(
        ("cat",), DedupeOptions(), 0, (("train", Fraction(1, 2)), ("validation", Fraction(1, 2))), True
    )
    elements = [(c, [ChunkCounts(c, (GroupCount("", 0, 4, 400),)), DecidedSlice(c, decided[c])]) for c in range(3)]
    return work, settings, elements, reads


def _run(fn, elements):
    fn.start_bundle()
    return [out for element in elements for out in fn.process(element) if isinstance(out, ChunkCounts)]


def test_the_pins_are_read_once_a_bundle_with_the_same_counts_as_once_a_chunk(setup):
    work, settings, elements, reads = setup
    each = [out for element in elements for out in dedupe_decide.regroup(element, work, settings)]
    assert reads == ["duplicates"] * 3  # once a chunk, called alone
    reads.clear()
    fn = dedupe_decide.Regroup(work, settings)
    got = _run(fn, elements)
    assert reads == ["duplicates"]
    assert got == [c for c in each if isinstance(c, ChunkCounts)]
    assert got[1].counts == (GroupCount("", 0, 1, 100, "validation"), GroupCount("", 0, 3, 300))
    _run(fn, elements[:1])  # a new bundle reads them again (a retried or later bundle sees the file as it is)
    assert reads == ["duplicates"] * 2
