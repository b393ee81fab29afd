"""Everything a conversion does before its pipeline, without importing Beam.

`run_conversion` is the whole conversion: `start_conversion`, then the
pipeline (`pipeline.run_started`). `start_conversion` checks the options
against the listing, decides what `--resume` may reuse (resume.py), clears or
refuses OUTPUT, and stages the listing in OUTPUT/.prep-tmp: its inputs in
chunk files, in `listing_order`, which the planner relies on (planning.py),
and its early rejects. `run_conversion` then lets go of the listing before
it imports the pipeline, so a caller that keeps no reference to it frees its
memory before Beam is imported: `prep convert` peaks at the larger of the
two, not at their sum. (With a gs:// or s3:// OUTPUT or SOURCE, storage.py
reaches those through Beam's FileSystems, so Beam is imported while listing;
and a runner or Beam options are checked against Beam before anything else.)
"""

from __future__ import annotations

import errno
import math
import os
import typing

import prep
from beam_jobs import checkpoints, finish, resume, storage
from prep import manifest as manifest_lib
from prep import tfds_meta
from prep.config import RUNNERS_LOCAL, ConvertConfig
from prep.errors import OutputError, PlanError
from prep.naming import ShardName
from prep.plan import check_empty_classes, check_split_source, sort_key
from prep.resume import run_record
from prep.sources import InputRef, Listing, printable

# Each chunk ends with a barrier (its index is written once all its images are
# done), costing ~15 ms of idle workers: 1,024 measured 9.6 s against 10.0-11.0 s
# for 256 on the prepare stage of 20,000 images at 2 workers.
MAX_CHUNK = 1024


def chunk_size(n: int) -> int:
    """Refs per chunk: about 32 chunks for small inputs, at most MAX_CHUNK refs each."""
    return max(16, min(MAX_CHUNK, math.ceil(n / 32)))


def make_chunks(refs, size: int) -> list[list]:
    return [list(refs[start:start + size]) for start in range(0, len(refs), size)]


def listing_order(refs: list[InputRef], seed: int) -> list[InputRef]:
    """The order the listing is staged in: by (split, class, sort key, path). Planning relies on it.

    Sorted one group at a time, so that sort keys are held for one class, not for every input.
    """
    groups: dict[tuple, list] = {}
    for r in refs:
        groups.setdefault((r.split or "", r.label), []).append(r)
    ordered = []
    for group in sorted(groups):
        members = groups.pop(group)
        members.sort(key=lambda r: (sort_key(seed, r.path), r.path))
        ordered += members
    return ordered


def listing_chunks(listing: Listing, seed: int) -> list[list]:
    """The listing's inputs in the chunks the pipeline prepares, in `listing_order`."""
    return make_chunks(listing_order(listing.refs, seed), chunk_size(len(listing.refs)))


def stage_listing(tmp_dir: str, chunks: list[list], rejects) -> None:
    """Writes the listing's chunks (`listing_chunks`) and early rejects for the pipeline to read."""
    for i, refs in enumerate(chunks):
        checkpoints.write_listing(tmp_dir, i, refs)
    finish.write_listing_rejects(tmp_dir, rejects)


class Staged(typing.NamedTuple):
    """What the pipeline needs of a listing once its chunks are staged in .prep-tmp."""

    classes: tuple[str, ...]
    found: int
    splits: tuple[str, ...]  # the splits SOURCE names, if any


class Started(typing.NamedTuple):
    """A conversion ready for its pipeline, or one `--resume` found already finished."""

    staged: Staged
    chunk_sizes: list[int]
    finished: dict | None  # the manifest, when OUTPUT already holds this finished dataset


def tool_info() -> dict:
    """The manifest's `tool`: our version and Pillow's, which decides re-encoded bytes."""
    import PIL

    return {"name": "tfrecord-prep", "version": prep.__version__, "pillow": PIL.__version__}


def start_conversion(config: ConvertConfig, listing: Listing) -> Started:
    """Readies OUTPUT for the pipeline and stages the listing (see the module docstring).

    Raises:
        PlanError: --split given for a SOURCE that names splits (known before any image is read).
        ResumeError: with `config.resume`, nothing to resume or the inputs or options differ.
        OutputError: OUTPUT cannot be used or written.
    """
    check_split_source(config.plan, any(r.split for r in listing.refs))
    check_listed_classes(config, listing)
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    chunks = listing_chunks(listing, config.plan.seed)
    record = run_record(config.manifest_options(), tool_info(), listing)
    summary = Staged(listing.classes, listing.found, tuple(sorted({r.split for r in listing.refs if r.split})))
    try:
        state = resume.open_interrupted(config.output, config.source, record, listing, chunks,
                                        lambda seed: listing_chunks(listing, seed)) if config.resume else None
        if state in (resume.FINISHED, resume.RESUME):
            delete_leftovers(config.output)
        if state == resume.FINISHED:
            path = storage.join(config.output, manifest_lib.FILENAME)
            return Started(summary, [len(c) for c in chunks], manifest_lib.loads(storage.read_bytes(path), path))
        if state != resume.RESUME:
            if state is None:
                prepare_output(config.output, config.overwrite)
            else:  # FRESH: what an earlier, interrupted run wrote goes, as with --overwrite
                prepare_output(config.output, overwrite=True)
            stage_listing(tmp_dir, chunks, listing.rejects)
            checkpoints.write_run(tmp_dir, record)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, config.output)) from None
    return Started(summary, [len(c) for c in chunks], None)


def check_listed_classes(config: ConvertConfig, listing: Listing) -> None:
    """With `--empty-classes fail`, refuses classes that list no input at all (an empty folder, or a
    `--classes` name no input has), before any image is read.

    Raises:
        PlanError: naming them.
    """
    listed = {r.label for r in listing.refs}
    empty = [i for i, name in enumerate(listing.classes) if name not in listed]
    try:
        check_empty_classes(listing.classes, empty, config.plan.empty_classes)
    except PlanError as exc:
        raise PlanError(f"{exc}; nothing was read: run again with --empty-classes keep "
                        "(or drop) to write the dataset") from None


def run_conversion(config: ConvertConfig, listing: Listing, runner: str = RUNNERS_LOCAL,
                   beam_args: list[str] | None = None, progress: bool = False,
                   group_target: int | None = None) -> dict:
    """Runs the whole conversion, or with `config.resume` finishes an interrupted one,
    and returns the manifest it wrote.

    Once the listing is staged in OUTPUT/.prep-tmp, this function drops its
    reference to it, and only then imports Beam: a caller that keeps none
    frees its inputs' memory before the pipeline's is allocated. `group_target`:
    see `pipeline.run_started`.

    A runner other than the local one, or Beam options, are checked first,
    before OUTPUT is touched (`pipeline.check_runner_options`): that imports Beam.

    Raises:
        PrepError: a user-fixable problem (OptionsError, PlanError, ResumeError, OutputError, ...).
    """
    if runner != RUNNERS_LOCAL or beam_args:
        from beam_jobs.pipeline import check_runner_options

        check_runner_options(runner, list(beam_args or []))
    ready = start_conversion(config, listing)
    del listing  # the staged chunk files stand for it from here on
    if ready.finished is not None:
        return ready.finished
    from beam_jobs.pipeline import run_started

    more = {} if group_target is None else {"group_target": group_target}
    return run_started(config, ready, runner, beam_args, progress, **more)


def prepare_output(output: str, overwrite: bool) -> None:
    """Refuses a non-empty OUTPUT unless `overwrite`; then clears what an earlier run wrote.

    Raises:
        OutputError: OUTPUT is a file, is not empty, or holds files prep did not write.
    """
    if not storage.is_remote(output) and os.path.exists(output) and not os.path.isdir(output):
        raise OutputError(f"OUTPUT {output} is a file, not a folder")
    names = storage.list_names(output)
    if not names:
        return
    if not overwrite:
        if manifest_lib.TMP_DIR in names and manifest_lib.FILENAME not in names:
            raise OutputError(f"OUTPUT {output} holds an unfinished conversion; pass --resume to finish it "
                              "(same inputs and image options; the planning options may change) or --overwrite "
                              "to start over")
        raise OutputError(f"OUTPUT {output} is not empty; pass --overwrite to replace what prep wrote there")
    written = _written_names()
    ours = {manifest_lib.TMP_DIR, *written, *(name + ".part" for name in written)}
    foreign = [n for n in names if n not in ours and ShardName.parse(n) is None and ShardName.parse_index(n) is None
               and not _is_leftover(n, written)]
    if foreign:
        raise OutputError(f"OUTPUT {output} holds files prep did not write (e.g. {foreign[0]}); "
                          "refusing to delete them with --overwrite")
    # The manifest goes first so that nothing left behind looks finished.
    storage.delete(storage.join(output, manifest_lib.FILENAME))
    for name in names:
        storage.delete(storage.join(output, name))


def _written_names() -> tuple[str, ...]:
    """The files other than shards and indexes that a conversion writes in OUTPUT."""
    return (manifest_lib.FILENAME, manifest_lib.REJECTS, *tfds_meta.file_names())


def _is_leftover(name: str, written: tuple[str, ...]) -> bool:
    return any(storage.is_temp_of(name, w) for w in written)


def delete_leftovers(output: str) -> None:
    """Deletes what a killed run was writing in OUTPUT (the temporary files of
    `_written_names`), so that a resumed or finished OUTPUT holds only the dataset."""
    written = _written_names()
    for name in storage.list_names(output):
        if _is_leftover(name, written):
            storage.delete(storage.join(output, name))


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM}


def describe_os_error(exc: OSError, output: str | None = None) -> str:
    """One line for a storage failure: what it is and which file (a failed write
    names no file: then OUTPUT, the only place the pipeline writes)."""
    where = f" {printable(str(exc.filename))}" if exc.filename else f" to OUTPUT {output}" if output else ""
    verb = "write" if exc.errno in _WRITE_ERRNOS or not exc.filename else "access"
    return f"cannot {verb}{where}: {exc.strerror or exc}"
