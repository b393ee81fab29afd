"""Entry point in Beam's own idiom:

    python -m beam_jobs.convert --source SRC --output OUT [conversion options] [Beam pipeline options]

The conversion options and defaults are those of `prep convert` (one table,
`prep.core.convert_options.OPTIONS`); everything else goes to Beam's `PipelineOptions`.
Without `--runner`, the embedded local runner is used, as for `prep convert`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from prep.core.config import RUNNERS_LOCAL
from prep.core.errors import PrepError
from prep.core.convert_options import add_arguments, build_config, check_beam_args
from prep.core.inputs import list_inputs
from prep.core.manifest import Manifest


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
    from beam_jobs.launch import convert

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
