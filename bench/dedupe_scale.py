"""What the dedupe stage costs at scale: `prep convert` with duplicates found (the default) against
`--duplicates off`, on one large generated set, interleaved.

    python bench/dedupe_scale.py --count 100000 --repeats 2
    python bench/dedupe_scale.py --count 20000 --repeats 2 --data /tmp/dedupe-scale
    python bench/dedupe_scale.py --count 5000 --size 500x375 --convert-args="--resize 256"   # photo-sized
    python bench/dedupe_scale.py --count 100000 --size 500x375 --variants 8   # photo-sized, made in minutes
    python bench/dedupe_scale.py --count 100000 --size 500x375 --variants 8 --repeats 10 --modes keep   # the goal's

The set (generated once, cached under --data): `--count` JPEGs (--size, default 64x64, quality 90) in 10 class
folders, photo-like scenes from tests/support/photos.py so that the perceptual hashes spread as real
photos' do, and 1% of them planted near-copies (exact copies, re-encodes at quality 60, brightness +12%)
in the same class. With `--variants N`, count/N scenes are drawn, each saved as is and mirrored or
turned N-1 ways, in one class (see TURNS); with `--mixed-sizes` each image is also cut to 70-100% of
each side at random, so nearly every picture has a size of its own (the keys hash same-sized images
together). Each repeat runs every mode (--modes) once, modes in turn (the order reversed every other repeat),
each as a fresh process of THIS checkout's code (PYTHONPATH), after the previous output is deleted and
synced. "wall" is the whole command, "CPU" its user + system time (os.wait4), "pipeline" the manifest's
run.seconds; "peak tree RSS" is the larger of the command's own peak (ru_maxrss, exact) and the summed
RSS of it and its child processes, polled every 250 ms (tests/support/proctree.py; polling every 20 ms
took ~8% of a core from the run measured). The table gives medians and each mode's ratio to
--duplicates off, and the median of the ratios of runs side by side.

The modes: `--conflicts reject` finds duplicates and rejects the groups whose images carry different
labels, so it writes fewer records than --duplicates off wherever the set has such groups (the generated
scenes do: 3,057 of 4,168 groups at 100,000, 14,762 images rejected; it was the
default then); the default (`--conflicts reject-exact`) rejects only conflicts between identical
images (a false one needs a SHA-256 collision: 0 expected per million images, docs/leakage.md) and reports
the near ones; `--conflicts keep` finds the same groups and writes every record, so its ratio is the
dedupe stage's cost alone. Results also go to bench/results/dedupe-scale-<count>[...].json
(with --modes, the modes run end its name).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from PIL import Image  # noqa: E402

from tests.support.photos import EDITS, jpeg, photo  # noqa: E402  (bench/ scripts run as files)
from tests.support.proctree import TreePeak  # noqa: E402

CLASSES = 10
SIZE = (64, 64)
PLANTED = ("copy", "reencode_q60", "brightness_12")
MODES = {
    "dedupe (default)": [],
    "--conflicts reject": ["--conflicts", "reject"],
    "--conflicts keep": ["--conflicts", "keep"],
    "--duplicates off": ["--duplicates", "off"],
}
SHORT = dict(zip(("default", "reject", "keep", "off"), MODES))  # --modes' names


# pHash sees orientation: mirrored and turned copies of one scene are mostly more than 7 bits apart, so one
# generated scene stands for up to 8 photos (a photo-sized 100,000-image set in minutes, not an hour). Some do
# pair (900 of the 4,158 groups at 100,000 images): they share a class, so they never make a label conflict.
TURNS = (
    None,
    Image.Transpose.FLIP_LEFT_RIGHT,
    Image.Transpose.FLIP_TOP_BOTTOM,
    Image.Transpose.ROTATE_180,
    Image.Transpose.ROTATE_90,
    Image.Transpose.ROTATE_270,
    Image.Transpose.TRANSPOSE,
    Image.Transpose.TRANSVERSE,
)


def _cut(img: Image.Image, rnd: random.Random) -> Image.Image:
    """A centre cut keeping 70-100% of each side, drawn at random: pictures of many sizes, as scraped sets
    hold (far more than a 5% crop, so it does not make a scene's turns pair)."""
    w, h = img.size
    cw, ch = round(w * rnd.uniform(0.7, 1.0)), round(h * rnd.uniform(0.7, 1.0))
    return img.crop(((w - cw) // 2, (h - ch) // 2, (w - cw) // 2 + cw, (h - ch) // 2 + ch))


def _make(job: tuple[int, int, str, tuple[int, int], int, bool]) -> None:
    start, stop, root, size, variants, mixed = job
    rnd = random.Random(start)
    scene = None
    for i in range(start, stop):
        turn = TURNS[i % variants]
        if turn is None:
            scene = photo(1_000_003 + i, size)
        img = scene if turn is None else scene.transpose(turn)
        data = jpeg(_cut(img, rnd) if mixed else img)
        folder = pathlib.Path(root) / f"class{(i // variants) % CLASSES:02d}"  # a scene's turns share a class
        (folder / f"img{i:07d}.jpg").write_bytes(data)
        if i % 100 == 7:  # 1%: a planted near-copy in the same class
            kind = PLANTED[(i // 100) % len(PLANTED)]
            (folder / f"dup{i:07d}_{kind}.jpg").write_bytes(EDITS[kind](data, rnd))


def ensure_data(
    count: int, data: pathlib.Path, jobs: int, size: tuple[int, int] = SIZE, variants: int = 1, mixed: bool = False
) -> pathlib.Path:
    """DATA/src-<count>[-WxH][-tN][-mixed], generated on first use (written under a temporary name, then renamed)."""
    source = data / (
        f"src-{count}"
        + ("" if size == SIZE else f"-{size[0]}x{size[1]}")
        + ("" if variants == 1 else f"-t{variants}")
        + ("-mixed" if mixed else "")
    )
    if source.exists():
        return source
    tmp = source.with_name(source.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for c in range(CLASSES):
        (tmp / f"class{c:02d}").mkdir(parents=True)
    step = 2000  # a multiple of every --variants
    todo = [(s, min(s + step, count), str(tmp), size, variants, mixed) for s in range(0, count, step)]
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
        for done, _ in enumerate(pool.map(_make, todo), 1):
            print(
                f"generated {min(done * step, count)} / {count} ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )
    tmp.rename(source)
    return source


def run_once(source: pathlib.Path, out: pathlib.Path, extra: list[str], workers: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    cmd = [
        sys.executable,
        "-m",
        "prep.cli",
        "convert",
        str(source),
        str(out),
        "--workers",
        str(workers),
        "--no-progress",
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=err_file, env=env)
        with TreePeak(proc.pid, interval=0.25) as peak:
            _, status, usage = os.wait4(proc.pid, 0)  # the command's own CPU time, as well as its wall
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = (_read(f) for f in (out_file, err_file))
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {stderr.decode()[-2000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    report = out / "duplicates.jsonl"
    groups = json.loads(report.read_text().splitlines()[0])["groups"] if report.exists() else 0
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "pipeline": manifest["run"]["seconds"],
        "tree_rss_mb": max(peak.peak, usage.ru_maxrss * 1024) / 2**20,
        "examples": manifest["inputs"]["written"],
        "groups": groups,
        "stdout": stdout.decode(),
    }


def _read(f) -> bytes:
    f.seek(0)
    return f.read()


def table(count: int, results: dict[str, list[dict]], what: str = "64x64 JPEGs") -> str:
    """Medians per mode, each against --duplicates off's; then the median of the runs' ratios pair by pair
    (repeat r of a mode against repeat r of off, run side by side), which a slow hour moves less, and their range."""
    keys = ("wall", "cpu", "pipeline")
    off = results["--duplicates off"]
    base = {k: statistics.median(r[k] for r in off) for k in keys}
    lines = [
        f"prep convert, {count} generated {what} (+1% planted copies), 2 workers, median of {len(off)}",
        f"{'mode':<18} {'images':>7} {'groups':>6} {'wall s':>8} {'x off':>6} {'CPU s':>8} {'x off':>6} "
        f"{'pipeline s':>10} {'x off':>6} {'peak tree RSS MB':>16} {'pairs: wall x off':>17} {'(range)':>13}",
    ]
    for mode, runs in results.items():
        m = {k: statistics.median(r[k] for r in runs) for k in keys}
        rss = statistics.median(r["tree_rss_mb"] for r in runs)
        ratios = [r["wall"] / o["wall"] for r, o in zip(runs, off)]
        lines.append(
            f"{mode:<18} {runs[0]['examples']:>7} {runs[0]['groups']:>6} "
            + " ".join(f"{m[k]:>{w}.2f} {m[k] / base[k]:>6.3f}" for k, w in zip(keys, (8, 8, 10)))
            + f" {rss:>16.0f} {statistics.median(ratios):>17.3f} {min(ratios):>6.3f}-{max(ratios):.3f}"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=pathlib.Path, default=pathlib.Path("/tmp/dedupe-scale"))
    parser.add_argument("--generate-only", action="store_true", help="make the set and stop")
    parser.add_argument("--size", default="64x64", help="WxH of the generated JPEGs")
    parser.add_argument(
        "--variants",
        type=int,
        default=1,
        choices=(1, 2, 4, 8),
        help="generate count/N scenes, each also mirrored and turned: N images apiece",
    )
    parser.add_argument(
        "--mixed-sizes",
        action="store_true",
        help="cut each image to 70-100%% of each side at random: nearly every picture its own size",
    )
    parser.add_argument(
        "--convert-args", default="", help="more prep convert options for both modes, e.g. '--resize 256'"
    )
    parser.add_argument(
        "--modes",
        default="default,keep,off",
        help="the modes to run, of default, reject, keep, off (off runs in any case: the ratios' base)",
    )
    args = parser.parse_args(argv)
    chosen = {SHORT[m.strip()] for m in args.modes.split(",") if m.strip() in SHORT} | {SHORT["off"]}
    if len(chosen) < 2 or any(m.strip() not in SHORT for m in args.modes.split(",")):
        parser.error(f"--modes takes names of {', '.join(SHORT)}, one besides off at least, got {args.modes!r}")
    modes = {mode: extra for mode, extra in MODES.items() if mode in chosen}
    size = tuple(int(v) for v in args.size.split("x"))
    source = ensure_data(args.count, args.data, args.workers, size, args.variants, args.mixed_sizes)
    if args.generate_only:
        return
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    for repeat in range(args.repeats):  # modes in turn, the order reversed every other repeat: a drift cancels
        for mode, extra in modes.items() if repeat % 2 == 0 else reversed(modes.items()):
            r = run_once(source, args.data / "out", [*args.convert_args.split(), *extra], args.workers)
            results[mode].append(r)
            print(
                f"repeat {repeat + 1} {mode}: wall {r['wall']:.2f} s, CPU {r['cpu']:.2f} s, "
                f"pipeline {r['pipeline']:.2f} s, "
                f"tree RSS {r['tree_rss_mb']:.0f} MB, groups {r['groups']}",
                file=sys.stderr,
            )
    shutil.rmtree(args.data / "out", ignore_errors=True)
    what = f"{args.size} JPEGs" + (" cut to 70-100% a side" if args.mixed_sizes else "")
    print(table(args.count, results, what + (f", {args.convert_args}" if args.convert_args else "")))
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    name = source.name.replace("src", "dedupe-scale") + "".join(f"-{a.strip('-')}" for a in args.convert_args.split())
    name += "" if len(modes) == len(MODES) else "-" + "-".join(k for k, v in SHORT.items() if v in modes)
    (results_dir / f"{name}.json").write_text(
        json.dumps(
            {mode: [{k: v for k, v in r.items() if k != "stdout"} for r in runs] for mode, runs in results.items()},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
