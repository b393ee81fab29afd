"""Text that people read: the tables and verdicts of `prep verify` and `prep inspect`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from prep.core import targets
from prep.core.manifest import Manifest
from prep.verify import Report


def human_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Lines of a table: first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    ]


def convert_summary(manifest: Manifest, seconds: float) -> str:
    """The end of `prep convert`: examples and shards per split, then the input accounting."""
    rows = [("split", "examples", "shards", "bytes")]
    for name, split in manifest.splits.items():
        rows.append((name, str(split.examples), str(split.num_shards), human_size(split.bytes)))
    lines = table(rows)
    inputs = manifest.inputs
    rate = inputs.found / seconds if seconds > 0 else 0.0
    lines.append(
        f"found {inputs.found}  written {inputs.written}  rejected {inputs.rejected}  "
        f"capped {inputs.capped}  converted {inputs.converted}"
    )
    if inputs.rejected:
        reasons = ", ".join(f"{k} {v}" for k, v in (inputs.rejected_by_reason or {}).items())
        lines.append(f"rejects by reason: {reasons} (see rejects.jsonl)")
    target = manifest.options.get("target", targets.NONE)
    if target in targets.TARGETS and target != targets.NONE:
        lines.append(
            f"target {target}: {targets.get(target).promise}, for {targets.get(target).reader} "
            f"(num_classes {len(manifest.labels)})"
        )
    warning = empty_classes_line(manifest.inputs.empty_classes or (), manifest.options.get("empty_classes"))
    if warning:
        lines.append("warning: " + warning)
    resumed = manifest.run.resumed
    if resumed:
        lines.append(
            f"resumed: reused {resumed.chunks_reused} of {resumed.chunks} prepared chunks and "
            f"{resumed.shards_reused} of {resumed.shards} shards"
        )
        in_flight = resumed.in_flight
        if in_flight is not None and in_flight.inputs:
            rejected = in_flight.rejected_by_reason
            verdict = (
                ("rejected " + ", ".join(f"{k} {v}" for k, v in rejected.items())) if rejected else "none rejected"
            )
            lines.append(
                f"resumed: {_plural(in_flight.inputs, 'input was', 'inputs were')} being read when the "
                f"run was killed; prepared again in the sandbox, not in-process: {verdict}"
            )
    lines.append(f"{seconds:.1f} s, {rate:.1f} images/s")
    return "\n".join(lines)


def empty_classes_line(empty, policy: str | None) -> str | None:
    """What became of the classes left with no example (`inputs.empty_classes`, under the manifest's
    `options.empty_classes`), or None if none was."""
    empty = list(empty or ())
    if not empty:
        return None
    shown = ", ".join(empty[:10]) + (f" and {len(empty) - 10} more" if len(empty) > 10 else "")
    what = f"{_plural(len(empty), 'class', 'classes')} with no example ({shown})"
    if policy == "drop":
        return f"dropped {what} from labels: the label ids of the classes after them moved down"
    return (
        f"{what}: every input rejected, or none listed; kept in labels with {'its' if len(empty) == 1 else 'their'}"
        " label id (--empty-classes drop removes them)"
    )


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


_TASK_PROMISES = {
    "detection": "every record has a decimal image/source_id and the keys TfExampleDecoder reads",
    "segmentation": "every record has the keys Model Garden's segmentation Decoder reads",
}


def verify_text(report: Report) -> str:
    """A table per split, the problems one per line, and the verdict as the last line."""
    lines = []
    if report.splits:
        rows = [("split", "shards", "records", "bytes", "problems")]
        for name, stats in report.splits.items():
            problems = sum(1 for p in report.problems if report.split_of(p) == name)
            rows.append((name, str(stats.shards), str(stats.examples), human_size(stats.bytes), str(problems)))
        lines += table(rows)
        rate = report.bytes_read / report.seconds / 1e6 if report.seconds > 0 else 0.0
        lines.append(f"read {human_size(report.bytes_read)} in {report.seconds:.2f} s ({rate:.0f} MB/s)")
    if report.problems:
        lines.append("problems:")
        lines += [f"  {p}" for p in report.problems]
    check = report.target
    if check is not None and check.records:
        reasons = "; ".join(
            f"{check.by_reason[reason]} {text}"
            for reason, text in targets.REASONS.items()
            if check.by_reason.get(reason)
        )
        lines.append(
            f"--target {check.name}: {_plural(check.records, 'record')} that "
            f"{targets.get(check.name).reader} cannot read ({reasons})"
        )
        lines.append(f"fix: {check.fix}")
    if report.problems:
        files = len({p.file for p in report.problems})
        lines.append(f"FAILED: {_plural(len(report.problems), 'problem')} in {_plural(files, 'file')}")
    else:
        records = sum(s.examples for s in report.splits.values())
        shards = sum(s.shards for s in report.splits.values())
        parts = (
            ["CRCs", "schema"]
            + {"detection": ["boxes", "class ids"], "multilabel": ["class ids"]}.get(report.task, [])
            + (["decoded image"] if report.deep else [])
        )
        if report.deep and report.task in ("detection", "segmentation"):
            parts.append("masks" if report.task == "detection" else "class map")
        checked = "every record's " + ", ".join(parts[:-1]) + " and " + parts[-1]
        lines.append(
            f"OK: {_plural(shards, 'shard')} and {_plural(records, 'record')} match the manifest "
            f"(sizes, sha256, counts, balance, {checked})"
        )
        if check is not None:
            wanted = targets.get(check.name)
            if report.task in _TASK_PROMISES:  # detection and segmentation decoders read PNG too: no JPEG rule
                lines.append(f"OK: --target {check.name}: {_TASK_PROMISES[report.task]}")
            else:
                lines.append(f"OK: --target {check.name}: {wanted.promise}, as {wanted.reader} need")
    return "\n".join(lines)


def _range(spread: dict) -> str:
    return str(spread["min"]) if spread["min"] == spread["max"] else f"{spread['min']}-{spread['max']}"


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def inspect_text(summary: dict) -> str:
    """The summary, the split table, then one class table per split."""
    totals, tool = summary["totals"], summary["tool"]
    made = f"written by {tool.get('name', '?')} {tool.get('version', '?')}"
    if summary["created"]:
        made += f" on {summary['created']}"
    if summary["runner"]:
        made += f" ({summary['runner']} runner)"
    options = "  ".join(f"{k}={v}" for k, v in sorted(summary["options"].items()) if v is not None)
    inputs = summary["inputs"]
    lines = [
        f"{summary['output']}: manifest version {summary['manifest_version']}, {made}",
        f"{_plural(totals['examples'], 'record')} in {_plural(totals['shards'], 'shard')} "
        f"({human_size(totals['bytes'])}), {_plural(totals['classes'], 'class', 'classes')}, "
        f"{_plural(totals['splits'], 'split')}",
        f"seed {summary['seed']}; options: {options}",
        f"inputs: found {inputs['found']}  written {inputs['written']}  rejected {summary['rejects']}  "
        f"capped {inputs['capped']}  converted {inputs.get('converted', 0)}",
    ]
    if inputs.get("rejected_by_reason"):
        lines.append(
            "rejects by reason: "
            + ", ".join(f"{k} {v}" for k, v in inputs["rejected_by_reason"].items())
            + " (see rejects.jsonl)"
        )
    empty = empty_classes_line(summary["inputs"].get("empty_classes"), summary["options"].get("empty_classes"))
    if empty:
        lines.append(empty[0].upper() + empty[1:])
    rows: list[tuple[str, ...]] = [("split", "records", "share", "shards", "bytes", "records/shard", "bytes/shard")]
    for name, split in summary["splits"].items():
        rows.append(
            (
                name,
                str(split["examples"]),
                _percent(split["share"]),
                str(split["num_shards"]),
                human_size(split["bytes"]),
                _range(split["per_shard"]),
                f"{human_size(split['shard_bytes']['min'])}-{human_size(split['shard_bytes']['max'])}",
            )
        )
    lines += ["", *table(rows)]
    task = summary.get("task")
    if task:  # the other tasks: a class's count is the images containing it
        lines.insert(
            1, f"task {task}: per class, the images containing it" + (" and its boxes" if task == "detection" else "")
        )
    for name, split in summary["splits"].items():
        head = ("class", "images" if task else "records", "share", "per shard")
        boxes = "max_boxes" in split
        rows = [head + (("boxes",) if boxes else ())]
        rows += [
            (label, str(c["count"]), _percent(c["share"]), _range(c["per_shard"]))
            + ((str(c.get("boxes", 0)),) if boxes else ())
            for label, c in split["classes"].items()
        ]
        title = f"{name}: {_plural(split['examples'], 'record')} in {_plural(split['num_shards'], 'shard')}"
        if boxes:
            title += f", {_plural(split['boxes'], 'box', 'boxes')}, at most {split['max_boxes']} in one image"
        lines += ["", title, *table(rows)]
    return "\n".join(lines)


def duplicates_text(dups: dict) -> list[str]:
    """inspect's lines for the head of duplicates.jsonl (`prep.inspect.duplicate_groups`)."""
    c = dups["counts"]
    lines = [
        "",
        f"duplicate groups: {c['groups']} ({c['exact_groups']} exact, {c['near_groups']} near) of "
        f"{c['images']} images; {c['conflict_groups']} with different labels, {c['cross_split_groups']} "
        f"across the source's splits; {c['rejected']} rejected (duplicates.jsonl lists them all)",
    ]
    for g in dups["groups"]:
        flags = "".join(
            f", {f}" for f, on in (("labels differ", g["conflict"]), ("across splits", g["cross_split"])) if on
        )
        lines.append(f"  {g['kind']} group of {g['size']}{flags}:")
        for m in g["members"]:
            where = f" [{m['split']}]" if m["split"] else ""
            note = f"  rejected {m['rejected']}" if m["rejected"] else ""
            lines.append(f"    {m['path']}{where} {m['label']}{note}")
        if g["size"] > len(g["members"]):
            lines.append(f"    ... and {g['size'] - len(g['members'])} more")
    if dups["more"]:
        lines.append(f"  ... and {_plural(dups['more'], 'more group')}")
    return lines


class ByteProgress:
    """`verify`'s progress callback: a tqdm bar over bytes, made on the first block read.

    Shown when `wanted` is True, or when it is None, stderr is a terminal and the
    dataset is over `LARGE` bytes (small ones finish before a bar means anything).
    """

    LARGE = 256 << 20

    def __init__(self, wanted: bool | None):
        self._wanted = wanted
        self._bar = None
        self._started = False

    def __call__(self, n: int, total: int) -> None:
        if not self._started:
            self._started = True
            show = self._wanted if self._wanted is not None else sys.stderr.isatty() and total >= self.LARGE
            if show:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="B", unit_scale=True, desc="verify", file=sys.stderr, leave=False)
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
