"""How old a file is, for the clean-ups that remove what is "so long" unused (no torch).

A file's mtime is the wall clock of the moment it was written (this host's, or, in a shared
home, another host's), and the wall clock is set: back by an NTP step or a VM's correction,
forward by years when a host booted with its clock in 1970 is put right, and a file from a host
whose clock runs ahead is stamped in the future. `now - mtime` then calls a file written a
minute ago 56 years old (removed at once), or one of last month "from the future" (kept until
the clock gets there). So:

- `older_than(mtime, limit)`: a file stamped in the future (past FUTURE_SLACK_S, a coarse file
  system's tick) is never "old": its age cannot be judged, and it is kept.
- `BootLedger`: where the studio itself writes or uses the files (the uploaded references), it
  records each one's moment on the host's boot clock (host_clock.host_now, with this boot's id);
  an age recorded in the same boot is measured on that clock alone (no wall-clock step moves
  it), and the mtime rule above judges only what the ledger has no same-boot entry for.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from pathlib import Path

from lorastudio.host_clock import host_now

log = logging.getLogger("lorastudio")

FUTURE_SLACK_S = 2.0  # a coarse file system's tick (FAT: 2 s): a stamp this far ahead is not yet "future"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MAX_LEDGER_BYTES = 4 << 20
_LOCK = threading.Lock()  # every ledger of the process: a read-modify-write is never interleaved


def boot_id() -> str | None:
    """This boot's id (Linux), None elsewhere or when it cannot be read: then no boot-clock
    entry is trusted (`BootLedger.age_s` answers None)."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def older_than(mtime: float, limit_s: float, now: float | None = None) -> bool:
    """Whether a file last written at `mtime` (wall clock) is more than `limit_s` old at `now`
    (default: the wall clock now); never for a file stamped in the future (its age cannot be
    judged: a clock set back since, or another host's running ahead)."""
    now = time.time() if now is None else now
    if mtime > now + FUTURE_SLACK_S:
        return False
    return now - mtime > limit_s


class BootLedger:
    """The moments files of one folder were written or used, on the host's boot clock: a hidden
    JSON file `{"boot": boot id, "at": {name: host_now()}}` beside them, written atomically
    (staged under a pid name, renamed). Thread-safe within a process; its writer is the one
    server of the home. An entry of another boot is dropped (the boot clock starts again at a
    boot)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = _LOCK

    def _load(self, boot: str | None) -> dict[str, float]:
        from lorastudio.basemodels.jsonfile import (
            read_json,
        )  # (basemodels imports staged_files, which imports this)

        try:  # never blocking on a FIFO nor reading a device (RELIABILITY 1163), at most MAX_LEDGER_BYTES
            data = read_json(self.path, MAX_LEDGER_BYTES)
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or boot is None or data.get("boot") != boot:
            return {}
        at = data.get("at")
        if not isinstance(at, dict):
            return {}
        return {  # a NaN or infinite moment (json reads them) would make its file never old: dropped
            str(k): float(v)
            for k, v in at.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }

    def _save(self, boot: str, at: dict[str, float]) -> None:
        from lorastudio.staged_files import staging_path  # (staged_files imports this module)

        tmp = staging_path(self.path)  # staged_files.py: a killed writer's is removed at a server start
        try:
            tmp.write_text(json.dumps({"boot": boot, "at": at}), encoding="utf-8")
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def note(self, name: str) -> None:
        """Record that `name` was written or used now. A failed write is logged: the file's
        age is then judged by its mtime (`older_than`)."""
        boot = boot_id()
        if boot is None:
            return
        with self._lock:
            at = self._load(boot)
            at[name] = host_now()
            try:
                self._save(boot, at)
            except OSError as err:
                log.warning("could not record the use of %s in %s: %s", name, self.path, err)

    def ages(self) -> dict[str, float]:
        """{name: seconds since it was noted} for the entries of this boot."""
        with self._lock:
            now = host_now()
            return {name: now - at for name, at in self._load(boot_id()).items()}

    def keep_only(self, names: set[str]) -> None:
        """Drop the entries of names not in `names` (their files removed); a ledger of another
        boot is emptied."""
        boot = boot_id()
        if boot is None:
            return
        with self._lock:
            at = self._load(boot)
            kept = {n: t for n, t in at.items() if n in names}
            try:
                if not kept:  # nothing to remember: no file stays behind
                    self.path.unlink(missing_ok=True)
                elif kept != at:
                    self._save(boot, kept)
            except OSError as err:
                log.warning("could not update %s: %s", self.path, err)

    def forget(self, names: set[str]) -> None:
        """Drop the entries of `names` (their files removed)."""
        with self._lock:
            left = set(self._load(boot_id())) - names
        self.keep_only(left)


def aged(
    name: str, mtime: float, limit_s: float, boot_ages: dict[str, float], now: float | None = None
) -> bool:
    """Whether file `name` is more than `limit_s` old: by its boot-clock age when `boot_ages`
    (BootLedger.ages) has one, else by its mtime (`older_than`)."""
    if name in boot_ages:
        return boot_ages[name] > limit_s
    return older_than(mtime, limit_s, now)
