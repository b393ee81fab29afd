"""`prep verify` and `prep inspect` on a remote OUTPUT (testfs://, standing in for gs:// and s3://)."""

import json

import pytest

from tests.support.imagegen import write_dirty_tree
from tests.support.testfs import to_url


@pytest.fixture(scope="module")
def remote_dataset(tmp_path_factory):
    from click.testing import CliRunner

    from prep.cli import main

    root = tmp_path_factory.mktemp("remote-edges")
    write_dirty_tree(root / "src", {"ant": 7, "bee": 12, "cat": 9}, size=(14, 10))
    out = to_url(str(root / "out"))
    args = ["convert", str(root / "src"), out, "--num-shards", "2", "--split", "train=0.7,validation=0.3", "--index"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (root / "out" / "manifest.json").is_file()
    return root / "out"


def test_verify_reads_a_remote_output(run_cli, remote_dataset):
    result = run_cli("verify", to_url(str(remote_dataset)))
    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    deep = run_cli("verify", "--deep", "--json", to_url(str(remote_dataset)))
    assert deep.exit_code == 0, deep.output
    assert json.loads(deep.output)["verdict"] == "ok"


def test_verify_finds_a_damaged_remote_shard(run_cli, remote_dataset, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(remote_dataset, copy)
    shard = sorted(copy.glob("*.tfrecord"))[0]
    shard.write_bytes(shard.read_bytes()[:-3])
    result = run_cli("verify", to_url(str(copy)))
    assert result.exit_code == 1, result.output
    assert shard.name in result.output


def test_inspect_reads_a_remote_output(run_cli, remote_dataset, tmp_path):
    url = to_url(str(remote_dataset))
    result = run_cli("inspect", url, "--contact-sheet", tmp_path / "sheet.png")
    assert result.exit_code == 0, result.output
    assert "ant" in result.output and "train" in result.output
    assert (tmp_path / "sheet.png").is_file()
    summary = json.loads(run_cli("inspect", "--json", url).output)
    assert summary["output"] == url and summary["totals"]["shards"] == 4


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_missing_remote_dataset_does_not_exist(run_cli, command, tmp_path):
    import tests.support.testfs  # noqa: F401 (registers the scheme)

    url = to_url(str(tmp_path / "nothing"))
    result = run_cli(command, url)
    assert result.exit_code == 2
    assert f"OUTPUT {url} does not exist" in result.output


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_store_that_cannot_be_asked_is_not_a_missing_dataset(run_cli, command, monkeypatch, tmp_path):
    from beam_jobs.beam_fs import BeamFileSystems

    def refuse(self, path):
        raise OSError("403 Forbidden")

    monkeypatch.setattr(BeamFileSystems, "exists", refuse)
    url = to_url(str(tmp_path))
    result = run_cli(command, url)
    assert result.exit_code == 2
    assert f"cannot access OUTPUT {url}: 403 Forbidden" in result.output


def test_beam_options_on_a_local_output_are_refused(run_cli, remote_dataset):
    result = run_cli("verify", remote_dataset, "--", "--s3_region_name=x")
    assert result.exit_code == 2
    assert "remote OUTPUT only" in result.output


def test_verify_takes_beam_options_after_the_separator(run_cli, remote_dataset):
    result = run_cli("verify", to_url(str(remote_dataset)), "--", "--s3_region_name=eu-1")
    assert result.exit_code == 0, result.output
