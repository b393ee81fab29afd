"""The work directory, OUTPUT/.prep-tmp: the one place that builds and parses its paths.

    .prep-tmp/run.json                     what decides the output (`run_record.run_record`);
                                           written once the listing is staged
    .prep-tmp/listing/HHH-chunk-NNNNNN.json  a chunk's inputs, in `ordering.listing_order`
    .prep-tmp/listing/rejects.json         inputs rejected while listing
    .prep-tmp/members/data-TTTTTT-GGGGGG.bin  WebDataset members' bytes copied from remote shards, and
    .prep-tmp/members/HHH-chunk-NNNNNN.json    the ranges of them that hold a chunk's (beam_jobs/list_shards.py);
                                           Parquet rows' images the same way, with members/rows-*.bin
                                           (beam_jobs/list_tables.py, prep/core/sources/table_held.py)
    .prep-tmp/listed/group-TTTTTT-GGGGGG.jsonl  listing on workers: task T's inputs of one (split, class),
                                           in rank order; listed/rejects-TTTTTT.json its rejects;
                                           listed/summary.json what the driver reads (beam_jobs/list_source.py)
    .prep-tmp/relisted/                    `--resume` on workers: SOURCE listed again as the OUTPUT of a work
                                           directory of its own, compared with the staged one, then deleted
    .prep-tmp/spill/HHH-chunk-NNNNNN.bin   a chunk's spill file: the framed records of its batches in
                                           batch order, kept images left out
    .prep-tmp/spill/HHH-chunk-NNNNNN.json  the chunk's index: its outcomes (prepared references and
                                           rejects), the size of each spill file, a signature per input
    .prep-tmp/inflight/HHH-chunk-NNNNNN.json  the inputs' paths of a chunk being prepared, deleted once
                                           its spill file is complete: what a run killed meanwhile was reading
    .prep-tmp/plan.json                    the shard count, for progress bars
    .prep-tmp/entries/task-NNNNNN.bin      a rank task's planned entries, by shard part;
                                           written again by every run, never reused
    .prep-tmp/shards/<file>.<hex>.part     a shard or record index being written (`storage.temp_path`)
    .prep-tmp/done/<shard>.json            sidecar of a complete shard: digest of its planned entries (label
                                           id written included), size, SHA-256
    .prep-tmp/parts/<shard>/part-NNNNNN    a part of a multi-part shard, and its sidecar ``part-NNNNNN.json``

The dedupe stage's files (what they hold: prep/core/run/dedupe_files.py), and the content keys' of the shards:

    .prep-tmp/groups/rows-NNNNNN.npy       the content keys of the good inputs chunk NNNNNN prepared
    .prep-tmp/groups/keys-NNNNNN.npy       a chunk's item ids and hashes, for the scan
    .prep-tmp/groups/members-NNNNNN.jsonl  a chunk's grouped images, by group batch
    .prep-tmp/groups/decided-BBBBBB.jsonl  a group batch's decisions, by chunk
    .prep-tmp/groups/lines-BBBBBB.jsonl    a group batch's lines of duplicates.jsonl
    .prep-tmp/groups/rejects-BBBBBB.jsonl  a group batch's policy rejects
    .prep-tmp/groups/units.json            user groups merged by duplicates
    .prep-tmp/groups/<kind>_pins.json      the split chosen per group: kind duplicates or users
    .prep-tmp/groups/chunk-NNNNNN.json     what becomes of a chunk's grouped inputs (the planner reads it)
    .prep-tmp/keys/<shard>.part-NNNNN.npy  where a shard part's records came from, in record order
    .prep-tmp/keys/<shard>.parts.json      a shard's parts, in order
    .prep-tmp/keys/join/<kind>-NNNNN.bin   the run files of the join that writes content_keys.jsonl (publish_keys.py)

A chunk's inputs are prepared in batches of `BATCH`; a batch is named by one int, its spill id
(`spill_id`): chunk * `BATCHES_PER_CHUNK` + batch, which a reference carries. Every batch of a chunk
writes to the chunk's one spill file (prep/core/run/chunk_spill.py), at offsets counted from its start.
HHH, three hex digits of a hash of the chunk number (`spread`), spreads a chunk's files over the key
ranges an object store serves separately, where sequential names would all fall in one.
What may be reused from these files, and when, is `prep.core.run.checkpoints`'s concern.
"""

from __future__ import annotations

import dataclasses
import re
import zlib

from prep.core import storage
from prep.core.ordering import MAX_CHUNK

TMP_DIR = ".prep-tmp"
RUN = "run.json"
BATCH = 16  # inputs per spill file
BATCHES_PER_CHUNK = 1024
if BATCHES_PER_CHUNK * BATCH < MAX_CHUNK:
    raise ImportError("BATCHES_PER_CHUNK * BATCH must cover MAX_CHUNK inputs")
_SPILL = re.compile(r"[0-9a-f]{3}-chunk-(\d{6})\.bin")
_SCAN_KEYS = re.compile(r"keys-(\d{6})\.npy")


def spill_id(chunk: int, batch: int) -> int:
    """One int naming the spill file of a chunk's batch; it travels in every reference."""
    return chunk * BATCHES_PER_CHUNK + batch


def spread(chunk: int) -> str:
    """The chunk's name prefix: three hex digits of a hash, the same on every run and platform."""
    return f"{zlib.crc32(chunk.to_bytes(8, 'big')) & 0xFFF:03x}-chunk-{chunk:06d}"


def parse_spill_name(name: str) -> int | None:
    """The chunk of a spill file's name, or None if `name` is not one."""
    match = _SPILL.fullmatch(name)
    return int(match[1]) if match else None


def parse_scan_keys_name(name: str) -> int | None:
    """The chunk of a scan key file's name (`WorkDir.scan_keys`), or None if `name` is not one."""
    match = _SCAN_KEYS.fullmatch(name)
    return int(match[1]) if match else None


@dataclasses.dataclass(frozen=True)
class WorkDir:
    """The paths of one conversion's work directory, under OUTPUT (local or remote)."""

    output: str

    @property
    def root(self) -> str:
        return storage.join(self.output, TMP_DIR)

    def _path(self, *parts: str) -> str:
        return storage.join(self.root, *parts)

    def top_level(self) -> list[str]:
        """Every file and folder directly under the work directory but run.json, which is deleted last."""
        return [self._path(name) for name in storage.list_names(self.root) if name != RUN]

    @property
    def run_record(self) -> str:
        return self._path(RUN)

    def listing_chunk(self, chunk: int) -> str:
        return self._path("listing", f"{spread(chunk)}.json")

    @property
    def listing_rejects(self) -> str:
        return self._path("listing", "rejects.json")

    @property
    def listing_boxes(self) -> str:
        """Detection: the box notes and tally of the annotations' problems (task_inputs.BoxNote, BoxTally)."""
        return self._path("listing", "boxes.json")

    # WebDataset members' bytes, copied from remote shards by the listing on workers in each chunk's order
    # (beam_jobs/list_shards.py), for the prepare step to read a batch at a time (prep/core/sources/held.py).
    def members_data(self, task: int, group: int) -> str:
        return self._path("members", f"data-{task:06d}-{group:06d}.bin")

    def members_rows(self, task: int, group: int) -> str:
        """Parquet rows of a group in rank order: where each one's image is, int64 (task, offset in
        `members_data(task, 0)`, length; -1 for one not copied)."""
        return self._path("members", f"rows-{task:06d}-{group:06d}.bin")

    def chunk_members(self, chunk: int) -> str:
        """The (data file, start, end) ranges that hold a chunk's members' bytes, in its order."""
        return self._path("members", f"{spread(chunk)}.json")

    # The listing made on workers (beam_jobs/list_source.py); the driver deletes these once it is staged.
    @property
    def relisted(self) -> str:
        """The OUTPUT whose work directory a resumed run lists SOURCE into on workers (prep/core/run/resume.py)."""
        return self._path("relisted")

    @property
    def listed_folder(self) -> str:
        return self._path("listed")

    def listed_group(self, task: int, group: int) -> str:
        """A listing task's inputs of one (split, class), in rank order, a JSON line each."""
        return self._path("listed", f"group-{task:06d}-{group:06d}.jsonl")

    def listed_rejects(self, task: int) -> str:
        return self._path("listed", f"rejects-{task:06d}.json")

    @property
    def listed_summary(self) -> str:
        """What the driver reads of the listing made on workers: classes, counts, chunk sizes, digests."""
        return self._path("listed", "summary.json")

    @property
    def spill_folder(self) -> str:
        return self._path("spill")

    def spill(self, spill: int) -> str:
        """The spill file of batch `spill`: its chunk's."""
        return self._path("spill", f"{spread(spill // BATCHES_PER_CHUNK)}.bin")

    @property
    def in_flight_folder(self) -> str:
        return self._path("inflight")

    def in_flight(self, chunk: int) -> str:
        """The record of chunk `chunk` being prepared (its inputs' paths), deleted once its spill file is complete.
        A run killed meanwhile (the OOM killer, a codec's segfault) leaves it for `--resume`."""
        return self._path("inflight", f"{spread(chunk)}.json")

    def chunk_index(self, chunk: int) -> str:
        return self._path("spill", f"{spread(chunk)}.json")

    @property
    def plan(self) -> str:
        return self._path("plan.json")

    def entries(self, task: int) -> str:
        return self._path("entries", f"task-{task:06d}.bin")

    def shard_temp(self, filename: str) -> str:
        """A new temporary name for shard (or record index) `filename`, renamed into OUTPUT once complete."""
        return storage.temp_path(self._path("shards", filename))

    def shard_sidecar(self, filename: str) -> str:
        return self._path("done", filename + ".json")

    def part(self, filename: str, part: int) -> str:
        return self._path("parts", filename, f"part-{part:06d}")

    def part_sidecar(self, filename: str, part: int) -> str:
        return self.part(filename, part) + ".json"

    # The dedupe stage's files (prep/core/run/dedupe_files.py).

    @property
    def groups_folder(self) -> str:
        return self._path("groups")

    def key_rows(self, chunk: int) -> str:
        return self._path("groups", f"rows-{chunk:06d}.npy")

    def scan_keys(self, chunk: int) -> str:
        return self._path("groups", f"keys-{chunk:06d}.npy")

    def members(self, chunk: int) -> str:
        return self._path("groups", f"members-{chunk:06d}.jsonl")

    def decisions(self, batch: int) -> str:
        return self._path("groups", f"decided-{batch:06d}.jsonl")

    def report_lines(self, batch: int) -> str:
        return self._path("groups", f"lines-{batch:06d}.jsonl")

    def policy_rejects(self, batch: int) -> str:
        return self._path("groups", f"rejects-{batch:06d}.jsonl")

    @property
    def units(self) -> str:
        return self._path("groups", "units.json")

    def pins(self, kind: str) -> str:
        """The splits chosen for groups of `kind`: "duplicates" or "users"."""
        return self._path("groups", f"{kind}_pins.json")

    def placements(self, chunk: int) -> str:
        return self._path("groups", f"chunk-{chunk:06d}.json")

    # The shards' content keys (prep/core/run/dedupe_files.py, publish_keys.py).

    def part_order(self, filename: str, part: int) -> str:
        return self._path("keys", f"{filename}.part-{part:05d}.npy")

    def shard_parts(self, filename: str) -> str:
        return self._path("keys", f"{filename}.parts.json")

    @property
    def join_folder(self) -> str:
        return self._path("keys", "join")

    def join_run(self, kind: str, n: int) -> str:
        """Run file `n` of the join's step `kind` ("places" or "joined")."""
        return self._path("keys", "join", f"{kind}-{n:05d}.bin")
