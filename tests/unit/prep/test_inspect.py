"""`prep inspect`: the summary from the manifest, the contact sheet from the shards, the plot, the errors."""

import io
import json

import numpy as np
import pytest
from PIL import Image

from prep import pictures
from prep.pictures import SheetLayout
from tests.support import datasets

# Each class is one colour (with a little noise), so a tile shows which class it came from.
COLOURS = {"blue": (30, 60, 220), "green": (40, 200, 60), "red": (220, 40, 40)}
COUNTS = {"blue": 3, "green": 12, "red": 9}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    rng = np.random.default_rng(0)
    for name, n in COUNTS.items():
        (root / "src" / name).mkdir(parents=True)
        for i in range(n):
            size = (24 + 8 * (i % 3), 18)  # varied sizes: thumbnails must fit any shape
            pixels = np.clip(np.array(COLOURS[name]) + rng.integers(-15, 15, (size[1], size[0], 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8), "RGB").save(root / "src" / name / f"{i}.png")
    (root / "src" / "red" / "broken.jpg").write_bytes(b"not an image")
    return datasets.convert(
        root / "src", root / "out", "--split", "train=0.75,test=0.25", "--num-shards", 2, "--seed", 5
    )


def test_summary_json(dataset, run_cli):
    result = run_cli("inspect", dataset, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    manifest = datasets.load(dataset)
    assert summary["labels"] == ["blue", "green", "red"] and summary["seed"] == 5
    assert summary["options"] == manifest["options"] and summary["rejects"] == 1
    assert summary["totals"] == {
        "examples": 24,
        "shards": 4,
        "bytes": sum(s["bytes"] for info in manifest["splits"].values() for s in info["shards"]),
        "classes": 3,
        "splits": 2,
    }
    train = summary["splits"]["train"]
    assert train["examples"] == 18 and train["num_shards"] == 2 and train["share"] == 0.75
    assert train["per_shard"] == {"min": 9, "max": 9}
    assert train["classes"]["blue"] == {"count": 2, "share": round(2 / 18, 6), "per_shard": {"min": 1, "max": 1}}
    assert train["classes"]["green"]["count"] == 9 and train["classes"]["green"]["per_shard"] == {"min": 4, "max": 5}
    test = summary["splits"]["test"]
    assert {k: v["count"] for k, v in test["classes"].items()} == {"blue": 1, "green": 3, "red": 2}
    assert test["classes"]["blue"]["per_shard"] == {"min": 0, "max": 1}


def test_summary_text(dataset, run_cli):
    result = run_cli("inspect", dataset)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{dataset}: manifest version 2, written by tfrecord-prep ")
    assert lines[1].startswith("24 records in 4 shards (") and lines[1].endswith("), 3 classes, 2 splits")
    assert lines[2].startswith("seed 5; options: ") and "num_shards=2" in lines[2] and "resize" not in lines[2]
    assert lines[3] == "inputs: found 25  written 24  rejected 1  capped 0  converted 0"
    assert lines[4] == "rejects by reason: undecodable 1 (see rejects.jsonl)"
    assert lines[6].split() == ["split", "records", "share", "shards", "bytes", "records/shard", "bytes/shard"]
    assert lines[7].split()[:3] == ["test", "6", "25.0%"] and lines[7].split()[6] == "3"  # bytes is two words
    at = lines.index("train: 18 records in 2 shards")
    assert lines[at + 1].split() == ["class", "records", "share", "per", "shard"]
    assert [line.split() for line in lines[at + 2 : at + 5]] == [
        ["blue", "2", "11.1%", "1"],
        ["green", "9", "50.0%", "4-5"],
        ["red", "7", "38.9%", "3-4"],
    ]


def _tile_pixels(sheet, layout, row, column):
    return np.asarray(sheet.crop(layout.tile_box(row, column)), dtype=np.float64)


def test_contact_sheet(dataset, tmp_path, run_cli):
    path = tmp_path / "sheet.png"
    result = run_cli("inspect", dataset, "--contact-sheet", path, "--per-class", 4, "--tile", 32, "--split", "train")
    assert result.exit_code == 0, result.output
    layout = SheetLayout(rows=3, columns=4, tile=32)
    assert layout.size == (160 + 4 * (32 + 4) + 4, 3 * (32 + 4) + 4)
    assert result.output.splitlines()[-1] == f"wrote {path} ({layout.size[0]}x{layout.size[1]}, 10 images)"
    sheet = Image.open(path)
    assert sheet.format == "PNG" and sheet.size == layout.size
    sheet = sheet.convert("RGB")
    available = {"blue": 2, "green": 4, "red": 4}  # train holds 2 blue images
    for row, name in enumerate(["blue", "green", "red"]):
        label = np.asarray(sheet.crop(layout.label_box(row)).convert("L"))
        assert (label < 100).sum() > 20, f"no label text for {name}"
        for column in range(4):
            tile = _tile_pixels(sheet, layout, row, column)
            if column < available[name]:
                # The image fills the tile's width at least, in the class's colour: not blank, not another class.
                centre = tile[8:24, 8:24].reshape(-1, 3).mean(axis=0)
                assert np.abs(centre - COLOURS[name]).max() < 30, (name, column, centre)
            else:
                assert (tile == pictures.EMPTY).all(), (name, column)


def test_contact_sheet_layout_is_what_the_cli_writes(dataset, tmp_path, run_cli):
    path = tmp_path / "sheet.png"
    assert run_cli("inspect", dataset, "--json", "--contact-sheet", path).exit_code == 0
    assert Image.open(path).size == SheetLayout(rows=3, columns=8).size == (160 + 8 * 100 + 4, 3 * 100 + 4)


def test_plot(dataset, tmp_path, run_cli):
    path = tmp_path / "plot.png"
    result = run_cli("inspect", dataset, "--plot", path)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"wrote {path} (600x450)"
    image = Image.open(io.BytesIO(path.read_bytes()))
    assert image.format == "PNG" and image.size == (600, 450)
    pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10  # bars, axes and text, not a blank canvas


@pytest.mark.parametrize(
    "args, code, error",
    [
        (lambda t, d: ["inspect", t / "nope"], 2, "Error: OUTPUT {t}/nope does not exist"),
        (
            lambda t, d: ["inspect", t / "empty"],
            1,
            "Error: {t}/empty/manifest.json does not exist: {t}/empty is not a finished dataset",
        ),
        (
            lambda t, d: ["inspect", d, "--contact-sheet", t / "sheet.jpg"],
            2,
            "Error: Invalid value for '--contact-sheet': '{t}/sheet.jpg' must be a .png file name",
        ),
        (
            lambda t, d: ["inspect", d, "--plot", "plot"],
            2,
            "Error: Invalid value for '--plot': 'plot' must be a .png file name",
        ),
        (
            lambda t, d: ["inspect", d, "--per-class", 0],
            2,
            "Error: Invalid value for '--per-class': 0 is not in the range 1<=x<=100.",
        ),
        (
            lambda t, d: ["inspect", d, "--contact-sheet", t / "sheet.png", "--split", "valid"],
            2,
            "Error: Invalid value for '--split': 'valid' is not a split of {d} (splits: test, train)",
        ),
        (
            lambda t, d: ["inspect", d, "--contact-sheet", t / "no" / "sheet.png"],
            1,
            "Error: cannot access {t}/no/sheet.png: No such file or directory",
        ),
    ],
)
def test_errors(dataset, tmp_path, run_cli, args, code, error):
    (tmp_path / "empty").mkdir()
    result = run_cli(*args(tmp_path, dataset))
    assert result.exit_code == code
    assert result.output.splitlines()[-1] == error.format(t=tmp_path, d=dataset)
    assert not (tmp_path / "sheet.png").exists()


def test_corrupt_shard_ends_in_one_line_error(dataset, tmp_path, run_cli):
    out = datasets.copy(dataset, tmp_path / "out")
    shard = out / "train-00000-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    data[40] ^= 1
    shard.write_bytes(data)
    result = run_cli("inspect", out, "--contact-sheet", tmp_path / "sheet.png")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: train-00000-of-00002.tfrecord: record 0 at byte 0: data CRC mismatch"
    )


def test_help(run_cli):
    text = run_cli("inspect", "--help").output
    assert "Summarize the dataset in OUTPUT" in text and "--contact-sheet FILE.png" in text and "--plot" in text
    assert "inspect" in run_cli("--help").output


def test_sheet_tiles_for_damaged_images_and_empty_classes():
    from prep.core.schema import ImageRecord

    good = io.BytesIO()
    Image.new("RGB", (40, 10), COLOURS["red"]).save(good, "PNG")
    records = {
        0: [
            ImageRecord.build(good.getvalue(), "png", 10, 40, 3, 0, "red", "a.png"),
            ImageRecord.build(b"\x89PNG broken", "png", 10, 40, 3, 0, "red", "b.png"),
        ],
        1: [],
    }
    layout = SheetLayout(rows=2, columns=3, tile=20)
    sheet = pictures.render_sheet(
        ["red", "a-very-long-class-name-that-cannot-fit-in-the-label-column"], records, layout
    )
    assert sheet.size == layout.size
    wide = _tile_pixels(sheet, layout, 0, 0)  # 40x10 fitted into 20x20: 20x5, centred, the rest empty
    assert (wide[8:12] == COLOURS["red"]).all() and (wide[:7] == pictures.EMPTY).all()
    assert (_tile_pixels(sheet, layout, 0, 1) == pictures.MISSING).all()
    for row, column in ((0, 2), (1, 0), (1, 1), (1, 2)):
        assert (_tile_pixels(sheet, layout, row, column) == pictures.EMPTY).all()
    label = np.asarray(sheet.crop(layout.label_box(1)).convert("L"))
    assert (label < 100).any() and (label[:, -4:] == 255).all()  # the long name is cut before the tiles
