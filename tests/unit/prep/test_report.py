"""`prep report` without a browser: what the page says (pure content), what it reads, and that
user-controlled text cannot break out of it. Browser checks: tests/e2e/test_report_browser.py."""

from __future__ import annotations

import json
import os
import threading
from types import SimpleNamespace as NS

import numpy as np
import pytest

from prep.report import content, thumbs
from prep.report.dataset import load_manifest, read_rejects
from prep.report.page import build
from tests.support import large_dataset
from tests.support.imagegen import image_bytes


def _manifest(counts: dict[str, dict[str, int]], **inputs):
    """counts: split -> {class: records}; one shard per split."""
    labels = tuple(next(iter(counts.values())))
    splits = {
        s: NS(
            name=s,
            examples=sum(c.values()),
            bytes=0,
            num_shards=1,
            class_counts=c,
            shards=(
                NS(file=f"{s}-00000-of-00001.tfrecord", index=0, examples=sum(c.values()), bytes=0, class_counts=c),
            ),
        )
        for s, c in counts.items()
    }
    base = dict(
        found=0,
        written=0,
        rejected=0,
        capped=0,
        converted=0,
        rejected_by_reason={},
        capped_by_class={},
        empty_classes=None,
    )
    return NS(
        labels=labels,
        splits=splits,
        options={},
        inputs=NS(**(base | inputs)),
        examples=sum(s.examples for s in splits.values()),
    )


def test_limits_name_the_bad_value():
    with pytest.raises(ValueError, match=r"Limits.thumbnails must be an int >= 1, got 0"):
        content.Limits(thumbnails=0)
    with pytest.raises(ValueError, match=r"Limits.tile must be in \[16, 512\], got 8"):
        content.Limits(tile=8)


def test_class_weights_are_loaders_balanced_weights_on_train():
    m = _manifest({"test": {"a": 1, "b": 1, "c": 0}, "train": {"a": 30, "b": 10, "c": 0}})
    rows = content.class_rows(m)
    assert content.weight_split(m) == "train"
    assert [round(r["weight"], 6) for r in rows] == [round(40 / (2 * 30), 6), 2.0, 0.0]
    assert [r["total"] for r in rows] == [31, 11, 0]


def test_chart_keeps_every_class_up_to_the_limit_then_aggregates_the_middle():
    m = _manifest({"train": {f"c{i}": i + 1 for i in range(10)}})
    assert content.chart_bars(m, 10).names == [f"c{i}" for i in range(10)]
    bars = content.chart_bars(m, 4)
    assert bars.names == ["c9", "c8", "6 others (mean)", "c1", "c0"]
    assert bars.values["train"] == [10, 9, (3 + 4 + 5 + 6 + 7 + 8) / 6, 2, 1]
    assert (bars.others, bars.others_count) == (2, 6)


def test_heat_map_is_exact_when_small_and_keeps_the_worst_cell_when_binned():
    matrix = np.full((100, 300), 4)
    exact = content.heat_map(matrix[:3, :5], 60, 100)
    assert not exact.binned and exact.cells.shape == (3, 5) and not exact.cells.any()
    matrix[57, 211] = 9  # one shard holds 5 records too many of class 57
    heat = content.heat_map(matrix, 60, 100)
    assert heat.binned and heat.cells.shape == (60, 100)
    row = np.searchsorted(heat.row_edges, 57, side="right") - 1
    column = np.searchsorted(heat.column_edges, 211, side="right") - 1
    assert heat.cells[row, column] == pytest.approx(5 - 5 / 300)
    assert np.abs(np.delete(heat.cells[row], column)).max() < 1  # the class's other shards: just below its mean


def test_balance_verdict_names_the_shard():
    m = _manifest({"train": {"a": 4, "b": 2}})
    assert content.balance_verdict(m, "train") == []
    shards = (
        NS(file="train-00000-of-00002.tfrecord", class_counts={"a": 4, "b": 1}),
        NS(file="train-00001-of-00002.tfrecord", class_counts={"a": 0, "b": 1}),
    )
    m.splits["train"].shards = shards
    problems = content.balance_verdict(m, "train")
    assert any(p.startswith("train-00000-of-00002.tfrecord: unbalanced: holds 4 of class 'a'") for p in problems)


def test_grid_shares_the_thumbnail_budget():
    m = _manifest({"train": {f"c{i}": 5 for i in range(10)} | {"empty": 0}})
    assert content.grid_plan(m, content.Limits(thumbnails=1000, per_class=8)) == {i: 5 for i in range(10)} | {10: 0}
    plan = content.grid_plan(m, content.Limits(thumbnails=7, per_class=8))
    assert plan == {i: 1 for i in range(7)}  # at least one each while the budget lasts


def test_warnings_say_what_became_of_empty_classes():
    kept = _manifest({"train": {"a": 3, "b": 0}}, found=5, written=3, rejected=2, empty_classes=["b"])
    assert content.warnings(kept)[0].startswith(
        "1 class(es) with no example (every input rejected, or none listed), kept in labels with their label id: b"
    )
    assert "2 input(s) rejected: see Rejects" in content.warnings(kept)
    dropped = _manifest({"train": {"a": 3}}, found=5, written=3, rejected=2, empty_classes=["b"])
    dropped.options = {"empty_classes": "drop"}
    assert "dropped from labels: b" in content.warnings(dropped)[0]
    wrong = _manifest({"train": {"a": 3}}, found=9, written=3)
    assert "the accounting does not add up: found 9 != written 3 + rejected 0 + capped 0" in content.warnings(wrong)


def test_read_rejects_counts_all_lists_some_and_keeps_exact_name_bytes(tmp_path):
    rows = [{"path": f"a/{i}.jpg", "reason": "empty", "detail": ""} for i in range(5)]
    rows.append({"path": "a/\\xff.jpg", "path_hex": (b"a/\xff.jpg").hex(), "reason": "undecodable", "detail": "x"})
    (tmp_path / "rejects.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rejects = read_rejects(str(tmp_path), limit=2)
    assert rejects.counts == {"empty": 5, "undecodable": 1} and rejects.note is None
    assert [r.path for r in rejects.listed["empty"]] == ["a/0.jpg", "a/1.jpg"]
    assert rejects.listed["undecodable"][0].raw_path == b"a/\xff.jpg"
    (tmp_path / "rejects.jsonl").write_text('{"path": "a"}\n')
    assert read_rejects(str(tmp_path), 2).note == "rejects.jsonl line 1 is not a reject record"
    os.remove(tmp_path / "rejects.jsonl")
    assert read_rejects(str(tmp_path), 2).note == f"rejects.jsonl is not in {tmp_path}"


def test_thumbnails_of_rejected_inputs(tmp_path):
    whole = image_bytes("JPEG", size=(64, 48), seed=1)
    (tmp_path / "cut.jpg").write_bytes(whole[: len(whole) * 2 // 3])
    (tmp_path / "text.jpg").write_bytes(b"not an image")
    assert thumbs.file_uri(str(tmp_path / "cut.jpg"), 32).startswith("data:image/jpeg;base64,")
    assert thumbs.file_uri(str(tmp_path / "text.jpg"), 32) is None
    assert thumbs.file_uri(str(tmp_path / "missing.jpg"), 32) is None
    os.mkfifo(tmp_path / "pipe.jpg")
    done = []
    worker = threading.Thread(target=lambda: done.append(thumbs.file_uri(str(tmp_path / "pipe.jpg"), 32)), daemon=True)
    worker.start()
    worker.join(5)
    assert done == [None]  # never opened: opening a FIFO would wait for a writer
    assert thumbs.input_path("/src", "a/b.jpg", None) == os.path.join("/src", "a", "b.jpg")
    assert thumbs.input_path("/src", "a/\\xff.jpg", b"a/\xff.jpg") == b"/src/a/\xff.jpg"


def test_page_escapes_user_text_and_survives_missing_shards(tmp_path):
    hostile = '<script>alert("x")</script>'
    out = large_dataset.write(
        tmp_path / "d",
        examples=40,
        classes=2,
        per_class=1,
        rejects=2,
        splits={"train": (0.8, 2), "test": (0.2, 1)},
        labels=[hostile, "b & c"],
    )
    with open(out / "rejects.jsonl", "a") as f:
        f.write(
            json.dumps({"path": "<img src=x onerror=alert(1)>.jpg", "reason": "undecodable", "detail": "</div>"}) + "\n"
        )
    os.remove(out / "train-00000-of-00002.tfrecord")  # the shard samples are read from
    html = build(str(out)).html
    assert hostile not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;.jpg" in html
    assert "b &amp; c" in html
    assert "train-00000-of-00002.tfrecord: No such file or directory" in html
    assert html.count("<script>") == 1  # ours, the pagination


def test_manifest_is_read_through_attributes(tmp_path):
    out = large_dataset.write(
        tmp_path / "d", examples=40, classes=3, per_class=1, rejects=0, splits={"train": (0.8, 2), "test": (0.2, 1)}
    )
    m = load_manifest(str(out))
    assert m.examples == 40 and len(m.labels) == 3 and m.inputs.rejected == 0
    assert sorted(m.splits) == ["test", "train"] and m.splits["train"].shards[1].index == 1
    assert m.run.source.endswith("gone")


def test_cli_errors_are_one_line(tmp_path, run_cli):
    missing = run_cli("report", tmp_path / "nope")
    assert missing.exit_code == 2 and f"Error: DATASET {tmp_path / 'nope'} does not exist" in missing.output
    not_dataset = run_cli("report", tmp_path)
    assert not_dataset.exit_code == 1
    assert not_dataset.output.strip() == (
        f"Error: {tmp_path / 'manifest.json'} does not exist: {tmp_path} is not a finished dataset"
    )
    bad_name = run_cli("report", tmp_path, "-o", tmp_path / "r.png")
    assert bad_name.exit_code == 2 and "must be an .html file name" in bad_name.output


def test_cli_writes_the_page_where_asked(tmp_path, run_cli):
    out = large_dataset.write(
        tmp_path / "d", examples=40, classes=3, per_class=1, rejects=0, splits={"train": (0.8, 2), "test": (0.2, 1)}
    )
    result = run_cli("report", out, "--output", tmp_path / "page.html")
    assert result.exit_code == 0 and result.output.startswith(f"wrote {tmp_path / 'page.html'} (")
    assert (tmp_path / "page.html").read_text().startswith("<!DOCTYPE html>")
    assert not (out / "report.html").exists()
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []  # written under a temporary name, renamed


def test_report_verify_on_a_damaged_dataset_writes_the_page_and_exits_1(tmp_path, run_cli):
    from tests.support.imagegen import write_class_tree

    write_class_tree(tmp_path / "src", {"a": 4, "b": 3})
    assert run_cli("convert", tmp_path / "src", tmp_path / "out", "--no-progress").exit_code == 0
    shard = next((tmp_path / "out").glob("train-*.tfrecord"))
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = run_cli("report", tmp_path / "out", "--verify")
    assert result.exit_code == 1
    assert "verify: 2 problem(s), listed on the page (prep verify prints them)" in result.output
    html = (tmp_path / "out" / "report.html").read_text()
    assert "FAILED: 2 problem(s)" in html and "data CRC mismatch" in html
    assert f"{shard.name}: record 0 at byte 0: data CRC mismatch" in html  # the sample grid's note, named once


def test_report_imports_neither_tensorflow_nor_beam(tmp_path):
    import subprocess
    import sys

    out = large_dataset.write(
        tmp_path / "d", examples=40, classes=3, per_class=1, rejects=1, splits={"train": (0.8, 2), "test": (0.2, 1)}
    )
    code = (
        "import sys; from prep.cli import main\n"
        "try:\n    main(['report', sys.argv[1], '--verify'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('tensorflow', 'apache_beam', 'loaders.dataset') if m in sys.modules))"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr
