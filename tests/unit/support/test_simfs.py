"""The simulated object store behaves like one and counts what a real one would be asked."""

import collections
import os

import pytest
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from tests.support import simfs


@pytest.fixture
def fs(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMFS_STORE", str(tmp_path))
    simfs.start_counting(None)
    return FileSystems


def kinds() -> collections.Counter:
    counts, _ = simfs.local_counts()
    out = collections.Counter()
    for (kind, _, _), n in counts.items():
        out[kind] += n
    return out


def test_a_source_is_listed_by_pages_and_served_from_names(fs):
    src = simfs.source_url(3, 700, 4)
    listed = fs.match([src + "/**"])[0].metadata_list
    assert len(listed) == 2100 and {m.size_in_bytes for m in listed} == {simfs.IMAGE_BYTES}
    assert kinds()["list"] == 3  # 1,000 keys a page
    assert fs.match([src + "/class-0001/**"])[0].metadata_list[0].path == src + "/class-0001/img-0000000.jpg"
    read = [fs.open(f"{src}/class-0002/img-{n:07d}.jpg").read() for n in range(4)]
    assert [len(b) for b in read] == [simfs.IMAGE_BYTES] * 4
    assert len(set(read)) == 3 and read[3] == read[2]  # number 3 repeats number 2 (d4)
    assert not fs.exists(src + "/class-0003/img-0000000.jpg") and not fs.exists(src + "/class-0000")
    with pytest.raises(BeamIOError):
        fs.create(src + "/class-0000/new.jpg")


def test_generated_pictures_do_not_look_alike():
    from prep.core import content_keys

    hashes = [content_keys.image_keys(simfs.image_bytes(c, n)).hashes[0] for c in range(2) for n in range(40)]
    nearest = min(bin(int(a) ^ int(b)).count("1") for i, a in enumerate(hashes) for b in hashes[i + 1 :])
    assert nearest > content_keys.NEAR_DISTANCE


def test_the_output_side_has_objects_not_folders(fs, tmp_path):
    with fs.create("simfs://out/a/b.bin") as f:
        f.write(b"x" * 10)
    assert fs.exists("simfs://out/a/b.bin") and not fs.exists("simfs://out/a")
    fs.rename(["simfs://out/a/b.bin"], ["simfs://out/c.bin"])
    assert not fs.exists("simfs://out/a/b.bin") and fs.open("simfs://out/c.bin").read() == b"x" * 10
    assert [m.path for m in fs.match(["simfs://out/**"])[0].metadata_list] == ["simfs://out/c.bin"]
    counts, _ = simfs.local_counts()
    assert kinds()["write"] == 1 and kinds()["rename"] == 1 and simfs.requests(counts, "rename") == 1
    assert simfs.requests(counts) == sum(kinds().values()) + 1  # a rename is a copy and a delete


def test_a_reader_counts_a_ranged_read_per_seek_elsewhere(fs):
    with fs.create("simfs://out/r.bin") as f:
        f.write(bytes(range(256)) * 8192)  # 2 MiB: more than the reader's buffer
    simfs.start_counting(None)
    with fs.open("simfs://out/r.bin") as f:
        f.read(10)
        f.read(10)  # from the buffer
        f.seek(1_500_000)
        f.read(10)
    assert kinds()["read"] == 2


def test_an_object_store_is_written_in_one_upload_and_renamed_without_a_stat(fs, tmp_path):
    # storage.uploads_whole: simfs says so as GCS and S3 do; testfs (local files behind a Beam FileSystem)
    # and local paths do not, so they keep the temporary name and the rename.
    import beam_jobs  # noqa: F401  (installs Beam's FileSystems in prep.core.storage)
    from beam_jobs.beam_fs import BeamFileSystems
    from prep.core import storage
    from tests.support import testfs

    # (gs:// asked of Beam's FileSystems: in a process that imported the loaders later, tf.io.gfile serves it)
    assert storage.uploads_whole("simfs://out/a") and BeamFileSystems().uploads_whole("gs://b/a")
    assert not storage.uploads_whole(testfs.to_url(str(tmp_path / "a"))) and not storage.uploads_whole("/tmp/a")
    start = kinds()
    storage.write_atomic("simfs://out/w/index.json", b"{}")
    assert kinds() - start == {"write": 1}  # not upload, stat, copy and delete
    assert fs.open("simfs://out/w/index.json").read() == b"{}"
    start = kinds()
    storage.rename("simfs://out/w/index.json", "simfs://out/w/moved.json")
    assert kinds() - start == {"rename": 1}  # the copy replaces the destination: no stat of it first
    start = kinds()
    storage.delete_file("simfs://out/w/moved.json")
    storage.delete_file("simfs://out/w/moved.json")  # gone already: not an error
    assert not fs.exists("simfs://out/w/moved.json")
    assert (kinds() - start)["delete"] == 2 and (kinds() - start)["list"] == 0
    local = testfs.to_url(str(tmp_path / "t" / "f.json"))
    storage.write_atomic(local, b"x")
    assert (tmp_path / "t" / "f.json").read_bytes() == b"x" and os.listdir(tmp_path / "t") == ["f.json"]
