"""`ChunkPool`: whole chunks prepared in worker processes, for PrepareChunk on the embedded runner.

Threads share one GIL, which the Python parts of each image's work hold (docs/design.md, "Processes for
the prepare stage"). A worker is a lean Python process (`python -c`, importing prep.core and Pillow,
never Beam or TensorFlow) that prepares a chunk at a time exactly as PrepareChunk's thread pool would
(chunk_prepare.prepare_chunk: in-flight record, spill file, key rows, index) and answers only whether it
is done. The parent reads the chunk's index back (checkpoints.read_chunk_index), as `--resume` does.

The wire: `multiprocessing.connection` frames of JSON, nothing a process could run.

    in, once:        {"output": OUTPUT, "options": PrepareOptions' fields, "labels": [group, ...]}
    in, per chunk:   {"chunk": id}
    out, per chunk:  {"done": id}  or  {"error": {"kind": "prep" | "os" | "other", ...}}

A chunk's error comes back as the thread path raises it (a PrepError keeps its type and message, an
OSError its errno and file); a worker that dies (killed, the OOM killer) ends the run with a RunnerError,
never a hang. Workers die with their parent (PR_SET_PDEATHSIG, set by the worker against the pool's
launcher thread, which lives until `close`) and are killed by `close`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import traceback
import typing
from multiprocessing.connection import Connection

from prep.core import errors
from prep.core.errors import PrepError, RunnerError
from prep.core.image_rules import ImageOptions
from prep.core.run.spill import PrepareOptions
from prep.core.run.task_build import TaskSpec
from prep.core.workdir import WorkDir

Json = dict[str, typing.Any]  # a JSON object of the wire


def options_json(options: PrepareOptions) -> Json:
    """PrepareOptions as JSON's plain values (`options_from` reads them back)."""
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    task = options.task
    return {
        **fields,
        "image": dataclasses.asdict(options.image),
        "task": None if task is None else task._asdict(),
        "suspects": sorted(options.suspects),
    }


def options_from(data: Json) -> PrepareOptions:
    task = data["task"]
    return PrepareOptions(
        **{
            **data,
            "image": ImageOptions(**data["image"]),
            "task": None if task is None else TaskSpec(**{**task, "classes": tuple(task["classes"])}),
            "suspects": frozenset(data["suspects"]),
        }
    )


class _Worker:
    """One worker process, its two pipe ends, and the chunks sent to it not yet answered, in order."""

    def __init__(self, setup: bytes) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        code = f"import sys; sys.path.insert(0, {root!r}); from prep.core.run.chunk_workers import serve; serve()"
        # One BLAS thread: the content keys' matrix products run on the worker's thread (as threadpool_limits
        # does in PrepareChunk's threads)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # PIPEs
        self.send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.waiting: collections.deque[int] = collections.deque()
        self.send.send_bytes(setup)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for conn in (self.send, self.recv):
            conn.close()


class ChunkPool:
    """`size` worker processes preparing chunks of `work`; started now, in the background.

    `submit` sends a chunk to the worker with the fewest chunks waiting; `wait` returns once a chunk is
    prepared (its index written), raising its error if it failed. Not thread-safe: one caller thread.
    """

    def __init__(self, size: int, work: WorkDir, options: PrepareOptions, labels: tuple[str, ...]):
        self.size = size
        setup = json.dumps({"output": work.output, "options": options_json(options), "labels": list(labels)})
        self._workers: list[_Worker] = []
        self._answers: dict[int, Json] = {}
        self._failed: BaseException | None = None
        self._started, self._closing = threading.Event(), threading.Event()
        # PR_SET_PDEATHSIG fires when the thread that started a worker ends: this one lives until close()
        self._launcher = threading.Thread(target=self._launch, args=(setup.encode(),), name="ChunkPool", daemon=True)
        self._launcher.start()

    def _launch(self, setup: bytes) -> None:
        try:
            for _ in range(self.size):
                self._workers.append(_Worker(setup))
        except BaseException as exc:
            self._failed = exc
        finally:
            self._started.set()
        self._closing.wait()

    def _ready(self) -> list[_Worker]:
        self._started.wait()
        if self._failed is not None:
            raise RunnerError(f"a worker process for preparing images could not start: {self._failed}")
        return self._workers

    def submit(self, chunk: int) -> None:
        workers = self._ready()
        for worker in workers:  # answers already in: a worker's count of waiting chunks is then true
            while worker.waiting and worker.recv.poll(0):
                self._read(worker)
        worker = min(workers, key=lambda w: len(w.waiting))
        try:
            worker.send.send_bytes(json.dumps({"chunk": chunk}).encode())
        except OSError:
            raise _died(worker) from None
        worker.waiting.append(chunk)

    def wait(self, chunk: int) -> None:
        """Returns once `chunk` (submitted) is prepared.

        Raises:
            PrepError, OSError: as preparing it in this process would have.
            RunnerError: its worker died.
        """
        while chunk not in self._answers:
            worker = next(w for w in self._ready() if chunk in w.waiting)
            self._read(worker)
        answer = self._answers.pop(chunk)
        if "error" in answer:
            _raise(answer["error"])

    def _read(self, worker: _Worker) -> None:
        """Reads the worker's answer for the first chunk it has waiting."""
        try:
            answer = json.loads(worker.recv.recv_bytes())
        except (EOFError, OSError):
            raise _died(worker) from None
        self._answers[worker.waiting.popleft()] = answer

    def close(self) -> None:
        """Stops and reaps every worker (one busy with a chunk is killed: its chunk is prepared again)."""
        self._closing.set()
        self._started.wait()
        for worker in self._workers:
            worker.kill()
        self._workers = []


def _died(worker: _Worker) -> RunnerError:
    try:
        status = worker.proc.wait(5)
    except subprocess.TimeoutExpired:
        worker.kill()
        status = worker.proc.returncode
    if status < 0:
        try:
            how = f"signal {signal.Signals(-status).name}"
        except ValueError:
            how = f"signal {-status}"
    else:
        how = f"exit status {status}"
    return RunnerError(f"a worker process preparing images ended abruptly ({how}: killed, or out of memory)")


def _describe(exc: BaseException) -> Json:
    """A chunk's failure as JSON, for `_raise` in the parent."""
    if isinstance(exc, PrepError):
        return {"kind": "prep", "type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, OSError) and exc.errno is not None:
        name = exc.filename
        return {
            "kind": "os",
            "errno": exc.errno,
            "strerror": exc.strerror,
            "filename": None if name is None else os.fsdecode(name) if isinstance(name, bytes) else str(name),
        }
    return {"kind": "other", "type": type(exc).__name__, "message": "".join(traceback.format_exception(exc))[-4000:]}


def _raise(error: Json) -> None:
    if error["kind"] == "prep":
        kind = getattr(errors, error["type"], PrepError)
        raise (kind if isinstance(kind, type) and issubclass(kind, PrepError) else PrepError)(error["message"])
    if error["kind"] == "os":
        raise OSError(error["errno"], error["strerror"], error["filename"])
    raise RuntimeError(f"a worker process preparing images failed: {error['type']}\n{error['message']}")


# --- the worker process ------------------------------------------------------------------------


def serve() -> None:
    """The worker's loop: read a chunk id, prepare the chunk, answer; until stdin closes."""
    from prep.core.image_rules import quiet_pillow
    from prep.core.run.chunk_prepare import prepare_chunk
    from prep.core.run.sandbox import Sandbox, die_with_parent

    die_with_parent()
    recv, send = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # a stray print must not land on the wire
    setup = json.loads(recv.recv_bytes())
    work, options = WorkDir(setup["output"]), options_from(setup["options"])
    label_ids = {name: i for i, name in enumerate(setup["labels"])}
    quiet_pillow()
    sandbox = Sandbox(1)  # --isolate and a resumed run's suspects: this worker's own
    try:
        while True:
            try:
                chunk = json.loads(recv.recv_bytes())["chunk"]
            except EOFError:
                return
            try:
                prepare_chunk(work, chunk, options, label_ids, sandbox)
                answer: Json = {"done": chunk}
            except Exception as exc:
                answer = {"error": _describe(exc)}
            send.send_bytes(json.dumps(answer).encode())
    finally:
        sandbox.close()
