"""`prep convert` stages the listing and lets go of it before Beam is imported, so that the listing's
memory is reused by the pipeline rather than added to it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])

SCRIPT = """
import importlib.abc, sys, weakref
from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from prep.core.run import output_dir, start

config = build_config(sys.argv[1], sys.argv[2], {"num_shards": 1})
start.ready_output(config, list_inputs(config))
print("beam imported while starting:", "apache_beam" in sys.modules)
output_dir.prepare_output(config.output, overwrite=True)  # start over, this time through conversion.convert

alive, seen = None, []

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "beam_jobs._execute":
            seen.append(alive() is not None)
        return None

def listed():  # the caller keeps no reference, as prep convert does
    global alive
    listing = list_inputs(config)
    alive = weakref.ref(listing)
    return listing

sys.meta_path.insert(0, Hook())
manifest = conversion.convert(config, listed())
print("listing alive when the pipeline was imported:", seen)
print("examples:", manifest.splits["train"].examples)
"""


def test_the_listing_is_staged_and_freed_before_beam_is_imported(tmp_path):
    source = Path(ROOT) / "samples" / "shapes"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(source), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "beam imported while starting: False"
    assert lines[1] == "listing alive when the pipeline was imported: [False]"
    assert lines[2] == "examples: 204"
