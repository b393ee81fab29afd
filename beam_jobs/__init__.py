"""The Apache Beam pipeline that turns listed inputs into shards, built on `prep.core`.

Importing the package installs Beam's FileSystems as `prep.core.storage`'s remote file
system (without importing Beam until a remote path is used), so every process that runs
our pipeline code, driver or worker, reaches ``gs://`` and ``s3://`` paths the same way.
"""

from beam_jobs.beam_fs import BeamFileSystems
from prep.core import storage

storage.install(BeamFileSystems())
