"""A preloaded zygote for the worker processes the job service starts inside a test process.

The job service starts every worker (training, standby, generation, caption) with
multiprocessing's spawn context (lorastudio.processes.spawn_context): a fresh interpreter that
imports torch, diffusers, transformers and peft before its job (~5-9 CPU s, most of what a tiny
job costs). A test of the in-process API (tests/api) that trains or generates pays that once per
worker. Under `ZygoteContext` (tests/conftest.py `_preloaded_workers`, autouse: what
lorastudio.processes.spawn_context returns in the test process) such a worker is
forked instead from one zygote per test process: a fresh interpreter started on the first worker
that has imported what the product's own standby worker imports while it waits for a job
(jobs/standby.PRELOAD and every family's diffusers classes, families/preload.py) and nothing else.

What the worker still gets, as a spawned one does (what multiprocessing's forkserver does not
give, and why this is written here rather than with `set_forkserver_preload`):
- it is a child of the test process, not of the zygote: the zygote forks an intermediate that
  forks the worker and exits, and the test process, a child subreaper (prctl
  PR_SET_CHILD_SUBREAPER) only while it asks, adopts it. So os.getppid() is the server's pid (the
  worker's bind_to_parent exits 3 otherwise), its parent-death signal is the server's death, the
  test process reaps it with waitpid (exit codes and signals as a spawned worker's; the
  test's CPU counts it: tests/cpu_costs.py) and Process.sentinel is a pipe that the worker holds,
  as popen_spawn_posix's;
- the server's environment now (os.environ, applied before anything of the job runs), its
  working folder, sys.path and the pickled target and args (multiprocessing's preparation data,
  the same bytes a spawned worker reads);
- no CUDA: the zygote never touches CUDA (this host has none; on one with CUDA, a fork after
  CUDA's initialisation would be unsafe: `ZygoteContext` is for the CPU suite only).

What it does not get, and when a real spawn is used instead (`fits`): a worker forked from the
zygote ran the zygote's imports under the zygote's environment, and its /proc/PID/environ and
cmdline are the zygote's. So the zygote is used only while the environment differs from the
test process's start (START_ENV, the zygote's) in LORASTUDIO_* variables (read when used: no module of src reads one at import;
the secrets among them excepted) and APPLIED_WHEN_USED (pytest's, the compile caches'); any other
difference (HF_HOME, a TORCH* or CUDA_* setting, a secret whose absence from the worker's
environment a test checks) gets a spawned worker. A test whose subject is the spawned process
itself (its imports, environ, cmdline, the standby's own preload) is marked
`@pytest.mark.spawned_workers` and gets real spawns throughout.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import os
import pickle
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from multiprocessing import (
    connection,
    forkserver,
    popen_fork,
    popen_forkserver,
    reduction,
    resource_tracker,
    spawn,
    util,
)
from multiprocessing.context import SpawnContext, SpawnProcess, set_spawning_popen

PR_SET_CHILD_SUBREAPER = 36
SIGNED = struct.Struct("q")
MAX_FDS = 256
ANSWER_S = 600.0  # its first answer waits for its imports (minutes on a loaded 2-core host)
# Environment variables besides LORASTUDIO_* that may differ between the zygote's start and a
# worker's request: pytest's, and the compile caches' folders that the engine sets in a process
# that trained (the in-process tests': training/speed/compile.keep_compile_cache, attention_fa4.
# keep_fa4_cache), read at a compile, not at import (the standby's APPLIED_AT_HAND names the
# first; the zygote imports no flash-attn).
APPLIED_WHEN_USED = frozenset(
    {
        "PYTEST_CURRENT_TEST",
        "TORCHINDUCTOR_CACHE_DIR",
        "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED",
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
    }
)
# The test process's environment as this module is imported (by tests/conftest.py, before any
# test changed it): the zygote's, and what a request's is compared with.
START_ENV = dict(os.environ)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _differences(then: Mapping[str, str], now: Mapping[str, str]) -> set[str]:
    return {k for k in set(then) | set(now) if then.get(k) != now.get(k)}


def _read_signed(fd: int) -> int:
    data = b""
    while len(data) < SIGNED.size:
        chunk = os.read(fd, SIGNED.size - len(data))
        if not chunk:
            raise EOFError("the zygote closed the pipe before the worker's pid")
        data += chunk
    return SIGNED.unpack(data)[0]


class Zygote:
    """The test process's handle on its zygote (started by `ensure_running`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._address: str | None = None
        self._alive_w: int | None = None
        self.failed: str | None = None  # why the zygote could not start (then: real spawns)

    def fits(self, env: Mapping[str, str]) -> bool:
        """Whether a worker forked now would see what a spawned one would (module docstring)."""
        from lorastudio.jobs.childenv import is_secret

        if self.failed is not None:
            return False
        return all(
            name in APPLIED_WHEN_USED or (name.startswith("LORASTUDIO_") and not is_secret(name))
            for name in _differences(START_ENV, env)
        )

    def ensure_running(self) -> None:
        """Start the zygote (under the lock). It inherits `has_child_subreaper` from this
        process, set for its start, which lets this process adopt the zygote's grandchildren."""
        if self.pid is not None:
            return
        resource_tracker.ensure_running()
        listener = socket.socket(socket.AF_UNIX)
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        listener.listen()
        alive_r, alive_w = os.pipe()
        cmd = f"import sys; sys.path[:] = {sys.path!r}; from zygote import main; main({listener.fileno()}, {alive_r})"
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        try:
            exe = spawn.get_executable()
            fds = (listener.fileno(), alive_r)
            self._process = subprocess.Popen([exe, "-c", cmd], pass_fds=fds, env=START_ENV)
        finally:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)
            os.close(alive_r)
            listener.close()
        self.pid = self._process.pid
        self._address = address
        self._alive_w = alive_w
        atexit.register(self.stop)

    def start_child(self, fds: list[int]) -> tuple[int, int, int]:
        """A new worker, a child of this process: (status_r: its sentinel, data_w: where its
        preparation data and process object go, pid)."""
        with self._lock:
            self.ensure_running()
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            env = pickle.dumps(dict(os.environ))
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
            try:
                with socket.socket(socket.AF_UNIX) as client:
                    client.connect(self._address)
                    std = [1, 2]  # where this test's output goes now (pytest's capture), not the zygote's
                    reduction.sendfds(client, [child_r, child_w, *std, resource_tracker.getfd(), *fds])
                    client.sendall(SIGNED.pack(len(env)) + env)
                if not select.select([parent_r], [], [], ANSWER_S)[0]:
                    raise OSError(f"the zygote did not answer in {ANSWER_S:.0f} s")
                pid = _read_signed(parent_r)  # once the intermediate is reaped: the worker is ours
            except BaseException:
                os.close(parent_r)
                os.close(parent_w)
                raise
            finally:
                _prctl(PR_SET_CHILD_SUBREAPER, 0)
                os.close(child_r)
                os.close(child_w)
        return parent_r, parent_w, pid

    def stop(self) -> None:
        """End the zygote and reap it (its CPU then counts in this process's children)."""
        with self._lock:
            if self.pid is None:
                return
            os.close(self._alive_w)
            try:
                self._process.wait(5)  # it exits at once
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            os.unlink(self._address)
            self.pid = None


ZYGOTE = Zygote()


class ZygotePopen(popen_forkserver.Popen):
    """popen_forkserver's launch through the zygote; popen_fork's waitpid (the worker is ours)."""

    method = "spawn"
    poll = popen_fork.Popen.poll

    def _launch(self, process_obj) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w, self.pid = ZYGOTE.start_child(self._fds)
        parent_w = os.dup(w)  # the child's sign that its parent lives (as popen_forkserver)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())


class ZygoteProcess(SpawnProcess):
    """A spawn context's Process that is forked from the zygote where that `fits`."""

    @staticmethod
    def _Popen(process_obj):
        _note(process_obj)
        if ZYGOTE.fits(os.environ):
            try:
                return ZygotePopen(process_obj)
            except (OSError, EOFError) as err:  # no zygote here (or it died): spawn from now on
                ZYGOTE.failed = str(err)
                print(f"[zygote] workers are spawned from now on: {err}", file=sys.stderr)
        return SpawnProcess._Popen(process_obj)


def _note(process_obj) -> None:
    """With LORASTUDIO_ZYGOTE_LOG=FILE: a line per worker start (the test, the target, forked or
    spawned, the variables that made it spawned), to find what keeps a test off the zygote."""
    log = os.environ.get("LORASTUDIO_ZYGOTE_LOG")
    if log:
        names = sorted(_differences(START_ENV, os.environ))
        fits = ZYGOTE.fits(os.environ)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{os.environ.get('PYTEST_CURRENT_TEST')}\t{process_obj._target.__name__}\t")
            out.write(f"{'forked' if fits else 'spawned'}\t{ZYGOTE.failed or ''}\t{' '.join(names)}\n")


class ZygoteContext(SpawnContext):
    Process = ZygoteProcess


# --- the zygote process ----------------------------------------------------------------------


def main(listener_fd: int, alive_r: int) -> None:
    """The zygote: import what a standby worker imports, then fork a worker per request until
    the test process closes its end of `alive_r`."""
    # no parent-death signal: it fires when the thread that started this process ends (a job
    # service's thread); the test process's end closes `alive_r`'s other end instead
    import importlib

    from lorastudio.families.preload import import_family_classes
    from lorastudio.import_freeze import freeze_imports
    from lorastudio.jobs.standby import PRELOAD

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # the worker's own import fails as a spawned one's would
            importlib.import_module(name)
    import_family_classes()
    freeze_imports(collect_first=True)
    util._close_stdin()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with (
        socket.socket(socket.AF_UNIX, fileno=listener_fd) as listener,
        selectors.DefaultSelector() as selector,
    ):
        selector.register(listener, selectors.EVENT_READ)
        selector.register(alive_r, selectors.EVENT_READ)
        while True:
            ready = [key.fileobj for key, _ in selector.select()]
            if alive_r in ready:
                os._exit(0)  # the test process closed its end: it ends or is gone
            if listener in ready:
                with listener.accept()[0] as request:
                    _fork_worker(request, [listener.fileno(), alive_r])


def _fork_worker(request: socket.socket, zygote_fds: list[int]) -> None:
    """Fork an intermediate that forks the worker and exits; tell the test process its pid."""
    child_r, child_w, out, err, *fds = reduction.recvfds(
        request, MAX_FDS + 1
    )  # fds: the tracker's, the job's
    size = SIGNED.unpack(_recv_exactly(request, SIGNED.size))[0]
    env = pickle.loads(_recv_exactly(request, size))
    pid_r, pid_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        code = 1
        try:
            os.close(pid_r)
            worker = os.fork()
            if worker == 0:
                os.close(pid_w)
                _run_worker(middle, request, zygote_fds, env, (out, err), child_r, fds)
            os.write(pid_w, SIGNED.pack(worker))
            code = 0
        finally:
            os._exit(code)
    os.close(pid_w)
    try:
        worker = _read_signed(pid_r)
    except EOFError:
        worker = -1
    os.close(pid_r)
    os.waitpid(middle, 0)  # now the worker's parent is the test process (its subreaper)
    with os.fdopen(child_w, "wb") as status:
        status.write(SIGNED.pack(worker))
    for fd in (child_r, out, err, *fds):
        os.close(fd)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the request ended early")
        data += chunk
    return data


def _run_worker(
    middle: int, request: socket.socket, zygote_fds: list[int], env, std, child_r: int, fds
) -> None:
    """In the worker: wait to be adopted, take the test process's environment, run the job."""
    code = 1
    try:
        request.close()
        for fd in zygote_fds:
            os.close(fd)
        while os.getppid() == middle:  # the intermediate's exit reparents this process
            os.sched_yield()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for target, fd in enumerate(std, start=1):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        # what popen_forkserver's pickled fds (its _DupFd) read; no zygote of its own (a worker
        # never holds the test process's `alive` end: the zygote ends when that process does)
        resource_tracker._resource_tracker._fd, *forkserver._forkserver._inherited_fds = fds
        parent_sentinel = os.dup(child_r)
        code = spawn._main(child_r, parent_sentinel)
    except BaseException:  # noqa: BLE001  (as forkserver's child: printed, then exit 1)
        sys.excepthook(*sys.exc_info())
        sys.stderr.flush()
    finally:
        os._exit(code)
