"""Hostile inputs end to end: every input is written (and the record tells the truth) or
rejected with a reason, and the counts reconcile. Everything is generated here.

What each case becomes is listed in docs/failures.md ("What happens when...").
"""

import io
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from prep.core.schema import FILENAME, ImageRecord, decode_example
from prep.core.tfrecord import read_records
from tests.support.imagegen import (
    bomb_png,
    encode,
    image_bytes,
    marker_image,
    oriented,
    png_raw,
    truncated_exif_jpeg,
    write_class_tree,
    ycck_jpeg,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def read_output(out: pathlib.Path):
    """({raw image/filename bytes: ImageRecord}, {path: reject line}, manifest)."""
    manifest = json.loads((out / "manifest.json").read_text())
    records = {}
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            with open(out / shard["file"], "rb") as f:
                for _, _, data in read_records(f, shard["file"]):
                    raw_name = decode_example(data)[FILENAME][1][0]
                    assert raw_name not in records, raw_name
                    records[raw_name] = ImageRecord.from_bytes(data)
    lines = (out / "rejects.jsonl").read_bytes().decode("utf-8").splitlines()  # strict UTF-8
    rejects = {}
    for line in lines:
        reject = json.loads(line)
        for value in reject.values():
            value.encode("utf-8")  # no lone surrogates: valid Unicode for any JSON reader
        rejects[reject["path"]] = reject
    return records, rejects, manifest


def pixels(record: ImageRecord) -> np.ndarray:
    img = Image.open(io.BytesIO(record.encoded))
    assert img.format.lower() == record.format  # image/format tells the truth
    assert (img.width, img.height, len(img.getbands())) == (record.width, record.height, record.channels)
    return np.asarray(img).astype(int)


def close(actual, expected, tolerance=12) -> bool:
    return bool(np.all(np.abs(np.asarray(actual) - np.asarray(expected)) <= tolerance))


def same_picture(actual, expected) -> bool:
    """Equal colours at the centre of every 16x16 block (JPEG smears colour edges) and a small mean error."""
    actual = np.asarray(actual)
    return (
        actual.shape == expected.shape
        and close(actual[8::16, 8::16], expected[8::16, 8::16])
        and bool(np.abs(actual - expected).mean() < 4)
    )


def frames(fmt: str, colours, **save) -> bytes:
    images = [Image.new("RGB", (16, 16), c) for c in colours]
    return encode(images[0], fmt, save_all=True, append_images=images[1:], **save)


def build_source(src: pathlib.Path) -> tuple[dict, dict]:
    """SOURCE with every hostile case. Returns ({path: check(record)}, {path: reason})."""
    write_class_tree(src, {"a": 4, "b": 4}, size=(20, 16))
    a, b = src / "a", src / "b"
    upright = marker_image()
    records, rejects = {}, {}

    def put(path, data, check):
        (src / path).write_bytes(data)
        records[path] = check

    for i in range(4):
        records[f"a/a_{i:04d}.{'png' if i % 5 == 4 else 'jpg'}"] = lambda r: r.format == "jpeg"
        records[f"b/b_{i:04d}.jpg"] = lambda r: r.format == "jpeg"

    gray = image_bytes("JPEG", size=(20, 16), mode="L")
    put("a/gray.jpg", gray, lambda r: r.encoded == gray and (r.format, r.channels) == ("jpeg", 1))
    png = image_bytes("PNG", size=(10, 10))
    put("a/png_named.jpg", png, lambda r: r.encoded == png and r.format == "png")
    jpeg = image_bytes("JPEG", size=(10, 10))
    put("a/jpeg_named.png", jpeg, lambda r: r.encoded == jpeg and r.format == "jpeg")
    red = np.full((16, 16, 3), (220, 30, 30), np.uint8)
    put(
        "a/cmyk.jpg",
        encode(Image.fromarray(red).convert("CMYK"), "JPEG", quality=95),
        lambda r: r.format == "jpeg" and r.channels == 3 and close(pixels(r), red),
    )
    put("a/ycck.jpg", ycck_jpeg(upright), lambda r: r.format == "jpeg" and same_picture(pixels(r), upright))
    level = np.zeros((8, 8), np.uint16)
    level[:, :4], level[:, 4:] = 0x8000, 0xFFFF
    put(
        "a/gray16.png",
        encode(Image.fromarray(level, "I;16"), "PNG"),
        lambda r: r.format == "png" and r.channels == 1 and pixels(r)[0, 0] == 128 and pixels(r)[0, 7] == 255,
    )
    put(
        "a/gray16_dark.png",
        encode(Image.fromarray(np.full((8, 8), 200, np.uint16), "I;16"), "PNG"),
        lambda r: r.channels == 1 and pixels(r).max() == 0,
    )  # 200 of 65535 is black, not 200 of 255
    rgb16 = np.zeros((8, 8, 3), np.uint16)
    rgb16[...] = (0xFF00, 0x8000, 0x0000)
    put("a/rgb16.png", png_raw(rgb16, 16, 2), lambda r: r.format == "png" and close(pixels(r)[0, 0], (255, 128, 0), 1))
    palette = Image.fromarray(np.array([[0, 1] * 4] * 8, np.uint8), "P")
    palette.putpalette([0, 0, 0, 10, 200, 10] + [0] * 762)
    put(
        "a/palette_transparent.png",
        encode(palette, "PNG", transparency=0),
        lambda r: (
            r.channels == 3 and close(pixels(r)[0, 0], (255, 255, 255), 0) and close(pixels(r)[0, 1], (10, 200, 10), 0)
        ),
    )
    la = np.zeros((8, 8, 2), np.uint8)
    la[..., 0], la[:, 4:, 1] = 50, 255
    put(
        "a/la.png",
        encode(Image.fromarray(la, "LA"), "PNG"),
        lambda r: close(pixels(r)[0, 0], (255, 255, 255), 0) and close(pixels(r)[0, 7], (50, 50, 50), 0),
    )
    rgba = np.zeros((8, 8, 4), np.uint8)
    rgba[...] = (0, 0, 255, 0)
    rgba[:, 4:, 3] = 255
    put(
        "a/rgba.png",
        encode(Image.fromarray(rgba, "RGBA"), "PNG"),
        lambda r: close(pixels(r)[0, 0], (255, 255, 255), 0) and close(pixels(r)[0, 7], (0, 0, 255), 0),
    )
    for o in range(2, 9):
        put(
            f"a/exif_{o}.jpg",
            oriented(upright, o),
            lambda r: (r.width, r.height, r.format) == (48, 32, "jpeg") and same_picture(pixels(r), upright),
        )
    put("a/exif_6.png", oriented(upright, 6, "PNG"), lambda r: r.format == "png" and close(pixels(r), upright, 0))
    put(
        "b/animated.gif",
        frames("GIF", [(255, 0, 0), (0, 0, 255)]),
        lambda r: r.format == "png" and close(pixels(r)[0, 0], (255, 0, 0), 0),
    )
    put(
        "b/animated.png",
        frames("PNG", [(255, 0, 0), (0, 0, 255)]),
        lambda r: r.format == "png" and close(pixels(r)[0, 0], (255, 0, 0), 0),
    )
    put(
        "b/camera.mpo.jpg",
        frames("MPO", [(255, 0, 0), (0, 0, 255)]),
        lambda r: r.format == "jpeg" and close(pixels(r)[0, 0], (255, 0, 0)),
    )
    # The same image under another path is another input; in another class it is a label conflict,
    # which the default --conflicts reject rejects whole, naming the other member.
    os.symlink("../a/gray.jpg", b / "alias.jpg")
    del records["a/gray.jpg"]
    rejects["a/gray.jpg"] = rejects["b/alias.jpg"] = "label_conflict"
    cafe = image_bytes("JPEG", size=(12, 12), seed=3)
    with open(os.fsencode(b) + b"/caf\xe9.jpg", "wb") as f:  # Latin-1 name: not UTF-8
        f.write(cafe)
    records["b/caf\udce9.jpg"] = lambda r: r.encoded == cafe

    def reject(path, data, reason):
        (src / path).write_bytes(data)
        rejects[path] = reason

    reject("b/zero.jpg", b"", "empty")
    reject("b/truncated.jpg", image_bytes("JPEG", size=(200, 200))[:700], "undecodable")
    reject("b/truncated.png", image_bytes("PNG", size=(200, 200))[:400], "undecodable")
    reject("b/noise.jpg", np.random.default_rng(1).integers(0, 256, 3000, np.uint8).tobytes(), "undecodable")
    reject("b/bomb.png", bomb_png(), "too_large")
    reject("b/.DS_Store", b"\0\0\0\1Bud1", "hidden")
    (src / ".git").mkdir()
    reject(".git/config", b"[core]", "hidden")
    reject("notes.txt", b"not in a class folder", "no_class")
    os.symlink(src / "nowhere.jpg", b / "broken_link.jpg")
    rejects["b/broken_link.jpg"] = "broken_symlink"
    os.symlink("loop_b.jpg", b / "loop_a.jpg")
    os.symlink("loop_a.jpg", b / "loop_b.jpg")
    rejects["b/loop_a.jpg"] = rejects["b/loop_b.jpg"] = "symlink_loop"
    os.symlink(".", a / "folder_loop")
    rejects["a/folder_loop"] = "symlink_loop"
    os.mkfifo(b / "fifo.jpg")  # reading it would block forever
    rejects["b/fifo.jpg"] = "unreadable"
    with open(os.fsencode(b) + b"/bad\xff.jpg", "wb") as f:
        f.write(b"not an image at all")
    rejects["b/bad\\xff.jpg"] = "undecodable"
    return records, rejects


def test_every_hostile_input_is_written_truthfully_or_rejected_with_a_reason(tmp_path, run_cli):
    src, out = tmp_path / "src", tmp_path / "out"
    expected_records, expected_rejects = build_source(src)
    result = run_cli("convert", src, out, "--num-shards", 2, "--workers", 2)
    assert result.exit_code == 0, result.output
    records, rejects, manifest = read_output(out)

    names = {raw.decode("utf-8", "surrogateescape") for raw in records}
    assert names == set(expected_records)
    assert b"b/caf\xe9.jpg" in records  # image/filename holds the raw bytes of the name
    failed = [
        path for path, check in expected_records.items() if not check(records[path.encode("utf-8", "surrogateescape")])
    ]
    assert failed == []
    assert {path: r["reason"] for path, r in rejects.items()} == expected_rejects
    assert rejects["b/bad\\xff.jpg"]["path_hex"] == b"b/bad\xff.jpg".hex()
    assert rejects["b/fifo.jpg"]["detail"] == "not a regular file (a FIFO)"
    assert rejects["b/bomb.png"]["detail"] == "12000x12000 = 144000000 pixels exceeds --max-pixels 89478485"
    assert rejects["a/gray.jpg"]["detail"] == "a duplicate of b/alias.jpg (b) with another label"
    inputs = manifest["inputs"]
    assert inputs["found"] == len(expected_records) + len(expected_rejects) == 46
    assert (inputs["written"], inputs["rejected"], inputs["capped"]) == (
        len(expected_records),
        len(expected_rejects),
        0,
    )
    assert inputs["found"] == inputs["written"] + inputs["rejected"] + inputs["capped"]


def test_non_utf8_class_folder_is_a_clear_error(tmp_path, run_cli):
    write_class_tree(tmp_path / "src", {"a": 2})
    os.makedirs(os.fsencode(tmp_path / "src") + b"/b\xe9")
    with open(os.fsencode(tmp_path / "src") + b"/b\xe9/x.jpg", "wb") as f:
        f.write(image_bytes())
    result = run_cli("convert", tmp_path / "src", tmp_path / "out")
    assert result.exit_code == 1
    assert result.output == (
        "Error: class folder name 'b\\\\xe9' is not UTF-8; class names go into records and "
        "the manifest as text: rename the folder\n"
    )


@pytest.fixture
def label_source(tmp_path):
    """SOURCE with a label file whose rows cover every label-file case."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for i in range(1, 8):
        (src / "a" / f"ok{i}.jpg").write_bytes(image_bytes("JPEG", size=(16, 16), seed=i))
    (src / "a" / "big.jpg").write_bytes(image_bytes("JPEG", size=(30, 30)))
    (src / "a" / "dir.jpg").mkdir()
    os.mkfifo(src / "a" / "fifo.jpg")
    (tmp_path / "outside.jpg").write_bytes(image_bytes("JPEG", size=(16, 16), seed=20))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "abs.jpg").write_bytes(image_bytes("JPEG", size=(16, 16), seed=21))
    rows = [
        ("a/ok1.jpg,cat", None),
        ("a/ok2.jpg,dog", None),
        ("a/ok1.jpg,dog", ("a/ok1.jpg", "duplicate")),
        ("./a/./ok1.jpg,cat", ("a/ok1.jpg", "duplicate")),  # the same path spelled otherwise
        ("./a/ok3.jpg,cat", None),
        ("a/short.jpg", ("labels.csv:7", "bad_row")),  # a missing field
        ("a/ok4.jpg,cat,extra", ("labels.csv:8", "bad_row")),  # an extra field
        ("a/ok5.jpg,bird", ("a/ok5.jpg", "unknown_label")),
        ("../outside.jpg,cat", ("../outside.jpg", "outside_source")),
        (f"{tmp_path}/elsewhere/abs.jpg,dog", (f"{tmp_path}/elsewhere/abs.jpg", "outside_source")),
        ("../src/a/ok6.jpg,dog", None),  # leaves SOURCE and comes back: inside
        ("a/dir.jpg,cat", ("a/dir.jpg", "unreadable")),
        ("a/fifo.jpg,dog", ("a/fifo.jpg", "unreadable")),
        ("a/gone.jpg,dog", ("a/gone.jpg", "missing")),
        ("a/big.jpg,cat", ("a/big.jpg", "too_large")),  # 900 pixels > --max-pixels 500
        (",cat", ("labels.csv:17", "bad_row")),
        ("a/ok7.jpg,", ("a/ok7.jpg", "empty_label")),
    ]
    (tmp_path / "labels.csv").write_text("path,label\n" + "".join(r + "\n" for r, _ in rows))
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    return src, {r for _, r in rows if r is not None}


def convert_labels(run_cli, tmp_path, out, *extra):
    result = run_cli(
        "convert",
        tmp_path / "src",
        out,
        "--labels",
        tmp_path / "labels.csv",
        "--classes",
        tmp_path / "classes.txt",
        "--max-pixels",
        500,
        "--num-shards",
        1,
        *extra,
    )
    assert result.exit_code == 0, result.output
    return read_output(out)


def test_label_file_rows_are_written_or_rejected(tmp_path, run_cli, label_source):
    src, expected_rejects = label_source
    records, rejects, manifest = convert_labels(run_cli, tmp_path, tmp_path / "out")
    assert sorted(records) == [b"a/ok1.jpg", b"a/ok2.jpg", b"a/ok3.jpg", b"a/ok6.jpg"]
    assert records[b"a/ok1.jpg"].text == "cat"  # the first row wins
    assert {(p, r["reason"]) for p, r in rejects.items()} <= expected_rejects
    assert sorted(r["reason"] for r in rejects.values()) == sorted(
        [
            "duplicate",
            "bad_row",
            "bad_row",
            "unknown_label",
            "outside_source",
            "outside_source",
            "unreadable",
            "unreadable",
            "missing",
            "too_large",
            "bad_row",
            "empty_label",
        ]
    )
    assert len(rejects) == 12  # two duplicate rows of a/ok1.jpg share a path in the mapping
    assert manifest["inputs"]["found"] == 17 == manifest["inputs"]["written"] + manifest["inputs"]["rejected"] + 0
    assert manifest["inputs"]["rejected"] == 13
    assert manifest["options"]["allow_outside_source"] is False


def test_paths_outside_source_only_with_opt_in(tmp_path, run_cli, label_source):
    records, rejects, manifest = convert_labels(run_cli, tmp_path, tmp_path / "out", "--allow-outside-source")
    outside = (tmp_path / "outside.jpg").read_bytes()
    absolute = f"{tmp_path}/elsewhere/abs.jpg".encode()
    # image/filename is the path as the label file wrote it, normalized
    assert records[b"../outside.jpg"].encoded == outside and records[b"../outside.jpg"].text == "cat"
    assert records[absolute].encoded == (tmp_path / "elsewhere" / "abs.jpg").read_bytes()
    assert "outside_source" not in {r["reason"] for r in rejects.values()}
    assert manifest["inputs"]["written"] == 6 and manifest["inputs"]["found"] == 17
    assert manifest["options"]["allow_outside_source"] is True


def _drop_file_permission_override():
    """Runs in the child before exec: root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
    is held to file permissions like any user (it stays the owner of the test files)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone after exec
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) refused")


def run_unprivileged(*args):
    """`prep convert ...` in a subprocess that file permissions apply to, even when tests run as root."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    preexec = _drop_file_permission_override if os.geteuid() == 0 else None
    try:
        return subprocess.run(
            [sys.executable, "-m", "prep.cli", "convert", *map(str, args)],
            env=env,
            preexec_fn=preexec,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.SubprocessError as exc:
        if "prctl" in str(exc):
            pytest.skip(f"cannot drop root's permission override here: {exc}")
        raise


def test_pillow_warnings_do_not_reach_the_terminal(tmp_path):
    src = tmp_path / "src"
    for label in ("a", "b"):
        (src / label).mkdir(parents=True)
        (src / label / "exif.jpg").write_bytes(truncated_exif_jpeg())
        (src / label / "plain.jpg").write_bytes(image_bytes("JPEG"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "prep.cli",
            "convert",
            str(src),
            str(tmp_path / "out"),
            "--workers",
            "2",
            "--no-progress",
            "--duplicates",
            "off",
        ],  # a and b hold the same images
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "written 4" in done.stdout
    assert "Truncated File Read" not in done.stderr and "Warning" not in done.stderr, done.stderr


def test_unreadable_files_and_folders_are_rejected_and_unwritable_output_is_an_error(tmp_path):
    src = tmp_path / "src"
    write_class_tree(src, {"a": 3, "b": 3})
    locked = src / "a" / "locked.jpg"
    locked.write_bytes(image_bytes())
    locked_dir = src / "b" / "locked_dir"
    locked_dir.mkdir()
    (locked_dir / "inside.jpg").write_bytes(image_bytes())
    read_only_out = tmp_path / "read_only_out"
    read_only_out.mkdir()
    for path, mode in ((locked, 0), (locked_dir, 0), (read_only_out, 0o555)):
        path.chmod(mode)
    try:
        result = run_unprivileged(src, tmp_path / "out", "--num-shards", 1)
        assert result.returncode == 0, result.stderr
        rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
        assert rejects == [
            {"path": "a/locked.jpg", "reason": "unreadable", "detail": "Permission denied"},
            {"path": "b/locked_dir", "reason": "unreadable", "detail": "cannot list folder: Permission denied"},
        ]
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert manifest["inputs"]["found"] == 8 and manifest["inputs"]["written"] == 6

        result = run_unprivileged(src, read_only_out, "--num-shards", 1)
        assert result.returncode == 1
        assert result.stderr == f"Error: cannot write {read_only_out}/.prep-tmp: Permission denied\n"
        assert os.listdir(read_only_out) == []
    finally:
        for path in (locked, locked_dir, read_only_out):
            path.chmod(0o755)
