"""`--resume`: decides, before the pipeline starts, whether OUTPUT holds an interrupted conversion to finish.

The pipeline itself then reuses work where it finds it complete (prepared
chunks in PrepareChunk, shards and parts in WriteParts and ConcatParts);
this module only refuses when reuse would be wrong, with a message that says why.

A SOURCE that a fresh run lists on workers is listed again on workers with `--resume`, into a work directory
of its own (`open_relisted`): the checks then compare the two run records (digests and counts) and read the
staged chunks one at a time, so the driver holds no listing (but to name a changed input when it refuses).
"""

from __future__ import annotations

import concurrent.futures
import typing
from collections.abc import Callable, Sequence
from typing import Any

from prep.core import storage
from prep.core.errors import ManifestError, ResumeError
from prep.core.listing import InputRef, Listing, printable
from prep.core.manifest import FILENAME, Manifest
from prep.core.run import checkpoints, replan
from prep.core.run.spill import input_signature
from prep.core.run_record import differences, listing_change, replanned
from prep.core.workdir import TMP_DIR, WorkDir

FINISHED, FRESH, RESUME = "finished", "fresh", "resume"
_START_OVER = "run with --overwrite instead to start over"


def interrupted(output: str) -> tuple[str, dict[str, Any] | None]:
    """What OUTPUT holds for `--resume`, before SOURCE is listed: (FINISHED, its run record) for a finished
    dataset with a leftover .prep-tmp (the record None when a kill deleted it), (FRESH, None) for an
    interrupted run that stopped before staging its listing (its .prep-tmp is removed: the caller clears
    OUTPUT and starts over), (RESUME, its run record) otherwise.

    Raises:
        ResumeError: nothing to resume.
    """
    names = storage.list_names(output)
    work = WorkDir(output)
    old = checkpoints.read_run(work) if TMP_DIR in names else None
    if FILENAME in names:
        if TMP_DIR not in names:
            raise ResumeError(f"OUTPUT {output} holds a finished dataset (manifest.json): nothing to resume")
        return FINISHED, old
    if TMP_DIR not in names:
        raise ResumeError(
            f"nothing to resume: OUTPUT {output} holds no interrupted conversion (no "
            f"{TMP_DIR} folder); run without --resume"
        )
    if old is None:
        storage.delete(work.root)
        return FRESH, None
    return RESUME, old


def open_interrupted(
    output: str,
    source: str,
    record: dict[str, Any],
    listing: Listing,
    chunks: list[list[InputRef]],
    chunks_for: Callable[[int], list[list[InputRef]]] | None = None,
) -> str:
    """Checks OUTPUT for an interrupted conversion that this one, listed on the driver, may finish.

    Returns FINISHED when OUTPUT already holds this finished dataset (a leftover
    .prep-tmp from a kill just after the manifest was published is removed),
    FRESH when the interrupted run stopped before staging its listing (its
    .prep-tmp is removed; the caller clears OUTPUT and starts over), RESUME otherwise.

    Planning options (`run_record.PLANNING_OPTIONS`) may differ from the
    interrupted run's: then its record is replaced by this run's, and with
    another seed the prepared chunks are staged again in this seed's order
    (replan.py). `chunks` are this run's; `chunks_for(seed)` gives the listing's
    chunks for another seed (the interrupted run's, to check them).

    Raises:
        ResumeError: nothing to resume, or the inputs, image options or input files differ.
    """
    state, old = interrupted(output)
    if state == FRESH:
        return FRESH
    old_seed = (old or {}).get("options", {}).get("seed") if state == RESUME else None
    staged = chunks if old_seed in (None, record["options"]["seed"]) or chunks_for is None else chunks_for(old_seed)
    return _settle(output, source, record, (old, state), _Current(lambda: current_entries(listing), staged, chunks))


def open_relisted(output: str, source: str, record: dict[str, Any], relisted: str) -> str:
    """`open_interrupted` for a SOURCE listed again on workers into the work directory of OUTPUT `relisted`
    (`WorkDir.relisted`) rather than on the driver: the same checks and errors, made from what is staged and
    recorded (the run records' digests and counts, the prepared chunks' input signatures read a chunk at a
    time), so the driver holds no listing but to name an input when it refuses a changed one.
    Returns FINISHED or RESUME (`interrupted` gave FRESH before any listing).

    Raises:
        ResumeError: as `open_interrupted`.
    """
    state, old = interrupted(output)
    if state == FRESH:  # the interrupted run's record went while SOURCE was listed again
        raise ResumeError(f"cannot resume: {WorkDir(output).run_record} is gone; {_START_OVER}")
    work, again = WorkDir(output), WorkDir(relisted)
    chunks = _Staged(again)
    # With the same seed the staged chunks are this listing's (same digest), and as many; a restaged run's
    # work directory may hold more chunk files than its listing, left by the order of an earlier seed.
    same = old is not None and (old.get("options") or {}).get("seed") == record["options"]["seed"]
    new = _Current(lambda: staged_entries(again, record), _Staged(work, len(chunks) if same else None), chunks)
    return _settle(output, source, record, (old, state), new)


class _Current(typing.NamedTuple):
    """This run's listing as the checks read it: its entries (only to name a change), the interrupted run's
    chunks in its own seed's order (`staged`) and this run's (`chunks`)."""

    entries: Callable[[], list[tuple[object, ...]]]
    staged: Sequence[list[InputRef]]
    chunks: Sequence[list[InputRef]]


def _settle(
    output: str, source: str, record: dict[str, Any], found: tuple[dict[str, Any] | None, str], current: _Current
) -> str:
    """The checks of `open_interrupted` once OUTPUT's state is known (`found`: the old record and the state)."""
    old, state = found
    work = WorkDir(output)
    if state == FINISHED:
        if old is None:  # killed after checkpoints.delete_work deleted run.json, its last file
            old = _record_from_manifest(storage.join(output, FILENAME), record)
        _refuse_if_different(old, record, work, current.entries)
        checkpoints.delete_work(work)
        return FINISHED
    assert old is not None  # `interrupted` gives a record with RESUME
    _refuse_if_different(old, record, work, current.entries, planning=False)
    staged = current.staged
    changed = changed_input(source, work, staged)
    if changed is not None:
        raise ResumeError(
            f"cannot resume: input {printable(changed)} changed since the interrupted run "
            f"(size, modification time or permissions); {_START_OVER}"
        )
    if old.get("restaged") and not replan.all_prepared(work, len(staged)):
        # Its chunks' references cross chunks: preparing one again would overwrite spill files others use.
        raise ResumeError(
            f"cannot resume: images prepared by the interrupted run are missing from "
            f"{work.root} (its spill files were changed or deleted); {_START_OVER}"
        )
    if replanned(old, record):
        replan.replan(work, old, record, staged, current.chunks)
    return RESUME


class _Staged(Sequence[list[InputRef]]):
    """The chunks staged in a work directory, each read when it is asked for: the driver holds one at a
    time. Their number, unless `count` gives it, is found by stating the chunk files in turn (O(chunks))."""

    def __init__(self, work: WorkDir, count: int | None = None) -> None:
        self._work = work
        self._count = count

    def __len__(self) -> int:
        if self._count is None:
            count = 0
            while storage.exists(self._work.listing_chunk(count)):
                count += 1
            self._count = count
        return self._count

    @typing.overload
    def __getitem__(self, index: int) -> list[InputRef]: ...
    @typing.overload
    def __getitem__(self, index: slice) -> Sequence[list[InputRef]]: ...
    def __getitem__(self, index: int | slice) -> list[InputRef] | Sequence[list[InputRef]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        return checkpoints.read_listing(self._work, index)


def _record_from_manifest(path: str, record: dict[str, Any]) -> dict[str, Any]:
    """A finished run's record rebuilt from its manifest: options, tool and classes
    (the listing's digest is only in run.json, so it is taken as unchanged)."""
    try:
        manifest = Manifest.from_json(storage.read_bytes(path), path)
    except (OSError, ManifestError):
        return {}  # unreadable: `differences` then says another version wrote it
    return dict(record, options=manifest.options, tool=manifest.tool, labels=list(manifest.labels))


def _refuse_if_different(
    old: dict[str, Any],
    record: dict[str, Any],
    work: WorkDir,
    entries: Callable[[], list[tuple[object, ...]]],
    planning: bool = True,
) -> None:
    found = differences(old, record, planning)
    if not found:
        return
    if found[-1] == "SOURCE lists other inputs":
        try:
            found[-1] += f" ({listing_change(staged_entries(work, old), entries())})"
        except (OSError, ValueError):
            pass  # the staged listing is damaged: the plain phrase is all we can say
    raise ResumeError(
        f"cannot resume: the inputs or options differ from the interrupted run: {'; '.join(found)}; {_START_OVER}"
    )


def current_entries(listing: Listing) -> list[tuple[object, ...]]:
    entries: list[tuple[object, ...]] = [tuple(r) for r in listing.refs]
    return entries + [tuple(r) for r in listing.rejects]


def staged_entries(work: WorkDir, old: dict[str, Any]) -> list[tuple[object, ...]]:
    """The interrupted run's listing, read back from the work directory."""
    entries: list[tuple[object, ...]] = [tuple(r) for r in checkpoints.read_listing_rejects(work)]
    chunk = 0
    while len(entries) < old["listing"]["inputs"] + old["listing"]["rejected"]:
        if not storage.exists(work.listing_chunk(chunk)):
            break
        entries += [tuple(r) for r in checkpoints.read_listing(work, chunk)]
        chunk += 1
    return entries


def changed_input(source: str, work: WorkDir, chunks: Sequence[list[InputRef]]) -> str | None:
    """The first input of a reusable chunk whose file changed since it was prepared, if any. A chunk's inputs
    at a time: `chunks` may read each from the work directory when asked (`_Staged`)."""

    def now(job: tuple[str, str]) -> str:
        return input_signature(storage.input_path(source, job[0]))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for chunk in range(len(chunks)):
            index = checkpoints.read_chunk_index(work, chunk)
            if index is None:
                continue
            jobs = list(zip((ref.path for ref in chunks[chunk]), index.inputs))  # (path, signature then)
            for (path, then), current in zip(jobs, pool.map(now, jobs)):
                if current != then:
                    return path
    return None
