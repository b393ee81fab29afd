"""PrepareChunk with `processes`: whole chunks prepared in worker processes (prep/core/run/chunk_workers.py)
give the threads' outputs, in the same order, and the same files; a chunk's failure in a worker is raised
as the threads raise it; PrepareOptions cross the wire as JSON, every field kept."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil

import pytest

from beam_jobs import prepare
from prep.core.errors import OutputError, PrepError, SourceError
from prep.core.image_rules import ImageOptions
from prep.core.run import chunk_workers
from prep.core.run.spill import PrepareOptions
from prep.core.run.task_build import TaskSpec
from prep.core.workdir import WorkDir
from tests.unit.beam_jobs.test_prepare_finish import LABELS, staged  # noqa: F401  (a fixture)


def _run(source, work, chunks, processes, workers=2):
    options = PrepareOptions(source, keys=True)
    dofn = prepare.PrepareChunk(work, LABELS, options, workers, lookahead=True, processes=processes)
    dofn.setup()
    assert (dofn._chunks is not None) == processes  # the worker processes prepare the chunks
    try:
        dofn.start_bundle()
        outputs = [o for chunk in chunks for o in dofn.process(chunk)]
        outputs += [value.value for value in dofn.finish_bundle() or ()]
    finally:
        dofn.teardown()
    return outputs


def _files(work: WorkDir) -> dict[str, bytes]:
    root = pathlib.Path(work.root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("workers", [1, 3])  # 3: more workers than chunks
def test_processes_give_the_threads_outputs_and_files(staged, tmp_path, workers):  # noqa: F811
    source, work, chunks = staged
    copy = WorkDir(str(tmp_path / "copy"))
    shutil.copytree(work.root, copy.root)
    threads = _run(source, work, chunks, processes=False)
    processes = _run(source, copy, chunks, processes=True, workers=workers)
    assert processes == threads
    assert any(isinstance(o, prepare.ChunkCounts) for o in processes)
    assert _files(copy) == _files(work)


def test_a_chunk_failing_in_a_worker_raises_as_on_the_threads(staged, tmp_path):  # noqa: F811
    source, work, chunks = staged
    copy = WorkDir(str(tmp_path / "copy"))
    shutil.copytree(work.root, copy.root)
    errors = []
    for w, processes in ((work, False), (copy, True)):
        pathlib.Path(w.root, "spill").write_text("not a folder")  # where the chunk's spill file goes
        with pytest.raises(OSError) as caught:
            _run(source, w, chunks, processes=processes)
        errors.append(caught.value)
    threads, processes = errors
    assert processes.errno == threads.errno
    # the same file (its temporary name's suffix is random)
    assert os.path.dirname(processes.filename.replace(copy.root, work.root)) == os.path.dirname(threads.filename)


@pytest.mark.parametrize("error", [OutputError("cannot write x: No space left on device"), SourceError("gone")])
def test_a_prep_error_keeps_its_type_and_message(error):
    with pytest.raises(PrepError) as caught:
        chunk_workers._raise(json.loads(json.dumps(chunk_workers._describe(error))))
    assert type(caught.value) is type(error) and str(caught.value) == str(error)


def test_other_errors_say_where_they_came_from():
    with pytest.raises(RuntimeError, match="a worker process preparing images failed: KeyError"):
        chunk_workers._raise(chunk_workers._describe(KeyError("x")))


def test_prepare_options_cross_the_wire_whole():
    options = PrepareOptions(
        "/src",
        ImageOptions(resize=64, max_side=900, image_format="png", quality=80, isolate="all"),
        source_ids=True,
        task=TaskSpec("detection", ("cat", "dog"), "drop", "skip", True, True, None),
        keys=True,
        suspects=frozenset({"a/1.jpg", "b/2.png"}),
        image_column="img",
    )
    for original in (options, PrepareOptions("/src")):
        data = chunk_workers.options_json(original)
        assert set(data) == {f.name for f in dataclasses.fields(PrepareOptions)}
        assert chunk_workers.options_from(json.loads(json.dumps(data))) == original


def test_workers_die_with_the_pool(staged):  # noqa: F811
    source, work, _ = staged
    pool = chunk_workers.ChunkPool(2, work, PrepareOptions(source), LABELS)
    pids = [w.proc.pid for w in pool._ready()]
    pool.close()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2]
