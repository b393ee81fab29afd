"""Readying OUTPUT for the pipeline and staging the listing in the work directory. Imports no Beam.

`ready_output` checks the options against the listing, decides what `--resume` may
reuse (resume.py), clears or refuses OUTPUT (output_dir.py), and stages the
listing: its inputs in chunk files, in `prep.core.ordering.listing_order` (which the
planner relies on), its early rejects, and the run record. From then on the staged
chunk files stand for the listing. A listing staged on workers (`beam_jobs.list_source`) is readied by
`clear_output` before it and `ready_listed` after; with `--resume`, by `resume.interrupted` before it and
`ready_relisted` after, which keeps the interrupted run's staged listing if this one agrees with it.
"""

from __future__ import annotations

import hashlib
import typing
from collections.abc import Iterable
from typing import Any

from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.config import ConvertConfig
from prep.core.errors import OutputError, PlanError
from prep.core.layout import check_empty_classes, check_split_source
from prep.core.listing import InputRef, Listing, Reject
from prep.core.manifest import FILENAME, Manifest
from prep.core.manifest_parts import Category
from prep.core.ordering import listing_chunks
from prep.core.run import checkpoints, resume
from prep.core.run.failures import describe_os_error
from prep.core.run.output_dir import delete_leftovers, prepare_output
from prep.core.run_record import ListedDigest, listing_digest, refs_sum, run_record, tool_info
from prep.core.task_inputs import BoxNote, BoxTally
from prep.core.workdir import WorkDir


class Staged(typing.NamedTuple):
    """What the pipeline needs of a listing once its chunks are staged in the work directory."""

    classes: tuple[str, ...]
    found: int
    splits: tuple[str, ...]  # the splits SOURCE names, if any
    task: str = "classification"
    groups: tuple[str, ...] | None = None  # the planner's groups when not the classes (Listing.groups)
    categories: tuple[Category, ...] = ()  # detection: manifest Categories
    masks: bool = False  # detection: records get instance masks


class Ready(typing.NamedTuple):
    """A conversion ready for its pipeline, or one `--resume` found already finished."""

    staged: Staged
    chunk_sizes: list[int]
    finished: Manifest | None  # when OUTPUT already holds this finished dataset


def stage_listing(
    work: WorkDir,
    chunks: list[list[InputRef]],
    rejects: Iterable[Reject],
    boxes: tuple[Iterable[BoxNote], BoxTally] | None = None,
) -> None:
    """Writes the listing's chunks (`ordering.listing_chunks`), early rejects (in `reject_order`) and, for
    detection, `boxes` (the listing's box notes and tally) for the pipeline to read."""
    for i, refs in enumerate(chunks):
        checkpoints.write_listing(work, i, refs)
    checkpoints.write_listing_rejects(work, sort_rejects(rejects))
    if boxes is not None:
        checkpoints.write_listing_boxes(work, *boxes)


def digest_listing(listing: Listing, chunks: list[list[InputRef]]) -> ListedDigest:
    """The run record's listing digest of what `stage_listing` writes, without writing it."""
    rejects = checkpoints.rejects_bytes(sort_rejects(listing.rejects))
    return ListedDigest(
        listing_digest(listing.classes, [refs_sum(c) for c in chunks], hashlib.sha256(rejects).hexdigest()),
        len(listing.refs),
        len(listing.rejects),
    )


def staged_of(listing: Listing) -> Staged:
    return Staged(
        listing.classes,
        listing.found,
        tuple(sorted({r.split for r in listing.refs if r.split})),
        listing.task,
        listing.groups,
        listing.categories,
        listing.masks,
    )


def ready_output(config: ConvertConfig, listing: Listing) -> Ready:
    """Readies OUTPUT for the pipeline and stages the listing (see the module docstring).

    Raises:
        PlanError: --split given for a SOURCE that names splits (known before any image is read).
        ResumeError: with `config.resume`, nothing to resume or the inputs or options differ.
        OutputError: OUTPUT cannot be used or written.
    """
    check_split_source(config.plan, any(r.split for r in listing.refs))
    check_listed_classes(config, {r.label for r in listing.refs}, listing.classes, listing.task)
    work = WorkDir(config.output)
    chunks = listing_chunks(listing, config.plan.seed)
    record = run_record(config.manifest_options(), tool_info(), listing.classes, digest_listing(listing, chunks))
    staged = staged_of(listing)
    sizes = [len(c) for c in chunks]
    try:
        state = (
            resume.open_interrupted(
                config.output, config.source, record, listing, chunks, lambda seed: listing_chunks(listing, seed)
            )
            if config.resume
            else None
        )
        if state in (resume.FINISHED, resume.RESUME):
            delete_leftovers(config.output)
        if state == resume.FINISHED:
            path = storage.join(config.output, FILENAME)
            return Ready(staged, sizes, Manifest.from_json(storage.read_bytes(path), path))
        if state != resume.RESUME:
            if state is None:
                prepare_output(config.output, config.overwrite)
            else:  # FRESH: what an earlier, resume run wrote goes, as with --overwrite
                prepare_output(config.output, overwrite=True)
            stage_listing(
                work, chunks, listing.rejects, None if listing.boxes is None else (listing.box_notes, listing.boxes)
            )
            checkpoints.write_run(work, record)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, config.output)) from None
    return Ready(staged, sizes, None)


def clear_output(config: ConvertConfig) -> None:
    """Refuses or clears OUTPUT (`prepare_output`) before SOURCE is listed on workers into its work directory.

    Raises:
        OutputError: OUTPUT cannot be used or written.
    """
    try:
        prepare_output(config.output, config.overwrite)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, config.output)) from None


def ready_listed(config: ConvertConfig, summary: dict[str, Any]) -> Ready:
    """Checks the options against a listing staged on workers (`beam_jobs.list_source` and the other
    listings, their summary) and records the run, as `ready_output` does for a driver's listing. OUTPUT was
    cleared first (`clear_output`). A detection summary (`beam_jobs.list_annotations`) gives its task,
    groups, categories and digest.

    Raises:
        PlanError: --split given for a SOURCE that names splits, or empty classes under --empty-classes fail.
        OutputError: OUTPUT cannot be written.
    """
    record, ready = _listed(config, summary)
    try:
        checkpoints.write_run(WorkDir(config.output), record)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, config.output)) from None
    return ready


def ready_relisted(config: ConvertConfig, summary: dict[str, Any], relisted: str) -> Ready:
    """`ready_listed` for `--resume`: SOURCE was listed again on workers into OUTPUT `relisted`'s work
    directory (`WorkDir.relisted`, `resume.interrupted` having found an interrupted run to finish); the
    interrupted run's staged listing is kept when this one agrees with it (`resume.open_relisted`).

    Raises:
        PlanError: as `ready_listed`.
        ResumeError: the inputs or options differ.
        OutputError: OUTPUT cannot be read or written.
    """
    record, ready = _listed(config, summary)
    try:
        state = resume.open_relisted(config.output, config.source, record, relisted)
        delete_leftovers(config.output)
        if state == resume.FINISHED:
            path = storage.join(config.output, FILENAME)
            return ready._replace(finished=Manifest.from_json(storage.read_bytes(path), path))
    except OSError as exc:
        raise OutputError(describe_os_error(exc, config.output)) from None
    return ready


def _listed(config: ConvertConfig, summary: dict[str, Any]) -> tuple[dict[str, Any], Ready]:
    """The run record and the readied run of a listing staged on workers (`ready_listed`)."""
    classes = tuple(summary["classes"])
    task = summary.get("task", "classification")
    check_split_source(config.plan, bool(summary["splits"]))
    check_listed_classes(config, set(summary["listed"]), classes, task)
    digest = summary.get("digest") or listing_digest(classes, [int(summary["sum"], 16)], summary["rejects_sha256"])
    listed = ListedDigest(digest, summary["inputs"], summary["rejected"])
    record = run_record(config.manifest_options(), tool_info(), classes, listed)
    groups = summary.get("groups")
    staged = Staged(
        classes,
        summary.get("found", listed.inputs + listed.rejected),
        tuple(summary["splits"]),
        task,
        None if groups is None else tuple(groups),
        tuple(Category(c["id"], c["name"], c["source_id"]) for c in summary.get("categories", ())),
        bool(summary.get("masks", False)),
    )
    return record, Ready(staged, list(summary["sizes"]), None)


def check_listed_classes(config: ConvertConfig, listed: set[str], classes: tuple[str, ...], task: str) -> None:
    """With `--empty-classes fail`, refuses classes that list no input at all (an empty folder, or a
    `--classes` name no input has), before any image is read. `listed`: the labels of the listed inputs.

    Raises:
        PlanError: naming them.
    """
    if task != "classification":
        if config.plan.empty_classes != "keep" or config.plan.max_per_class is not None:
            flag = "--max-per-class" if config.plan.max_per_class is not None else "--empty-classes"
            raise PlanError(f"{flag} applies to single-label classification, not {task}")
        return
    empty = [i for i, name in enumerate(classes) if name not in listed]
    try:
        check_empty_classes(classes, empty, config.plan.empty_classes)
    except PlanError as exc:
        raise PlanError(
            f"{exc}; nothing was read: run again with --empty-classes keep (or drop) to write the dataset"
        ) from None
