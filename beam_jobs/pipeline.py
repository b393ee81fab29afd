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

Before the pipeline, `start.start_conversion` (which imports no Beam) stages
the listing sorted by (split, class, sort key, path) (`start.listing_order`),
so each group's inputs come in rank order and the planner needs only
per-chunk counts to rank them exactly. References never travel as elements:
a chunk's wait in its index, a rank task's entries in its entry file.
Elements are counted in chunks, tasks and shard parts, so the memory the
runner holds between steps does not grow with the inputs.

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
which runs the same thread pools; on the DaskRunner, only once the chunk ids
are cut into about as many partitions as the cluster has task slots
(`dask_partition_args`; bench/runner_scaling.py measures the spread).

Only Create, ParDo, GroupByKey, Flatten and composites of them are used, with
no side inputs or tagged outputs: the DaskRunner translates nothing else.
Only on the embedded runner does a DoFn emit from finish_bundle (PrepareChunk's
`lookahead`), since the DaskRunner drops such outputs.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shutil
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.runner import PipelineRunner, create_runner

from beam_jobs import checkpoints, finish, prepare, staging, storage, write
from beam_jobs.progress import Progress
from beam_jobs.planning import CAPPED, ENTRY, GROUP_TARGET, PlanShards
from beam_jobs.start import Staged, Started, describe_os_error, tool_info
from prep import manifest as manifest_lib
from prep import targets
from prep.config import RUNNERS_LOCAL, ConvertConfig
from prep.errors import OptionsError, OutputError, PrepError, RunnerError
from prep.options import OPTIONS

# A write task holds this many parts at most, so that it holds at most about
# MAX_WRITE_WIDTH * GROUP_TARGET entries.
MAX_WRITE_WIDTH = 4


def write_width(workers: int | None) -> int:
    """Parts written at once by one write task: one per worker thread, at most MAX_WRITE_WIDTH."""
    return max(1, min(MAX_WRITE_WIDTH, workers or os.cpu_count() or 1))


def _tag(kind):
    return lambda value: (kind, value)


def build(p: beam.Pipeline, config: ConvertConfig, listing: Staged, num_chunks: int, run_info: dict,
          group_target: int = GROUP_TARGET, lookahead: bool = False, suspects: frozenset = frozenset()) -> None:
    """Adds the conversion steps to pipeline `p` (the listing must be staged).

    With `config.resume`, complete chunks and shards of the interrupted run are reused, and
    `suspects`, the inputs it was reading when it was killed, are prepared in a sandbox.
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
                                 lookahead=lookahead, source_ids=targets.get(config.target).source_id,
                                 suspects=suspects))
    )
    counts = outcomes | "Prepared" >> beam.FlatMap(lambda o: [o[1]] if o[0] == prepare.COUNTS else [])
    rejects = outcomes | "Rejected" >> beam.FlatMap(lambda o: [(finish.REJECT, o[1])] if o[0] == prepare.REJECT else [])
    reused = outcomes | "ReusedChunks" >> beam.FlatMap(
        lambda o: [(finish.REUSED, o[1])] if o[0] == prepare.REUSED else [])
    ranked = counts | "PlanShards" >> PlanShards(len(labels), config.plan, tmp_dir, group_target, labels)
    width = write_width(config.workers)
    written = (
        ranked
        | "Entries" >> beam.FlatMap(lambda r: [(write.write_task(r[1], width), (r[1], r[2]))] if r[0] == ENTRY else [])
        | "GroupParts" >> beam.GroupByKey()  # (write task, [(part key, Section)])
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


# Runners that drop the options Beam does not know. Dataflow, Flink and Spark (with
# their uber jar) and Prism hand them to the job instead, where they may mean something.
_DROP_UNKNOWN_OPTIONS = ("FnApiRunner", "SwitchingDirectRunner", "TestDirectRunner", "BundleBasedDirectRunner",
                         "PortableRunner", "DaskRunner")


def check_runner_options(runner: str, beam_args: list[str]) -> None:
    """Refuses a runner Beam cannot load, Beam options it would ignore, and options
    the runner's own checks refuse (Dataflow's project, region, temp_location).

    Called before OUTPUT is touched: Beam would stop on a bad runner or refused
    options with a traceback once OUTPUT was readied, and it ignores, with a
    warning at most, an option spelled with dashes (`--direct-num-workers`) and,
    on runners that do not pass options on (`_DROP_UNKNOWN_OPTIONS`), one it
    does not know: `-- --num-shard 3` would change nothing.

    Raises:
        OptionsError: naming the runner or the first option at fault.
    """
    runner_object = None
    if runner != RUNNERS_LOCAL:
        try:
            runner_object = create_runner(runner)  # imports the runner's module, which may define options (Dask)
        except ImportError as exc:
            hint = "; install apache-beam[gcp]" if "dataflow" in runner.lower() else ""
            raise OptionsError(f"--runner {runner} cannot be loaded ({exc}){hint}") from None
        except (ValueError, AttributeError, TypeError):
            pass
        if not isinstance(runner_object, PipelineRunner):
            raise OptionsError(f"unknown --runner {runner}: give local, a runner Beam names (DirectRunner, "
                               "PortableRunner, DataflowRunner, FlinkRunner, SparkRunner, ...) or the full "
                               "name of a PipelineRunner class")
    parsers, said = [], io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # argparse prints its usage, then exits
            PipelineOptions(beam_args).get_all_options(add_extra_args_fn=parsers.append)
    except SystemExit:
        error = said.getvalue().strip().splitlines()[-1:] or ["cannot be parsed"]
        raise OptionsError(f"Beam pipeline options: {error[0].split('error: ', 1)[-1]}") from None
    known = {name for action in parsers[0]._actions for name in action.option_strings}
    drops_unknown = runner_object is None or type(runner_object).__name__ in _DROP_UNKNOWN_OPTIONS
    for arg in beam_args:
        name = arg.split("=", 1)[0]
        if not name.startswith("--") or name in known:
            continue
        spelled = "--" + name[2:].replace("-", "_")
        if spelled in known:
            raise OptionsError(f"Beam pipeline option {name} is spelled {spelled}: Beam ignores it as written")
        if drops_unknown:
            ours = [o.name for o in OPTIONS]
            close = difflib.get_close_matches(name, sorted(known) + ours, n=1)
            hint = "" if not close else f"; did you mean {close[0]}?" + (
                " (a conversion option; for prep convert it goes before the --)" if close[0] in ours else "")
            raise OptionsError(f"unknown Beam pipeline option {name}{hint}")
    if type(runner_object).__name__ == "DaskRunner":
        client_options = _dask_client_options(beam_args)
        if "address" in client_options or "scheduler_file" in client_options:
            try:
                _dask_slots(client_options)
            except Exception as exc:  # noqa: BLE001 (distributed raises OSError, ValueError, TimeoutError, ...)
                where = client_options.get("address") or client_options.get("scheduler_file")
                raise OptionsError(f"cannot reach the Dask scheduler {where}: "
                                   f"{' '.join(str(exc).split()) or type(exc).__name__}") from None
    if runner_object is not None:  # what Beam checks when the pipeline is made (Dataflow: project, region, ...)
        errors = PipelineOptionsValidator(pipeline_options(runner, beam_args), runner_object).validate()
        if errors:
            raise OptionsError(f"--runner {runner}: " + "; ".join(" ".join(e.split()).rstrip(".") for e in errors))


def _dask_client_options(beam_args: list[str]) -> dict:
    """The Dask client's options among `beam_args`, as the DaskRunner takes them
    (address, scheduler_file, timeout, ...; npartitions and partition_size included)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return PipelineOptions(beam_args).view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)


def _dask_slots(client_options: dict) -> int:
    """How many tasks the Dask cluster named by `client_options` runs at once.

    Raises:
        Exception: whatever `distributed.Client` raises when it cannot connect.
    """
    from distributed import Client

    with Client(**client_options) as client:
        return sum(client.nthreads().values()) or 1


def dask_partition_args(runner: str, beam_args: list[str], num_chunks: int) -> list[str]:
    """Beam args with `--dask_npartitions` added on the DaskRunner: the cluster's task
    slots (its workers' threads), at most one per chunk, unless the user sets
    `--dask_npartitions` or `--dask_partition_size`. Dask cuts the chunk ids into
    partitions of ceil(chunks / npartitions) ids, so there may be a few fewer
    partitions than slots (32 chunks on 24 slots: 16 partitions of 2).

    Beam's Dask translation puts up to 128 created elements in one partition, and
    its GroupByKey keeps the number of partitions, so all chunks ran in one
    partition on one worker: 2 workers were 1.06x 1 worker (bench/runner_scaling.py).
    Every partition costs a lot on its own: one per chunk (32) took 20 s where one
    took 10 s, for 2,000 images on one worker.
    """
    if staging.runner_class_name(runner) != "DaskRunner":
        return beam_args
    client_options = _dask_client_options(beam_args)
    if "npartitions" in client_options or "partition_size" in client_options:
        return beam_args
    slots = os.cpu_count() or 1  # without a scheduler, the DaskRunner starts a local cluster of this machine
    if "address" in client_options or "scheduler_file" in client_options:
        try:
            slots = _dask_slots(client_options)
        except Exception:  # noqa: BLE001 (checked by check_runner_options; the DaskRunner reports it anyway)
            return beam_args
    return [*beam_args, f"--dask_npartitions={max(1, min(num_chunks, slots))}"]


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


def run_started(config: ConvertConfig, started: Started, runner: str = RUNNERS_LOCAL,
                beam_args: list[str] | None = None, progress: bool = False,
                group_target: int = GROUP_TARGET) -> dict:
    """Runs the pipeline of a conversion `start.start_conversion` readied (not a finished one); returns
    the manifest it wrote.

    `group_target` bounds the references per task and part (see planning.py);
    tests lower it to exercise many rank tasks and multi-part shards on small
    inputs. Callers go through `start.run_conversion`.

    Raises:
        PrepError: a user-fixable problem, unwrapped from the runner's exception;
            OutputError for a file OUTPUT cannot hold (disk full, permissions).
    """
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    manifest_path = storage.join(config.output, manifest_lib.FILENAME)
    summary, sizes, num_chunks = started.staged, started.chunk_sizes, len(started.chunk_sizes)
    _skip_ipython_probe()
    run_info = {"runner": runner, "workers": config.workers, "source": config.source, "started": time.time()}
    suspects = frozenset()
    if config.resume:
        # Inputs the killed run was reading may be what killed it: never read in this thread again.
        suspects = checkpoints.read_in_flight(tmp_dir)
        run_info["resumed"] = {"chunks": num_chunks, "in_flight": sorted(suspects)}
    beam_args, staged = staging.staging_args(runner, dask_partition_args(runner, list(beam_args or []), num_chunks))
    options = pipeline_options(runner, beam_args)
    try:
        with Progress(config.output, sizes, progress):
            p = beam.Pipeline(runner=make_runner(runner), options=options)
            build(p, config, summary, num_chunks, run_info, group_target, lookahead=runner == RUNNERS_LOCAL,
                  suspects=suspects)
            result = p.run()
            try:
                result.wait_until_finish()
            finally:
                client = getattr(result, "client", None)  # DaskRunner's client to the cluster
                if client is not None:
                    client.close()
    except Exception as exc:
        error = find_prep_error(exc, config.output)
        if error is None and submits_job(runner):  # the job service's or the remote job's failure
            error = RunnerError(runner_failure(runner, options, exc))
        if error is not None:
            if isinstance(error, (OutputError, RunnerError)) and _resumable(tmp_dir):
                error = type(error)(f"{error}; the work done so far is kept: fix this and run again with "
                                    "--resume to finish")
            raise error from None
        raise
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
    return manifest_lib.loads(storage.read_bytes(manifest_path), manifest_path)


def submits_job(runner: str) -> bool:
    """Whether `runner` hands the pipeline to a job service or a cloud service (Portable,
    Flink, Spark, Prism, Dataflow), rather than running our code where its
    exceptions reach us as they are (local, Direct, Dask): there, an exception that
    is not a PrepError is a bug, and keeps its traceback."""
    return staging.runner_class_name(runner) in staging.STAGING_RUNNERS


def runner_failure(runner: str, options: PipelineOptions, exc: BaseException) -> str:
    """One line for what stopped a run on a runner that `submits_job`."""
    if type(exc).__name__ == "FutureTimeoutError":  # grpc's, while Beam waits for the job service
        portable = options.view_as(PortableOptions)
        where = f" at --job_endpoint {portable.job_endpoint}" if portable.job_endpoint else ""
        return (f"no job service answered{where} within {portable.job_server_timeout} s "
                "(--job_server_timeout); is it running and reachable?")
    text = " ".join(str(exc).split())
    return f"the {runner} run failed: {type(exc).__name__}" + (f": {text[:400]}" if text else "")


def _resumable(tmp_dir: str) -> bool:
    try:
        return checkpoints.read_run(tmp_dir) is not None
    except Exception:
        return False


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
