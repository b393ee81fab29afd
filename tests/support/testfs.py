"""`testfs://`: a Beam FileSystem over local files, so object-store code paths
(FileSystems.match/open/create/rename/delete, URL joins) run for real in tests.

testfs:///tmp/x maps to /tmp/x. Importing this module registers the scheme
(Beam finds FileSystem subclasses by their scheme()).
"""

from apache_beam.io.filesystem import FileMetadata, MatchResult
from apache_beam.io.localfilesystem import LocalFileSystem

PREFIX = "testfs://"


def to_local(path: str) -> str:
    return path[len(PREFIX) :] if path.startswith(PREFIX) else path


def to_url(path: str) -> str:
    return PREFIX + path


class TestFileSystem(LocalFileSystem):
    @classmethod
    def scheme(cls):
        return "testfs"

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path):
        return super().mkdirs(to_local(path))

    def match(self, patterns, limits=None):
        # LocalFileSystem's own methods call match() with local paths: leave those alone.
        results = []
        for i, pattern in enumerate(patterns):
            limit = None if limits is None else [limits[i]]
            (result,) = super().match([to_local(pattern)], limit)
            if pattern.startswith(PREFIX):
                result = MatchResult(
                    pattern,
                    [
                        FileMetadata(to_url(m.path), m.size_in_bytes, m.last_updated_in_seconds)
                        for m in result.metadata_list
                    ],
                )
            results.append(result)
        return results

    def _list(self, dir_or_prefix):
        # The paged listing a listing task streams (beam_jobs/list_source.py), as an object store's; match()
        # lists local paths through here too: those stay local.
        if not dir_or_prefix.startswith(PREFIX):
            yield from super()._list(dir_or_prefix)
            return
        for m in super()._list(to_local(dir_or_prefix)):
            yield FileMetadata(to_url(m.path), m.size_in_bytes, m.last_updated_in_seconds)

    def create(self, path, *args, **kwargs):
        return super().create(to_local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return super().open(to_local(path), *args, **kwargs)

    def copy(self, source_file_names, destination_file_names):
        return super().copy([to_local(p) for p in source_file_names], [to_local(p) for p in destination_file_names])

    def rename(self, source_file_names, destination_file_names):
        return super().rename([to_local(p) for p in source_file_names], [to_local(p) for p in destination_file_names])

    def exists(self, path):
        return super().exists(to_local(path))

    def size(self, path):
        return super().size(to_local(path))

    def last_updated(self, path):
        return super().last_updated(to_local(path))

    def checksum(self, path):
        return super().checksum(to_local(path))

    def metadata(self, path):
        m = super().metadata(to_local(path))
        url = to_url(m.path) if path.startswith(PREFIX) else m.path
        return FileMetadata(url, m.size_in_bytes, m.last_updated_in_seconds)

    def delete(self, paths):
        return super().delete([to_local(p) for p in paths])
