"""Whether another process still runs, by its pid: the one check the job service (launcher, crash
leftovers, dataset claims) and the on-disk cache (staged files of a dead writer) share. No torch."""

from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether process `pid` still runs. A zombie does not count (it has exited; only its parent
    has not reaped it). Where /proc is missing (not Linux) the kernel is asked with signal 0, and
    a process this user may not signal counts as running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
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


def start_token(pid: int) -> str | None:
    """What tells process `pid` from any other process that had (or will have) its pid: the boot
    id and its start time in clock ticks after boot, from /proc. None where /proc cannot tell
    (not Linux, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return f"{boot}:{fields[19]}"  # field 22 of stat, starttime


def same_process_alive(pid: int, token: str | None) -> bool:
    """Whether the process recorded as (`pid`, `token` = start_token(pid) then) still runs: `pid`
    is alive and, where both tokens are known, started when the recorded one did (a reused pid is
    another process)."""
    if not process_alive(pid):
        return False
    now = start_token(pid) if token is not None else None
    return now is None or now == token
