"""The conversion's work outside Beam: readying OUTPUT and staging the listing (`start`), what a
killed run left and whether `--resume` may finish it (`checkpoints`, `resume`, `replan`), OUTPUT
itself (`output_dir`), and the parts of the pipeline's steps that need no Beam: a prepare task's
batch (`spill`, `sandbox`, `task_build`), the dedupe stage's work files and decisions (`dedupe_*`),
the keys a publish joins (`publish_keys`); also `progress`, `failures` and `heap`.

These modules read and write OUTPUT and its work directory, but import no Beam, TensorFlow, click,
`beam_jobs` or `loaders`, as all of `prep.core` (`../shared/tools/structure.py` checks); the Beam
steps of `beam_jobs` call them.
"""
