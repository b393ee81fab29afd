"""`prep.core.storage`: local paths directly, remote ones through the installed file system that handles them."""

import pytest

from prep.core import storage
from prep.core.workdir import WorkDir, parse_spill_name, spill_id


class _Memory:
    """A remote file system over a dict, for one scheme."""

    def __init__(self, scheme):
        self.scheme, self.files = scheme, {}

    def handles(self, path):
        return path.startswith(self.scheme + "://")

    def exists(self, path):
        return path in self.files

    def size(self, path):
        return len(self.files[path]) if path in self.files else None

    def match(self, pattern):
        prefix = pattern.removesuffix("**")
        return [(p, len(d)) for p, d in self.files.items() if p.startswith(prefix)]


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(storage, "_installed", [])
    return storage.install


def test_a_remote_path_goes_to_the_newest_file_system_that_handles_it(installed):
    mem, other = _Memory("mem"), _Memory("other")
    installed(mem)
    installed(other)
    mem.files["mem://b/x/1.jpg"] = b"abc"
    assert storage.exists("mem://b/x/1.jpg") and storage.size("mem://b/x/1.jpg") == 3
    assert not storage.exists("other://b/x/1.jpg")
    assert storage.list_names("mem://b") == ["x"] and storage.list_files("mem://b") == [("x/1.jpg", None)]


def test_a_fallback_answers_only_where_no_other_does_whatever_the_order(installed):
    """loaders installs tf.io.gfile as a fallback: in a process that also has Beam's file systems (which
    know S3 and the stores' options), Beam's answer for gs:// whether loaders was imported before or after."""
    beam, gfile = _Memory("gs"), _Memory("gs")
    gfile.handles = lambda path: path.startswith(("gs://", "hdfs://"))
    installed(beam)
    installed(gfile, fallback=True)
    beam.files["gs://b/k"] = b"beam"
    gfile.files["gs://b/k"] = b"gfile"
    gfile.files["hdfs://b/k"] = b"only gfile"
    assert storage.size("gs://b/k") == len(b"beam") and storage.size("hdfs://b/k") == len(b"only gfile")
    storage._installed[:] = []
    installed(gfile, fallback=True)
    installed(beam)
    assert storage.size("gs://b/k") == len(b"beam")


def test_without_a_remote_file_system_a_remote_path_is_an_os_error(installed):
    with pytest.raises(OSError, match="no file system is installed for gs://b/x"):
        storage.exists("gs://b/x")


def test_local_paths_need_no_file_system(installed, tmp_path):
    storage.write_atomic(str(tmp_path / "a" / "f.bin"), b"data")
    assert storage.read_bytes(str(tmp_path / "a" / "f.bin")) == b"data" and storage.list_names(str(tmp_path / "a")) == [
        "f.bin"
    ]
    assert not storage.is_remote(str(tmp_path)) and storage.is_remote("s3://b/k")


def test_the_work_directory_builds_and_parses_spill_names():
    work = WorkDir("gs://bucket/out")
    path = work.spill(spill_id(12, 3))
    assert path == work.spill(spill_id(12, 0)) == "gs://bucket/out/.prep-tmp/spill/342-chunk-000012.bin"
    assert parse_spill_name(path.rsplit("/", 1)[1]) == 12
    assert (
        parse_spill_name(work.chunk_index(12).rsplit("/", 1)[1]) is None
        and parse_spill_name(path.rsplit("/", 1)[1] + ".x.part") is None
    )


def test_write_atomic_leaves_nothing_when_the_rename_fails(tmp_path, monkeypatch):
    # A full disk or an interrupt between writing and renaming must leave neither file behind.
    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage, "rename", refuse)
    with pytest.raises(OSError, match="No space left"):
        storage.write_atomic(str(tmp_path / "report.html"), b"page")
    assert list(tmp_path.iterdir()) == []
