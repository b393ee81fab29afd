"""The `prep` command line. Thin: it parses options, calls the core, and turns
every `PrepError` into a one-line `Error: ...` with a non-zero exit."""

from __future__ import annotations

import logging
import os
import re
import sys
import time

import click

from prep import __version__
from prep.errors import OptionsError, PrepError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "KIB": 1024, "M": 1000**2, "MB": 1000**2, "MIB": 1024**2,
          "G": 1000**3, "GB": 1000**3, "GIB": 1024**3, "T": 1000**4, "TB": 1000**4, "TIB": 1024**4}


def parse_size(text: str) -> int:
    """Parses '128MiB', '64MB', '1.5GiB' or a byte count."""
    match = _SIZE_RE.match(text)
    if not match:
        raise OptionsError(f"--shard-size {text!r} is not a size such as 128MiB or 64MB")
    return int(float(match[1]) * _UNITS[(match[2] or "").upper()])


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


@main.command(context_settings={"show_default": True})
@click.argument("source", type=click.Path(file_okay=False, path_type=str))
@click.argument("output", type=str)
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- BEAM_OPTIONS...]")
@click.option("--labels", type=click.Path(dir_okay=False, path_type=str),
              help="CSV, TSV or JSONL label file with path,label[,split]; paths relative to SOURCE.")
@click.option("--classes", "classes_file", type=click.Path(dir_okay=False, path_type=str),
              help="File with one class name per line: fixes label ids in that order.")
@click.option("--layout", type=click.Choice(["auto", "classes", "splits"]), default="auto",
              help="SOURCE/<class>/... or SOURCE/<split>/<class>/...; auto picks splits when every "
                   "top folder is a split name (train, validation, val, test, eval, dev).")
@click.option("--split", "split_spec", metavar="NAME=FRAC,...",
              help="Stratified split when SOURCE names none, e.g. train=0.8,validation=0.1,test=0.1.")
@click.option("--num-shards", type=int, help="Shards per split (default: derived from --shard-size).")
@click.option("--shard-size", default="128MiB", help="Target bytes per shard when --num-shards is not given.")
@click.option("--max-per-class", type=int, help="Keep at most N examples of each class (deterministic).")
@click.option("--seed", type=int, default=0, help="Seed for split assignment and record order.")
@click.option("--resize", type=int, help="Downscale so the shorter side is N pixels.")
@click.option("--max-side", type=int, help="Downscale so the longer side is at most N pixels.")
@click.option("--image-format", type=click.Choice(["keep", "jpeg", "png"]), default="keep",
              help="Stored format; keep: JPEG and PNG keep their format, others become PNG.")
@click.option("--quality", type=int, default=95, help="JPEG quality when an image is re-encoded.")
@click.option("--max-pixels", type=int, default=89_478_485, help="Reject images with more pixels than this.")
@click.option("--workers", type=int, default=os.cpu_count() or 1, show_default="all cores",
              help="Threads that read and convert images in each pipeline worker.")
@click.option("--runner", default="local",
              help="Beam runner: local (embedded, in-process), DirectRunner, PortableRunner, DataflowRunner, ...")
@click.option("--overwrite", is_flag=True, help="Replace a dataset prep wrote earlier in OUTPUT.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
def convert(source, output, beam_args, labels, classes_file, layout, split_spec, num_shards, shard_size,
            max_per_class, seed, resize, max_side, image_format, quality, max_pixels, workers, runner,
            overwrite, progress):
    """Convert SOURCE (class folders or a --labels file) into balanced TFRecord shards in OUTPUT.

    Pipeline options for Beam go after `--`, e.g.
    `prep convert SRC gs://bucket/out --runner DataflowRunner -- --project=p --region=r`.
    """
    from prep import sources
    from prep.config import ConvertConfig
    from prep.images import ImageOptions
    from prep.plan import PlanOptions, parse_split_fractions

    started = time.time()
    classes = sources.read_class_file(classes_file) if classes_file else None
    config = ConvertConfig(
        source=source, output=output, labels=labels, classes=classes, layout=layout,
        plan=PlanOptions(seed=seed, num_shards=num_shards, shard_size=parse_size(shard_size),
                         split_fractions=parse_split_fractions(split_spec) if split_spec else None,
                         max_per_class=max_per_class),
        image=ImageOptions(resize=resize, max_side=max_side, image_format=image_format, quality=quality,
                           max_pixels=max_pixels),
        workers=workers, overwrite=overwrite)
    listing = (sources.list_label_file(source, labels, classes) if labels
               else sources.list_folders(source, layout, classes))
    show = sys.stderr.isatty() if progress is None else progress
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR  # Beam warns about optional GCP clients on import
    try:
        from beam_jobs.pipeline import run_conversion
    finally:
        root.setLevel(level)

    manifest = run_conversion(config, listing, runner=runner, beam_args=list(beam_args), progress=show)
    if manifest:
        click.echo(summary_table(manifest, time.time() - started))
    else:
        click.echo(f"wrote {output}")


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
