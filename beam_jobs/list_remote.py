"""A remote SOURCE's object names for the listing on workers (list_source.py), streamed from the file
system's own paged listing into a spool file.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator

from prep.core.errors import SourceError


def remote_names(source: str, stack: contextlib.ExitStack):
    """Streams the names under a remote SOURCE to a local temporary file (its listing may outgrow memory); returns
    a function that reads them back, and the folders one and two levels down.

    Raises:
        SourceError: the listing fails, part-way or not, naming the prefix (never a SOURCE missing a folder).
    """
    from beam_jobs.beam_fs import file_systems

    prefix = source.rstrip("/") + "/"
    spool = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogateescape"))
    dirs: set[str] = set()
    try:
        # The file system's own paged listing, as a generator: FileSystems.match would hold every name at once.
        for metadata in file_systems().get_filesystem(prefix)._list(prefix):
            path = metadata.path
            if not path.startswith(prefix) or path == prefix:
                continue
            rel = path[len(prefix) :]
            if "\n" in rel:
                raise SourceError(f"SOURCE {source} holds an object whose name has a line break: {rel!r}")
            spool.write(rel + "\n")
            parts = rel.split("/")
            for n in (1, 2):
                if len(parts) > n and not any(p.startswith(".") for p in parts[:n]):
                    dirs.add("/".join(parts[:n]))
    except SourceError:
        raise
    except Exception as exc:  # each file system raises its own types
        raise SourceError(f"cannot list SOURCE {prefix}: {exc}") from None
    if not dirs and not spool.tell():
        raise SourceError(f"SOURCE {source} holds no files")

    def names() -> Iterator[str]:
        spool.seek(0)
        for line in spool:
            yield line[:-1]

    return names, sorted(dirs)
