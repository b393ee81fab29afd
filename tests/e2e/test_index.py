"""`--index`: per-shard record indexes for NVIDIA DALI's TFRecord reader and the `tfrecord` package.

Every offset and size must match the TFRecord framing, also for shards written
in parts; the manifest records each index file; `prep verify` checks them; and
the readers that take them read our records through them.
"""

import hashlib
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from prep.core.tfrecord import record_index
from prep.verify import verify
from tests.support.datasets import copy, load, save
from tests.support.imagegen import image_bytes, write_class_tree
from tests.support.shards import read_dataset

OPTIONS = {"split": "train=0.7,validation=0.3", "num_shards": 2, "seed": 3, "workers": 2, "index": True}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Shards cut into parts (group_target=4), so index offsets are shifted across parts."""
    root = tmp_path_factory.mktemp("index")
    write_class_tree(root / "src", {"ant": 9, "bee": 14, "cat": 5}, size=(22, 14), png_every=3)
    (root / "src" / "cat" / "gray.jpg").write_bytes(image_bytes("JPEG", size=(17, 11), mode="L"))
    config = build_config(str(root / "src"), str(root / "out"), OPTIONS)
    conversion.convert(config, list_inputs(config), group_target=4)
    return root / "out"


def framing(path) -> bytes:
    """The index read from the file's own framing, independently of prep.core.tfrecord: headers only."""
    import struct

    lines, data, offset = [], path.read_bytes(), 0
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        size = 12 + length + 4
        lines.append(f"{offset} {size}\n")
        offset += size
    assert offset == len(data)
    return "".join(lines).encode()


def shards(out):
    manifest = json.loads((out / "manifest.json").read_text())
    return [shard for info in manifest["splits"].values() for shard in info["shards"]]


def test_record_index_golden_bytes():
    assert record_index([]) == b""
    assert record_index([17, 5, 1000]) == b"0 17\n17 5\n22 1000\n"


def test_every_offset_matches_the_framing_and_the_manifest_records_each_index(dataset):
    entries = shards(dataset)
    assert len(entries) == 4
    for shard in entries:
        index = dataset / (shard["file"] + ".idx")
        data = index.read_bytes()
        assert data == framing(dataset / shard["file"])
        assert len(data.splitlines()) == shard["examples"]
        assert shard["index_file"] == {
            "file": index.name,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    assert json.loads((dataset / "manifest.json").read_text())["options"]["index"] is True
    assert verify(str(dataset)).ok


def test_without_index_nothing_is_written(tmp_path):
    write_class_tree(tmp_path / "src", {"a": 3, "b": 3})
    config = build_config(str(tmp_path / "src"), str(tmp_path / "out"), {"num_shards": 2})
    conversion.convert(config, list_inputs(config))
    assert not list((tmp_path / "out").glob("*.idx"))
    assert all("index_file" not in shard for shard in shards(tmp_path / "out"))


def test_verify_reports_an_index_that_does_not_match_the_framing(dataset, tmp_path):
    out = copy(dataset, tmp_path / "out")
    manifest = load(out)
    shard = manifest["splits"]["train"]["shards"][1]
    index = out / shard["index_file"]["file"]
    lines = index.read_bytes().splitlines(keepends=True)
    offset, size = lines[1].decode().split()
    lines[1] = f"{int(offset) + 1} {size}\n".encode()  # well-formed, recorded in the manifest, but wrong
    index.write_bytes(b"".join(lines))
    shard["index_file"].update(bytes=index.stat().st_size, sha256=hashlib.sha256(index.read_bytes()).hexdigest())
    save(out, manifest)
    (out / "train-00000-of-00009.tfrecord.idx").write_bytes(b"0 1\n")
    (out / "validation-00000-of-00002.tfrecord.idx").unlink()
    problems = [str(p) for p in verify(str(out)).problems]
    assert problems == [
        f"{index.name}: does not match the records of {shard['file']}: line 2 is "
        f"'{int(offset) + 1} {size}', but record 1 of the shard starts at byte {offset} and is {size} bytes long",
        "validation-00000-of-00002.tfrecord.idx: missing: the manifest names it but OUTPUT has no such file",
        "train-00000-of-00009.tfrecord.idx: unexpected record index file: the manifest does not name it",
    ]


def test_verify_reports_an_index_changed_after_writing(dataset, tmp_path):
    out = copy(dataset, tmp_path / "out")
    index = out / "train-00000-of-00002.tfrecord.idx"
    index.write_bytes(index.read_bytes()[:-1])
    messages = [p.message for p in verify(str(out)).problems if p.file == index.name]
    assert messages[0].startswith("size is ") and messages[1].startswith("sha256 is ")
    assert messages[2].startswith("does not match the records of train-00000-of-00002.tfrecord")


# The tfrecord package registers its own copy of TensorFlow's example.proto, so it cannot be imported in a
# process that imports TensorFlow (either order: "duplicate symbol 'tensorflow.BytesList'"). Its users
# (PyTorch) have no TensorFlow; the test runs it in a fresh interpreter, as they would.
TFRECORD_READER = """
import hashlib, json, sys
from tfrecord.reader import tfrecord_loader

read = {}
for path in sys.argv[1:]:
    read[path] = []
    for worker in range(2):  # shard=(i, n) splits the file by its index
        for r in tfrecord_loader(path, path + ".idx", {"image/encoded": "byte", "image/class/label": "int"},
                                 shard=(worker, 2)):
            read[path].append([hashlib.sha256(bytes(r["image/encoded"])).hexdigest(), int(r["image/class/label"][0])])
print(json.dumps(read))
"""

# The PyTorch recipe of docs/other-readers.md without torch: MultiTFRecordDataset is this loader in a torch IterableDataset.
TFRECORD_MULTI = """
import hashlib, json, sys
from tfrecord.reader import multi_tfrecord_loader

folder, split = sys.argv[1:]
manifest = json.load(open(f"{folder}/manifest.json"))
shards = manifest["splits"][split]["shards"]
splits = {s["file"]: s["examples"] / manifest["splits"][split]["examples"] for s in shards}
read = multi_tfrecord_loader(folder + "/{}", folder + "/{}.idx", splits,
                             {"image/encoded": "byte", "image/class/label": "int"}, infinite=False)
print(json.dumps(sorted([hashlib.sha256(bytes(r["image/encoded"])).hexdigest(), int(r["image/class/label"][0])]
                        for r in read)))
"""


def test_the_tfrecord_package_reads_shards_through_the_index(dataset):
    """The pure-Python reader PyTorch users use (docs/other-readers.md, "PyTorch")."""
    if importlib.util.find_spec("tfrecord") is None:
        pytest.skip("the tfrecord package is not installed")
    expected = {
        str(dataset / shard["file"]): [
            [hashlib.sha256(r["image/encoded"]).hexdigest(), int(r["image/class/label"])] for r in records
        ]
        for split, files in read_dataset(dataset).items()
        for shard, records in zip([s for s in shards(dataset) if s["file"].startswith(split)], files)
    }
    done = subprocess.run(
        [sys.executable, "-c", TFRECORD_READER, *expected], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == expected
    done = subprocess.run(
        [sys.executable, "-c", TFRECORD_MULTI, str(dataset), "train"], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == sorted(
        r for path, records in expected.items() if "/train-" in path for r in records
    )


def test_dali_reads_a_shard_through_the_index(dataset):
    """NVIDIA DALI's TFRecord reader, on a CPU-only pipeline (no GPU here)."""
    pytest.importorskip("nvidia.dali", reason="nvidia-dali is not installed: pip install -e '.[dali]'")
    from nvidia.dali import fn, pipeline_def, tfrecord, types

    expected = read_dataset(dataset)["train"][0]
    shard = dataset / shards(dataset)[0]["file"]

    @pipeline_def(batch_size=len(expected), num_threads=1, device_id=None)
    def pipeline():
        records = fn.readers.tfrecord(
            path=[str(shard)],
            index_path=[str(shard) + ".idx"],
            random_shuffle=False,
            features={
                "image/encoded": tfrecord.FixedLenFeature((), tfrecord.string, ""),
                "image/class/label": tfrecord.FixedLenFeature([1], tfrecord.int64, -1),
            },
        )
        images = fn.decoders.image(records["image/encoded"], device="cpu", output_type=types.RGB)
        return records["image/encoded"], records["image/class/label"], images

    pipe = pipeline()
    pipe.build()
    encoded, labels, images = pipe.run()
    for i, record in enumerate(expected):
        assert np.array(encoded[i]).tobytes() == record["image/encoded"]
        assert int(np.array(labels[i])[0]) == record["image/class/label"]
        assert np.array(images[i]).shape == (record["image/height"], record["image/width"], 3)


def test_overwrite_replaces_indexes_and_tfds_files_but_not_foreign_files(dataset, tmp_path):
    from prep.core.errors import OutputError

    out = copy(dataset, tmp_path / "out")
    (out / "train-00007-of-00009.tfrecord.idx").write_bytes(b"")  # an index of an earlier run: ours to delete
    (out / "dataset_info.json.0a1b2c3d.part").write_bytes(b"{")  # a kill while writing it (storage.temp_path)
    config = build_config(str(tmp_path / "src"), str(out), {"num_shards": 1, "overwrite": True})
    write_class_tree(tmp_path / "src", {"a": 2, "b": 2})
    conversion.convert(config, list_inputs(config))
    assert not list(out.glob("*.idx")) and not list(out.glob("*.part")) and (out / "dataset_info.json").exists()
    assert verify(str(out)).ok
    (out / "notes.idx.txt").write_text("mine")
    with pytest.raises(OutputError, match="holds files prep did not write \\(e.g. notes.idx.txt\\)"):
        conversion.convert(config, list_inputs(config))
