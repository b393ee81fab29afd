"""Beam's FileSystems as `prep.core.storage`'s remote file system (``gs://``, ``s3://``, ...).

`beam_jobs/__init__.py` installs it, so any process that runs our pipeline code (the
driver, and every remote worker that unpickles one of our DoFns) reaches remote paths
the way Beam does. Beam itself is imported only when a remote path is used.
"""

from __future__ import annotations


def _fs():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _uncompressed():
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def configure(beam_args) -> None:
    """Gives Beam's FileSystems the pipeline options of `beam_args` (the words after `--`).

    Beam builds a FileSystem (S3's client, GCS's credentials, ...) from the options it was
    given, and only `Pipeline.__init__` gives them; the driver lists SOURCE and reads
    OUTPUT before any pipeline exists, so without this an S3 store answers
    "Must provide one of client or options".
    """
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(beam_args)))


# Object stores whose uploads appear whole when they end, and whose copy replaces its destination. A
# Beam FileSystem may also say so itself with a class attribute UPLOADS_WHOLE (tests/support/simfs.py does).
_OBJECT_STORES = ("gs", "s3")


class BeamFileSystems:
    """`RemoteFileSystem` over `apache_beam.io.filesystems.FileSystems`."""

    def handles(self, path: str) -> bool:
        if path.startswith("s3://"):  # every process that reaches S3 (driver or worker) gets the fixes
            from beam_jobs.beam_s3 import apply as fix_s3

            fix_s3()
        try:
            _fs().get_filesystem(path)
        except ValueError:  # no FileSystem registered for the scheme
            return False
        return True

    def open_read(self, path: str):
        return _fs().open(path, compression_type=_uncompressed())

    def open_write(self, path: str):
        return _fs().create(path, compression_type=_uncompressed())

    def exists(self, path: str) -> bool:
        return _fs().exists(path)

    def size(self, path: str) -> int | None:
        matches = _fs().match([path])[0].metadata_list
        return matches[0].size_in_bytes if matches else None

    def uploads_whole(self, path: str) -> bool:
        fs = _fs().get_filesystem(path)
        return bool(getattr(fs, "UPLOADS_WHOLE", fs.scheme() in _OBJECT_STORES))

    def rename(self, src: str, dst: str) -> None:
        # An object store's copy replaces `dst`; a file system's rename may refuse an existing one.
        if not self.uploads_whole(dst) and _fs().exists(dst):
            _fs().delete([dst])
        _fs().rename([src], [dst])

    def delete(self, paths: list[str]) -> None:
        _fs().delete(paths)

    def match(self, pattern: str) -> list[tuple[str, int]]:
        # "**", not "*", from callers: FileSystems built on glob match only files with "*", and leave out
        # names starting with "." (such as .prep-tmp); object stores match across "/" with either.
        return [(m.path, m.size_in_bytes) for m in _fs().match([pattern])[0].metadata_list]

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))
