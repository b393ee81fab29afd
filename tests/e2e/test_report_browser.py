"""`prep report` pages opened in headless Chromium: what a user sees, on the sample, on a
dataset with rejects and an empty class, and on a synthetic 1,000,000-example, 1,000-class
dataset. Skipped, with the reason, only where no browser is available."""

from __future__ import annotations

import io
import json
import pathlib
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.support import browser
from tests.support.imagegen import image_bytes, write_class_tree

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXECUTABLE, WHY = browser.chromium()
needs_browser = pytest.mark.skipif(EXECUTABLE is None, reason=f"no browser for the report tests: {WHY}")


def _checks(visit: browser.PageVisit) -> None:
    """What every report page must do in a browser."""
    assert visit.errors == []
    assert visit.requests == [visit.url]  # the page itself, nothing else
    assert visit.images and all(i["complete"] and i["natural_width"] > 0 for i in visit.images), [
        i for i in visit.images if not i["natural_width"]
    ]
    pixels = np.asarray(Image.open(io.BytesIO(visit.screenshot)).convert("L"), dtype=np.float64)
    assert pixels.std() > 20  # not a blank (or single-colour) page


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "shapes"
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(
        main,
        [
            "convert",
            str(ROOT / "samples" / "shapes"),
            str(out),
            "--split",
            "train=0.8,validation=0.1,test=0.1",
            "--num-shards",
            "2",
            "--no-progress",
            "--report",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {out / 'report.html'}" in result.output
    return out


@pytest.fixture(scope="module")
def dirty(tmp_path_factory):
    """Rejects of several reasons, thumbnails for those that decode, and a class whose every input is rejected."""
    base = tmp_path_factory.mktemp("dirty")
    src = base / "src"
    write_class_tree(src, {"apple": 8, "banana": 6}, size=(40, 30))
    whole = image_bytes("JPEG", size=(64, 64), seed=3)
    (src / "banana" / "cut.jpg").write_bytes(whole[: len(whole) * 2 // 3])  # truncated: decodes in part
    (src / "banana" / "zero.jpg").write_bytes(b"")
    (src / "cherry").mkdir()
    (src / "cherry" / "notes.jpg").write_bytes(b"not an image at all")
    (src / "cherry" / "half.png").write_bytes(image_bytes("PNG", size=(32, 32), seed=5)[:120])
    out = base / "out"
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(
        main, ["convert", str(src), str(out), "--num-shards", "2", "--no-progress"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["report", str(out), "--verify"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


@needs_browser
def test_sample_report_in_browser(sample):
    visit = browser.visit(sample / "report.html")
    _checks(visit)
    manifest = json.loads((sample / "manifest.json").read_text())
    for name in manifest["labels"]:
        assert name in visit.text
    train = manifest["splits"]["train"]
    assert f"{train['examples']}" in visit.text
    for name, n in train["class_counts"].items():  # the class table's row: id, name, per-split counts
        assert f"{name}\t{manifest['splits']['test']['class_counts'][name]}\t{n}\t" in visit.text
    assert "train: balanced" in visit.text
    assert "No input was rejected." in visit.text
    # samples per class: 8 thumbnails for each of the 5 classes, decoded from the shards
    assert sum(1 for i in visit.images if i["src"].startswith("data:image/jpeg")) == 5 * 8


@needs_browser
def test_report_with_rejects_and_an_empty_class(dirty):
    def open_rejects(page):
        for summary in page.query_selector_all("details.reason-block > summary"):
            if summary.evaluate("s => !s.parentElement.open"):
                summary.click()
        return {
            "reject_images": page.eval_on_selector_all(".reject img", "els => els.map(e => [e.alt, e.naturalWidth])")
        }

    visit = browser.visit(dirty / "report.html", open_rejects)
    _checks(visit)
    text = visit.text
    for reason in ("undecodable", "empty"):
        assert reason in text
    for path in ("banana/cut.jpg", "banana/zero.jpg", "cherry/notes.jpg", "cherry/half.png"):
        assert path in text
    assert "1 class(es) with no example" in text and "cherry" in text
    shown = dict(visit.extra["reject_images"])
    assert shown.get("banana/cut.jpg", 0) > 0  # a truncated JPEG still shows what it holds
    assert "cherry/notes.jpg" not in shown and "banana/zero.jpg" not in shown
    assert "OK: every shard and record matches the manifest" in text


@needs_browser
def test_report_without_its_source_still_opens(dirty, tmp_path):
    copy = tmp_path / "moved"
    shutil.copytree(dirty, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["run"]["source"] = str(tmp_path / "gone")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(main, ["report", str(copy), "-o", str(tmp_path / "r.html")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    visit = browser.visit(tmp_path / "r.html")
    _checks(visit)
    assert f"source {tmp_path / 'gone'} is not a folder here" in visit.text
    assert "banana/cut.jpg" in visit.text


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    from tests.support import large_dataset

    out = large_dataset.write(tmp_path_factory.mktemp("large") / "big")
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(main, ["report", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out / "report.html"


def test_large_report_stays_small(large):
    """1,000,000 examples in 1,000 classes and 640 shards: under 10 MB, charts aggregated, tables paginated."""
    html = large.read_text()
    assert large.stat().st_size < 10_000_000
    assert "960 others (mean)" in html  # the class chart: 20 largest, 20 smallest and one bar for the rest
    assert html.count("<svg") == 4  # one class chart and a heat map per split, ...
    assert "in 60 x 100 cells" in html and "in 60 x 64 cells" in html  # ... binned
    assert html.count('class="thumb"') == 2000  # the sample grid's budget: 2 per class
    assert "and 1,467 more in rejects.jsonl" in html  # 200 of 1,667 listed per reason


@needs_browser
def test_large_report_in_browser(large):
    def page_through(page):
        rows = lambda: page.eval_on_selector_all(
            "#class-table tbody tr", "els => els.filter(e => e.offsetParent).length"
        )
        first = rows()
        page.fill("input.filter", "class_0999")
        found = page.inner_text("#class-table tbody")
        return {"first": first, "filtered": found}

    visit = browser.visit(large, page_through)
    _checks(visit)
    assert visit.extra["first"] == 25
    assert "class_0999" in visit.extra["filtered"] and "class_0998" not in visit.extra["filtered"]
    assert "page 1 of 40 (1000 items)" in visit.text
    assert "train: balanced" in visit.text
