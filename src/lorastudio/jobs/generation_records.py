"""The asynchronous generations' records in the studio home, so that a server restart does not
turn a generation's status into a 404 (jobs/generation_jobs.py keeps them in memory while the
server lives). No torch, no HTTP.

One JSON file per request, `<home>/generation-jobs/<request_id>.json` (request ids are
`[A-Za-z0-9_-]{1,64}`: a file name of their own): {"version", "seq", "request_id", "created",
"outcome" (null while in flight; done / failed / cancelled), "ended", "step", "steps" (its
denoising step when last written: its hand-over, then its end; not rewritten each step),
"result" (done: the gallery image's fields), "error" (failed / cancelled: {"kind": the domain
error's class name, "detail", "problems"})}. Written when the request is handed to its thread
and when it ends, each write atomic (staged beside it under a pid staging name, fsynced,
renamed: staged_files.py removes a killed writer's). Only the server writes them, and it owns
the home alone (jobs/homelock.py), so a record in flight that the running server does not hold
in memory is a previous server's: read as interrupted (`read_record`).

Bounded like the caption jobs' records: the newest KEEP by "seq" (the request's number in the
order the home's requests were sent, one more than the highest recorded; never the wall
clock), the oldest removed when a new one is written. The numbering and that prune list the
folder on each new request but read each entry at most once per change (its name, size, mtime_ns,
ctime_ns and inode: `_all`), so files there that are not records (a hand's, another shape: fix
1160) are not parsed again by every POST (RELIABILITY 1181).

A roll-back to a version before these records (fix 1095) keeps its generations in memory only
and does not read the folder, so it may take a request_id recorded here; after the next upgrade
that id's record would answer the first generation, not the roll-back's. The folder's `.epoch`
names the home's epoch (jobs/homelock.py: carried by every lock holder of this version, begun
anew after a holder of an older one) its records were written under; a server that finds another
epoch there removes the records as possibly overtaken (their GET then answers 404, as a roll-back's
own generations do) and records on under its own (RELIABILITY 1182). Each record names its
epoch, and the mark the highest seq when it was made: a record without an epoch numbered above
both shows that the gap's server was one that keeps records and refuses their ids (the version
between fixes 1095 and 1182), and then nothing is removed (RELIABILITY 1250).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
from pathlib import Path
from typing import Any

from lorastudio import errors, json_read
from lorastudio.capped_read import read_small_file
from lorastudio.errors import ConfigError, LorastudioError
from lorastudio.jobs.homelock import home_epoch
from lorastudio.staged_files import write_staged_text

log = logging.getLogger("lorastudio.jobs")

RECORDS_DIR = "generation-jobs"
KEEP = 200  # records kept (the newest): each a few KB
VERSION = 1
MAX_RECORD_BYTES = 1 << 20
INTERRUPTED = "interrupted"
OUTCOMES = frozenset(("done", "failed", "cancelled"))
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
EPOCH_FILE = ".epoch"  # the home epoch the folder's records were written under


class RecordedError(LorastudioError):
    """A failed or cancelled generation's error as its record kept it: `kind` is the domain
    error's class name (the route answers that class's status), `problems` its problems."""

    def __init__(self, kind: str, detail: str, problems: list[Any] | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.problems = list(problems or [])

    def error_class(self) -> type[LorastudioError]:
        """The recorded error's class (GenerationFailed for a name this version does not know)."""
        cls = getattr(errors, self.kind, None)
        ok = isinstance(cls, type) and issubclass(cls, LorastudioError)
        return cls if ok else errors.GenerationFailed  # type: ignore[return-value]


def records_dir(home: Path) -> Path:
    return home / RECORDS_DIR


def _error_fields(err: LorastudioError | None) -> dict[str, Any] | None:
    if err is None:
        return None
    if isinstance(err, RecordedError):
        return {"kind": err.kind, "detail": str(err), "problems": err.problems}
    problems: list[Any] = []
    if isinstance(err, ConfigError):
        problems = [{"field": p.field, "message": p.message} for p in err.problems]
    elif isinstance(getattr(err, "problems", None), list):
        problems = [str(p) for p in err.problems]  # type: ignore[attr-defined]
    return {"kind": type(err).__name__, "detail": str(err), "problems": problems}


class GenerationRecords:
    """The records of one home, written by its server (thread-safe). A write that fails (a full
    disk, a read-only home) is logged and the generation goes on: only its status after a
    restart is lost. Made at the server's start, holding the home's lock: records written under
    another home epoch than the lock's are removed then (module docstring)."""

    def __init__(self, home: Path) -> None:
        self.folder = records_dir(home)
        self._epoch = home_epoch(home)  # None: no lock of this version (a test harness): not judged
        self._epoch_marked = False
        self._overtaken: set[str] = set()  # records of another epoch it could not remove: never answered
        self._lock = threading.Lock()
        self._seq: int | None = None  # the highest seq recorded, read once
        # each entry's (stat key, its record or None) when last read: `_all` reads an entry again
        # only when it changed
        self._memo: dict[str, tuple[tuple[int, ...], dict[str, Any] | None]] = {}
        self._drop_another_epochs()

    def write(self, status: dict[str, Any], error: LorastudioError | None = None, new: bool = False) -> None:
        """Record `status` (GenerationJobs.status's fields: request_id, state, step, steps,
        created, ended, result) and its `error`; `new`: its first record (numbered, and the
        oldest beyond KEEP removed)."""
        rid = str(status["request_id"])
        if not _ID.match(rid):
            return
        outcome = status["state"] if status["state"] in OUTCOMES else None
        try:
            with self._lock:
                seq = self._next_seq() if new else self._seq_of(rid)
                record = {
                    "version": VERSION, "seq": seq, "request_id": rid, "created": status["created"],
                    "outcome": outcome, "ended": status.get("ended"), "step": status.get("step", 0),
                    "steps": status.get("steps", 0), "result": status.get("result"),
                    "error": _error_fields(error), "epoch": self._epoch,
                }  # fmt: skip
                self._write(self.folder / f"{rid}.json", record)
                if new:
                    self._prune()
        except (OSError, TypeError, ValueError) as err:  # TypeError / ValueError: a result not JSON-able
            log.warning("could not record generation %s in %s: %s", rid, self.folder, err)

    def _write(self, target: Path, record: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._mark_epoch()
        write_staged_text(target, json.dumps(record, allow_nan=False))

    def _mark_epoch(self) -> None:
        """Name the home's epoch in the folder (once per instance), before a record is written;
        never while records of another epoch stay (`_overtaken`)."""
        if self._epoch is not None and not self._epoch_marked and not self._overtaken:
            top = max((r["seq"] for r in self._all()), default=0)  # the last seq written before the mark
            write_staged_text(self.folder / EPOCH_FILE, f"{self._epoch} {top}")
            self._epoch_marked = True

    def _drop_another_epochs(self) -> None:
        """Remove the records written under another home epoch than the lock's (RELIABILITY 1182:
        an older server may have taken their ids since). A folder without EPOCH_FILE holds the
        records of a version before it (or none): kept, as before; an EPOCH_FILE that is there
        but no file of the studio's (a link, a FIFO, a huge file: RELIABILITY 1244) names
        another epoch. Logs what it removed; a record
        it cannot remove is logged and never answered by this server (`_overtaken`), and the
        folder is not marked, so a later start tries again.

        Kept (RELIABILITY 1250): the records of this epoch (their "epoch" field: a start that could
        not remove the overtaken ones), and all of them where a version that keeps records but
        no epoch (fix 1095 up to 1182: it refuses an id recorded here) wrote one since the mark
        (a record without "epoch" numbered above the mark's seq and every tagged record): that
        version, not one that keeps none, served the gap."""
        if self._epoch is None or not self.folder.is_dir():
            return
        marked = read_small_file(self.folder / EPOCH_FILE, 256)
        if marked is None and os.path.lexists(self.folder / EPOCH_FILE):
            marked = b""  # there but not one (a link, a FIFO, over 256 bytes): no epoch of this one
        try:
            epoch, top = _mark_fields(marked)
            if marked is not None and epoch != self._epoch:
                with os.scandir(self.folder) as listing:
                    names = [
                        e.name for e in listing if e.name.endswith(".json") and not e.name.startswith(".")
                    ]
                records = self._all()
                if _recorder_served(records, top):
                    log.info(
                        "kept the generation records in %s: a lorastudio that keeps them (and checks"
                        " their ids) served this home since they were written",
                        self.folder,
                    )
                    names = []
                ours = {f"{r['request_id']}.json" for r in records if r.get("epoch") == self._epoch}
                names = [n for n in names if n not in ours]
                for name in names:
                    try:
                        os.unlink(self.folder / name)
                    except FileNotFoundError:
                        pass
                    except OSError as err:
                        self._overtaken.add(name)
                        log.warning("could not remove the overtaken generation record %s: %s", name, err)
                if names:
                    log.warning(
                        "removed %d generation records in %s: an older lorastudio served this home since they"
                        " were written (it keeps none) and may have taken their request ids",
                        len(names) - len(self._overtaken),
                        self.folder,
                    )
            self._mark_epoch()
        except OSError as err:
            log.warning("could not judge the generation records in %s: %s", self.folder, err)

    def _all(self) -> list[dict[str, Any]]:
        """Every record in the folder (callers hold `_lock`). An entry is read again only when its
        stat key changed since the last listing (a record is replaced by a rename: a new inode);
        what is not a record is remembered as None while it stays as it is."""
        try:
            with os.scandir(self.folder) as listing:
                entries = [e for e in listing if e.name.endswith(".json") and not e.name.startswith(".")]
        except OSError:
            return []
        entries = [e for e in entries if e.name not in self._overtaken]
        seen: dict[str, tuple[tuple[int, ...], dict[str, Any] | None]] = {}
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # removed since the listing
                continue
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)
            known = self._memo.get(entry.name)
            seen[entry.name] = (
                known if known is not None and known[0] == key else (key, _read(Path(entry.path)))
            )
        self._memo = seen
        return [record for _, record in seen.values() if record is not None]

    def _next_seq(self) -> int:
        if self._seq is None:
            self._seq = max((r["seq"] for r in self._all()), default=0)
        self._seq += 1
        return self._seq

    def _seq_of(self, rid: str) -> int:
        known = _read(self.folder / f"{rid}.json")
        return known["seq"] if known is not None else self._next_seq()

    def _prune(self) -> None:
        """Remove the oldest records beyond KEEP (by seq, then id)."""
        records = sorted(self._all(), key=lambda r: (r["seq"], r["request_id"]), reverse=True)
        for record in records[KEEP:]:
            try:
                (self.folder / f"{record['request_id']}.json").unlink()
            except FileNotFoundError:
                pass
            except OSError as err:
                log.warning("could not remove the old generation record %s: %s", record["request_id"], err)

    def forget(self, request_id: str) -> None:
        """Remove request `request_id`'s record (it was never started)."""
        if _ID.match(request_id):
            try:
                (self.folder / f"{request_id}.json").unlink()
            except FileNotFoundError:
                pass
            except OSError as err:
                log.warning("could not remove the generation record %s: %s", request_id, err)

    def read(self, request_id: str) -> tuple[dict[str, Any], LorastudioError | None] | None:
        """The status of a generation a previous server ran (GenerationJobs.status's fields) and
        its error, from its record; None when there is none (or it is not readable). A record
        still in flight reads as INTERRUPTED with a ServerStopping error: the server that ran it
        stopped (or was killed) before it ended, and nothing of it was kept."""
        if not _ID.match(request_id) or f"{request_id}.json" in self._overtaken:
            return None
        record = _read(self.folder / f"{request_id}.json")
        if record is None:
            return None
        error: LorastudioError | None = None
        if record.get("outcome") is None:
            state = INTERRUPTED
            error = RecordedError(
                "ServerStopping",
                f"the server stopped before generation {request_id!r} ended (restarted, or killed): "
                "nothing of it was kept; send it again",
            )
        else:
            state = record["outcome"]  # checked by _read: one of OUTCOMES here
            if isinstance(record.get("error"), dict):
                e = record["error"]
                error = RecordedError(str(e.get("kind")), str(e.get("detail")), e.get("problems") or [])
        status = {
            "request_id": request_id, "state": state, "step": record["step"], "steps": record["steps"],
            "cancelling": False, "created": record["created"], "ended": record.get("ended"),
            "result": record.get("result") if state == "done" else None, "error": error,
        }  # fmt: skip
        return status, error


def _number(value: Any) -> bool:
    """A finite JSON number (json.loads reads NaN and Infinity, which no status may answer)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fits(record: Any, rid: str) -> bool:
    """Whether `record` has every field a status is made of, each of its type (RELIABILITY 1160:
    a planted `"result": [1]` raised AttributeError here, which failed the GET of it and every
    later POST /api/generations, whose numbering reads all records)."""
    if not isinstance(record, dict) or record.get("request_id") != rid:
        return False
    outcome, result, error = record.get("outcome"), record.get("result"), record.get("error")
    return (
        isinstance(record.get("seq"), int)
        and not isinstance(record.get("seq"), bool)
        and _number(record.get("created"))
        and (record.get("ended") is None or _number(record.get("ended")))
        and (outcome is None or outcome in OUTCOMES)
        and _count(record.get("step"))
        and _count(record.get("steps"))
        and (outcome != "done" or (isinstance(result, dict) and isinstance(result.get("file"), str)))
        and (
            error is None
            or (
                isinstance(error, dict)
                and isinstance(error.get("kind"), str)
                and isinstance(error.get("detail"), str)
                and isinstance(error.get("problems", []), list | None)
            )
        )
    )


def _mark_fields(marked: bytes | None) -> tuple[str | None, int | None]:
    """(epoch, seq) of an EPOCH_FILE's contents "<epoch> <the highest seq when marked>"; seq None
    where the file names none (written before fix 1250) or is absent."""
    parts = marked.decode("utf-8", "replace").split() if marked is not None else []
    seq = parts[1] if len(parts) > 1 else ""
    return (parts[0] if parts else None), (int(seq) if seq.isdigit() and len(seq) < 19 else None)


def _recorder_served(records: list[dict[str, Any]], top: int | None) -> bool:
    """Whether a record without an "epoch" (a version between fixes 1095 and 1182 wrote it) is
    numbered above `top` (the mark's seq; None: not known, never judged so) and above every
    record of this version."""
    if top is None:
        return False
    floor = max([top, *(r["seq"] for r in records if r.get("epoch") is not None)])
    return any(r.get("epoch") is None and r["seq"] > floor for r in records)


def _read(path: Path) -> dict[str, Any] | None:
    """A record's contents, None when it cannot be read or is not one (a regular file of at most
    MAX_RECORD_BYTES, never a link or FIFO; every field of its type, its request_id its name's:
    `_fits`). Never raises."""
    data = read_small_file(path, MAX_RECORD_BYTES)
    if data is None:
        return None
    try:
        record = json_read.loads(data.decode("utf-8"))
    except ValueError:
        return None
    return record if _fits(record, path.stem) else None
