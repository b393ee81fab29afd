"""`prep report`: one self-contained HTML page of what a dataset holds.

The page inlines its styles, script, charts (SVG) and thumbnails (data: URIs) and
makes no network request, so it opens from a laptop, a bucket or a CI artefact.
Modules by role: `dataset` reads the folder (the one accessor of the manifest),
`content` decides what to show (pure), `charts` and `thumbs` draw, `page` renders.
"""

from prep.core.manifest import REPORT as FILENAME
from prep.report.content import Limits
from prep.report.page import build, write

__all__ = ["FILENAME", "Limits", "build", "write"]
