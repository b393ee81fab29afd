"""`prep convert` end to end: balance, splits, determinism, accounting, records readable by TensorFlow."""

import gc
import json
from collections import Counter

import pytest
from click.testing import CliRunner

from prep.cli import CliHooks, main
from tests.support import datasets
from tests.support.imagegen import image_bytes, write_class_tree
from tests.support.shards import manifest_without_run, read_dataset, shard_bytes


def assert_balanced(shards):
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1, sizes
    labels = {r["image/class/label"] for s in shards for r in s}
    for label in labels:
        per_shard = [sum(1 for r in s if r["image/class/label"] == label) for s in shards]
        assert max(per_shard) - min(per_shard) <= 1, (label, per_shard)


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    root = tmp_path_factory.mktemp("skewed")
    # 1 to 300 a class: skewed enough that 16 shards get 0 or 1 of a_one and 18 or 19 of d_300 each
    write_class_tree(root, {"a_one": 1, "b_seven": 7, "c_hundred": 100, "d_300": 300}, size=(12, 10))
    return root


def test_skewed_classes_are_balanced_and_readable(skewed, tmp_path, run_cli):
    out = tmp_path / "out"
    result = run_cli("convert", skewed, out, "--num-shards", 16, "--workers", 2)
    assert result.exit_code == 0, result.output
    assert "train" in result.output and "408" in result.output and "images/s" in result.output
    data = read_dataset(out)
    manifest = datasets.load(out)  # the shards' counts (shard_counts.jsonl) put back in the shards
    shards = data["train"]
    assert len(shards) == 16
    assert_balanced(shards)
    counts = Counter()
    for shard, info in zip(shards, manifest["splits"]["train"]["shards"]):
        assert len(shard) == info["examples"]
        assert Counter(r["image/class/text"].decode() for r in shard) == +Counter(info["class_counts"])
        for record in shard:
            folder = record["image/filename"].decode().split("/")[0]
            assert record["image/class/text"].decode() == folder
            assert manifest["labels"][record["image/class/label"]] == folder
            counts[folder] += 1
            assert (skewed / record["image/filename"].decode()).read_bytes() == record["image/encoded"]
    assert counts == {"a_one": 1, "b_seven": 7, "c_hundred": 100, "d_300": 300}
    assert manifest["inputs"] == {
        "found": 408,
        "written": 408,
        "rejected": 0,
        "capped": 0,
        "converted": 0,
        "rejected_by_reason": {},
        "capped_by_class": {k: 0 for k in counts},
    }
    assert not (out / ".prep-tmp").exists()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    write_class_tree(root, {"cat": 23, "dog": 31, "owl": 9}, size=(16, 12))
    return root


def convert(run_cli, source, out, *extra):
    result = run_cli("convert", source, out, "--split", "train=0.6,validation=0.2,test=0.2", "--num-shards", 3, *extra)
    assert result.exit_code == 0, result.output
    return out


def test_byte_identical_across_runs_and_workers(small, tmp_path, run_cli):
    a = convert(run_cli, small, tmp_path / "a", "--workers", 1)
    b = convert(run_cli, small, tmp_path / "b", "--workers", 2)
    c = convert(run_cli, small, tmp_path / "c", "--workers", 2)
    assert shard_bytes(a) == shard_bytes(b) == shard_bytes(c)
    assert len(shard_bytes(a)) == 9
    assert manifest_without_run(a) == manifest_without_run(b) == manifest_without_run(c)
    d = convert(run_cli, small, tmp_path / "d", "--seed", 1)
    assert shard_bytes(d) != shard_bytes(a)
    assert manifest_without_run(d)["inputs"] == manifest_without_run(a)["inputs"]


def test_byte_identical_whatever_the_listing_order(tmp_path, run_cli):
    counts = {"x": 17, "y": 11}
    write_class_tree(tmp_path / "fwd", counts, order="forward")
    write_class_tree(tmp_path / "rev", counts, order="reverse")
    write_class_tree(tmp_path / "shuf", counts, order="shuffle")
    outs = [convert(run_cli, tmp_path / name, tmp_path / f"out-{name}") for name in ("fwd", "rev", "shuf")]
    assert shard_bytes(outs[0]) == shard_bytes(outs[1]) == shard_bytes(outs[2])


def test_stratified_split_end_to_end(small, tmp_path, run_cli):
    out = convert(run_cli, small, tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    assert {k: v["class_counts"] for k, v in manifest["splits"].items()} == {
        "train": {"cat": 14, "dog": 19, "owl": 5},  # 13.8 -> 14, 18.6 -> 19, 5.4 -> 5
        "validation": {"cat": 5, "dog": 6, "owl": 2},
        "test": {"cat": 4, "dog": 6, "owl": 2},
    }
    data = read_dataset(out)
    for shards in data.values():
        assert_balanced(shards)
    paths = [r["image/filename"] for s in data.values() for shard in s for r in shard]
    assert len(paths) == len(set(paths)) == 63


def test_counts_reconcile_with_corrupt_files(tmp_path, run_cli):
    src = tmp_path / "src"
    write_class_tree(src, {"a": 10, "b": 10})
    (src / "a" / "zero.jpg").write_bytes(b"")
    (src / "a" / "trunc.jpg").write_bytes(image_bytes("JPEG", size=(300, 300))[:700])
    (src / "b" / "noise.jpg").write_bytes(bytes(range(256)) * 4)
    (src / "b" / "really_png.jpg").write_bytes(image_bytes("PNG", size=(10, 10)))
    (src / "b" / ".DS_Store").write_bytes(b"junk")
    (src / "notes.txt").write_text("hello")
    out = tmp_path / "out"
    result = run_cli("convert", src, out, "--num-shards", 2)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    inputs = manifest["inputs"]
    assert inputs["found"] == 26
    assert inputs["written"] == 21
    assert inputs["found"] == inputs["written"] + inputs["rejected"] + inputs["capped"]
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["path"]: r["reason"] for r in rejects} == {
        "a/trunc.jpg": "undecodable",
        "a/zero.jpg": "empty",
        "b/.DS_Store": "hidden",
        "b/noise.jpg": "undecodable",
        "notes.txt": "no_class",
    }
    assert inputs["rejected_by_reason"] == {"empty": 1, "hidden": 1, "no_class": 1, "undecodable": 2}
    records = [r for s in read_dataset(out)["train"] for r in s]
    png = [r for r in records if r["image/filename"] == b"b/really_png.jpg"]
    assert png[0]["image/format"] == b"png"
    assert_balanced(read_dataset(out)["train"])


def test_max_per_class_counts_what_was_left_out(small, tmp_path, run_cli):
    out = tmp_path / "out"
    assert run_cli("convert", small, out, "--max-per-class", 10, "--num-shards", 2).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["class_counts"] == {"cat": 10, "dog": 10, "owl": 9}
    assert manifest["inputs"]["capped_by_class"] == {"cat": 13, "dog": 21, "owl": 0}
    assert manifest["inputs"]["capped"] == 34 and manifest["inputs"]["written"] == 29


def test_label_file_with_splits_and_resize(tmp_path, run_cli):
    src = tmp_path / "src"
    src.mkdir()
    rows = ["path,label,split"]
    for i in range(12):
        (src / f"{i}.jpg").write_bytes(image_bytes("JPEG", size=(64, 48), seed=i))
        rows.append(f"{i}.jpg,{'even' if i % 2 == 0 else 'odd'},{'train' if i < 8 else 'test'}")
    rows.append("gone.jpg,odd,train")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    result = run_cli("convert", src, out, "--labels", tmp_path / "labels.csv", "--resize", 24, "--num-shards", 2)
    assert result.exit_code == 0, result.output
    data = read_dataset(out)
    assert sorted(data) == ["test", "train"]
    records = [r for shards in data.values() for s in shards for r in s]
    assert len(records) == 12
    assert all((r["image/height"], r["image/width"]) == (24, 32) for r in records)
    for r in records:
        number = int(r["image/filename"].decode().split(".")[0])
        assert r["image/class/text"].decode() == ("even" if number % 2 == 0 else "odd")
    rejects = (out / "rejects.jsonl").read_text()
    assert '"reason": "missing"' in rejects and "gone.jpg" in rejects


def test_output_must_be_empty_unless_overwrite(small, tmp_path, run_cli):
    out = tmp_path / "out"
    assert run_cli("convert", small, out, "--num-shards", 2).exit_code == 0
    result = run_cli("convert", small, out, "--num-shards", 3)
    assert result.exit_code == 1
    assert (
        result.output.strip() == f"Error: OUTPUT {out} is not empty; pass --overwrite to replace what prep wrote there"
    )
    assert run_cli("convert", small, out, "--num-shards", 3, "--overwrite").exit_code == 0
    assert sorted(p.name for p in out.glob("*.tfrecord")) == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    (out / "mine.txt").write_text("precious")
    result = run_cli("convert", small, out, "--overwrite")
    assert result.exit_code == 1 and "holds files prep did not write (e.g. mine.txt)" in result.output
    assert (out / "mine.txt").exists() and (out / "manifest.json").exists()


def test_overwrite_replaces_a_dataset_with_its_report(small, tmp_path, run_cli):
    # README's first command (--report --overwrite) must run twice in a row.
    out = tmp_path / "out"
    for _ in range(2):
        result = run_cli("convert", small, out, "--num-shards", 2, "--report", "--overwrite")
        assert result.exit_code == 0, result.output
    assert (out / "report.html").exists()


def write_labels(tmp_path, text):
    path = tmp_path / "labels.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (lambda t: ["convert", t / "nope", t / "out"], "Error: SOURCE {t}/nope does not exist"),
        (
            lambda t: ["convert", t / "empty", t / "out"],
            "Error: SOURCE {t}/empty has no class folders (expected {t}/empty/<class>/<image>)",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--labels", write_labels(t, "file,label\n")],
            "Error: label file {t}/labels.csv has no 'path' column (columns: file, label)",
        ),
        (
            lambda t: ["convert", t / "withempty", t / "out", "--empty-classes", "fail"],
            "Error: class 'zzz' has no example (every input rejected, or none listed) and --empty-classes is fail; nothing "
            "was read: run again with --empty-classes keep (or drop) to write the dataset",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--num-shards", 9],
            "Error: split 'train' has 4 example(s), fewer than --num-shards 9; use --num-shards 4 or less; the images read "
            "so far are kept: run the same command again with the corrected option and --resume to plan them anew "
            "without reading them again",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--split", "train=0.9"],
            "Error: --split fractions must sum to 1, got 0.9",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--shard-size", "big"],
            "Error: --shard-size 'big' is not a size such as 128MiB or 64MB",
        ),
        (lambda t: ["convert", t / "src", t / "out", "--workers", 0], "Error: --workers must be >= 1, got 0"),
        (
            lambda t: ["convert", t / "src", t / "out", "--split", ""],
            "Error: --split is empty; leave the option out instead",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--labels", " "],
            "Error: --labels is empty; leave the option out instead",
        ),
        (lambda t: ["convert", t / "junk", t / "out"], "Error: class 'a' has no images in {t}/junk"),
        (
            lambda t: ["convert", t / "bad", t / "out"],
            "Error: no input could be converted (undecodable 1); see {t}/out/rejects.jsonl",
        ),
        (
            lambda t: ["convert", t / "splits", t / "out", "--split", "train=0.5,test=0.5"],
            "Error: --split cannot be used when SOURCE already names splits (split folders or a split column)",
        ),
        (
            lambda t: ["convert", t / "splits", t / "out"],
            "Error: split 'test' has no example left: every input listed in it was rejected; see {t}/out/rejects.jsonl",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--", "--num-shards", 3],
            "Error: --num-shards is a conversion option, not a Beam pipeline option: write it as --num-shards, before "
            "any Beam options (for prep convert, before the --)",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", 3],
            "Error: unexpected argument '3': Beam pipeline options start with -- (for prep convert, after a lone --)",
        ),
        (
            lambda t: ["convert", t / "src", t / "out", "--shard-size", "1" * 40],
            "Error: --shard-size '" + "1" * 40 + "' is larger than any shard could be",
        ),
        (
            lambda t: ["convert", t / "src", t / "src" / "out"],
            "Error: OUTPUT {t}/src/out is inside SOURCE {t}/src: its shards would be listed as inputs (and its folder as a "
            "class) on the next run; choose an OUTPUT outside SOURCE",
        ),
    ],
)
def test_user_mistakes_end_in_one_line_error(tmp_path, run_cli, args, message):
    write_class_tree(tmp_path / "src", {"a": 2, "b": 2})
    (tmp_path / "empty").mkdir()
    write_class_tree(tmp_path / "withempty", {"a": 1})
    (tmp_path / "withempty" / "zzz").mkdir()
    (tmp_path / "junk" / "a").mkdir(parents=True)
    (tmp_path / "junk" / "a" / ".hidden").write_text("x")
    (tmp_path / "bad" / "a").mkdir(parents=True)
    (tmp_path / "bad" / "a" / "x.jpg").write_bytes(b"nope")
    write_class_tree(tmp_path / "splits" / "train", {"a": 2, "b": 2})
    (tmp_path / "splits" / "test" / "a").mkdir(parents=True)
    (tmp_path / "splits" / "test" / "a" / "x.jpg").write_bytes(b"not an image")  # all of test rejected
    result = run_cli(*args(tmp_path))
    assert result.exit_code == 1
    assert result.output.strip() == message.format(t=tmp_path)
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not (tmp_path / "src" / "out").exists()
    if "--split" in map(str, args(tmp_path)):
        assert not (tmp_path / "out").exists()  # refused before any image was read or any file written


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--runner", "Nope"],
            "Error: unknown --runner Nope: give local, a runner Beam names (DirectRunner, PortableRunner, "
            "DataflowRunner, FlinkRunner, SparkRunner, ...) or the full name of a PipelineRunner class",
        ),
        (
            ["--", "--num-shard", "3"],
            "Error: unknown Beam pipeline option --num-shard; did you mean --num-shards? "
            "(a conversion option; for prep convert it goes before the --)",
        ),
        (
            ["--", "--direct_num_wrkers=2"],
            "Error: unknown Beam pipeline option --direct_num_wrkers; did you mean --direct_num_workers?",
        ),
        (
            ["--", "--direct_num_workers=x"],
            "Error: Beam pipeline options: argument --direct_num_workers: invalid int value: 'x'",
        ),
        (["--runner", "DataflowRunner"], "Error: --runner DataflowRunner: "),
        (
            ["--", "--direct-num-workers=2"],
            "Error: Beam pipeline option --direct-num-workers is spelled "
            "--direct_num_workers: Beam ignores it as written",
        ),
        (
            ["--runner", "apache_beam.runners.direct.DirectRunnr"],
            "Error: unknown --runner apache_beam.runners.direct.DirectRunnr: ",
        ),
        (
            ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner", "--", "--dask_client_address=localhost"],
            "Error: cannot reach the Dask scheduler localhost: missing port number in address 'localhost'",
        ),
    ],
)
def test_runner_and_beam_options_are_checked_before_output_is_touched(tmp_path, run_cli, extra, message):
    # Beam would drop an unknown option with a warning, and stop on the others
    # with a traceback after OUTPUT had been readied (an "unfinished conversion").
    write_class_tree(tmp_path / "src", {"a": 2, "b": 2})
    result = run_cli("convert", tmp_path / "src", tmp_path / "out", *extra)
    assert result.exit_code == 1
    assert result.output.startswith(message) and result.output.count("\n") == 1
    if extra == ["--runner", "DataflowRunner"]:
        assert "Missing required option: project" in result.output
    assert not (tmp_path / "out").exists()


def test_options_that_flink_spark_and_prism_pass_on_to_their_job_are_not_refused():
    # These runners hand options Beam does not define to the job (Flink's
    # checkpointing_interval with its uber jar, apache/beam#21318).
    from beam_jobs.runners import check_runner_options

    check_runner_options(
        "FlinkRunner",
        [
            "--flink_master=localhost:8081",
            "--flink_submit_uber_jar",
            "--environment_type=DOCKER",
            "--checkpointing_interval=60000",
        ],
    )
    check_runner_options("SparkRunner", ["--spark_master_url=spark://host:7077", "--storage_level=MEMORY_ONLY"])
    check_runner_options("PrismRunner", ["--job_port=8073"])


def test_output_inside_source(tmp_path):
    from prep.core.inputs import output_inside

    (tmp_path / "src").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "src")
    assert output_inside(str(tmp_path / "src" / "out"), str(tmp_path / "src"))
    assert output_inside(str(tmp_path / "src"), str(tmp_path / "src/"))
    assert output_inside(str(tmp_path / "link" / "out"), str(tmp_path / "src"))  # through a symlink
    assert not output_inside(str(tmp_path / "src2"), str(tmp_path / "src"))  # a sibling sharing the prefix
    assert not output_inside(str(tmp_path / "out"), str(tmp_path / "src"))
    assert output_inside("gs://b/data/out", "gs://b/data")
    assert not output_inside("gs://b/data2", "gs://b/data")


def test_help_texts(run_cli):
    assert "Convert SOURCE" in run_cli("convert", "--help").output
    assert "convert" in run_cli("--help").output


def test_progress_counts_each_chunk_spill_file_once():
    from beam_jobs.progress import prepared_count
    from prep.core.workdir import BATCH, WorkDir, spill_id

    sizes = [2 * BATCH + 3, BATCH, 5]
    names = [WorkDir("t").spill(spill_id(chunk, batch)).split("/")[-1] for chunk, batch in [(0, 0), (0, 2), (2, 0)]]
    temporary = WorkDir("t").spill(spill_id(1, 0)).split("/")[-1] + ".0a1b2c3d.part"
    index = WorkDir("t").chunk_index(1).split("/")[-1]
    assert prepared_count(names + [temporary, index], sizes) == 2 * BATCH + 3 + 5
    every = [WorkDir("t").spill(spill_id(chunk, 0)).split("/")[-1] for chunk in range(3)]
    assert prepared_count(every, sizes) == sum(sizes)


def test_progress_bar_goes_to_stderr_and_run_completes(small, tmp_path):
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(main, ["convert", str(small), str(tmp_path / "out"), "--progress"])
    assert result.exit_code == 0, result.output
    assert "prepare" in result.stderr and "img" in result.stderr
    assert "prepare" not in result.stdout and "images/s" in result.stdout


@pytest.mark.parametrize(
    "text, size",
    [("128Mi", 128 << 20), ("1Ki", 1024), ("2GiB", 2 << 30), ("64MB", 64_000_000), ("1.5GiB", 3 << 29), ("100", 100)],
)
def test_shard_sizes(text, size):
    from prep.core.convert_options import parse_size

    assert parse_size(text) == size


def test_beam_idiom_entry_point_errors_are_one_line(tmp_path):
    import subprocess
    import sys

    from beam_jobs.convert import run
    from prep.core.errors import PrepError

    write_class_tree(tmp_path / "src", {"a": 2, "b": 2})
    where = ["--source", str(tmp_path / "src"), "--output", str(tmp_path / "out")]
    # `python -m beam_jobs.convert` prints any PrepError as one line (its __main__ block): once as a process,
    # then the messages of the others from run() in-process (a Python and Beam start less for each).
    proc = subprocess.run(
        [sys.executable, "-m", "beam_jobs.convert", *where, "--num_shards", "2"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    message = "Error: --num_shards is a conversion option, not a Beam pipeline option: write it as --num-shards"
    assert message in proc.stderr and "Traceback" not in proc.stderr
    for extra, message in (
        (["--num-shards", "9"], "split 'train' has 4 example(s), fewer than --num-shards 9"),
        (["--num-sh", "2"], "unknown Beam pipeline option --num-sh; did you mean --num-shards?"),
    ):
        with pytest.raises(PrepError) as error:
            run([*where, *extra])
        assert message in str(error.value)


def test_beam_idiom_entry_point_leaves_dataflow_job_labels_to_beam(tmp_path):
    from beam_jobs.convert import run

    # Dataflow's --label key=value was taken for an abbreviation of our --labels (a label file). run() in-process:
    # the parsing is run()'s; its __main__ block (a process) is test_beam_idiom_entry_point_errors_are_one_line's.
    write_class_tree(tmp_path / "src", {"a": 2, "b": 2})
    run(["--source", str(tmp_path / "src"), "--output", str(tmp_path / "out"), "--label", "team=ml"])
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["inputs"]["written"] == 4


def _fail_at_manifest(point):
    if point == "manifest":
        raise RuntimeError("a step that failed")


def test_an_in_process_conversion_leaves_the_collector_unfrozen(small, tmp_path, run_cli):
    """The heap is frozen while the pipeline runs (_execute.py); a caller in process, a notebook or a test,
    must get its garbage collected again afterwards, after a run that failed too."""
    convert(run_cli, small, tmp_path / "a")
    assert gc.get_freeze_count() == 0
    result = CliRunner().invoke(
        main, ["convert", str(small), str(tmp_path / "b")], obj=CliHooks(on_step=_fail_at_manifest)
    )
    assert result.exit_code != 0 and "a step that failed" in repr(result.exception)
    assert gc.get_freeze_count() == 0
