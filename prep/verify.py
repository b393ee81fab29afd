"""`prep verify`: is a dataset folder exactly what its manifest promises? No click, no TensorFlow.

An I/O edge, not core: it walks a local OUTPUT and reads every shard; the decisions it
applies (the manifest's shape and self-consistency, the balance rule, shard names) are
`prep.core`'s.

Checks, in order (docs/verify.md lists them with their messages):

1. The manifest reads, is ours and of a known version, and has the shape of
   docs/manifest.md; otherwise that is the only problem reported.
2. The manifest agrees with itself: shard names, indexes and counts, per-split
   sums, `labels` against `class_counts`, the input accounting.
3. Every shard it names is a file in OUTPUT; no other shard (of any format) or record
   index) is there.
4. Each shard, read once (`prep.shard_checks`): size and sha256 as recorded, every
   record's framing and CRCs, every record parses with our schema and its label
   and class text agree with `labels`; with `deep`, every image decodes to its
   stored format, height, width and channels.
5. The records counted per shard and per class match the manifest (`prep.manifest_agreement`).
6. Balance, on what the shards hold: each shard of a split holds ⌊n/N⌋ or ⌈n/N⌉
   records, and so does each class (which is the same as "differs by at most
   one between any two shards").
7. Record indexes and tfds metadata, when present (`prep.sidecars`).
8. With a target (`--target`, else the one the manifest records), every record
   that target's default readers would fail on (`prep.core.targets`), counted, with
   the command that converts the dataset for it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import time
import warnings
from collections.abc import Callable

from prep import manifest_agreement, sidecars, task_checks
from prep.core import formats, storage, targets
from prep.core.errors import ManifestError
from prep.core.manifest import FILENAME, REJECTS, Manifest
from prep.core.manifest_checks import contradictions, strata_unbalanced, sum_counts, unbalanced
from prep.core.naming import INDEX_SUFFIX
from prep.shard_checks import DEFAULT_MAX_PIXELS, ScanOptions, ShardScan, scan_shard

JSON_VERSION = 1


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a dataset: the file (relative to OUTPUT), the record index if any, what."""

    file: str
    record: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.record is None else f"{self.file} record {self.record}"
        return f"{where}: {self.message}"

    def to_json(self) -> dict:
        return {"file": self.file, "record": self.record, "message": self.message}


@dataclasses.dataclass(frozen=True)
class SplitStats:
    """What was read of one split: shard files, records, bytes, records per class."""

    shards: int
    examples: int
    bytes: int
    class_counts: dict[str, int] | None  # None: not read (segmentation's class maps are decoded with --deep only)


@dataclasses.dataclass(frozen=True)
class TargetCheck:
    """What `verify` found for a target (`prep.core.targets`): records its default readers would fail on."""

    name: str
    records: int  # records that fail for any reason
    by_reason: dict[str, int]  # records per prep.core.targets reason
    fix: str  # the prep convert command that rewrites the dataset for the target

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "records": self.records,
            "by_reason": self.by_reason,
            "fix": self.fix if self.records else None,
        }


@dataclasses.dataclass(frozen=True)
class Report:
    """The outcome of `verify`: problems (empty when the dataset is intact) and what was read."""

    output: str
    deep: bool
    problems: tuple[Problem, ...]
    splits: dict[str, SplitStats]
    bytes_read: int
    seconds: float
    target: TargetCheck | None = None  # None: no target checked
    task: str = "classification"  # the manifest's task

    @property
    def ok(self) -> bool:
        return not self.problems

    def split_of(self, problem: Problem) -> str | None:
        return sidecars.split_of(problem.file)

    def to_json(self) -> dict:
        """The `--json` document; its structure is documented in docs/verify.md."""
        return {
            "version": JSON_VERSION,
            "output": self.output,
            "verdict": "ok" if self.ok else "problems",
            "deep": self.deep,
            "problems": [p.to_json() for p in self.problems],
            "splits": {
                name: {
                    **dataclasses.asdict(stats),
                    "problems": sum(1 for p in self.problems if self.split_of(p) == name),
                }
                for name, stats in self.splits.items()
            },
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "target": None if self.target is None else self.target.to_json(),
        } | ({} if self.task == "classification" else {"task": self.task})  # classification's JSON as before


Progress = Callable[[int, int], None]  # (bytes just read, total bytes to read)


def check_manifest(manifest: Manifest) -> list[Problem]:
    """Where a well-shaped manifest contradicts itself (`manifest_checks.contradictions`, and the task
    fields: `task_checks.manifest_issues`)."""
    messages = contradictions(manifest) + task_checks.manifest_issues(manifest)
    return [Problem(FILENAME, None, message) for message in dict.fromkeys(messages)]  # once each, in order


def balance_problems(split: str, files: list[str], counts: list[dict[str, int]]) -> list[Problem]:
    """Shards of one split that break the balance rule (`manifest_checks.unbalanced`)."""
    return [Problem(file, None, message) for file, message in unbalanced(split, files, counts)]


def manifest_balance_problems(manifest: Manifest, split: str) -> list[Problem]:
    """The balance rule on a split's counts as the manifest records them, for any task: per class
    (single-label), per stratum (multi-label, detection), on records (segmentation). For `prep report`."""
    shards = manifest.splits[split].shards
    if manifest.task == "classification":
        return balance_problems(split, [s.file for s in shards], [s.held for s in shards])
    files = {s.file for s in shards}
    return [Problem(f, None, m) for f, m in strata_unbalanced(manifest) if f in files]


def verify(
    output: str,
    *,
    deep: bool = False,
    workers: int | None = None,
    progress: Progress | None = None,
    target: str | None = None,
) -> Report:
    """Checks the dataset in `output` (a local folder or a remote path) against its manifest.

    Args:
        output: the folder `prep convert` wrote.
        deep: also decode every image and check its stored format and size.
        workers: threads decoding images with `deep` (default: all cores).
        progress: called as `progress(bytes_read, total_bytes)` after each block read.
        target: also report every record this target's default readers would fail on
            (`prep.core.targets`); None: the target the manifest records, if any.

    Returns:
        A `Report`; `report.ok` when nothing is wrong.

    Raises:
        OSError: a file cannot be read (other than a missing shard, which is a problem).
    """
    started = time.perf_counter()
    file = FILENAME  # the file a ManifestError is about
    try:
        manifest = Manifest.load(output)
        if manifest.shard_counts is not None:  # version 2: every shard's counts, from the sidecar it names
            file = manifest.shard_counts.file
            manifest = manifest.read_shard_counts(output)
    except ManifestError as exc:
        message = str(exc).removeprefix(storage.join(output, file)).removeprefix(" ").removeprefix(": ")
        return Report(output, deep, (Problem(file, None, message),), {}, 0, time.perf_counter() - started)
    problems = check_manifest(manifest)
    recorded = manifest.options.get("target", targets.NONE)
    if target is None and recorded not in targets.TARGETS:
        problems.append(
            Problem(
                FILENAME,
                None,
                f"options.target is {recorded!r}, not a target this version knows ({', '.join(targets.TARGETS)})",
            )
        )
    target = target or (recorded if recorded in targets.TARGETS else targets.NONE)
    problems += [Problem(*issue) for issue in sidecars.check_index_names(manifest)]
    problems += [Problem(*issue) for issue in manifest_agreement.check_rejects(output, manifest)]
    problems += [Problem(*issue) for issue in sidecars.check_tfds(output, manifest)]
    entries = {shard.file: (split.name, shard) for split, shard in manifest.shards()}
    present = {}
    for file in entries:
        path = storage.join(output, file)
        if os.path.basename(file) != file or not storage.is_file(path):
            problems.append(Problem(file, None, "missing: the manifest names it but OUTPUT has no such file"))
        else:
            present[file] = path
    names = storage.list_names(output)
    for name in names:
        if name.endswith(formats.SUFFIXES) and name not in entries:
            problems.append(Problem(name, None, "unexpected shard file: the manifest does not name it"))
    problems += [Problem(*issue) for issue in sidecars.unexpected_indexes(names, manifest)]

    total = sum(storage.size(path) or 0 for path in present.values())
    on_block = (lambda n: progress(n, total)) if progress else None
    scans: dict[str, ShardScan] = {}
    labels = manifest.labels
    max_pixels = manifest.options.get("max_pixels")
    if not isinstance(max_pixels, int) or max_pixels < 1:
        max_pixels = DEFAULT_MAX_PIXELS
    scanning = ScanOptions(
        tuple(labels), manifest.task, deep, max_pixels, target, manifest.ignore_value, manifest.file_format
    )
    pool = concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1) if deep else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns about odd EXIF; decode errors are what we report
            for file, path in present.items():
                scans[file] = scan_shard(path, file, scanning, pool, on_block)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    for file, scan in scans.items():
        issues = manifest_agreement.compare_shard(file, entries[file][1], scan, task_checks.exact_strata(manifest))
        problems += [Problem(*issue) for issue in issues]
    for file, (_, entry) in entries.items():
        scanned = scans.get(file)
        sizes = scanned.record_sizes if scanned is not None and scanned.complete else None
        problems += [Problem(*issue) for issue in sidecars.check_index(output, entry, sizes)]

    splits = {}
    for split, info in manifest.splits.items():
        files = [s.file for s in info.shards]
        read = [scans[f] for f in files if f in scans]
        counts = sum_counts(s.class_counts for s in read)
        splits[split] = SplitStats(
            shards=len(read),
            examples=sum(s.records for s in read),
            bytes=sum(s.size for s in read),
            class_counts=None
            if any(s.tally and not s.tally.classes_read for s in read)
            else {**{name: 0 for name in labels}, **counts},
        )
        if files and len(read) == len(files) and all(s.complete for s in read):
            if manifest.task == "classification":
                problems += balance_problems(split, files, [s.class_counts for s in read])
            else:  # on records and the manifest's stratum_counts, which compare_shard ties to the records
                problems += [Problem(f, None, m) for f, m in strata_unbalanced(manifest) if f in files]
                if manifest.task == "detection":
                    problems += [Problem(*i) for i in manifest_agreement.max_boxes_issues(split, info, read)]
    problems.sort(key=_problem_order(manifest))
    check = None
    if target != targets.NONE:
        check = TargetCheck(
            target,
            sum(s.target_records for s in scans.values()),
            sum_counts(s.target_failures for s in scans.values()),
            _with_task_flags(targets.fix_command(manifest, output, target), manifest),
        )
    return Report(
        output,
        deep,
        tuple(problems),
        splits,
        sum(s.size for s in scans.values()),
        time.perf_counter() - started,
        check,
        manifest.task,
    )


def _with_task_flags(command: str, manifest: Manifest) -> str:
    """The fix command with the options that make a detection or segmentation dataset (the manifest keeps
    --annotations and --masks by base name, as --labels), which `targets.fix_command` does not rebuild."""
    import shlex

    options, words = manifest.options, []
    if manifest.task == "detection" and options.get("annotations"):
        given = options["annotations"]  # one base name, or ["SPLIT=name", ...]
        for value in given if isinstance(given, list) else [given]:
            words += ["--annotations", value]
        defaults = {"annotation_format": None, "bad_boxes": "clip", "crowd": "keep", "unannotated": "skip"}
        for key, default in defaults.items():
            if options.get(key) not in (None, default):
                words += ["--" + key.replace("_", "-"), str(options[key])]
        if options.get("skip_empty"):
            words.append("--skip-empty")
    elif manifest.task == "segmentation" and options.get("masks"):
        words += ["--masks", options["masks"]]
    if not words or "--annotations" in command or "--masks" in command:
        return command
    head, sep, tail = command.partition(" --target ")
    return f"{head} {' '.join(map(shlex.quote, words))}{sep}{tail}"


def _problem_order(manifest: Manifest):
    """Manifest problems first, then by file in manifest order (indexes after their shards), then record index."""
    rank = {FILENAME: (0, 0), REJECTS: (0, 1)}
    for _, shard in manifest.shards():
        rank.setdefault(shard.file, (1, len(rank)))
        rank.setdefault(shard.file + INDEX_SUFFIX, (1, len(rank)))  # a shard's index right after it
    return lambda p: (rank.get(p.file, (2, 0)), p.file, -1 if p.record is None else p.record)


def dumps(report: Report) -> str:
    """The `--json` output."""
    return json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
