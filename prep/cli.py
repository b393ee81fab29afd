"""The `prep` command line. Thin: it parses options, calls the core, and turns
every `PrepError` into a one-line `Error: ...` with a non-zero exit."""

from __future__ import annotations

import logging
import sys
import time

import click

from prep import __version__
from prep.errors import PrepError
from prep.options import click_options


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PrepError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"cannot access{where}: {exc.strerror or exc}") from None


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="prep")
def main():
    """Turn raw images and labels into balanced TFRecord shards, and check them."""


@main.command()
@click.argument("source", type=str)
@click.argument("output", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click_options
@click.option("--runner", default="local", show_default=True,
              help="Beam runner: local (embedded, in-process), DirectRunner, PortableRunner, DataflowRunner, ...")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@click.option("--verbose", is_flag=True, help="Show Beam's own log messages (hidden by default).")
def convert(source, output, beam_args, runner, progress, verbose, **values):
    """Convert SOURCE (class folders or a --labels file) into balanced TFRecord shards in OUTPUT.

    Beam pipeline options go after `--`, e.g.
    `prep convert SRC gs://bucket/out --runner DataflowRunner -- --project=p --region=r`.
    """
    from prep.options import build_config, list_inputs

    started = time.time()
    config = build_config(source, output, values)
    listing = list_inputs(config)
    show = sys.stderr.isatty() if progress is None else progress
    # Beam logs failures with tracebacks, and warnings about optional cloud
    # clients; our errors reach the user as one line instead.
    logging.basicConfig(level=logging.INFO if verbose else logging.CRITICAL, format="%(levelname)s %(message)s")
    if not verbose:
        logging.getLogger().setLevel(logging.CRITICAL)
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    from beam_jobs.pipeline import run_conversion

    manifest = run_conversion(config, listing, runner=runner, beam_args=list(beam_args), progress=show)
    click.echo(summary_table(manifest, time.time() - started))


def summary_table(manifest: dict, seconds: float) -> str:
    """The end-of-run summary: examples and shards per split, then the accounting."""
    rows = [("split", "examples", "shards", "bytes")]
    for name, split in manifest["splits"].items():
        rows.append((name, str(split["examples"]), str(split["num_shards"]), _human(split["bytes"])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    inputs = manifest["inputs"]
    rate = inputs["found"] / seconds if seconds > 0 else 0.0
    lines.append(f"found {inputs['found']}  written {inputs['written']}  rejected {inputs['rejected']}  "
                 f"capped {inputs['capped']}  converted {inputs['converted']}")
    if inputs["rejected"]:
        reasons = ", ".join(f"{k} {v}" for k, v in inputs["rejected_by_reason"].items())
        lines.append(f"rejects by reason: {reasons} (see rejects.jsonl)")
    resumed = manifest.get("run", {}).get("resumed")
    if resumed:
        lines.append(f"resumed: reused {resumed['chunks_reused']} of {resumed['chunks']} prepared chunks and "
                     f"{resumed['shards_reused']} of {resumed['shards']} shards")
    lines.append(f"{seconds:.1f} s, {rate:.1f} images/s")
    return "\n".join(lines)


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


if __name__ == "__main__":
    main()
