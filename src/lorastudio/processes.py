"""Whether another process still runs, by its pid: the one check the job service (launcher, crash
leftovers, dataset claims) and the on-disk cache (staged files of a dead writer) share; the spawn
context the workers start with and the way they end (exit_worker). No torch."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import socket
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import NoReturn

log = logging.getLogger("lorastudio.jobs")


def process_alive(pid: int) -> bool:
    """Whether process `pid` still runs. A zombie does not count (it has exited; only its parent
    has not reaped it). Where /proc is missing (not Linux) the kernel is asked with signal 0, and
    a process this user may not signal counts as running."""
    try:
        stat = _proc_stat(pid)
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat[stat.rindex(")") + 2 :].split(" ", 1)[0] not in ("Z", "X")


PF_EXITING = 0x4  # the kernel's task flag set as a process's exit begins (include/linux/sched.h)


def process_ending(pid: int) -> bool:
    """Whether process `pid` has ended or is ending: gone, a zombie, or inside its exit (its
    task flags, field 9 of /proc/PID/stat, hold PF_EXITING: set when the exit starts, before
    its files and sockets close, so a peer that saw its connection reset finds it ending, where
    process_alive may still find it running). Where /proc is missing: not process_alive."""
    try:
        stat = _proc_stat(pid)
    except FileNotFoundError:
        return True
    except OSError:
        return not process_alive(pid)
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0] in ("Z", "X") or bool(int(fields[6]) & PF_EXITING)


def _proc_stat(pid: int) -> str:
    """/proc/PID/stat as text. Its second field is the process's name, any bytes a process gave
    itself, cut at 15 bytes (mid-character for a name of accented letters): a strict UTF-8 read
    raised UnicodeDecodeError there, through every liveness check of a pid another process may
    have taken (RELIABILITY 1031). The fields read are those after the name's last ")"."""
    return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")


def start_token(pid: int) -> str | None:
    """What tells process `pid` from any other process that had (or will have) its pid:
    "host|boot id|pid namespace|start time in clock ticks after boot", from /proc. None where
    /proc cannot tell (not Linux, or the process is gone)."""
    try:
        stat = _proc_stat(pid)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    ticks = stat[stat.rindex(")") + 2 :].split()[19]  # field 22 of stat, starttime
    return "|".join((socket.gethostname(), boot, namespace, ticks))


def same_kernel(token: str | None) -> bool:
    """Whether the process recorded with start token `token` ran on this kernel, this boot (its
    boot id is this one's, whatever its host name or PID namespace: a container beside this one)."""
    mine = start_token(os.getpid())
    recorded = token.split("|") if token is not None else []
    return mine is not None and len(recorded) == 4 and recorded[1] == mine.split("|")[1]


def process_gone(pid: int, token: str | None) -> bool:
    """True only when this process can tell that the process recorded as (`pid`, `token` =
    its start_token then) has ended: `pid` is not running, or runs another process (a reused
    pid), or this machine rebooted since. A process recorded on another host (a shared network
    home) or in another pid namespace cannot be told: False."""
    mine = start_token(os.getpid())
    recorded = token.split("|") if token is not None else []
    if len(recorded) == 4 and mine is not None:
        host, boot, namespace, _ = mine.split("|")
        if recorded[0] != host:
            return False
        if recorded[1] != boot:
            return True
        if recorded[2] != namespace:
            return False
    if not process_alive(pid):
        return True
    now = start_token(pid) if token is not None else None
    return now is not None and now != token


def keep_working_folder() -> None:
    """Make sure this process's working folder exists before it starts another process: when it
    was deleted (a `lorastudio serve` started in a folder removed later), move to "/". A spawn
    asks for the folder (multiprocessing's spawn reads os.getcwd(): "could not start the worker:
    [Errno 2] No such file or directory" for every run) and a child started in a deleted folder
    dies importing torch ("Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so"). Nothing
    of the studio is relative to it (the home and every path a server takes are absolute), and a
    relative path against a deleted folder named nothing anyway."""
    try:
        os.getcwd()
    except FileNotFoundError:
        os.chdir("/")
        log.warning("the working folder of this process was deleted; it works in / now")


def spawn_context() -> SpawnContext:
    """multiprocessing's spawn context, with a working folder that exists (keep_working_folder):
    what every worker of the job service is started with."""
    keep_working_folder()
    return mp.get_context("spawn")


def start_resource_tracker_deaf_to_hangup() -> None:
    """Start multiprocessing's resource tracker (the process that unlinks the workers' queues'
    semaphores) with SIGHUP ignored, as it ignores SIGINT and SIGTERM itself: a terminal's hangup
    reaches the whole process group, and the tracker died of it while the server shut down
    ("resource_tracker: process died unexpectedly", a KeyError traceback for each semaphore).
    An ignored signal stays ignored across the tracker's exec. Main thread only (signal.signal);
    no-op where the tracker already runs."""
    import signal
    from multiprocessing import resource_tracker

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)


def exit_worker(code: int) -> NoReturn:
    """End a spawned worker of the server at once (os._exit: the interpreter's teardown of torch
    and CUDA would only delay handing the GPU back), stdout and stderr flushed and its
    multiprocessing semaphores unlinked first (multiprocessing's own exit finalizers, priority 0
    and up: what a normal exit runs before its teardown). A lock a library makes in the worker
    (tqdm's progress-bar lock, made by a diffusers pipeline's or a checkpoint load's bar) is
    registered with the server's resource tracker; an os._exit past its finalizer left the
    server's console, at its end, an unstamped "resource_tracker: There appear to be 1 leaked
    semaphore objects to clean up at shutdown" warning (RELIABILITY 2121)."""
    import sys
    from multiprocessing import util

    try:
        util._run_finalizers(0)  # noqa: SLF001 - multiprocessing's exit step, run before os._exit
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
