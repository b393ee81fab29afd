"""Helpers the tests share: generated images (imagegen), converted datasets and ways to change one
(datasets), reading shards back (shards), a Beam file system over local files standing in for object
stores (testfs), and the worker process of the distributed tests (dist_worker). No tests here."""
