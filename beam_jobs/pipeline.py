"""The conversion pipeline: listed inputs -> checked records -> plan -> shards -> manifest.

What each PCollection holds:

    chunks    = Create | Reshuffle          # chunk id; its listing waits in .prep-tmp/listing/
    outcomes  = ParDo(PrepareChunk)         # (OK, PreparedRef) | (REJECT, Reject)
    refs      = FlatMap                     # PreparedRef(path, label, split, chunk, offset, length, converted)
    ranked    = PlanShards                  # (ENTRY, part key, Entry) | (CAPPED, label)   see planning.py
    parts     = GroupByKey                  # ((split, shard, num_shards, part, num_parts), [Entry])
    written   = ParDo(WriteShardPart)       # (SHARD, result) | (PART, shard file, part info)
    joined    = GroupByKey | ParDo(ConcatParts)   # (SHARD, result), only for shards cut into parts
    summary   = Flatten | GroupByKey(one key)     # shard results, rejects, capped counts: small
    done      = FlatMap(finish)             # writes rejects.jsonl, then manifest.json

Images are read, checked and converted once, before planning, so the plan
knows exactly which inputs are valid and every shard is balanced over the
examples actually written. Their framed records wait in spill files under
OUTPUT/.prep-tmp; only small references are grouped, and shard writers copy
records from the spill files. Image bytes never pass through a shuffle, and no
group holds more than about `planning.GROUP_TARGET` references (the final
summary group holds one result per shard and the rejects).

Parallelism. The local runner runs each stage as one bundle, so parallelism
comes from `workers` threads inside PrepareChunk (images of a chunk) and
WriteShardPart (read-ahead of records): Pillow releases the GIL while decoding,
resizing and encoding. On a cluster, Reshuffle and the GroupByKeys spread
chunks and shards over workers, each of which runs the same thread pools.

Only Create, ParDo, GroupByKey, Flatten and composites of them are used, with
no side inputs, tagged outputs or outputs from finish_bundle: the DaskRunner
translates nothing else.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import prep
from beam_jobs import finish, prepare, staging, storage, write
from beam_jobs.progress import Progress
from beam_jobs.planning import CAPPED, ENTRY, GROUP_TARGET, PlanShards
from prep import manifest as manifest_lib
from prep.config import RUNNERS_LOCAL, ConvertConfig
from prep.errors import OutputError, PrepError
from prep.naming import ShardName
from prep.sources import Listing

MAX_CHUNK = 256


def chunk_size(n: int) -> int:
    """Refs per chunk: about 32 chunks for small inputs, at most MAX_CHUNK refs each."""
    return max(16, min(MAX_CHUNK, math.ceil(n / 32)))


def make_chunks(refs, size: int) -> list[list]:
    return [list(refs[start:start + size]) for start in range(0, len(refs), size)]


def stage_listing(tmp_dir: str, listing: Listing) -> int:
    """Writes the listing in chunk files for the pipeline to read; returns the chunk count."""
    chunks = make_chunks(listing.refs, chunk_size(len(listing.refs)))
    for i, refs in enumerate(chunks):
        prepare.write_listing(tmp_dir, i, refs)
    finish.write_listing_rejects(tmp_dir, listing.rejects)
    return len(chunks)


def _tag(kind):
    return lambda value: (kind, value)


def build(p: beam.Pipeline, config: ConvertConfig, listing: Listing, num_chunks: int, run_info: dict,
          group_target: int = GROUP_TARGET) -> None:
    """Adds the conversion steps to pipeline `p` (the listing must be staged)."""
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    labels = listing.classes
    outcomes = (
        p
        | "ListChunks" >> beam.Create(list(range(num_chunks)))  # chunk id
        | "SpreadChunks" >> beam.Reshuffle()
        | "PrepareImages" >> beam.ParDo(
            prepare.PrepareChunk(config.source, tmp_dir, labels, config.image, config.workers))
    )
    refs = outcomes | "Prepared" >> beam.FlatMap(lambda o: [o[1]] if o[0] == prepare.OK else [])
    rejects = outcomes | "Rejected" >> beam.FlatMap(lambda o: [(finish.REJECT, o[1])] if o[0] == prepare.REJECT else [])
    ranked = refs | "PlanShards" >> PlanShards(len(labels), config.plan, len(listing.refs), tmp_dir, group_target)
    written = (
        ranked
        | "Entries" >> beam.FlatMap(lambda r: [(r[1], r[2])] if r[0] == ENTRY else [])
        | "GroupParts" >> beam.GroupByKey()  # (part key, [Entry])
        | "WriteShards" >> beam.ParDo(write.WriteShardPart(config.output, tmp_dir, labels, config.workers))
    )
    whole = written | "WholeShards" >> beam.FlatMap(lambda w: [w] if w[0] == write.SHARD else [])
    joined = (
        written
        | "Parts" >> beam.FlatMap(lambda w: [(w[1], w[2])] if w[0] == write.PART else [])
        | "GroupShardParts" >> beam.GroupByKey()  # (shard file, [part info])
        | "ConcatParts" >> beam.ParDo(write.ConcatParts(config.output, tmp_dir, labels))
    )
    capped = (
        ranked
        | "Capped" >> beam.FlatMap(lambda r: [(r[1], 1)] if r[0] == CAPPED else [])
        | "CountCapped" >> beam.CombinePerKey(sum)
        | "TagCapped" >> beam.Map(_tag(finish.CAPPED))
    )
    (
        (whole, joined, rejects, capped)
        | "Summary" >> beam.Flatten()
        | "OneKey" >> beam.Map(lambda item: (None, item))
        | "GatherSummary" >> beam.GroupByKey()
        | "WriteManifest" >> beam.FlatMap(
            finish.finish, output=config.output, tmp_dir=tmp_dir, labels=labels,
            options=config.manifest_options(), found=listing.found,
            tool={"name": "tfrecord-prep", "version": prep.__version__, "pillow": _pillow_version()},
            run=run_info)
    )


def _pillow_version() -> str:
    import PIL

    return PIL.__version__


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
        raise OutputError(f"OUTPUT {output} is not empty; pass --overwrite to replace what prep wrote there")
    ours = {manifest_lib.FILENAME, manifest_lib.REJECTS, manifest_lib.TMP_DIR, manifest_lib.FILENAME + ".part",
            manifest_lib.REJECTS + ".part"}
    foreign = [n for n in names if n not in ours and ShardName.parse(n) is None]
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
    """Beam asks `is_in_ipython()` for every transform label, which imports IPython
    when it is installed (~0.5 s). If IPython is not imported yet we are not
    inside it, so the answer is known to be False."""
    if "IPython" in sys.modules:
        return
    from apache_beam.utils import interactive_utils

    if hasattr(interactive_utils, "is_in_ipython"):
        interactive_utils.is_in_ipython = lambda: False


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
    """Runs the whole conversion and returns the manifest it wrote.

    `group_target` bounds the references per group (see planning.py); tests
    lower it to exercise many buckets and multi-part shards on small inputs.

    Raises:
        PrepError: a user-fixable problem, unwrapped from the runner's exception.
    """
    prepare_output(config.output, config.overwrite)
    _skip_ipython_probe()
    run_info = {"runner": runner, "workers": config.workers, "source": config.source, "started": time.time()}
    beam_args, staged = staging.staging_args(runner, list(beam_args or []))
    options = pipeline_options(runner, beam_args)
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    num_chunks = stage_listing(tmp_dir, listing)
    try:
        with Progress(config.output, [len(c) for c in make_chunks(listing.refs, chunk_size(len(listing.refs)))],
                      progress):
            p = beam.Pipeline(runner=make_runner(runner), options=options)
            build(p, config, listing, num_chunks, run_info, group_target)
            result = p.run()
            try:
                result.wait_until_finish()
            finally:
                client = getattr(result, "client", None)  # DaskRunner's client to the cluster
                if client is not None:
                    client.close()
    except Exception as exc:
        error = find_prep_error(exc)
        if error is not None:
            raise error from None
        raise
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
    manifest_path = storage.join(config.output, manifest_lib.FILENAME)
    return manifest_lib.loads(storage.read_bytes(manifest_path), manifest_path)


_REMOTE_ERROR = re.compile(r"prep\.errors\.(\w+Error): (.*?)(?: \[while running|$)", re.MULTILINE)


def find_prep_error(exc: BaseException) -> PrepError | None:
    """The PrepError behind a runner's exception, if any.

    In-process runners re-raise it; runners with remote workers report it only
    as text ("prep.errors.PlanError: ...") inside their own exception.
    """
    seen, current = set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PrepError):
            return type(current)(str(current).split(" [while running")[0])
        current = current.__cause__ or current.__context__
    match = _REMOTE_ERROR.search(str(exc))
    if match:
        from prep import errors

        kind = getattr(errors, match[1], PrepError)
        return (kind if isinstance(kind, type) and issubclass(kind, PrepError) else PrepError)(match[2])
    return None
