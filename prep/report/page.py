"""Assembles the report: reads the dataset (`dataset`), computes what to say (`content`),
draws (`charts`, `thumbs`) and renders `template.html` with Jinja2.

Jinja2 rather than string formatting: every class name, path and reject detail comes
from user input (file names can hold `<`, quotes or `</script>`), and the template
escapes each of them by default. Styles and the small pagination script are inlined
from `report.css` and `report.js`: the page is one file that makes no request.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import time
from importlib import resources

import prep.report.charts as charts
import prep.report.content as content
import prep.report.thumbs as thumbs
from prep import __version__
from prep.core import storage
from prep.report.dataset import load_manifest, read_rejects, read_samples

NO_THUMBNAIL = {"bad_row", "missing", "broken_symlink", "symlink_loop", "unreadable", "empty", "duplicate"}


def _human_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def _source_folder(manifest, source: str | None) -> tuple[str | None, str | None]:
    """The folder (or remote prefix) rejected inputs are read from, or None and why not."""
    where = source or manifest.run.source
    if not where:
        return None, "the manifest records no source (run.source): rejected inputs are listed without thumbnails"
    if storage.is_remote(where):
        return where, None  # no folder to ask about: each thumbnail's read says whether it is there
    if not os.path.isdir(where):
        return None, (
            f"source {where} is not a folder here: rejected inputs are listed without thumbnails "
            "(prep report --source DIR points at it)"
        )
    return where, None


def _rejects(output: str, manifest, limits: content.Limits, source: str | None):
    rejects = read_rejects(output, limits.rejects_listed)
    folder, note = _source_folder(manifest, source) if rejects.counts else (None, None)
    reasons = []
    for reason, count in sorted(rejects.counts.items(), key=lambda kv: (-kv[1], kv[0])):
        items = []
        for i, reject in enumerate(rejects.listed.get(reason, [])):
            tried = bool(folder) and reason not in NO_THUMBNAIL and i < limits.reject_thumbnails
            uri = None
            if folder and tried:
                uri = thumbs.file_uri(thumbs.input_path(folder, reject.path, reject.raw_path), limits.tile)
            items.append({"path": reject.path, "detail": reject.detail, "thumbnail": uri, "tried": tried})
        reasons.append({"reason": reason, "count": count, "items": items})
    return reasons, rejects.note, note


def _grid(output: str, manifest, limits: content.Limits):
    wanted = content.grid_plan(manifest, limits)
    samples = read_samples(manifest, output, wanted, limits.max_records)
    rows = []
    for label, want in wanted.items():
        tiles = []
        for record in samples.picked.get(label, []):
            tiles.append(
                {
                    "uri": thumbs.data_uri(record.encoded, limits.tile),
                    "title": f"{record.filename} ({record.width}x{record.height} {record.format})",
                }
            )
        rows.append({"id": label, "name": manifest.labels[label], "tiles": tiles, "wanted": want})
    return rows, len(manifest.labels) - len(wanted), samples


def _heat_maps(manifest, limits: content.Limits):
    maps = []
    for split in manifest.splits:
        found = content.split_heat_map(manifest, split, limits.heat_rows, limits.heat_columns)
        if found is None:
            continue
        heat = found.heat
        title = f"{split}: {found.classes} classes x {found.shards} shards"
        if heat.binned:
            title += f", in {heat.cells.shape[0]} x {heat.cells.shape[1]} cells"
        problems = content.balance_verdict(manifest, split)
        maps.append(
            {
                "split": split,
                "binned": heat.binned,
                "problem_count": len(problems),
                "problems": problems[: limits.problems_listed],
                "min": found.low,
                "max": found.high,
                "svg": charts.heat_map(heat, list(manifest.labels), title, salt=f"heat-{split}"),
            }
        )
    return maps


def _verify(output: str, limits: content.Limits):
    from prep.verify import verify

    report = verify(output)
    return {
        "ok": report.ok,
        "problems": [str(p) for p in report.problems[: limits.problems_listed]],
        "problem_count": len(report.problems),
        "seconds": report.seconds,
        "bytes_read": _human_size(report.bytes_read),
        "splits": [
            {"name": n, "shards": s.shards, "examples": s.examples, "bytes": _human_size(s.bytes)}
            for n, s in report.splits.items()
        ],
        "target": None if report.target is None else dataclasses.asdict(report.target),
    }


@dataclasses.dataclass(frozen=True)
class Page:
    """A rendered report: its HTML, and the number of problems `prep verify` found (None: not run)."""

    html: str
    verify_problems: int | None


_LIMITS = content.Limits()  # frozen: one default instance serves every call


def build(output: str, *, verify: bool = False, source: str | None = None, limits: content.Limits = _LIMITS) -> Page:
    """The report page of the dataset in OUTPUT.

    Args:
        output: a local dataset folder (with its manifest.json).
        verify: also run `prep verify` and show its verdict.
        source: where the rejected inputs are (default: the manifest's run.source).
        limits: how much of a large dataset to show.

    Raises:
        ManifestError: the manifest is missing or not one this tool reads.
    """
    import jinja2

    started = time.perf_counter()
    manifest = load_manifest(output)
    rows = content.class_rows(manifest)
    bars = content.chart_bars(manifest, limits.chart_classes)
    title = "Records per class" + (
        f" ({bars.others_count} classes in the middle shown as their mean)" if bars.others is not None else ""
    )
    rejects, rejects_note, source_note = _rejects(output, manifest, limits, source)
    grid, not_shown, samples = _grid(output, manifest, limits)
    page = {
        "output": output,
        "name": os.path.basename(os.path.normpath(output)) or output,
        "manifest": manifest,
        "human_size": _human_size,
        "bytes": sum(s.bytes for s in manifest.splits.values()),
        "shards": sum(s.num_shards for s in manifest.splits.values()),
        "weight_split": content.weight_split(manifest),
        "classes": rows,
        "class_chart": charts.class_chart(bars, title) if manifest.splits else None,
        "heat_maps": _heat_maps(manifest, limits),
        "grid": grid,
        "grid_not_shown": not_shown,
        "grid_notes": samples.notes,
        "rejects": rejects,
        "source_note": source_note,
        "warnings": content.warnings(manifest, rejects_note),
        "verify": _verify(output, limits) if verify else None,
        "limits": limits,
        "version": __version__,
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    files = resources.files("prep.report")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(files.joinpath("template.html").read_text("utf-8"))
    page["css"] = files.joinpath("report.css").read_text("utf-8")
    page["js"] = files.joinpath("report.js").read_text("utf-8")
    page["build_seconds"] = time.perf_counter() - started
    return Page(template.render(page), None if page["verify"] is None else page["verify"]["problem_count"])


@dataclasses.dataclass(frozen=True)
class Written:
    """What `write` wrote: the file's size in bytes, and verify's problem count (None: not run)."""

    bytes: int
    verify_problems: int | None


def write(output: str, path: str, **kwargs) -> Written:
    """Writes the report to `path` atomically (a temporary name, then renamed)."""
    page = build(output, **kwargs)
    data = page.html.encode("utf-8")
    storage.write_atomic(path, data)
    return Written(len(data), page.verify_problems)
