"""The documentation: the MkDocs site builds in strict mode (a broken link or anchor, a page
left out of the nav, or a docstring that names a parameter the function lacks fails), and
every relative link in README.md points at a file of the repository."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_docs_site_builds_strictly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--site-dir",
            str(tmp_path / "site"),
            "--config-file",
            str(ROOT / "mkdocs.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    for command in ("convert", "verify", "inspect", "report"):  # generated from the click commands
        assert f"prep {command}" in cli
    assert "--shard-size" in cli and "--verify" in cli
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "steps_per_epoch" in api and "class_weights" in api and "global_batch_size" in api


def test_readme_links_point_at_files():
    text = (ROOT / "README.md").read_text()
    anchors = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, flags=re.M)
    }
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        if path and not (ROOT / path).exists():
            broken.append(target)
        elif not path and anchor not in anchors:
            broken.append(target)
    assert broken == []
