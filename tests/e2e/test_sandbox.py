"""Every image bounded in memory and time (prep/core/run/sandbox.py, --isolate): each kind of
offender is rejected with its reason, the rest of the run is byte-identical to a run
without them, the process tree stays under the memory bound of docs/benchmarks.md, and a run killed
while reading a batch prepares that batch in the sandbox on --resume."""

import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
from PIL import Image

from prep.core.headers import predictable, read_header
from prep.core.image_rules import ImageOptions, ImageRejected, prepare_image
from prep.core.run.sandbox import Sandbox
from tests.support.imagegen import (
    damaged_deflate_tiff,
    gray_png,
    huge_j2k,
    icns,
    ico,
    image_bytes,
    interlaced_gray_png,
    rgba_png,
    write_class_tree,
)
from tests.support.proctree import TreePeak
from tests.support.shards import convert_with_cli, shard_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
MiB = 1 << 20
# docs/benchmarks.md, "Memory": the main process (Beam, the pipeline, at most --max-image-memory per thread
# for an image decoded in-thread, which `predictable` keeps far smaller here) plus, per worker
# thread, one sandbox worker: its baseline plus --max-image-memory.
MAIN_BOUND = 250 * MiB
SANDBOX_BASELINE = 70 * MiB  # ~35-40 MB idle, replaced when 32 MB over its start


def tree_bound(workers: int, budget: int) -> int:
    return MAIN_BOUND + workers * (SANDBOX_BASELINE + budget)


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox(1)
    yield box
    box.close()


def rejected(box: Sandbox, data: bytes, options: ImageOptions) -> ImageRejected:
    with pytest.raises(ImageRejected) as info:
        box.prepare(data, options)
    return info.value


def test_container_declaring_a_small_image_holding_a_huge_one_is_too_large(sandbox):
    # The 240 KB ICNS of the issue: its header says 256x256, its JPEG 2000 260 gigapixels.
    data = icns([(b"ic08", huge_j2k())])
    assert Image.open(io.BytesIO(data)).size == (256, 256)
    for reject in (
        rejected(sandbox, data, ImageOptions()),
        pytest.raises(ImageRejected, prepare_image, data, ImageOptions()).value,
    ):
        assert (reject.reason, reject.detail) == (
            "too_large",
            "an inner image or frame of 260100000000 pixels exceeds --max-pixels 89478485",
        )


def test_decoder_allocating_far_more_than_declared_is_image_memory(sandbox):
    # An icon declaring 16x16 whose PNG is 6000x6000 RGBA: 144 MB decoded, ~680 MB converted.
    data = ico(16, 16, rgba_png(6000, 6000))
    reject = rejected(sandbox, data, ImageOptions(max_image_memory=64 * MiB))
    assert reject.reason == "image_memory"
    assert "--max-image-memory 67108864" in reject.detail
    assert sandbox.prepare(data, ImageOptions(max_image_memory=1 << 30))[0].width == 6000  # it fits a larger bound


def test_slow_decode_is_image_timeout_and_the_worker_is_replaced(sandbox):
    slow = gray_png(10_000, 8_900)  # 89 Mpx in 107 KB: 0.58 s to decode on an idle machine here
    started = time.monotonic()
    reject = rejected(sandbox, slow, ImageOptions(image_timeout=0.1))
    assert time.monotonic() - started < 5
    assert (reject.reason, reject.detail) == (
        "image_timeout",
        "not prepared within --image-timeout 0.1 s of CPU time; stopped",
    )
    small = image_bytes("PNG", size=(30, 20))
    assert sandbox.prepare(small, ImageOptions())[0].encoded == small


def test_a_blocked_worker_is_timed_out_but_one_kept_waiting_for_a_core_is_not():
    # --image-timeout counts the worker's CPU time: which image is rejected must not depend on how busy
    # the machine is (the hog below was once image_timeout, waiting for a core, instead of image_memory).
    box = Sandbox(1)
    small, hog = image_bytes("PNG", size=(30, 20)), ico(16, 16, rgba_png(6000, 6000))
    cpu = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        box.prepare(small, ImageOptions())
        (worker,) = box._workers
        os.kill(worker.proc.pid, signal.SIGSTOP)  # neither computing nor runnable, as a codec stuck on a lock
        started = time.monotonic()
        stuck = rejected(box, small, ImageOptions(image_timeout=0.3))
        assert time.monotonic() - started < 5
        assert (stuck.reason, stuck.detail) == (
            "image_timeout",
            "blocked, neither computing nor waiting for a core, for --image-timeout 0.3 s; stopped",
        )
        assert box.prepare(small, ImageOptions())[0].encoded == small  # by a new worker
        (worker,) = box._workers
        os.sched_setaffinity(worker.proc.pid, {cpu})  # one core, shared with a busy loop 68 times its weight
        os.setpriority(os.PRIO_PROCESS, worker.proc.pid, 19)
        started = time.monotonic()
        reject = rejected(box, hog, ImageOptions(max_image_memory=64 * MiB, image_timeout=0.3))
        assert reject.reason == "image_memory", (reject.detail, time.monotonic() - started)
    finally:
        busy.kill()
        busy.wait()
        box.close()


def test_a_worker_that_dies_is_crashed_decoder_and_the_next_image_goes_on():
    box = Sandbox(1)
    try:
        small = image_bytes("JPEG", size=(30, 20))
        box.prepare(small, ImageOptions())
        (worker,) = box._workers
        killer = threading.Timer(0.2, os.kill, (worker.proc.pid, signal.SIGSEGV))  # as a codec's bug would
        killer.start()
        reject = rejected(box, gray_png(10_000, 8_900), ImageOptions())
        killer.join()
        assert reject.reason == "crashed_decoder"
        assert "signal SIGSEGV" in reject.detail
        assert box.prepare(small, ImageOptions())[0].encoded == small
    finally:
        box.close()
    assert worker.proc.poll() is not None


def test_codec_messages_are_captured_with_their_input(sandbox, capfd):
    reject = rejected(sandbox, damaged_deflate_tiff(), ImageOptions())
    assert reject.reason == "undecodable"
    assert "(the codec said: ZIPDecode: Decoding error" in reject.detail
    assert capfd.readouterr().err == ""  # libtiff printed it in the worker, not on our console


@pytest.mark.parametrize(
    "data, options",
    [
        (image_bytes("JPEG", size=(64, 48)), ImageOptions()),
        (image_bytes("JPEG", size=(64, 48)), ImageOptions(resize=20)),
        (image_bytes("PNG", size=(33, 17), mode="RGBA"), ImageOptions()),
        (image_bytes("GIF", size=(33, 17), mode="P"), ImageOptions(image_format="jpeg", quality=80)),
        (image_bytes("TIFF", size=(33, 17), mode="I;16"), ImageOptions()),
    ],
)
def test_sandbox_gives_the_bytes_of_the_calling_thread(sandbox, data, options):
    assert sandbox.prepare(data, options)[0] == prepare_image(data, options)


def test_predictable_keeps_only_plain_jpeg_and_png_in_thread():
    options = ImageOptions()
    assert predictable(image_bytes("JPEG", size=(500, 375)), options)
    assert predictable(image_bytes("PNG", size=(500, 375), mode="RGBA"), options)
    for fmt in ("GIF", "TIFF", "BMP", "WEBP", "ICO"):
        assert not predictable(image_bytes(fmt, size=(50, 40)), options), fmt
    assert not predictable(ico(16, 16, image_bytes("PNG")), options)
    assert not predictable(b"\xff\xd8\xff", options)  # no frame header
    # By memory: 20 bytes a pixel for a PNG, so 7000 x 7000 is over 512 MiB.
    assert predictable(gray_png(7000, 7000), ImageOptions(max_image_memory=1 << 30))
    assert not predictable(gray_png(7000, 7000), ImageOptions(max_image_memory=512 * MiB))
    # By time: under a low --image-timeout a large image goes to the sandbox, a small one does not.
    assert not predictable(gray_png(4000, 4000), ImageOptions(image_timeout=0.5))
    assert predictable(image_bytes("PNG", size=(500, 375)), ImageOptions(image_timeout=0.5))
    progressive = image_bytes("JPEG", size=(64, 48), progressive=True)
    assert read_header(progressive).scans > 3  # counted: 10 for Pillow's default script
    assert read_header(image_bytes("JPEG")).scans == 3  # sequential: at most one scan per component
    assert read_header(image_bytes("JPEG", mode="L")).scans == 1


# --- end to end -------------------------------------------------------------------------------------

BOUNDS = ("--image-timeout", "0.35", "--max-image-memory", "128MiB", "--workers", "2", "--num-shards", "3")
OFFENDERS = {  # path: (bytes, reason)
    "a/icon.icns": (lambda: icns([(b"ic08", huge_j2k())]), "too_large"),
    "a/slow.png": (lambda: interlaced_gray_png(10_000, 8_900), "image_timeout"),
    # 324 MB for its first allocation, so it is over the bound at once, however busy the machine.
    "b/hog.ico": (lambda: ico(16, 16, rgba_png(9000, 9000)), "image_memory"),
    "b/damaged.tif": (damaged_deflate_tiff, "undecodable"),
}


def run_cli_process(*args, env=None) -> tuple[subprocess.CompletedProcess, int]:
    """`prep ...` as its own process (with this checkout's code); returns it and the peak RSS of its tree."""
    env = dict(env or os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, "-m", "prep.cli", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with TreePeak(proc.pid) as peak:
        out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), peak.peak


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    clean = tmp_path_factory.mktemp("clean")
    write_class_tree(clean, {"a": 20, "b": 16}, size=(40, 30))
    hostile = tmp_path_factory.mktemp("hostile")
    write_class_tree(hostile, {"a": 20, "b": 16}, size=(40, 30))
    for path, (make, _) in OFFENDERS.items():
        (hostile / path).write_bytes(make())
    return clean, hostile


# Not `alone` any more: --image-timeout counts CPU time, so the hog hits --max-image-memory first however
# busy the machine (it was once rejected image_timeout while waiting for a core, at a load average of 34).
def test_offenders_rejected_rest_identical_tree_under_bound(sources, tmp_path):
    clean, hostile = sources
    reference = convert_with_cli(clean, tmp_path / "ref", *BOUNDS)
    result, peak = run_cli_process("convert", hostile, tmp_path / "out", *BOUNDS, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "ZIPDecode" not in result.stderr
    rejects = {r["path"]: r for r in map(json.loads, (tmp_path / "out" / "rejects.jsonl").read_text().splitlines())}
    assert {path: r["reason"] for path, r in rejects.items()} == {p: reason for p, (_, reason) in OFFENDERS.items()}
    assert "260100000000 pixels" in rejects["a/icon.icns"]["detail"]
    assert shard_bytes(tmp_path / "out") == shard_bytes(reference)
    assert peak < tree_bound(2, 128 * MiB), f"peak RSS of the process tree {peak / MiB:.0f} MiB"
    assert "rejects by reason: image_memory 1, image_timeout 1, too_large 1, undecodable 1" in result.stdout


def test_isolate_all_and_none_write_the_same_bytes(sources, tmp_path):
    clean, _ = sources
    extra = ("--workers", "2", "--num-shards", "2", "--resize", "24")
    isolated = convert_with_cli(clean, tmp_path / "all", *extra, "--isolate", "all")
    in_thread = convert_with_cli(clean, tmp_path / "none", *extra, "--isolate", "none")
    assert shard_bytes(isolated) == shard_bytes(in_thread)


def test_resume_prepares_the_killed_batch_in_the_sandbox(tmp_path, run_cli):
    # One batch of 16: the memory hog and 15 innocents. The first run decodes in-thread
    # (--isolate none) and is killed while the batch is in flight, as the OOM killer would.
    clean, src = tmp_path / "clean", tmp_path / "src"
    write_class_tree(clean, {"a": 8, "b": 7}, size=(40, 30))
    write_class_tree(src, {"a": 8, "b": 7}, size=(40, 30))
    (src / "b" / "hog.ico").write_bytes(ico(16, 16, rgba_png(6000, 6000)))
    args = ("--isolate", "none", "--max-image-memory", "64MiB", "--workers", "1", "--num-shards", "2")
    reference = convert_with_cli(clean, tmp_path / "ref", *args)
    out = tmp_path / "out"
    env = dict(
        os.environ,
        PREP_TEST_PAUSE="batch=600",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.paused_cli", "convert", str(src), str(out), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not list((out / ".prep-tmp" / "inflight").glob("*.json")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    # The resume in-process (the sandbox's workers are processes all the same): a Python and Beam start less.
    result = run_cli("convert", src, out, *args, "--resume", "--no-progress")
    assert result.exit_code == 0, result.output
    assert (
        "resumed: 16 inputs were being read when the run was killed; prepared again in the sandbox, "
        "not in-process: rejected image_memory 1"
    ) in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run"]["resumed"]["in_flight"] == {"inputs": 16, "rejected_by_reason": {"image_memory": 1}}
    assert shard_bytes(out) == shard_bytes(reference)
