"""A group file's lines are staged and hashed as they are (beam_jobs/list_source.py `WriteChunk`): the chunk
file and the listing digest must be exactly what parsing them into references would give."""

from __future__ import annotations

import json

from beam_jobs import list_source
from prep.core.listing import InputRef, fields_json
from prep.core.run import checkpoints
from prep.core.run_record import refs_sum
from prep.core.workdir import WorkDir

REFS = [
    InputRef("cats/a.jpg", "cats", None),
    InputRef('dogs/"quoted" \\ back.png', "dogs", "train"),
    InputRef("ünïcode/日本.jpg", "ünïcode", None),
    InputRef("raw/\udcff\udcfebytes.jpg", "raw", None),  # an undecodable file name (surrogateescape)
    InputRef("ctl/tab\tnew\nline\r.jpg", "ctl", "test"),
    InputRef("multi/x.jpg", "a|b", None, '{"labels": [1, 2]}', "00ff" * 8),
    InputRef("groups/y.jpg", "g", "val", None, None, "patient-7"),
]


def test_fields_json_is_json_dumps():
    for ref in REFS:
        assert fields_json(ref.fields()) == json.dumps(ref.fields())
    assert fields_json([]) == json.dumps([])

    class Text(str):
        pass

    for fields in (["a", 3, None], [None, 1.5], ["a", True], [Text("é"), None], ["a", ["b"]]):  # not only text
        assert fields_json(fields) == json.dumps(fields)


def test_write_chunk_stages_and_hashes_the_lines_as_parsed_references_would(tmp_path):
    work = WorkDir(str(tmp_path / "out"))
    group = str(tmp_path / "group.jsonl")
    listed = list_source.write_group(group, REFS, seed=3)
    size = listed.offsets[-1]
    half = listed.offsets[len(listed.offsets) // 2]
    job = list_source.ChunkJob(5, [(group, 0, half), (group, half, size)])
    (written,) = list_source.WriteChunk(work).process(job)
    refs = list_source.read_refs(group, 0, size)
    assert sorted(refs) == sorted(REFS)
    staged = (tmp_path / "out" / ".prep-tmp" / "listing").glob("*")
    got = {p.name: p.read_bytes() for p in staged}
    checkpoints.write_listing(work, 5, refs)  # the same file, as the driver's listing writes it
    expected = {p.name: p.read_bytes() for p in (tmp_path / "out" / ".prep-tmp" / "listing").glob("*")}
    assert got == expected and len(got) == 1
    assert written == list_source.ChunkWritten(5, len(REFS), refs_sum(refs))


def test_an_empty_chunk_stages_as_the_drivers(tmp_path):
    work = WorkDir(str(tmp_path / "out"))
    (written,) = list_source.WriteChunk(work).process(list_source.ChunkJob(0, []))
    assert written == list_source.ChunkWritten(0, 0, refs_sum([]))
    path = tmp_path / "out" / ".prep-tmp" / "listing"
    (only,) = path.glob("*")
    assert only.read_bytes() == json.dumps([]).encode()
