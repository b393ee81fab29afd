"""The one entry point of a conversion: `convert(config, listing, ...)` from Python, `run(argv)` in Beam's idiom:

    python -m beam_jobs.convert --source SRC --output OUT [conversion options] [Beam pipeline options]

The conversion options and defaults are those of `prep convert` (one table,
`prep.core.convert_options.OPTIONS`); everything else goes to Beam's `PipelineOptions`.
Without `--runner`, the embedded local runner is used, as for `prep convert`.

`convert` is a whole conversion, or with `--resume` the end of an interrupted one. The order is
the point: a runner other than the local one, or Beam options, are checked first, before OUTPUT
is touched (`runners.check_runner_options`, which imports Beam); then OUTPUT is readied and the
listing staged (`prep.core.run.start`, no Beam); then the listing is let go of, and only then is
the pipeline imported and run (`_execute`, private to this module). A caller that keeps no
reference to the listing frees its memory before the pipeline's is allocated: `prep convert`
peaks at the larger of the two, not their sum.

Given no listing, `convert` stages a SOURCE of class folders (`list_source`), of WebDataset shards
(`list_shards`), of Parquet or Arrow files (`list_tables`), or on a runner other than the embedded one a
label file read in byte ranges, single- or multi-label (`list_labels`), a detection SOURCE (`list_annotations`) or
a segmentation one (`list_masks`), with a first pipeline on the same runner, after OUTPUT is cleared: the driver
then holds nothing per input (multi-label WebDataset and Parquet sets too). With `--resume` that pipeline lists
SOURCE again beside the interrupted run's work (`_relisted_on_workers`), whose staged listing is kept if the
two agree. The other tasks and formats are listed on the driver (`folder_source`, `shard_source`,
`table_source`, `label_source`, `detection_source` and `segmentation_source` say when); so are label files,
annotations and masks on the embedded runner, whose workers are the driver's process (the driver's listing
is the faster there).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import sys

from prep.core import storage
from prep.core.config import RUNNERS_LOCAL, ConvertConfig
from prep.core.convert_options import add_arguments, build_config, check_beam_args
from prep.core.detection_inputs import DetectionSource
from prep.core.errors import PrepError
from prep.core.inputs import (
    FolderSource,
    detection_source,
    folder_source,
    list_inputs,
    segmentation_source,
    shard_source,
    table_source,
)
from prep.core.label_ranges import LabelSource, label_source
from prep.core.layout import check_split_source
from prep.core.listing import Listing
from prep.core.manifest import Manifest
from prep.core.run import checkpoints, resume
from prep.core.run.checkpoints import StepHook
from prep.core.run.start import Ready, clear_output, ready_listed, ready_output, ready_relisted
from prep.core.segmentation_inputs import SegmentationSource
from prep.core.sources.parquet import TableSource
from prep.core.sources.shard_set import ShardSource
from prep.core.workdir import WorkDir


def convert(
    config: ConvertConfig,
    listing: Listing | None = None,
    runner: str = RUNNERS_LOCAL,
    beam_args: list[str] | None = None,
    progress: bool = False,
    group_target: int | None = None,
    on_step: StepHook | None = None,
) -> Manifest:
    """Runs the conversion and returns the manifest it wrote (see the module docstring).

    `listing`: SOURCE listed by the driver (`prep.core.inputs.list_inputs`); None lists it here: a SOURCE of
    class folders on workers (`list_source`), any other on the driver.
    `group_target`: see `_execute.execute`; `on_step`: the test hook of checkpoints.py.

    Raises:
        PrepError: a user-fixable problem (OptionsError, PlanError, ResumeError, OutputError, ...).
    """
    if runner != RUNNERS_LOCAL or beam_args:
        from beam_jobs.runners import check_runner_options

        check_runner_options(runner, list(beam_args or []))
    ready = None
    readying = config  # what readies OUTPUT: another config for a --resume that starts over (`_restarting`)
    if listing is None:
        source: FolderSource | LabelSource | DetectionSource | SegmentationSource | None = folder_source(config)
        if source is None and runner != RUNNERS_LOCAL:  # the embedded runner's workers are this process
            source = label_source(config) or detection_source(config) or segmentation_source(config)
        if source is not None:
            readying = _restarting(config)
            ready = _listed_on_workers(readying, source, runner, beam_args)
        if ready is None and (source is None or storage.is_remote(config.source)):
            # WebDataset shards: local ones seen by folder_source, remote ones by the workers' listing
            shards = shard_source(config) or table_source(config)
            if shards is not None:
                readying = _restarting(config) if readying is config else readying
                ready = _listed_on_workers(readying, shards, runner, beam_args)
        if ready is None:
            listing = list_inputs(config)
    if ready is None:
        assert listing is not None  # listed just above, or given
        ready = ready_output(readying, listing)
    del listing  # the staged chunk files stand for it from here on
    if ready.finished is not None:
        return ready.finished
    from beam_jobs._execute import execute

    more = {} if group_target is None else {"group_target": group_target}
    return execute(config, ready, runner, beam_args, progress, on_step=on_step, **more)


def _listed_on_workers(
    config: ConvertConfig,
    source: FolderSource | LabelSource | ShardSource | TableSource | DetectionSource | SegmentationSource,
    runner: str,
    beam_args: list[str] | None,
) -> Ready | None:
    """Clears OUTPUT, lists SOURCE on workers into its work directory and readies the run; None when the
    listing needs the driver (its summary's `fallback`). A failure, or the fallback, leaves OUTPUT as
    `clear_output` left it: no work directory, and no OUTPUT folder where there was none."""
    from beam_jobs import list_source
    from beam_jobs._execute import list_on_workers

    # known from the top of a local SOURCE (or the shards' names): refused before OUTPUT is touched
    if (
        source.layout == "splits"
        if isinstance(source, FolderSource)
        else isinstance(source, ShardSource)
        and any(t.split for t in source.tasks)
        or isinstance(source, TableSource)
        and source.splits
    ):
        check_split_source(config.plan, True)
    if config.resume:
        return _relisted_on_workers(config, source, runner, beam_args)
    existed = storage.exists(config.output)
    clear_output(config)

    def undo() -> None:
        with contextlib.suppress(OSError):
            if existed:
                checkpoints.delete_work(WorkDir(config.output))
            else:
                storage.delete(config.output)

    try:
        summary = list_on_workers(config, source, runner, beam_args)
        list_source.delete_listed(config.output)
        if summary["fallback"] is not None:
            logging.getLogger(__name__).info("listing SOURCE on the driver: %s", summary["fallback"])
            undo()
            return None
        return ready_listed(config, summary)
    except BaseException:
        undo()
        raise


def _restarting(config: ConvertConfig) -> ConvertConfig:
    """`config`, or for a `--resume` of a run killed before it staged its listing (`resume.FRESH`, whose
    .prep-tmp `interrupted` removes) the config that readies OUTPUT as `--overwrite` does, as `ready_output`
    does then. The pipeline still runs with `config`: its manifest says the run was resumed.

    Raises:
        ResumeError: nothing to resume.
    """
    if config.resume and resume.interrupted(config.output)[0] == resume.FRESH:
        return dataclasses.replace(config, resume=False, overwrite=True)
    return config


def _relisted_on_workers(
    config: ConvertConfig,
    source: FolderSource | LabelSource | ShardSource | TableSource | DetectionSource | SegmentationSource,
    runner: str,
    beam_args: list[str] | None,
) -> Ready | None:
    """`--resume` of an interrupted run that staged its listing: lists SOURCE again on workers, into a work
    directory of its own (`WorkDir.relisted`, deleted after), and readies the run from what that staged and
    the interrupted run recorded (`ready_relisted`). None when the listing needs the driver."""
    from beam_jobs import list_source
    from beam_jobs._execute import list_on_workers

    relisted = WorkDir(config.output).relisted
    try:
        storage.delete(relisted)  # what a resume killed while listing left
        summary = list_on_workers(dataclasses.replace(config, output=relisted, resume=False), source, runner, beam_args)
        if summary["fallback"] is not None:
            logging.getLogger(__name__).info("listing SOURCE on the driver: %s", summary["fallback"])
            return None
        list_source.delete_listed(relisted)
        return ready_relisted(config, summary, relisted)
    finally:
        with contextlib.suppress(OSError):
            storage.delete(relisted)


def run(argv=None) -> Manifest:
    """Parses argv, runs the conversion, and returns the manifest it wrote."""
    # No abbreviations: Dataflow's `--label key=value` (job labels) would be taken for our --labels.
    parser = argparse.ArgumentParser(description="Convert images into balanced TFRecord shards.", allow_abbrev=False)
    parser.add_argument("--source", required=True, help="Class folders, or the root of --labels paths.")
    parser.add_argument("--output", required=True, help="Output folder (local, gs://, s3://).")
    add_arguments(parser)
    known, pipeline_args = parser.parse_known_args(argv)
    runner_parser = argparse.ArgumentParser(add_help=False)
    runner_parser.add_argument("--runner", default=RUNNERS_LOCAL)
    runner, pipeline_args = runner_parser.parse_known_args(pipeline_args)
    check_beam_args(pipeline_args)
    values = {k: v for k, v in vars(known).items() if k not in ("source", "output")}
    config = build_config(known.source, known.output, values)
    return convert(config, None, runner=runner.runner, beam_args=pipeline_args)


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    # A failing step is logged there with its traceback; the error reaches the user as one line below.
    for name in ("apache_beam.runners.common", "apache_beam.runners.worker"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        manifest = run()
    except PrepError as exc:
        sys.exit(f"Error: {exc}")
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        sys.exit(f"Error: cannot access{where}: {exc.strerror or exc}")
    print({name: split.examples for name, split in manifest.splits.items()})
