"""A corpus of 359 odd and damaged files in 25 formats (tests/support/hostile_corpus.py) converts:
counts reconcile, no traceback, nothing on the console, the dataset verifies deep, and the
process tree stays under the memory bound of docs/benchmarks.md."""

import json

from tests.e2e.test_sandbox import MiB, run_cli_process, tree_bound
from tests.support.hostile_corpus import write_corpus

REASONS = {"empty", "undecodable", "too_large", "image_memory", "image_timeout", "crashed_decoder"}


def test_hostile_corpus_converts_within_bounds(tmp_path, run_cli):
    counts = write_corpus(tmp_path / "src")
    files = sum(counts.values())
    assert files >= 300 and len(counts) - 1 >= 20  # formats, besides the offenders' folder
    out = tmp_path / "out"
    result, peak = run_cli_process(
        "convert",
        tmp_path / "src",
        out,
        "--workers",
        2,
        "--num-shards",
        4,
        "--max-image-memory",
        "256MiB",
        "--image-timeout",
        10,
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no traceback, no codec chatter, no Python warning
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert inputs["found"] == files
    assert inputs["found"] == inputs["written"] + inputs["rejected"] + inputs["capped"]
    assert inputs["written"] >= 100 and set(inputs["rejected_by_reason"]) <= REASONS
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) == inputs["rejected"]
    assert any("ZIPDecode" in r["detail"] for r in rejects)  # libtiff's message, kept with its input
    assert peak < tree_bound(2, 256 * MiB), f"peak RSS of the process tree {peak / MiB:.0f} MiB"
    verified = run_cli("verify", out, "--deep")
    assert verified.exit_code == 0, verified.output
