"""Golden bytes: a fixed input converted with fixed options gives exactly these files.

The input is committed (tests/data/golden/, made once by tests/data/make_golden.py): three
classes of tiny images, some kept as they are, some converted (EXIF rotation, alpha, palette
GIF, 16-bit PNG), some rejected. Every file of OUTPUT is pinned by its SHA-256; in
manifest.json the "run" object (times, the source's absolute path) is cut out first, the rest
is pinned byte for byte.

content_keys.jsonl (the records' content keys, docs/leakage.md) came in with the keys written by
convert; no other file changed then. Issue 37 changed manifest.json twice and only it: shard counts
lost their zero entries, then version 2 moved them to shard_counts.jsonl (new here). A change that alters these bytes on purpose (a new manifest
field, another encoder setting)
updates the digests here in the same commit and says why; any other change must keep them.
"""

import hashlib
import pathlib
import re

import PIL
import pytest

SOURCE = pathlib.Path(__file__).resolve().parent / "data" / "golden"
# SHA-256 over (relative path + bytes) of every input file, in sorted order.
INPUT_SHA256 = "6105cc76d7f0c1f81211a7522f0c4adbf2198341bbb3f021ae05c86a33b8ffa5"
# Converted images are re-encoded by Pillow's libjpeg/zlib: their bytes are only pinned for this version.
PILLOW = "12.3.0"
RUN = re.compile(rb'\n  "run": \{\n(?:    .*\n)*  \},\n')

GOLDEN = {
    "split-index": (
        ["--split", "train=0.5,validation=0.25,test=0.25", "--num-shards", 2, "--seed", 7, "--index"],
        {
            "content_keys.jsonl": "4e515d93566f1b964ac54e295ab67c770e7995f967e2808e9a83e438e41d80c9",
            "dataset_info.json": "21c05d40a2bab214b9e905598bbcdc28f7582b38fec282bf67508f035126c615",
            "features.json": "d7b025865c0589ed8e734c6efb68f144a3f0b9feb344fab856f3a6ec32301121",
            "image.class.label.labels.txt": "f6ce6a2d26de106475a885c1030dcf58de90919bdcb80dc07327901a68c523c2",
            "manifest.json": "5f9f2cebffb63fd97692354d830297c07e178ed0a33c34362739ed1e0afc2089",
            "rejects.jsonl": "477ad144afc5f205f62c0c05276cc9e713bb4a5a3551fe2e0f72ff5abcfc8bb5",
            "shard_counts.jsonl": "f3b698b72a3d247c50a01ac688b9bf6d20b294f9c8cf9aaec90f4837d2de17fb",
            "test-00000-of-00002.tfrecord": "c8170590f21d2cfe456ab581a8eb52b3bfff5f72d4fe39d8492e9bd7d0653889",
            "test-00000-of-00002.tfrecord.idx": "96600afc451d38ea001298da0f735dec77f3cca04dfcf3bd43c9975d64e7c2dc",
            "test-00001-of-00002.tfrecord": "24758897fecca3d6039702ebaecbeccfb6f25581fff945e4bed480d404d33f7e",
            "test-00001-of-00002.tfrecord.idx": "d186f00af54b9fb73fdb4fc2c1698ced7f66af18654216dcc62c4f271b9ed55c",
            "train-00000-of-00002.tfrecord": "47c913167eaa922af150c056212e7720226219f76f02f8723d9a8b034ebca1ae",
            "train-00000-of-00002.tfrecord.idx": "03613d39b708f8889a634e7c9504c6ccfad43b6354b5694a344fa03391656b04",
            "train-00001-of-00002.tfrecord": "fac34abd3df86c66b7d2a3a7fb418881a47848fd07df92b0de68ce20bb3fdc86",
            "train-00001-of-00002.tfrecord.idx": "afda470aeec334d0fd57ef07bf443158ae6df4e7fc955f834a943fd8b55464aa",
            "validation-00000-of-00002.tfrecord": "e239db8ed43f86989b7dfb67d53e1747e623da7afb75ea94be2f8b4e4afd6a2e",
            "validation-00000-of-00002.tfrecord.idx": "1f85155d68327d685b81d42b6ba0fd850849dedd1e0fd947d2e80a310c321394",
            "validation-00001-of-00002.tfrecord": "84611ede6ebf05394dab18360ef6fb4161520739f3f126ab7eedda2c7d9e190a",
            "validation-00001-of-00002.tfrecord.idx": "45154a2913fb32ed508096dd54353ce5ca1120db1956a746d70209b8237f55e7",
        },
    ),
    "capped-resized-jpeg": (
        [
            "--max-per-class",
            4,
            "--resize",
            8,
            "--image-format",
            "jpeg",
            "--quality",
            80,
            "--num-shards",
            3,
            "--seed",
            3,
        ],
        {
            "content_keys.jsonl": "44dc435f5ba56b7f9ae964cc6eeb22bf6a94dd5b3ab6500fb1351e519ad1a94b",
            "dataset_info.json": "fdda61093c8a0fc00cce58f31b6826c9b04b24a0f65eda132d1c288b843e5243",
            "features.json": "d7b025865c0589ed8e734c6efb68f144a3f0b9feb344fab856f3a6ec32301121",
            "image.class.label.labels.txt": "f6ce6a2d26de106475a885c1030dcf58de90919bdcb80dc07327901a68c523c2",
            "manifest.json": "843a375207bb93f75dfe057fef86dec665a8814dbe4184fb0ec9895f64e33266",
            "rejects.jsonl": "477ad144afc5f205f62c0c05276cc9e713bb4a5a3551fe2e0f72ff5abcfc8bb5",
            "shard_counts.jsonl": "85e0a29b5fb86051d7a75be1c2c7afe3abc8edb0d224bc59effe3745ddbe8bbc",
            "train-00000-of-00003.tfrecord": "358c6dddd3cd9265f71a71ba371a78461d97e6449daa1c10edd20a127cdb4843",
            "train-00001-of-00003.tfrecord": "5dbb91683e86a8625a1837f8331f11a88790d8e87829ffc70b4dcda5eca17c2f",
            "train-00002-of-00003.tfrecord": "bc64e1a7c0131a75851636d042373e42b8996172c2475f07619f332c0543d618",
        },
    ),
}


def digests(out: pathlib.Path) -> dict[str, str]:
    """SHA-256 of every file in `out`, manifest.json's "run" object cut out."""
    result = {}
    for path in sorted(out.rglob("*")):
        if path.is_dir():
            continue
        data = path.read_bytes()
        if path.name == "manifest.json":
            data, found = RUN.subn(b'\n  "run": RUN,\n', data)
            assert found == 1, "manifest.json has no \"run\" object where expected"
        result[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return result


@pytest.mark.skipif(
    PIL.__version__ != PILLOW,
    reason=f"golden digests were recorded with Pillow {PILLOW}, whose encoders made the converted images",
)
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fixed_input_and_options_give_the_golden_bytes(run_cli, tmp_path, name):
    args, expected = GOLDEN[name]
    result = run_cli("convert", SOURCE, tmp_path / "out", *args, "--no-progress")
    assert result.exit_code == 0, result.output
    got = digests(tmp_path / "out")
    assert got == expected, "output bytes changed; if on purpose, the new digests are:\n" + "\n".join(
        f'"{k}": "{v}",' for k, v in got.items()
    )


def test_the_golden_input_is_the_committed_one():
    """Guards the input itself: a checkout that changed line endings or dropped the empty file shows here."""
    sizes = {str(p.relative_to(SOURCE)): p.stat().st_size for p in sorted(SOURCE.rglob("*")) if p.is_file()}
    assert len(sizes) == 22 and sizes["fish/empty.jpg"] == 0 and sizes["fish/.hidden.jpg"] > 0
    total = hashlib.sha256(b"".join(k.encode() + (SOURCE / k).read_bytes() for k in sorted(sizes)))
    assert total.hexdigest() == INPUT_SHA256
