"""`--resume`: decides, before the pipeline starts, what an interrupted conversion left to reuse.

The pipeline itself then reuses work where it finds it complete (prepared
chunks in PrepareChunk, shards and parts in WriteParts and ConcatParts);
this module only refuses when reuse would be wrong, with a message that says why.
"""

from __future__ import annotations

import concurrent.futures
import json

from beam_jobs import checkpoints, finish, replan, storage
from prep import manifest as manifest_lib
from prep.errors import ResumeError
from prep.resume import differences, listing_change, replanned
from prep.sources import Listing, printable

FINISHED, FRESH, RESUME = "finished", "fresh", "resume"
_START_OVER = "run with --overwrite instead to start over"


def open_interrupted(output: str, source: str, record: dict, listing: Listing, chunks: list[list],
                     chunks_for=None) -> str:
    """Checks OUTPUT for an interrupted conversion that this one may finish.

    Returns FINISHED when OUTPUT already holds this finished dataset (a leftover
    .prep-tmp from a kill just after the manifest was published is removed),
    FRESH when the interrupted run stopped before staging its listing (its
    .prep-tmp is removed; the caller clears OUTPUT and starts over), RESUME otherwise.

    Planning options (prep.resume.PLANNING_OPTIONS) may differ from the
    interrupted run's: then its record is replaced by this run's, and with
    another seed the prepared chunks are staged again in this seed's order
    (replan.py). `chunks` are this run's; `chunks_for(seed)` gives the listing's
    chunks for another seed (the interrupted run's, to check them).

    Raises:
        ResumeError: nothing to resume, or the inputs, image options or input files differ.
    """
    tmp_dir = storage.join(output, manifest_lib.TMP_DIR)
    names = storage.list_names(output)
    old = checkpoints.read_run(tmp_dir) if manifest_lib.TMP_DIR in names else None
    if manifest_lib.FILENAME in names:
        if manifest_lib.TMP_DIR not in names:
            raise ResumeError(f"OUTPUT {output} holds a finished dataset (manifest.json): nothing to resume")
        if old is None:  # killed after checkpoints.delete_tmp deleted run.json, its last file
            old = _record_from_manifest(storage.join(output, manifest_lib.FILENAME), record)
        _refuse_if_different(old, record, tmp_dir, listing)
        checkpoints.delete_tmp(tmp_dir)
        return FINISHED
    if manifest_lib.TMP_DIR not in names:
        raise ResumeError(f"nothing to resume: OUTPUT {output} holds no interrupted conversion (no "
                          f"{manifest_lib.TMP_DIR} folder); run without --resume")
    if old is None:
        storage.delete(tmp_dir)
        return FRESH
    _refuse_if_different(old, record, tmp_dir, listing, planning=False)
    old_seed = (old.get("options") or {}).get("seed")
    staged = chunks if old_seed == record["options"]["seed"] or chunks_for is None else chunks_for(old_seed)
    changed = changed_input(source, tmp_dir, staged)
    if changed is not None:
        raise ResumeError(f"cannot resume: input {printable(changed)} changed since the interrupted run "
                          f"(size, modification time or permissions); {_START_OVER}")
    if old.get("restaged") and not replan.all_prepared(tmp_dir, len(staged)):
        # Its chunks' references cross chunks: preparing one again would overwrite spill files others use.
        raise ResumeError(f"cannot resume: images prepared by the interrupted run are missing from "
                          f"{tmp_dir} (its spill files were changed or deleted); {_START_OVER}")
    if replanned(old, record):
        replan.replan(tmp_dir, old, record, staged, chunks)
    return RESUME


def _record_from_manifest(path: str, record: dict) -> dict:
    """A finished run's record rebuilt from its manifest: options, tool and classes
    (the listing's digest is only in run.json, so it is taken as unchanged)."""
    try:
        manifest = json.loads(storage.read_bytes(path))
        return dict(record, options=manifest["options"], tool=manifest["tool"], labels=manifest["labels"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}  # unreadable: `differences` then says another version wrote it


def _refuse_if_different(old: dict, record: dict, tmp_dir: str, listing: Listing, planning: bool = True) -> None:
    found = differences(old, record, planning)
    if not found:
        return
    if found[-1] == "SOURCE lists other inputs":
        try:
            found[-1] += f" ({listing_change(staged_entries(tmp_dir, old), current_entries(listing))})"
        except (OSError, ValueError):
            pass  # the staged listing is damaged: the plain phrase is all we can say
    raise ResumeError(f"cannot resume: the inputs or options differ from the interrupted run: "
                      f"{'; '.join(found)}; {_START_OVER}")


def current_entries(listing: Listing) -> list[tuple]:
    return [tuple(r) for r in listing.refs] + [tuple(r) for r in listing.rejects]


def staged_entries(tmp_dir: str, old: dict) -> list[tuple]:
    """The interrupted run's listing, read back from .prep-tmp/listing."""
    entries = [tuple(r) for r in json.loads(storage.read_bytes(finish.listing_rejects_path(tmp_dir)))]
    chunk = 0
    while len(entries) < old["listing"]["inputs"] + old["listing"]["rejected"]:
        path = checkpoints.listing_path(tmp_dir, chunk)
        if not storage.exists(path):
            break
        entries += [tuple(r) for r in json.loads(storage.read_bytes(path))]
        chunk += 1
    return entries


def changed_input(source: str, tmp_dir: str, chunks: list[list]) -> str | None:
    """The first input of a reusable chunk whose file changed since it was prepared, if any."""
    jobs = []
    for chunk, refs in enumerate(chunks):
        index = checkpoints.read_chunk_index(tmp_dir, chunk)
        if index is not None:
            jobs += [(ref.path, then) for ref, then in zip(refs, index.inputs)]
    if not jobs:
        return None

    def now(job):
        return storage.signature(storage.input_path(source, job[0]))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for (path, then), current in zip(jobs, pool.map(now, jobs)):
            if current != then:
                return path
    return None
