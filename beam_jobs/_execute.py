"""Running the pipeline of a staged conversion, `execute`, or of a listing on workers, `list_on_workers`, and
turning their failures into user errors.

Imports Beam; `convert.py` imports this module only once the listing is staged.
"""

from __future__ import annotations

import gc
import shutil
import time
import types
from typing import Any

import apache_beam as beam

from beam_jobs import list_source, runners, worker_setup
from beam_jobs.graph import RunSettings, build
from beam_jobs.plan import GROUP_TARGET
from beam_jobs.progress import Progress
from prep.core import storage
from prep.core.config import RUNNERS_LOCAL, ConvertConfig
from prep.core.detection_inputs import DetectionSource
from prep.core.errors import OutputError, RunnerError
from prep.core.frozen_heap import frozen_heap
from prep.core.inputs import FolderSource
from prep.core.label_ranges import LabelSource
from prep.core.manifest import FILENAME, Manifest
from prep.core.run import checkpoints
from prep.core.run.checkpoints import StepHook
from prep.core.run.failures import describe_os_error, find_prep_error, runner_failure, with_resume_hint
from prep.core.run.start import Ready
from prep.core.segmentation_inputs import SegmentationSource
from prep.core.sources.parquet import TableSource
from prep.core.sources.shard_set import ShardSource
from prep.core.workdir import WorkDir


def execute(
    config: ConvertConfig,
    ready: Ready,
    runner: str = RUNNERS_LOCAL,
    beam_args: list[str] | None = None,
    progress: bool = False,
    group_target: int = GROUP_TARGET,
    on_step: StepHook | None = None,
) -> Manifest:
    """Runs the pipeline of a conversion `start.ready_output` readied (not a finished one);
    returns the manifest it wrote. Callers go through `convert.convert`.

    `group_target` bounds the references per task and part (see plan.py);
    tests lower it to exercise many rank tasks and multi-part shards on small
    inputs. `on_step` is the test hook of checkpoints.py.

    Raises:
        PrepError: a user-fixable problem, unwrapped from the runner's exception;
            OutputError for a file OUTPUT cannot hold (disk full, permissions).
    """
    work = WorkDir(config.output)
    manifest_path = storage.join(config.output, FILENAME)
    num_chunks = len(ready.chunk_sizes)
    run_info: dict[str, Any] = {
        "runner": runner,
        "workers": config.workers,
        "source": config.source,
        "started": time.time(),
    }
    suspects: frozenset[str] = frozenset()
    if config.resume:
        # Inputs the killed run was reading may be what killed it: never read in this thread again.
        suspects = checkpoints.read_in_flight(work)
        run_info["resumed"] = {"chunks": num_chunks, "in_flight": sorted(suspects)}
    settings = RunSettings(num_chunks, run_info, group_target, lookahead=runner == RUNNERS_LOCAL, suspects=suspects)
    with Progress(config.output, ready.chunk_sizes, progress):
        _run(config, runner, beam_args, num_chunks, lambda p: build(p, config, ready.staged, settings, on_step=on_step))
    return Manifest.from_json(storage.read_bytes(manifest_path), manifest_path)


def list_on_workers(
    config: ConvertConfig,
    source: FolderSource | LabelSource | ShardSource | TableSource | DetectionSource | SegmentationSource,
    runner: str = RUNNERS_LOCAL,
    beam_args: list[str] | None = None,
    pipeline: bool | None = None,
) -> dict[str, Any]:
    """Lists and stages a SOURCE of class folders (`list_source`), a label file (`list_labels`), WebDataset
    shards (`list_shards`), Parquet/Arrow files (`list_tables`), detection annotations (`list_annotations`) or
    a segmentation SOURCE (`list_masks`) on workers; returns the summary the driver reads. Callers go through
    `convert.convert`, which cleared OUTPUT first. `pipeline`: run the listing as a pipeline (default: on any
    runner but the embedded one, where `list_here` runs its steps).

    Raises:
        PrepError: SOURCE cannot be listed or used (SourceError), or the runner failed.
    """
    classes, seed = config.classes, config.plan.seed
    lister = _lister(source)
    if not (runner != RUNNERS_LOCAL if pipeline is None else pipeline):
        try:
            # Beam is imported by now: unfrozen, its objects were walked by every full collection that the
            # listing's few objects an input set off (at 100,000 photos, 0.2 of its 0.8 s of CPU).
            with frozen_heap():
                lister.list_here(source, seed, classes, config.output)  # type: ignore[arg-type]
        except OSError as exc:  # as a pipeline's failure would be told (find_prep_error)
            raise OutputError(describe_os_error(exc, config.output)) from None
        return list_source.read_summary(config.output)

    def add(p: beam.Pipeline) -> None:
        lister.build_listing(p, source, seed, classes, config.output)  # type: ignore[arg-type]

    _run(config, runner, beam_args, source.ranges if isinstance(source, LabelSource) else len(source.tasks), add)
    return list_source.read_summary(config.output)


def _lister(source) -> types.ModuleType:
    """The module that lists `source`, imported on first use: a conversion of class folders, the default, spent
    ~14 ms of its serial start importing the other five."""
    if isinstance(source, LabelSource):
        from beam_jobs import list_labels

        return list_labels
    if isinstance(source, ShardSource):
        from beam_jobs import list_shards

        return list_shards
    if isinstance(source, TableSource):
        from beam_jobs import list_tables

        return list_tables
    if isinstance(source, DetectionSource):
        from beam_jobs import list_annotations

        return list_annotations
    if isinstance(source, SegmentationSource):
        from beam_jobs import list_masks

        return list_masks
    return list_source


def _run(config: ConvertConfig, runner: str, beam_args: list[str] | None, items: int, add) -> None:
    """Runs a pipeline of `items` created elements that `add(p)` builds, turning its failures into PrepErrors."""
    work = WorkDir(config.output)
    runners.skip_ipython_probe()
    beam_args, staged = worker_setup.staging_args(
        runner, runners.dask_partition_args(runner, list(beam_args or []), items)
    )
    options = runners.pipeline_options(runner, beam_args)
    try:
        # frozen for the graph's build too: it sets off full collections of what is alive before
        with frozen_heap(), runners.memoized_introspection():
            p = beam.Pipeline(runner=runners.make_runner(runner), options=options)
            add(p)
            gc.freeze()  # and the graph, alive for the whole run (unfrozen with the rest after)
            result = p.run()
            try:
                result.wait_until_finish()
            finally:
                client = getattr(result, "client", None)  # DaskRunner's client to the cluster
                if client is not None:
                    client.close()
    except Exception as exc:
        error = find_prep_error(exc, config.output)
        if error is None and runners.submits_job(runner):  # the job service's or the remote job's failure
            error = RunnerError(runner_failure(runner, *runners.job_service(options), exc))
        if error is not None:
            if isinstance(error, (OutputError, RunnerError)) and _resumable(work):
                error = with_resume_hint(error)
            raise error from None
        raise
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)


def _resumable(work: WorkDir) -> bool:
    try:
        return checkpoints.read_run(work) is not None
    except Exception:
        return False
