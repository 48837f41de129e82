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
