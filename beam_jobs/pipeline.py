"""The conversion pipeline: listed inputs -> checked records -> plan -> shards -> manifest.

What each PCollection holds:

    chunks    = Create | Reshuffle          # chunk id; its listing waits in .prep-tmp/listing/
    outcomes  = ParDo(PrepareChunk)         # per chunk: (COUNTS, (chunk, counts)) | (REJECT, [Reject])
                                            #   | (REUSED, chunk id); its references wait in its index
    ranked    = PlanShards                  # (ENTRY, part key, Section) | (CAPPED, label, count)   see planning.py
    parts     = GroupByKey                  # (write task, [(part key, Section)])
    written   = ParDo(WriteParts)           # per part: (SHARD, result) | (PART, shard file, part info)
    joined    = GroupByKey | ParDo(ConcatParts)   # (SHARD, result), only for shards cut into parts
    summary   = Flatten | GroupByKey(one key)     # shard results, reject lists, capped counts, reused chunks
    done      = FlatMap(finish)             # writes rejects.jsonl, then manifest.json

The listing is staged sorted by (split, class, sort key, path)
(`planning.listing_order`), so each group's inputs come in rank order and the
planner needs only per-chunk counts to rank them exactly. References never
travel as elements: a chunk's wait in its index, a rank task's entries in its
entry file, and elements are counted in chunks, tasks and shard parts, so the
memory the runner holds between steps does not grow with the inputs.

Crash safety and `--resume`: every file appears under its final name only by a
rename once complete, and manifest.json last. What each step leaves in
OUTPUT/.prep-tmp for a resumed run to reuse (prepared chunks, complete
shards) is described in checkpoints.py; resume.py decides whether it may be
reused; REUSED outcomes and the shard results' `reused` flags are counted in
the manifest's `run.resumed`.

Images are read, checked and converted once, before planning, so the plan
knows exactly which inputs are valid and every shard is balanced over the
examples actually written. Their framed records wait in spill files under
OUTPUT/.prep-tmp (without the image when it is kept as it is: the shard
writer reads it from the source again, see spill.read_and_prepare), and
shard writers copy records from the spill files. Image bytes never pass
through a shuffle; no task holds more than about `planning.GROUP_TARGET`
references, a write task `MAX_WRITE_WIDTH` times that (the final summary
group holds one result per shard and the rejects).

Parallelism. The local runner runs each stage as one bundle, so parallelism
comes from `workers` threads inside PrepareChunk (batches of a chunk's
images, each writing its own spill file) and WriteParts (read-ahead of
records, and up to one part file per worker at once): Pillow releases the
GIL while decoding, resizing and encoding (for encoding, only into a file:
see prep.images.EncodeBuffer). On the local runner PrepareChunk keeps the
next chunk on the pool while the runner's thread records a chunk's
index and passes its counts downstream (`lookahead`). On a cluster,
Reshuffle and the GroupByKeys spread chunks and shards over workers, each of
which runs the same thread pools.

Only Create, ParDo, GroupByKey, Flatten and composites of them are used, with
no side inputs or tagged outputs: the DaskRunner translates nothing else.
Only on the embedded runner does a DoFn emit from finish_bundle (PrepareChunk's
`lookahead`), since the DaskRunner drops such outputs.
"""

from __future__ import annotations

import errno
import math
import os
import re
import shutil
import sys
import time
import typing

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import prep
from beam_jobs import checkpoints, finish, prepare, resume, staging, storage, write
from beam_jobs.progress import Progress
from beam_jobs.planning import CAPPED, ENTRY, GROUP_TARGET, PlanShards, listing_order
from prep import manifest as manifest_lib
from prep import tfds_meta
from prep.config import RUNNERS_LOCAL, ConvertConfig
from prep.errors import OutputError, PrepError
from prep.resume import run_record
from prep.naming import ShardName
from prep.plan import check_split_source
from prep.sources import Listing, printable

# Each chunk ends with a barrier (its index is written once all its images are
# done), costing ~15 ms of idle workers: 1,024 measured 9.6 s against 10.0-11.0 s
# for 256 on the prepare stage of 20,000 images at 2 workers.
MAX_CHUNK = 1024
# A write task holds this many parts at most, so that a group still holds at
# most MAX_WRITE_WIDTH * GROUP_TARGET references.
MAX_WRITE_WIDTH = 4


def chunk_size(n: int) -> int:
    """Refs per chunk: about 32 chunks for small inputs, at most MAX_CHUNK refs each."""
    return max(16, min(MAX_CHUNK, math.ceil(n / 32)))


def write_width(workers: int | None) -> int:
    """Parts written at once by one write task: one per worker thread, at most MAX_WRITE_WIDTH."""
    return max(1, min(MAX_WRITE_WIDTH, workers or os.cpu_count() or 1))


def make_chunks(refs, size: int) -> list[list]:
    return [list(refs[start:start + size]) for start in range(0, len(refs), size)]


def listing_chunks(listing: Listing, seed: int) -> list[list]:
    """The listing's inputs in the chunks the pipeline prepares, in `listing_order`."""
    return make_chunks(listing_order(listing.refs, seed), chunk_size(len(listing.refs)))


def stage_listing(tmp_dir: str, chunks: list[list], rejects) -> None:
    """Writes the listing's chunks (`listing_chunks`) and early rejects for the pipeline to read."""
    for i, refs in enumerate(chunks):
        prepare.write_listing(tmp_dir, i, refs)
    finish.write_listing_rejects(tmp_dir, rejects)


def _tag(kind):
    return lambda value: (kind, value)


class Staged(typing.NamedTuple):
    """What the pipeline needs of a listing once its chunks are staged in .prep-tmp."""

    classes: tuple[str, ...]
    found: int
    splits: tuple[str, ...]  # the splits SOURCE names, if any


def build(p: beam.Pipeline, config: ConvertConfig, listing: Staged, num_chunks: int, run_info: dict,
          group_target: int = GROUP_TARGET, lookahead: bool = False) -> None:
    """Adds the conversion steps to pipeline `p` (the listing must be staged).

    With `config.resume`, complete chunks and shards of the interrupted run are reused.
    `lookahead` lets PrepareChunk emit from finish_bundle, which the runner must keep.
    """
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    labels = listing.classes
    reuse = config.resume
    outcomes = (
        p
        | "ListChunks" >> beam.Create(list(range(num_chunks)))  # chunk id
        | "SpreadChunks" >> beam.Reshuffle()
        | "PrepareImages" >> beam.ParDo(
            prepare.PrepareChunk(config.source, tmp_dir, labels, config.image, config.workers, reuse,
                                 lookahead=lookahead))
    )
    counts = outcomes | "Prepared" >> beam.FlatMap(lambda o: [o[1]] if o[0] == prepare.COUNTS else [])
    rejects = outcomes | "Rejected" >> beam.FlatMap(lambda o: [(finish.REJECT, o[1])] if o[0] == prepare.REJECT else [])
    reused = outcomes | "ReusedChunks" >> beam.FlatMap(
        lambda o: [(finish.REUSED, o[1])] if o[0] == prepare.REUSED else [])
    ranked = counts | "PlanShards" >> PlanShards(len(labels), config.plan, tmp_dir, group_target)
    width = write_width(config.workers)
    written = (
        ranked
        | "Entries" >> beam.FlatMap(lambda r: [(write.write_task(r[1], width), (r[1], r[2]))] if r[0] == ENTRY else [])
        | "GroupParts" >> beam.GroupByKey()  # (write task, [(part key, [Entry])])
        | "WriteShards" >> beam.ParDo(write.WriteParts(config.output, config.source, tmp_dir, labels, config.workers,
                                                       width, reuse, config.index))
    )
    whole = written | "WholeShards" >> beam.FlatMap(lambda w: [w] if w[0] == write.SHARD else [])
    joined = (
        written
        | "Parts" >> beam.FlatMap(lambda w: [(w[1], w[2])] if w[0] == write.PART else [])
        | "GroupShardParts" >> beam.GroupByKey()  # (shard file, [part info])
        | "ConcatParts" >> beam.ParDo(write.ConcatParts(config.output, tmp_dir, labels, reuse, config.index))
    )
    capped = (
        ranked
        | "Capped" >> beam.FlatMap(lambda r: [(r[1], r[2])] if r[0] == CAPPED else [])
        | "CountCapped" >> beam.CombinePerKey(sum)
        | "TagCapped" >> beam.Map(_tag(finish.CAPPED))
    )
    (
        (whole, joined, rejects, capped, reused)
        | "Summary" >> beam.Flatten()
        | "OneKey" >> beam.Map(lambda item: (None, item))
        | "GatherSummary" >> beam.GroupByKey()
        | "WriteManifest" >> beam.FlatMap(
            finish.finish, output=config.output, tmp_dir=tmp_dir, labels=labels,
            options=config.manifest_options(), found=listing.found, tool=tool_info(), run=run_info,
            splits=listing.splits)
    )


def tool_info() -> dict:
    """The manifest's `tool`: our version and Pillow's, which decides re-encoded bytes."""
    import PIL

    return {"name": "tfrecord-prep", "version": prep.__version__, "pillow": PIL.__version__}


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
                              "(same inputs and options) or --overwrite to start over")
        raise OutputError(f"OUTPUT {output} is not empty; pass --overwrite to replace what prep wrote there")
    written = (manifest_lib.FILENAME, manifest_lib.REJECTS, *tfds_meta.file_names())
    ours = {manifest_lib.TMP_DIR, *written, *(name + ".part" for name in written)}
    foreign = [n for n in names if n not in ours and ShardName.parse(n) is None and ShardName.parse_index(n) is None]
    if foreign:
        raise OutputError(f"OUTPUT {output} holds files prep did not write (e.g. {foreign[0]}); "
                          "refusing to delete them with --overwrite")
    # The manifest goes first so that nothing left behind looks finished.
    storage.delete(storage.join(output, manifest_lib.FILENAME))
    for name in names:
        storage.delete(storage.join(output, name))


def pipeline_options(runner: str, beam_args: list[str]) -> PipelineOptions:
    options = PipelineOptions(beam_args)
    if runner != RUNNERS_LOCAL:
        options.view_as(beam.options.pipeline_options.StandardOptions).runner = runner
    return options


def _skip_ipython_probe() -> None:
    """Beam asks `is_in_ipython()` for every transform label and once more after a
    run, which imports IPython when it is installed (~0.3 s each time it is
    not yet imported). If IPython is not imported yet we are not inside it, so
    the answer is known to be False."""
    if "IPython" in sys.modules:
        return
    import apache_beam.pipeline
    from apache_beam.utils import interactive_utils

    for module in (interactive_utils, apache_beam.pipeline):
        if hasattr(module, "is_in_ipython"):
            module.is_in_ipython = lambda: False


def make_runner(runner: str):
    if runner == RUNNERS_LOCAL:
        # The embedded runner, chosen explicitly: DirectRunner would first try to
        # download Prism, so its behaviour would depend on the network.
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    return None


def run_conversion(config: ConvertConfig, listing: Listing, runner: str = RUNNERS_LOCAL,
                   beam_args: list[str] | None = None, progress: bool = False,
                   group_target: int = GROUP_TARGET) -> dict:
    """Runs the whole conversion, or with `config.resume` finishes an interrupted one,
    and returns the manifest it wrote.

    `group_target` bounds the references per group (see planning.py); tests
    lower it to exercise many rank tasks and multi-part shards on small inputs.
    Once the listing is staged in OUTPUT/.prep-tmp, this function drops its
    reference to it: a caller that keeps none frees its inputs' memory then.

    Raises:
        PrepError: a user-fixable problem, unwrapped from the runner's exception;
            OutputError for a file OUTPUT cannot hold (disk full, permissions).
    """
    check_split_source(config.plan, any(r.split for r in listing.refs))  # known before any image is read
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    manifest_path = storage.join(config.output, manifest_lib.FILENAME)
    chunks = listing_chunks(listing, config.plan.seed)
    record = run_record(config.manifest_options(), tool_info(), listing)
    try:
        state = resume.open_interrupted(config.output, config.source, record, listing, chunks) \
            if config.resume else None
        if state == resume.FINISHED:
            return manifest_lib.loads(storage.read_bytes(manifest_path), manifest_path)
        if state != resume.RESUME:
            if state is None:
                prepare_output(config.output, config.overwrite)
            else:  # FRESH: what an earlier, interrupted run wrote goes, as with --overwrite
                prepare_output(config.output, overwrite=True)
            stage_listing(tmp_dir, chunks, listing.rejects)
            checkpoints.write_run(tmp_dir, record)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, config.output)) from None
    # From here on the staged chunk files stand for the listing: the driver lets go of
    # its inputs (~0.2 KB each; the caller passes the listing without keeping it).
    summary = Staged(listing.classes, listing.found,
                     tuple(sorted({r.split for r in listing.refs if r.split})))
    sizes = [len(c) for c in chunks]
    num_chunks = len(chunks)
    del listing, chunks
    _skip_ipython_probe()
    run_info = {"runner": runner, "workers": config.workers, "source": config.source, "started": time.time()}
    if config.resume:
        run_info["resumed"] = {"chunks": num_chunks}
    beam_args, staged = staging.staging_args(runner, list(beam_args or []))
    options = pipeline_options(runner, beam_args)
    try:
        with Progress(config.output, sizes, progress):
            p = beam.Pipeline(runner=make_runner(runner), options=options)
            build(p, config, summary, num_chunks, run_info, group_target, lookahead=runner == RUNNERS_LOCAL)
            result = p.run()
            try:
                result.wait_until_finish()
            finally:
                client = getattr(result, "client", None)  # DaskRunner's client to the cluster
                if client is not None:
                    client.close()
    except Exception as exc:
        error = find_prep_error(exc, config.output)
        if error is not None:
            if isinstance(error, OutputError) and _resumable(tmp_dir):
                error = OutputError(f"{error}; the work done so far is kept: fix this and run again with "
                                    "--resume to finish")
            raise error from None
        raise
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
    return manifest_lib.loads(storage.read_bytes(manifest_path), manifest_path)


def _resumable(tmp_dir: str) -> bool:
    try:
        return checkpoints.read_run(tmp_dir) is not None
    except Exception:
        return False


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM}


def describe_os_error(exc: OSError, output: str | None = None) -> str:
    """One line for a storage failure: what it is and which file (a failed write
    names no file: then OUTPUT, the only place the pipeline writes)."""
    where = f" {printable(str(exc.filename))}" if exc.filename else f" to OUTPUT {output}" if output else ""
    verb = "write" if exc.errno in _WRITE_ERRNOS or not exc.filename else "access"
    return f"cannot {verb}{where}: {exc.strerror or exc}"


_REMOTE_ERROR = re.compile(r"prep\.errors\.(\w+Error): (.*?)(?: \[while running|$)", re.MULTILINE)
_REMOTE_OS_ERROR = re.compile(r"\[Errno (\d+)\] ([^:\n\[]+?)(?:: '([^'\n]*)')?(?: \[while running|$)", re.MULTILINE)


def find_prep_error(exc: BaseException, output: str | None = None) -> PrepError | None:
    """The PrepError behind a runner's exception, if any.

    In-process runners re-raise it; runners with remote workers report it only
    as text ("prep.errors.PlanError: ...") inside their own exception. An
    OSError (disk full, permission denied) becomes an OutputError: inputs that
    cannot be read are rejects, so a pipeline's OSError is about OUTPUT.
    """
    seen, current, os_error = set(), exc, None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PrepError):
            return type(current)(str(current).split(" [while running")[0])
        if isinstance(current, OSError) and os_error is None:
            os_error = current
        current = current.__cause__ or current.__context__
    match = _REMOTE_ERROR.search(str(exc))
    if match:
        from prep import errors

        kind = getattr(errors, match[1], PrepError)
        return (kind if isinstance(kind, type) and issubclass(kind, PrepError) else PrepError)(match[2])
    if os_error is not None:
        return OutputError(describe_os_error(os_error, output))
    match = _REMOTE_OS_ERROR.search(str(exc))
    if match:
        return OutputError(describe_os_error(OSError(int(match[1]), match[2].strip(), match[3]), output))
    return None
