"""`Sandbox`: prepares images in worker processes bounded in memory and time.

A thread cannot be bounded: a codec that allocates 24 GB or loops for minutes
takes the whole run with it. A sandbox worker is a lean Python process (it
imports Pillow, numpy and prep.core.image_rules, never Beam or TensorFlow) that prepares
one image at a time under `resource.setrlimit(RLIMIT_AS)` = its size when the
image arrives + `--max-image-memory`, while the calling thread waits until the worker
has computed `--image-timeout` seconds (its CPU time, so that how busy the machine is
does not decide which images are rejected) or has sat that long neither computing nor
waiting for a core (blocked). Whatever happens to the image, the run goes on:

    over the memory limit    MemoryError in the codec   -> image_memory
    over the time limit      worker killed, respawned    -> image_timeout
    worker dies (segfault, abort, the kernel's OOM killer) -> crashed_decoder

Workers start on first use (a conversion of plain JPEGs under `--isolate auto`
starts none), one per calling thread at most, and die with their parent
(PR_SET_PDEATHSIG) or when `close` is called. What a codec prints on stderr
(libtiff, libjpeg) and Pillow's Python warnings are captured per image and
returned with it, never shown on the console.

Messages on the pipes are a small typed header and the raw image bytes
(sandbox_wire.py): nothing a worker sends can run code in the parent.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from multiprocessing.connection import Connection

from prep.core.image_rules import ImageOptions, ImageRejected, PreparedImage
from prep.core.run.sandbox_wire import Answer, Kind, read_answer, read_request, send_answer, send_request

_READY = b"ready"
# A worker whose RSS stays this far above its start after an image (heap fragments) is
# replaced, so that an idle worker holds its baseline only (docs/benchmarks.md, "Memory").
_RECYCLE = 32 << 20
# The worker's own start (interpreter, Pillow, numpy) is not the image's time.
_START_TIMEOUT = 60.0
# Answers after which a worker is not reused: it is gone, stuck, or not to be trusted.
_LOST = (Kind.DIED, Kind.TIMEOUT, Kind.MALFORMED)


class SandboxError(RuntimeError):
    """A sandbox worker could not start: a broken installation, not a bad image."""


class _Worker:
    """One worker process and its two pipe ends."""

    def __init__(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = f"import sys; sys.path.insert(0, {root!r}); from prep.core.run.sandbox import serve; serve()"
        # One BLAS thread: numpy's default pool reserves address space per core.
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None  # PIPEs
        self._send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self._recv = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        try:
            ready = self._recv.poll(_START_TIMEOUT) and self._recv.recv_bytes() == _READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            err = self.proc.stderr.read().decode("utf-8", "replace").strip()
            raise SandboxError(f"a sandbox worker did not start: {err[-2000:] or 'no message'}")
        self.proc.stderr.close()  # from here on the worker writes its stderr to a file of its own
        self.base_rss = self.rss()

    def prepare(self, data: bytes, options: ImageOptions) -> Answer:
        """The worker's answer for one image, or DIED (with its exit status) or TIMEOUT."""
        try:
            send_request(self._send, data, options)
        except OSError:  # the worker died before it read the image
            return Answer(Kind.DIED, status=self._exit_status())
        try:
            late = self._wait(options.image_timeout)
            return Answer(Kind.TIMEOUT, detail=late) if late else read_answer(self._recv)
        except (EOFError, OSError):
            return Answer(Kind.DIED, status=self._exit_status())

    def _wait(self, timeout: float) -> str:
        """Waits for the worker's answer; returns "" once it is there, else why it is late.

        Late: the worker computed `timeout` seconds (CPU time: on a busy machine it waits for a core
        longer, and is not rejected for it), or it used no CPU and was not runnable (state R) for
        `timeout` seconds: blocked, not computing. Without /proc, `timeout` seconds of wall time."""
        start = _cpu_and_state(self.proc.pid)
        if start is None:
            return "" if self._recv.poll(timeout) else f"not prepared within --image-timeout {timeout:g} s; stopped"
        last, used, progress = start[0], 0.0, time.monotonic()
        while not self._recv.poll(max(timeout - used, 0.01)):
            now = _cpu_and_state(self.proc.pid)
            if now is None:  # gone: the pipe says so
                return ""
            used = now[0] - start[0]
            if used >= timeout:
                return f"not prepared within --image-timeout {timeout:g} s of CPU time; stopped"
            if now[0] > last or now[1] == "R":
                last, progress = now[0], time.monotonic()
            elif time.monotonic() - progress >= timeout:
                return f"blocked, neither computing nor waiting for a core, for --image-timeout {timeout:g} s; stopped"
        return ""

    def _exit_status(self) -> int:
        try:
            return self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for conn in (self._send, self._recv):
            conn.close()

    def rss(self) -> int:
        """Resident bytes (0 once the process is gone)."""
        try:
            with open(f"/proc/{self.proc.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0


class Sandbox:
    """A pool of at most `size` sandbox workers, shared by the threads that call `prepare`.

    Made in a DoFn's setup() and closed in its teardown(): it holds processes and is not picklable.
    """

    def __init__(self, size: int):
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(size):
            self._idle.put(None)  # a slot whose worker is not started yet
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def prepare(self, data: bytes, options: ImageOptions) -> tuple[PreparedImage, str]:
        """Prepares `data` as prep.core.image_rules.prepare_image would, in a bounded worker.

        Returns the image and what the codec printed while preparing it ("" if nothing).

        Raises:
            ImageRejected: as prepare_image, or image_memory, image_timeout, crashed_decoder.
            SandboxError: no worker could be started.
        """
        worker = self._idle.get()
        try:
            if worker is None:
                worker = self._start()
            started = time.monotonic()
            answer = worker.prepare(data, options)
            if answer.kind in _LOST or worker.rss() > worker.base_rss + _RECYCLE:
                self._discard(worker)
                worker = None
            if answer.kind is Kind.OK:
                assert answer.image is not None  # an OK answer carries its image (read_answer)
                return answer.image, answer.message
            if answer.kind is Kind.REJECTED:
                detail = answer.detail
                raise ImageRejected(
                    answer.reason, f"{detail} (the codec said: {answer.message})" if answer.message else detail
                )
            if answer.kind is Kind.TIMEOUT:
                raise ImageRejected("image_timeout", answer.detail)
            if answer.kind is Kind.MALFORMED:
                raise ImageRejected(
                    "crashed_decoder", "the decoder's process sent an answer that does not read as one; it was stopped"
                )
            raise ImageRejected(
                "crashed_decoder",
                f"the decoder's process died ({_describe(answer.status)}) after {time.monotonic() - started:.1f} s",
            )
        finally:
            self._idle.put(worker)

    def _start(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed")
        worker = _Worker()
        with self._lock:
            self._workers.add(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)

    def workers_rss(self) -> int:
        with self._lock:
            return sum(w.rss() for w in self._workers)

    def close(self) -> None:
        """Kills every worker; a `prepare` still waiting then ends in crashed_decoder."""
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers), set()
        for w in workers:
            w.kill()


def _cpu_and_state(pid: int) -> tuple[float, str] | None:
    """A process's CPU seconds (user and system, all its threads) and its state letter; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def _describe(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"exit status {status}"


# --- the worker process ------------------------------------------------------------------------


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel kills this worker when its parent dies, even by SIGKILL.

    Strictly, when the parent's thread that started it ends: a pool thread, which lives
    as long as the pool (PrepareChunk's teardown closes the sandbox first anyway).
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker still ends when its stdin closes


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def serve() -> None:
    """The worker's loop: read an image, prepare it under the limits, answer; until stdin closes."""
    _die_with_parent()
    import resource
    import warnings

    import numpy  # noqa: F401  (imported before the limit is set: image_rules needs it for 16-bit images)
    from PIL import Image

    from prep.core import image_rules as images

    Image.init()  # every format plugin, now rather than during an image's time
    images.quiet_pillow()
    recv, send = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
    capture = os.memfd_create("prep-sandbox-stderr") if hasattr(os, "memfd_create") else os.open(os.devnull, os.O_RDWR)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    send.send_bytes(_READY)
    os.dup2(capture, 2)  # codecs print here; nothing reaches the console
    buffer = images.EncodeBuffer()
    while True:
        try:
            data, options = read_request(recv)
        except EOFError:
            return
        os.ftruncate(capture, 0)
        os.lseek(capture, 0, os.SEEK_SET)
        limit = _address_space() + options.max_image_memory
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
        try:
            with warnings.catch_warnings(record=True) as caught:  # one thread here: safe
                warnings.simplefilter("always")
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # see images.bomb_limit
                try:
                    answer = Answer(Kind.OK, images.prepare_image(data, options, buffer))
                except images.ImageRejected as exc:
                    answer = Answer(Kind.REJECTED, reason=exc.reason, detail=exc.detail)
                except MemoryError:  # outside the codec, e.g. while converting
                    answer = Answer(
                        Kind.REJECTED,
                        reason="image_memory",
                        detail=f"preparing it needs more than --max-image-memory {options.max_image_memory} bytes",
                    )
            del data
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        send_answer(send, answer._replace(message=_message(capture, caught)))


def _message(capture: int, caught: list[warnings.WarningMessage]) -> str:
    """The first line a codec printed, or the first Python warning, for the image's record."""
    size = os.lseek(capture, 0, os.SEEK_END)
    if size:
        os.lseek(capture, 0, os.SEEK_SET)
        text = os.read(capture, min(size, 4096)).decode("utf-8", "replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[0][:300]
    for w in caught:
        return str(w.message).strip()[:300]
    return ""
