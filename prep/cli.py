"""The `prep` command line. Thin: it parses options, calls the core and the pipeline, and
turns every `PrepError` into a one-line `Error: ...` with a non-zero exit (`prep.cli_kit`).

`main` takes an optional `CliHooks` as click's context object (`main(args, obj=...)`):
the one way tests inject a hook into a conversion (`on_step`, see
`prep.core.run.checkpoints`); the console script passes one saying that it owns the process.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import sys
import time
import warnings
from collections.abc import Callable

import click

from prep import __version__, cli_datasets
from prep.cli_kit import ErrorGroup, Trouble, click_options, existing_dataset, html_name, png_name
from prep.core.config import RUNNERS_LOCAL
from prep.core.targets import TARGETS


@dataclasses.dataclass(frozen=True)
class CliHooks:
    """Callbacks a caller of `main` injects (tests); see the module docstring."""

    on_step: Callable[[str], None] | None = None
    # The console script's: nothing else runs in this process, so `prep convert` on the embedded runner
    # imports Beam without the optional clients it never uses (beam_jobs/lean_import.py).
    owns_process: bool = False


@click.group(cls=ErrorGroup)
@click.version_option(__version__, prog_name="prep")
def main():
    """Turn raw images and labels into balanced TFRecord shards, and check them."""


@main.command()
@click.argument("source", type=str)
@click.argument("output", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click_options
@click.option(
    "--runner",
    default="local",
    show_default=True,
    help="Beam runner: local (embedded, in-process), DirectRunner, PortableRunner, DataflowRunner, ...",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@click.option("--verbose", is_flag=True, help="Show Beam's own log messages (hidden by default).")
@click.option(
    "--report",
    "write_report",
    is_flag=True,
    help="At the end, write OUTPUT/report.html, the page `prep report` writes.",
)
@click.pass_context
def convert(ctx, source, output, beam_args, runner, progress, verbose, write_report, **values):
    """Convert SOURCE (class folders or a --labels file) into balanced TFRecord shards in OUTPUT.

    Beam pipeline options go after `--`, e.g.
    `prep convert SRC gs://bucket/out --runner DataflowRunner -- --project=p --region=r`.
    """
    from beam_jobs import convert as conversion  # installs Beam's FileSystems for a remote SOURCE or label file
    from prep.core.convert_options import build_config, check_beam_args

    started = time.time()
    check_beam_args(beam_args)
    if beam_args and ("://" in source or "://" in output):
        # The driver lists SOURCE (and readies OUTPUT) with Beam's FileSystems before any pipeline exists;
        # a local run imports no more of Beam than it did (its import warnings, its memory).
        from beam_jobs import beam_fs

        beam_fs.configure(beam_args)
    config = build_config(source, output, values)
    show = sys.stderr.isatty() if progress is None else progress
    # Beam logs failures with tracebacks, and warnings about optional cloud
    # clients; our errors reach the user as one line instead.
    logging.basicConfig(level=logging.INFO if verbose else logging.CRITICAL, format="%(levelname)s %(message)s")
    if not verbose:
        logging.getLogger().setLevel(logging.CRITICAL)
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
        # Pillow warns about files it can still read (corrupt EXIF, an APNG read
        # as PNG); the image rule decides what becomes of them and rejects are
        # recorded, so the warnings would only bury the progress bar. Set here,
        # for the process the CLI owns: prep.core.image_rules changes no filter, since
        # warnings.catch_warnings() is not thread-safe for the pool's threads.
        warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
    hooks = ctx.obj if isinstance(ctx.obj, CliHooks) else CliHooks()
    if hooks.owns_process and runner == RUNNERS_LOCAL:  # after the logging set-up: Beam logs what it misses
        from beam_jobs.lean_import import import_beam

        import_beam()
    manifest = conversion.convert(  # lists SOURCE: class folders on workers, others on the driver
        config, None, runner=runner, beam_args=list(beam_args), progress=show, on_step=hooks.on_step
    )
    from prep.render import convert_summary

    click.echo(convert_summary(manifest, time.time() - started))
    boxes = manifest.inputs.boxes
    if boxes is not None:  # detection: read = written + dropped; clipped boxes are written
        reasons = ", ".join(f"{k} {v}" for k, v in boxes.dropped_by_reason.items())
        click.echo(
            f"boxes read {boxes.read}  written {boxes.written}  dropped {boxes.dropped}  "
            f"clipped {boxes.clipped}" + (f"  (dropped: {reasons}; see rejects.jsonl)" if reasons else "")
        )
    from beam_jobs.dedupe import duplicates_summary

    for line in duplicates_summary(output, config.dedupe.conflicts):
        click.echo(line, err=line.startswith("Warning"))
    if write_report:
        cli_datasets.write_report(output, None, verify=False, source=None)


@main.command()
@click.argument("output", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click.option(
    "--deep",
    is_flag=True,
    help="Also decode every image and check its stored format, height, width and channels (CPU-bound; slower).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of the table (docs/verify.md).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Threads that decode images with --deep (default: all cores).",
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar (default: on a terminal, for datasets over 256 MiB)."
)
@click.option(
    "--target",
    type=click.Choice(TARGETS),
    default=None,
    help="Also report every record this consumer's default input pipeline would fail on, and the "
    "command that fixes them (default: the target the dataset was converted for, if any).",
)
@click.pass_context
def verify(ctx, output, beam_args, deep, as_json, workers, progress, target):
    """Prove that the dataset in OUTPUT is exactly what its manifest.json promises.

    Checks the manifest, that every shard is there with its recorded size and
    sha256 and no other shard is, every record's CRCs and schema, the counts per
    shard, class and split, and the balance rule; with --target model-garden,
    also that Model Garden's default decoders read every record. Exit status: 0
    intact, 1 problems found (each listed with its file and record index), 2
    usage error. OUTPUT may be remote (gs://, s3://); Beam's file system options
    go after `--`, as for `prep convert`.
    """
    from prep import render
    from prep.verify import dumps
    from prep.verify import verify as run_verify

    _remote_dataset(output, beam_args)
    bar = render.ByteProgress(progress)
    try:
        report = run_verify(output, deep=deep, workers=workers, progress=bar, target=target)
    finally:
        bar.close()
    click.echo(dumps(report) if as_json else render.verify_text(report))
    if not report.ok:
        ctx.exit(1)


@main.command()
@click.argument("output", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (docs/verify.md).")
@click.option(
    "--contact-sheet",
    "sheet",
    metavar="FILE.png",
    callback=png_name,
    help="Write a grid of sample images per class, decoded from the shards, labelled with the class name.",
)
@click.option(
    "--per-class",
    type=click.IntRange(1, 100),
    default=8,
    show_default=True,
    help="Images per class on the contact sheet.",
)
@click.option(
    "--tile", type=click.IntRange(16, 1024), default=96, show_default=True, help="Contact-sheet tile size in pixels."
)
@click.option(
    "--split",
    default=None,
    help="Take contact-sheet samples from this split only (default: every split, largest first).",
)
@click.option("--plot", metavar="FILE.png", callback=png_name, help="Write a bar chart of records per class and split.")
def inspect(output, beam_args, as_json, sheet, per_class, tile, split, plot):
    """Summarize the dataset in OUTPUT from its manifest: splits, shards, classes, sizes, options, rejects.

    Prints the totals, a table per split with each class's records, share and
    per-shard spread, and the first duplicate groups the conversion found;
    --contact-sheet and --plot draw pictures of it. OUTPUT may be remote
    (gs://, s3://); Beam's file system options go after `--`, as for `prep convert`.
    """
    import json

    from prep import inspect as inspect_lib
    from prep import pictures, render
    from prep.core.manifest import Manifest

    _remote_dataset(output, beam_args)
    manifest = Manifest.load(output, shard_counts=True)  # the per-shard spreads read every shard's counts
    if split is not None and split not in manifest.splits:
        raise click.BadParameter(
            f"{split!r} is not a split of {output} (splits: {', '.join(manifest.splits)})", param_hint="'--split'"
        )
    summary = inspect_lib.summary(manifest, output)
    dups = inspect_lib.duplicate_groups(output)
    if dups is not None:  # only then: a dataset without duplicates is shown as before
        summary["duplicates"] = dups
    click.echo(
        json.dumps(summary, indent=2, sort_keys=True, ensure_ascii=False)
        if as_json
        else "\n".join([render.inspect_text(summary), *(render.duplicates_text(dups) if dups else [])])
    )
    if sheet:
        picked = inspect_lib.samples(manifest, output, per_class, split)
        layout = pictures.SheetLayout(rows=len(manifest.labels), columns=per_class, tile=tile)
        pictures.render_sheet(list(manifest.labels), picked, layout).save(sheet, "PNG")
        click.echo(
            f"wrote {sheet} ({layout.size[0]}x{layout.size[1]}, {sum(map(len, picked.values()))} images)", err=as_json
        )
    if plot:
        width, height = pictures.write_plot(summary, plot)
        click.echo(f"wrote {plot} ({width}x{height})", err=as_json)


@main.command()
@click.argument("a", type=str)
@click.argument("b", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click.option("--json", "as_json", is_flag=True, help="Print the pairs as JSON (docs/leakage.md).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes that hash images not hashed before (default: all cores).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar while images are hashed (default: when stderr is a terminal).",
)
@click.pass_context
def leakage(ctx, a, b, beam_args, as_json, workers, progress):
    """List the images that datasets A and B share: exact copies and near duplicates.

    A and B are converted datasets (OUTPUT folders, local or remote: Beam's file
    system options go after `--`). Near duplicates are
    re-encodes, resizes, brightness changes and border crops of up to 5%
    (docs/leakage.md). `prep leakage A A` lists the duplicates inside A, across
    its splits and within them. Content keys are computed from the shards the
    first time and kept in each folder's content_keys.jsonl. Exit status, like
    diff: 0 no pair, 1 pairs found, 2 error.
    """
    try:
        _ready_remote([a, b], beam_args, "A or B")
    except click.UsageError as exc:
        raise Trouble(exc.message) from None
    for name in (a, b):
        cli_datasets.check_leakage_side(name)
    if cli_datasets.run_leakage(a, b, as_json, workers, progress):
        ctx.exit(1)


def _remote_dataset(output: str, beam_args, what: str = "OUTPUT") -> None:
    """Checks that the dataset OUTPUT is there (`existing_dataset`), after `_ready_remote`."""
    _ready_remote([output], beam_args, what)
    existing_dataset(output, what)


def _ready_remote(paths: list[str], beam_args, what: str) -> None:
    """For remote paths, installs Beam's FileSystems with the options after `--` (only then: a local
    run imports no Beam); Beam options with local paths only are a usage error."""
    from prep.core import storage
    from prep.core.convert_options import check_beam_args

    check_beam_args(beam_args)
    if any(storage.is_remote(p) for p in paths):
        from beam_jobs import beam_fs  # importing beam_jobs installs Beam's FileSystems in prep.core.storage

        beam_fs.configure(beam_args)
    elif beam_args:
        raise click.UsageError(f"Beam options ({beam_args[0]} ...) are for a remote {what} only")


@main.command()
@click.argument("dataset", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click.option(
    "--output",
    "-o",
    "path",
    metavar="FILE.html",
    callback=html_name,
    help="Where to write the page (default: DATASET/report.html).",
)
@click.option("--verify", "run_verify", is_flag=True, help="Also run `prep verify` and show its verdict on the page.")
@click.option(
    "--source",
    metavar="DIR",
    default=None,
    help="Where the rejected inputs are, for their thumbnails (default: the source the manifest records).",
)
@click.pass_context
def report(ctx, dataset, beam_args, path, run_verify, source):
    """Write one self-contained HTML page about the dataset in DATASET.

    Overview, classes per split with class weights, per-shard balance, sample
    pictures per class read from the shards, rejects with their reasons and
    thumbnails, warnings; with --verify, the verdict of `prep verify`. The page
    inlines everything it shows and makes no network request. Exit status: 0
    written, 1 an error (or, with --verify, problems found: the page is still
    written), 2 usage error. DATASET may be remote (gs://, s3://); Beam's file
    system options go after `--`, as for `prep convert`.
    """
    _remote_dataset(dataset, beam_args, "DATASET")
    if cli_datasets.write_report(dataset, path, verify=run_verify, source=source):
        ctx.exit(1)


def run() -> None:
    """The `prep` console script: `main`, then a quick exit.

    Freezing the heap before the interpreter exits spares it a last garbage
    collection of every object Beam and TensorFlow left (docs/design.md).
    atexit handlers still run, but a file left open in a
    reference cycle would no longer be flushed: every command closes its files
    (`with`) before it returns. Tests call `main` in process, where freezing
    would keep their garbage alive.
    """
    try:
        main(obj=CliHooks(owns_process=True))
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
