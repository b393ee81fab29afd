"""OUTPUT itself: refusing or clearing it before a conversion, removing what a killed run was writing,
and the shards an earlier plan wrote that a resumed run's plan does not name.

Only files prep writes are ever deleted: shards, record indexes, manifest.json, shard_counts.jsonl,
rejects.jsonl, the tfds metadata, their temporary names, and the work directory.
"""

from __future__ import annotations

import os

from prep.core import keys_sidecar, storage, tfds_meta
from prep.core.errors import OutputError
from prep.core.manifest import FILENAME, LABEL_MAP_CSV, LABEL_MAP_PBTXT, REJECTS, REPORT, SHARD_COUNTS, Manifest
from prep.core.naming import ShardName
from prep.core.run.dedupe_files import DUPLICATES_FILE
from prep.core.workdir import TMP_DIR


def prepare_output(output: str, overwrite: bool) -> None:
    """Refuses a non-empty OUTPUT unless `overwrite`; then clears what an earlier run wrote.

    Raises:
        OutputError: OUTPUT is a file, is not empty, or holds files prep did not write.
    """
    if not storage.is_remote(output) and os.path.exists(output) and not os.path.isdir(output):
        raise OutputError(f"OUTPUT {output} is a file, not a folder")
    names = storage.list_names(output)
    if not names:
        return
    if not overwrite:
        if TMP_DIR in names and FILENAME not in names:
            raise OutputError(
                f"OUTPUT {output} holds an unfinished conversion; pass --resume to finish it "
                "(same inputs and image options; the planning options may change) or --overwrite "
                "to start over"
            )
        raise OutputError(f"OUTPUT {output} is not empty; pass --overwrite to replace what prep wrote there")
    written = _written_names()
    ours = {TMP_DIR, *written, *(name + ".part" for name in written)}
    foreign = [
        n
        for n in names
        if n not in ours
        and ShardName.parse(n) is None
        and ShardName.parse_index(n) is None
        and not _is_leftover(n, written)
    ]
    if foreign:
        raise OutputError(
            f"OUTPUT {output} holds files prep did not write (e.g. {foreign[0]}); "
            "refusing to delete them with --overwrite"
        )
    # The manifest goes first so that nothing left behind looks finished.
    storage.delete(storage.join(output, FILENAME))
    for name in names:
        storage.delete(storage.join(output, name))


def _written_names() -> tuple[str, ...]:
    """The files other than shards and indexes that prep writes in OUTPUT (`prep leakage` its key
    sidecar, `prep report` its page)."""
    return (
        FILENAME,
        SHARD_COUNTS,
        REJECTS,
        *tfds_meta.all_file_names(),
        keys_sidecar.FILENAME,
        REPORT,
        LABEL_MAP_PBTXT,
        LABEL_MAP_CSV,
        DUPLICATES_FILE,
    )


def _is_leftover(name: str, written: tuple[str, ...]) -> bool:
    return any(storage.is_temp_of(name, w) for w in written)


def delete_leftovers(output: str) -> None:
    """Deletes what a killed run was writing in OUTPUT (the temporary files of
    `_written_names`), so that a resumed or finished OUTPUT holds only the dataset."""
    written = _written_names()
    for name in storage.list_names(output):
        if _is_leftover(name, written):
            storage.delete(storage.join(output, name))


def delete_unplanned_shards(output: str, manifest: Manifest) -> None:
    """Deletes shard and record-index files the manifest does not name: a resumed run that
    planned anew (other --num-shards, --split, ...) leaves none of the old plan's shards behind."""
    planned = set()
    for _, shard in manifest.shards():
        planned.add(shard.file)
        parsed = ShardName.parse(shard.file)
        if parsed is not None:  # always, in a manifest that was read: its shard names are checked
            planned.add(parsed.index_filename)
    for name in storage.list_names(output):
        if name not in planned and (ShardName.parse(name) is not None or ShardName.parse_index(name) is not None):
            storage.delete(storage.join(output, name))
