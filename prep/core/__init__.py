"""The pure core of tfrecord-prep: every decision and convention, as plain functions over plain data.

Which example goes to which split and shard (`layout`, `ordering`), what a shard is
called (`naming`), what a record holds (`schema`, `tfrecord`), what a manifest holds
and whether it is consistent (`manifest`, `manifest_checks`), how SOURCE is listed
(`listing`, `label_file`, `inputs`), how an image is checked and converted
(`image_rules`), the counts that must reconcile (`accounting`), the conversion's
options (`config`, `convert_options`), where every path of the work directory is
(`workdir`) and how local and remote paths are reached (`storage`).

`run/` holds the conversion's work that needs no Beam, on OUTPUT and its work
directory (see its docstring).

Invariant: nothing here imports Beam, TensorFlow, click, `beam_jobs`, `loaders` or
prep's command-line modules, not even lazily (`../shared/tools/structure.py` checks).
"""
