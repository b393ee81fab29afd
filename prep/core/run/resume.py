"""`--resume`: decides, before the pipeline starts, whether OUTPUT holds an interrupted conversion to finish.

The pipeline itself then reuses work where it finds it complete (prepared
chunks in PrepareChunk, shards and parts in WriteParts and ConcatParts);
this module only refuses when reuse would be wrong, with a message that says why.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, cast

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


def open_interrupted(
    output: str,
    source: str,
    record: dict[str, Any],
    listing: Listing,
    chunks: list[list[InputRef]],
    chunks_for: Callable[[int], list[list[InputRef]]] | None = None,
) -> str:
    """Checks OUTPUT for an interrupted conversion that this one may finish.

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
    work = WorkDir(output)
    names = storage.list_names(output)
    old = checkpoints.read_run(work) if TMP_DIR in names else None
    if FILENAME in names:
        if TMP_DIR not in names:
            raise ResumeError(f"OUTPUT {output} holds a finished dataset (manifest.json): nothing to resume")
        if old is None:  # killed after checkpoints.delete_work deleted run.json, its last file
            old = _record_from_manifest(storage.join(output, FILENAME), record)
        _refuse_if_different(old, record, work, listing)
        checkpoints.delete_work(work)
        return FINISHED
    if TMP_DIR not in names:
        raise ResumeError(
            f"nothing to resume: OUTPUT {output} holds no interrupted conversion (no "
            f"{TMP_DIR} folder); run without --resume"
        )
    if old is None:
        storage.delete(work.root)
        return FRESH
    _refuse_if_different(old, record, work, listing, planning=False)
    old_seed = cast(int, (old.get("options") or {}).get("seed"))  # every record of this RUN_VERSION holds one
    staged = chunks if old_seed == record["options"]["seed"] or chunks_for is None else chunks_for(old_seed)
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
        replan.replan(work, old, record, staged, chunks)
    return RESUME


def _record_from_manifest(path: str, record: dict[str, Any]) -> dict[str, Any]:
    """A finished run's record rebuilt from its manifest: options, tool and classes
    (the listing's digest is only in run.json, so it is taken as unchanged)."""
    try:
        manifest = Manifest.from_json(storage.read_bytes(path), path)
    except (OSError, ManifestError):
        return {}  # unreadable: `differences` then says another version wrote it
    return dict(record, options=manifest.options, tool=manifest.tool, labels=list(manifest.labels))


def _refuse_if_different(
    old: dict[str, Any], record: dict[str, Any], work: WorkDir, listing: Listing, planning: bool = True
) -> None:
    found = differences(old, record, planning)
    if not found:
        return
    if found[-1] == "SOURCE lists other inputs":
        try:
            found[-1] += f" ({listing_change(staged_entries(work, old), current_entries(listing))})"
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


def changed_input(source: str, work: WorkDir, chunks: list[list[InputRef]]) -> str | None:
    """The first input of a reusable chunk whose file changed since it was prepared, if any."""
    jobs: list[tuple[str, str]] = []  # (path, its signature when it was prepared)
    for chunk, refs in enumerate(chunks):
        index = checkpoints.read_chunk_index(work, chunk)
        if index is not None:
            jobs += [(ref.path, then) for ref, then in zip(refs, index.inputs)]
    if not jobs:
        return None

    def now(job: tuple[str, str]) -> str:
        return input_signature(storage.input_path(source, job[0]))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for (path, then), current in zip(jobs, pool.map(now, jobs)):
            if current != then:
                return path
    return None
