"""Importing Beam for a conversion on the embedded runner without the optional clients Beam would load.

`import apache_beam` tries, each inside a `try: ... except ImportError`, the clients of
services a conversion never calls: BigQuery (whose progress helpers import tqdm's notebook
widgets, hence IPython), Pub/Sub, MongoDB, Dataflow's API, and pandas for its DataFrame
type hints. Installed (`apache-beam[gcp]` brings most of them), they were ~0.9 s of the
~2.9 s of CPU that `prep convert` spent on 20 images (docs/benchmarks.md, "A conversion's
fixed cost"). `import_beam` refuses them for the length of that one import: Beam records them
as absent, as it would on an install without them, and a later `import pandas` works. Refused
since: Beam's own BigQuery module (232 ms of `-X importtime` even without its client), apitools,
pyarrow and bson, ~0.1 s of the ~1.0 s of CPU a one-photo conversion spent, and 50 MB of its peak
RSS (docs/benchmarks.md, "Session 25: the serial start and end").

Beam's object-store file systems (GCS, S3, Azure) are refused too, and loaded by
`object_stores` when a remote path is first used (beam_jobs/beam_fs.py, list_remote.py): Beam
finds a FileSystem by its subclasses at each call, so one imported later serves as well. Their
clients were ~40% of what remained of Beam's import, paid by every conversion of local files.

Only the `prep` console script calls it, for the embedded runner: it owns its process, so no
caller's Beam (a notebook's BigQuery read) is left without a client it wanted; other runners
may need these clients in the driver (Dataflow's API) and keep them. Object stores are not
refused: `gs://` and `s3://` paths go through Beam's GCS and S3 file systems.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys

# Optional for Beam, never used by a conversion on the embedded runner.
UNUSED = (
    "IPython",
    "pandas",
    "pymongo",
    "bson",  # MongoDB's, tried before pymongo
    "google.cloud.bigquery",
    "google.cloud.bigquery_storage_v1",
    "google.cloud.dataflow_v1beta3",
    "google.cloud.pubsub",
    "google.cloud.pubsub_v1",
    # `apache_beam.io` imports Beam's BigQuery, Pub/Sub and cross-language IOs in one `try`: refused
    # at its first line, the block is skipped (gcsio is imported again by `object_stores`' GCS).
    "apache_beam.io.gcp.bigquery",
    # the Dataflow and BigQuery clients' HTTP layer: `apache_beam.utils.retry` keeps its error
    # classes for its filters, which `object_stores` gives back (`_retry_classes`)
    "apitools",
    # for the Arrow batch converters of `apache_beam.typehints`; no conversion step is batched
    "pyarrow",
)


# Beam's file systems for object stores: loaded on a remote path's first use (`object_stores`).
OBJECT_STORES = (
    "apache_beam.io.gcp.gcsfilesystem",
    "apache_beam.io.aws.s3filesystem",
    "apache_beam.io.azure.blobstoragefilesystem",
)
_stores_loaded = False


class _Refuse(importlib.abc.MetaPathFinder):
    """Fails the import of `names` and of their submodules, as if they were not installed."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def import_beam() -> None:
    """Imports Beam without `UNUSED` (see the module docstring); already imported ones are left alone."""
    if "apache_beam" in sys.modules:
        return
    refuse = _Refuse(tuple(name for name in UNUSED + OBJECT_STORES if name not in sys.modules))
    sys.meta_path.insert(0, refuse)
    try:
        import apache_beam  # noqa: F401  (imported for its side effect: in sys.modules for the conversion)
    finally:
        sys.meta_path.remove(refuse)


def object_stores() -> None:
    """Imports Beam's object-store file systems that are installed, as `apache_beam.io.filesystems` would."""
    global _stores_loaded
    if _stores_loaded:
        return
    for name in OBJECT_STORES:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed (Beam logs why when it tries them itself)
            pass
    _retry_classes()
    _stores_loaded = True


def _retry_classes() -> None:
    """Gives `apache_beam.utils.retry` the error classes it would have had without `import_beam`'s refusal
    of apitools (the same `try` as Beam's): its retry filters tell server errors by them, for S3 and Azure."""
    retry = sys.modules.get("apache_beam.utils.retry")
    if retry is None or getattr(retry, "HttpError", None) is not None:
        return
    try:
        from apitools.base.py.exceptions import HttpError
        from google.api_core.exceptions import GoogleAPICallError
    except ImportError:  # not installed: Beam's own import found them absent too
        return
    vars(retry).update(HttpError=HttpError, GoogleAPICallError=GoogleAPICallError)  # names Beam binds in a try
