"""`prep verify`: is a dataset folder exactly what its manifest promises? Pure: no click, no TensorFlow.

Checks, in order (docs/verify.md lists them with their messages):

1. The manifest reads, is ours and of a known version, and has the shape of
   docs/manifest.md; otherwise that is the only problem reported.
2. The manifest agrees with itself: shard names, indexes and counts, per-split
   sums, `labels` against `class_counts`, the input accounting.
3. Every shard it names is a file in OUTPUT; no other ``*.tfrecord`` (or record
   index) is there.
4. Each shard, read once (`prep.scan`): size and sha256 as recorded, every
   record's framing and CRCs, every record parses with our schema and its label
   and class text agree with `labels`; with `deep`, every image decodes to its
   stored format, height, width and channels.
5. The records counted per shard and per class match the manifest.
6. Balance, on what the shards hold: each shard of a split holds ⌊n/N⌋ or ⌈n/N⌉
   records, and so does each class (which is the same as "differs by at most
   one between any two shards").
7. Record indexes and tfds metadata, when present (`prep.sidecars`).
8. With a target (`--target`, else the one the manifest records), every record
   that target's default readers would fail on (`prep.targets`), counted, with
   the command that converts the dataset for it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import os
import time
import warnings
from typing import Callable

from prep import manifest as manifest_lib
from prep import sidecars, targets
from prep.errors import ManifestError
from prep.manifest_shape import load_checked
from prep.naming import INDEX_SUFFIX, SUFFIX, ShardName
from prep.scan import DEFAULT_MAX_PIXELS, ShardScan, scan_shard

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
    class_counts: dict[str, int]


@dataclasses.dataclass(frozen=True)
class TargetCheck:
    """What `verify` found for a target (`prep.targets`): records its default readers would fail on."""

    name: str
    records: int  # records that fail for any reason
    by_reason: dict[str, int]  # records per prep.targets reason
    fix: str  # the prep convert command that rewrites the dataset for the target

    def to_json(self) -> dict:
        return {"name": self.name, "records": self.records, "by_reason": self.by_reason,
                "fix": self.fix if self.records else None}


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
            "splits": {name: {**dataclasses.asdict(stats),
                              "problems": sum(1 for p in self.problems if self.split_of(p) == name)}
                       for name, stats in self.splits.items()},
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "target": None if self.target is None else self.target.to_json(),
        }


Progress = Callable[[int, int], None]  # (bytes just read, total bytes to read)


def check_manifest(manifest: dict) -> list[Problem]:
    """Where a well-shaped manifest contradicts itself (names, indexes, sums, accounting)."""
    labels = manifest["labels"]
    messages = []
    if len(set(labels)) != len(labels):
        messages.append("labels repeat a class name")
    for split, info in manifest["splits"].items():
        shards = info["shards"]
        if info["num_shards"] != len(shards):
            messages.append(f"split {split}: num_shards is {info['num_shards']} but {len(shards)} shards are listed")
        for i, shard in enumerate(shards):
            name = ShardName(split, i, len(shards)).filename
            if (shard["file"], shard["index"]) != (name, i):
                messages.append(f"split {split}: shard {i} of {len(shards)} must be {name} with index {i}, "
                                f"not {shard['file']} with index {shard['index']}")
            in_classes = sum(shard["class_counts"].values())
            if in_classes != shard["examples"]:
                messages.append(f"{shard['file']}: examples is {shard['examples']} but its class_counts sum "
                                f"to {in_classes}")
        for key in ("examples", "bytes"):
            summed = sum(s[key] for s in shards)
            if info[key] != summed:
                messages.append(f"split {split}: {key} is {info[key]} but its shards sum to {summed}")
        summed = _sum_counts(s["class_counts"] for s in shards)
        for name in sorted(set(summed) | set(info["class_counts"])):
            claimed = info["class_counts"].get(name, 0)
            if claimed != summed.get(name, 0):
                messages.append(f"split {split}: class_counts[{name!r}] is {claimed} but its shards sum to "
                                f"{summed.get(name, 0)}")
        unknown = sorted(set(info["class_counts"]) - set(labels))
        if unknown:
            messages.append(f"split {split}: class_counts name classes not in labels: {', '.join(map(repr, unknown))}")
    inputs = manifest["inputs"]
    total = sum(info["examples"] for info in manifest["splits"].values())
    if inputs["written"] != total:
        messages.append(f"inputs.written is {inputs['written']} but the splits hold {total}")
    if inputs["found"] != inputs["written"] + inputs["rejected"] + inputs["capped"]:
        messages.append("inputs.found is not written + rejected + capped")
    messages += _empty_class_messages(manifest)
    return [Problem(manifest_lib.FILENAME, None, message) for message in messages]


def _empty_class_messages(manifest: dict) -> list[str]:
    """Where `inputs.empty_classes` contradicts the rest: a class named there must hold no
    record, and be in `labels` unless `--empty-classes drop` took it out."""
    messages = []
    dropped = manifest["options"].get("empty_classes") == "drop"
    labels = set(manifest["labels"])
    for name in manifest["inputs"].get("empty_classes", []):
        held = sum(info["class_counts"].get(name, 0) for info in manifest["splits"].values())
        if held:
            messages.append(f"inputs.empty_classes names {name!r}, which holds {held} record(s)")
        if dropped and name in labels:
            messages.append(f"inputs.empty_classes names {name!r} as dropped (--empty-classes drop), "
                            "but it is in labels")
        elif not dropped and name not in labels:
            messages.append(f"inputs.empty_classes names {name!r}, which is not in labels")
    return messages


def balance_problems(split: str, files: list[str], counts: list[dict[str, int]]) -> list[Problem]:
    """Shards of one split that break the balance rule, given what each holds per class.

    Every shard must hold ⌊n/N⌋ or ⌈n/N⌉ of the split's n records, and the same for
    each class's records; for counts summing to n this is exactly "any two shards
    differ by at most one".
    """
    problems = []

    def check(values: list[int], what: str, of: str):
        n, shards = sum(values), len(values)
        low, high = n // shards, -(-n // shards)
        allowed = f"{low}" if low == high else f"{low} or {high}"
        for file, value in zip(files, values):
            if value not in (low, high):
                problems.append(Problem(file, None, f"unbalanced: holds {value} {what}; split {split} has {n} {of} "
                                                    f"in {shards} shards, so each must hold {allowed}"))

    check([sum(c.values()) for c in counts], "records", "records")
    for name in sorted(set().union(*counts)):
        check([c.get(name, 0) for c in counts], f"of class {name!r}", f"of class {name!r}")
    return problems


def _sum_counts(counts) -> dict[str, int]:
    total: collections.Counter[str] = collections.Counter()
    for c in counts:
        total.update(c)
    return dict(total)


def _compare_shard(file: str, entry: dict, scan: ShardScan) -> list[Problem]:
    problems = [Problem(file, index, message) for index, message in scan.issues]
    if scan.size != entry["bytes"]:
        problems.append(Problem(file, None, f"size is {scan.size} bytes, the manifest says {entry['bytes']}"))
    if scan.sha256 != entry["sha256"]:
        problems.append(Problem(file, None, f"sha256 is {scan.sha256}, the manifest says {entry['sha256']}"))
    if not scan.complete:
        return problems  # the counts of a shard read only in part say nothing more
    if scan.records != entry["examples"]:
        problems.append(Problem(file, None, f"holds {scan.records} records, the manifest says {entry['examples']}"))
    names = sorted(set(scan.class_counts) | set(entry["class_counts"]))
    diffs = [f"{name} {scan.class_counts.get(name, 0)} (manifest {entry['class_counts'].get(name, 0)})"
             for name in names if scan.class_counts.get(name, 0) != entry["class_counts"].get(name, 0)]
    if diffs:
        problems.append(Problem(file, None, f"records per class differ from the manifest: {', '.join(diffs)}"))
    return problems


def _check_rejects(output: str, manifest: dict) -> list[Problem]:
    path = os.path.join(output, manifest_lib.REJECTS)
    if not os.path.isfile(path):
        return []  # optional: it explains the accounting, the shards do not depend on it
    with open(path, "rb") as f:
        lines = sum(1 for line in f if line.strip())
    expected = manifest["inputs"].get("rejected")
    if lines != expected:
        return [Problem(manifest_lib.REJECTS, None, f"has {lines} lines, the manifest counts {expected} rejects")]
    return []


def verify(output: str, *, deep: bool = False, workers: int | None = None,
           progress: Progress | None = None, target: str | None = None) -> Report:
    """Checks the dataset in the local folder `output` against its manifest.

    Args:
        output: the folder `prep convert` wrote.
        deep: also decode every image and check its stored format and size.
        workers: threads decoding images with `deep` (default: all cores).
        progress: called as `progress(bytes_read, total_bytes)` after each block read.
        target: also report every record this target's default readers would fail on
            (`prep.targets`); None: the target the manifest records, if any.

    Returns:
        A `Report`; `report.ok` when nothing is wrong.

    Raises:
        OSError: a file cannot be read (other than a missing shard, which is a problem).
    """
    started = time.perf_counter()
    try:
        manifest = load_checked(output)
    except ManifestError as exc:
        path = os.path.join(output, manifest_lib.FILENAME)
        message = str(exc).removeprefix(path).removeprefix(" ").removeprefix(": ")
        return Report(output, deep, (Problem(manifest_lib.FILENAME, None, message),), {}, 0,
                      time.perf_counter() - started)
    problems = check_manifest(manifest)
    recorded = manifest["options"].get("target", targets.NONE)
    if target is None and recorded not in targets.TARGETS:
        problems.append(Problem(manifest_lib.FILENAME, None, f"options.target is {recorded!r}, not a target this "
                                                             f"version knows ({', '.join(targets.TARGETS)})"))
    target = target or (recorded if recorded in targets.TARGETS else targets.NONE)
    problems += [Problem(*issue) for issue in sidecars.check_index_names(manifest)]
    problems += _check_rejects(output, manifest)
    problems += [Problem(*issue) for issue in sidecars.check_tfds(output, manifest)]
    entries = {shard["file"]: (split, shard) for split, info in manifest["splits"].items() for shard in info["shards"]}
    present = {}
    for file in entries:
        path = os.path.join(output, file)
        if os.path.basename(file) != file or not os.path.isfile(path):
            problems.append(Problem(file, None, "missing: the manifest names it but OUTPUT has no such file"))
        else:
            present[file] = path
    names = sorted(os.listdir(output))
    for name in names:
        if name.endswith(SUFFIX) and name not in entries:
            problems.append(Problem(name, None, "unexpected shard file: the manifest does not name it"))
    problems += [Problem(*issue) for issue in sidecars.unexpected_indexes(names, manifest)]

    total = sum(os.path.getsize(path) for path in present.values())
    on_block = (lambda n: progress(n, total)) if progress else None
    scans: dict[str, ShardScan] = {}
    labels = manifest["labels"]
    max_pixels = manifest["options"].get("max_pixels")
    if not isinstance(max_pixels, int) or max_pixels < 1:
        max_pixels = DEFAULT_MAX_PIXELS
    pool = concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1) if deep else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns about odd EXIF; decode errors are what we report
            for file, path in present.items():
                scans[file] = scan_shard(path, labels, name=file, deep=deep, max_pixels=max_pixels, pool=pool,
                                         on_block=on_block, target=target)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    for file, scan in scans.items():
        problems += _compare_shard(file, entries[file][1], scan)
    for file, (_, entry) in entries.items():
        scan = scans.get(file)
        sizes = scan.record_sizes if scan is not None and scan.complete else None
        problems += [Problem(*issue) for issue in sidecars.check_index(output, entry, sizes)]

    splits = {}
    for split, info in manifest["splits"].items():
        files = [s["file"] for s in info["shards"]]
        read = [scans[f] for f in files if f in scans]
        counts = _sum_counts(s.class_counts for s in read)
        splits[split] = SplitStats(shards=len(read), examples=sum(s.records for s in read),
                                   bytes=sum(s.size for s in read),
                                   class_counts={**{name: 0 for name in labels}, **counts})
        if files and len(read) == len(files) and all(s.complete for s in read):
            problems += balance_problems(split, files, [s.class_counts for s in read])
    problems.sort(key=_problem_order(manifest))
    check = None
    if target != targets.NONE:
        check = TargetCheck(target, sum(s.target_records for s in scans.values()),
                            _sum_counts(s.target_failures for s in scans.values()),
                            targets.fix_command(manifest, output, target))
    return Report(output, deep, tuple(problems), splits, sum(s.size for s in scans.values()),
                  time.perf_counter() - started, check)


def _problem_order(manifest: dict):
    """Manifest problems first, then by file in manifest order (indexes after their shards), then record index."""
    rank = {manifest_lib.FILENAME: (0, 0), manifest_lib.REJECTS: (0, 1)}
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            rank.setdefault(shard["file"], (1, len(rank)))
            rank.setdefault(shard["file"] + INDEX_SUFFIX, (1, len(rank)))  # a shard's index right after it
    return lambda p: (rank.get(p.file, (2, 0)), p.file, -1 if p.record is None else p.record)


def dumps(report: Report) -> str:
    """The `--json` output."""
    return json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
