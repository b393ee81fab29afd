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
"""

from __future__ import annotations

import argparse
import logging
import sys

from prep.core.config import RUNNERS_LOCAL, ConvertConfig
from prep.core.convert_options import add_arguments, build_config, check_beam_args
from prep.core.errors import PrepError
from prep.core.inputs import list_inputs
from prep.core.listing import Listing
from prep.core.manifest import Manifest
from prep.core.run.checkpoints import StepHook
from prep.core.run.start import ready_output


def convert(
    config: ConvertConfig,
    listing: Listing,
    runner: str = RUNNERS_LOCAL,
    beam_args: list[str] | None = None,
    progress: bool = False,
    group_target: int | None = None,
    on_step: StepHook | None = None,
) -> Manifest:
    """Runs the conversion and returns the manifest it wrote (see the module docstring).

    `group_target`: see `_execute.execute`; `on_step`: the test hook of checkpoints.py.

    Raises:
        PrepError: a user-fixable problem (OptionsError, PlanError, ResumeError, OutputError, ...).
    """
    if runner != RUNNERS_LOCAL or beam_args:
        from beam_jobs.runners import check_runner_options

        check_runner_options(runner, list(beam_args or []))
    ready = ready_output(config, listing)
    del listing  # the staged chunk files stand for it from here on
    if ready.finished is not None:
        return ready.finished
    from beam_jobs._execute import execute

    more = {} if group_target is None else {"group_target": group_target}
    return execute(config, ready, runner, beam_args, progress, on_step=on_step, **more)


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
    return convert(config, list_inputs(config), runner=runner.runner, beam_args=pipeline_args)


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
