"""The bodies of `prep leakage` and of the report page (`prep report`, `prep convert --report`), which
`prep.cli` declares. They run once `prep.cli` has readied a remote dataset's file system (Beam's
FileSystems, which only `prep.cli` imports: tests/unit/test_layers.py); local or remote, every read and
write goes through `prep.core.storage`. No Beam, no TensorFlow.
"""

from __future__ import annotations

import json
import os
import sys

import click

from prep.cli_kit import Trouble, cannot_access
from prep.core import storage
from prep.core.errors import PrepError
from prep.core.manifest import FILENAME


def check_leakage_side(name: str) -> None:
    """A of `prep leakage A B` (or B) must be a dataset folder, or a remote dataset; exit 2 otherwise.
    A store that cannot be asked (no credentials, no network) is not a dataset that is missing."""
    if not storage.is_remote(name):
        if not os.path.isdir(name):
            raise Trouble(f"{name} {'is not a folder' if os.path.exists(name) else 'does not exist'}")
        return
    try:
        found = storage.exists(storage.join(name, FILENAME))
    except Exception as exc:  # each store raises its own types
        raise Trouble(f"cannot access {name}: {exc}") from None
    if not found:
        raise Trouble(f"{name} does not exist")


def run_leakage(a: str, b: str, as_json: bool, workers: int | None, progress: bool | None) -> bool:
    """Compares A and B and prints the pairs (text or JSON); returns whether any pair was found."""
    from prep import leakage as leakage_lib

    bars: list = []

    def bar(name):
        if not (sys.stderr.isatty() if progress is None else progress):
            return None

        def update(n, total):
            if not bars or bars[-1][0] != name:
                from tqdm import tqdm

                bars.append(
                    (name, tqdm(total=total, unit="image", desc=f"hashing {name}", file=sys.stderr, leave=False))
                )
            bars[-1][1].update(n)

        return update

    try:
        report = leakage_lib.compare(a, b, workers, bar)
    except PrepError as exc:
        raise Trouble(str(exc)) from None
    except OSError as exc:
        raise Trouble(cannot_access(exc)) from None
    finally:
        for _, shown in bars:
            shown.close()
    for side in (report.a, report.b):
        if side.warning:
            click.echo(f"warning: {side.warning}", err=True)
    click.echo(
        json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
        if as_json
        else leakage_lib.render_text(report)
    )
    return bool(report.found.pairs)


def write_report(dataset: str, path: str | None, **kwargs) -> int | None:
    """Writes the report page (default: DATASET/report.html, remote too); returns the problems
    `prep verify` found (None: not run)."""
    from prep import report as report_lib

    path = path or storage.join(dataset, report_lib.FILENAME)
    written = report_lib.write(dataset, path, **kwargs)
    click.echo(f"wrote {path} ({written.bytes / 1e6:.1f} MB)")
    if written.verify_problems:
        click.echo(f"verify: {written.verify_problems} problem(s), listed on the page (prep verify prints them)")
    return written.verify_problems
