"""Caption job records: what a caption job did, kept in the studio home past the process that ran
it (a server's jobs/captioning.py, a CLI `lorastudio datasets caption`). No torch, no HTTP.

One JSON file per job, `<home>/caption-jobs/<id>.json`: {"version", "job": the job's snapshot
(jobs/caption_job.CaptionJob.snapshot), "owner": {"pid", "start", "source"}} (the process that
runs it, lorastudio.processes.start_token). Every write is atomic (staged beside it, fsynced,
renamed): a reader sees the old record or the new one, never half of one. A job is written when
it starts, when its worker has planned (the total), then at most every RECORD_EVERY_S while it
runs (`CaptionRecorder`: a 5,000-image job on a fast captioner writes ~1 small file every 2 s,
not one per image), and when it ends, with its summary. Its failures list holds the first
MAX_LISTED_FAILURES (fix 320/321), so a record stays small.

A record still "running" whose owner process is gone (a server or CLI killed outright, a power
loss) is read as "interrupted" with what it had done when last written (`settle`, which the
server runs at its start, and every read). Owners: a server owns the home alone and a CLI
caption shares it only with other CLI commands (jobs/homelock.py), so a server and a CLI never
write records at once; two CLI captions (on two datasets: the dataset claim refuses the same one
twice) each write only their own file. The newest KEEP records are kept: a new job removes the
oldest beyond that, never a running one whose owner lives.

Order (listing, and which KEEP are kept): a record's "seq", the job's number in the order the
home's jobs began (one more than the highest recorded when its recorder was made), never the
wall clock (a clock set back an hour would list the next jobs below the last hour's and remove
them first); then created_at / created_ns / id, which order the records written before "seq"
was (seq 0: below every numbered one) and two CLI jobs begun at the same instant.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from lorastudio.capped_read import read_small_file
from lorastudio.jobs.caption_job import now_iso
from lorastudio.processes import process_gone, start_token
from lorastudio.staged_files import write_staged_text

log = logging.getLogger("lorastudio.jobs")

RECORDS_DIR = "caption-jobs"
KEEP = 50  # records kept (the newest); older ones are removed when a job starts
RECORD_EVERY_S = 2.0  # a running job's record is rewritten at most this often
VERSION = 1
INTERRUPTED = "interrupted"
OWNER_WORDS = {"server": "the lorastudio server", "cli": "the `lorastudio datasets caption` process"}
ID_CHARS = frozenset("0123456789abcdef")
MAX_RECORD_BYTES = 1 << 20  # a record is a few KB (100 failures at most); a larger file is not one
STATUSES = frozenset(("running", "completed", "failed", "cancelled", INTERRUPTED))
_COUNTS = ("done", "captioned", "skipped", "failed")
_TEXTS = ("dataset", "model", "created_at")
_MAYBE_TEXTS = ("beside_training", "prefix", "prompt", "error", "cancel_reason", "finished_at")


def records_dir(home: Path) -> Path:
    return home / RECORDS_DIR


def owner(source: str) -> dict[str, Any]:
    """This process as a record's owner (`source`: "server" or "cli")."""
    return {"pid": os.getpid(), "start": start_token(os.getpid()), "source": source}


def write_record(
    home: Path, snapshot: dict[str, Any], who: dict[str, Any], created_ns: int = 0, seq: int = 0
) -> None:
    """Write job `snapshot` (owned by `who`; `seq`: its place in the home's order of jobs,
    `next_seq`; `created_ns`: when the job began, in ns) atomically. Raises OSError (a full
    disk, a read-only home): callers go on without the record (`CaptionRecorder`)."""
    folder = records_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{snapshot['id']}.json"
    record = {
        "version": VERSION, "job": snapshot, "owner": who, "recorded_at": now_iso(), "created_ns": created_ns,
        "seq": seq,
    }  # fmt: skip
    # staged beside it: a killed writer's staging file is removed at a server start
    write_staged_text(target, json.dumps(record, allow_nan=False))


def _read(path: Path) -> dict[str, Any] | None:
    """A record file's contents, None when it cannot be read or is not a record: only a regular
    file of at most MAX_RECORD_BYTES is read (never a link, a FIFO, a device or a folder put in
    its place: opened without following a link and without blocking), and only a record of the
    job its name says, every field of the type a job snapshot gives (`well_formed`)."""
    data = read_small_file(path, MAX_RECORD_BYTES)
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # RecursionError: JSON nested beyond the parser
        return None
    ok = (
        isinstance(record, dict)
        and isinstance(record.get("job"), dict)
        and isinstance(record.get("owner"), dict)
    )
    return record if ok and well_formed(record["job"], path.stem) else None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")


def _is_maybe(value: Any, kind: type) -> bool:
    return value is None or isinstance(value, kind)


def _pairs(value: Any, keys: tuple[str, str]) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, dict) and all(isinstance(item.get(key), str) for key in keys) for item in value
    )


def well_formed(job: dict[str, Any], job_id: str) -> bool:
    """Whether `job` is a caption job snapshot (caption_job.CaptionJob.snapshot) of id `job_id`:
    its id is `job_id` and hex (a record names no other file: a settle rewrites and a prune
    removes `<id>.json` by it), every field has its snapshot's type (counts whole and not
    negative), so a record written by hand or by a foreign tool is skipped, not answered as a
    job an API reader cannot take."""
    return (
        job.get("id") == job_id
        and bool(job_id)
        and set(job_id) <= ID_CHARS
        and all(isinstance(job.get(key), str) for key in _TEXTS)
        and all(_is_maybe(job.get(key), str) for key in _MAYBE_TEXTS)
        and all(_is_count(job.get(key)) for key in _COUNTS)
        and (job.get("total") is None or _is_count(job.get("total")))
        and (job.get("cut") is None or _is_count(job.get("cut")))  # a record before fix 1941: none
        and (job.get("max_tokens") is None or _is_count(job.get("max_tokens")))  # before 1943: none
        and (job.get("kohya_kept") is None or _is_count(job.get("kohya_kept")))  # before 1944: none
        and (job.get("eta_s") is None or _is_seconds(job.get("eta_s")))  # before fix 1942: none
        and (job.get("gpu") is None or _is_count(job.get("gpu")))
        and job.get("device") in ("cpu", "cuda")
        and job.get("status") in STATUSES
        and isinstance(job.get("overwrite"), bool)
        and _pairs(job.get("failures"), ("file", "reason"))
        and _pairs(job.get("preview"), ("file", "caption"))
    )


def interrupted_error(job: dict[str, Any], who: dict[str, Any]) -> str:
    """Why a record left running reads as interrupted, with what it had done."""
    whom = OWNER_WORDS.get(str(who.get("source")), "the process that ran it")
    total = job.get("total")
    of = f" of {total}" if isinstance(total, int) else ""
    return (
        f"{whom} (pid {who.get('pid')}) ended without recording the end of this caption job (killed?)"
        f"; when last recorded {job.get('done', 0)}{of} images were done ({job.get('captioned', 0)}"
        f" captioned, {job.get('failed', 0)} failed); the caption files written are kept and a new"
        " job skips them"
    )


def _count_of(record: dict[str, Any], key: str) -> int:
    """record[key] when it is a count (an int >= 0, not a bool), else 0 (a record before it)."""
    value = record.get(key)
    return value if _is_count(value) else 0


def _age(record: dict[str, Any]) -> tuple[int, str, int, str]:
    """A record's place in the order jobs began: its seq, then (records before seq, two jobs
    numbered alike) its creation (the second, then the ns), then its id."""
    created = str(record["job"].get("created_at", ""))
    return _count_of(record, "seq"), created, _count_of(record, "created_ns"), record["job"]["id"]


def _all_records(home: Path) -> list[dict[str, Any]]:
    """Every readable record of the home (unsorted, unsettled)."""
    folder = records_dir(home)
    try:
        paths = [p for p in folder.iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
    except OSError:
        return []
    return [r for r in map(_read, paths) if r is not None]


def next_seq(home: Path) -> int:
    """The seq of a job beginning now: one more than the highest recorded (1 in a home without)."""
    return 1 + max((_count_of(r, "seq") for r in _all_records(home)), default=0)


def _settled(record: dict[str, Any], home: Path | None) -> dict[str, Any]:
    """The record's job, "interrupted" when it was left running by a process that is gone
    (rewritten so, when `home` is given and the home can be written)."""
    job, who = record["job"], record["owner"]
    if job.get("status") != "running":
        return job
    pid, token = who.get("pid"), who.get("start")
    identified = _is_count(pid) and pid > 0 and _is_maybe(token, str)
    if identified and not process_gone(pid, token):  # an owner no process can be: gone
        return job
    job = {
        **job,
        "status": INTERRUPTED,
        "error": job.get("error") or interrupted_error(job, who),
        "eta_s": None,
    }
    job["finished_at"] = job.get("finished_at") or record.get("recorded_at") or job.get("created_at")
    if home is not None:
        try:
            write_record(home, job, who, _count_of(record, "created_ns"), _count_of(record, "seq"))
        except OSError as err:  # a read-only or full home: read as interrupted all the same
            log.warning("caption job %s: could not record it interrupted (%s)", job["id"], err)
    return job


def read_record(home: Path, job_id: str) -> dict[str, Any] | None:
    """Job `job_id`'s snapshot from its record (settled: see `_settled`); None when none."""
    if not job_id or not set(job_id) <= ID_CHARS:  # ids are hex: no path from a request
        return None
    record = _read(records_dir(home) / f"{job_id}.json")
    return _settled(record, home) if record is not None else None


def list_records(home: Path, limit: int = KEEP) -> list[dict[str, Any]]:
    """The newest `limit` recorded jobs' snapshots (settled), newest first (by `_age`)."""
    records = _all_records(home)
    records.sort(key=_age, reverse=True)
    return [_settled(r, home) for r in records[:limit]]


def settle(home: Path) -> int:
    """Rewrite every record left running by a process that is gone as interrupted (the server,
    at its start); returns how many."""
    return sum(1 for job in list_records(home, limit=10**9) if job.get("status") == INTERRUPTED)


def prune(home: Path, keep: int = KEEP) -> int:
    """Remove the records beyond the newest `keep` (never one running whose owner lives);
    returns how many were removed."""
    removed = 0
    for job in list_records(home, limit=10**9)[keep:]:
        if job.get("status") == "running":
            continue
        try:
            (records_dir(home) / f"{job['id']}.json").unlink(missing_ok=True)
            removed += 1
        except OSError:
            pass
    return removed


class CaptionRecorder:
    """Writes one job's record: `write(snapshot, force)` writes when `force` (start, plan, end)
    or when RECORD_EVERY_S has passed since the last write. A write that fails (full disk,
    read-only home) is logged once and tried again at the next chance; the job goes on."""

    def __init__(self, home: Path, source: str, every_s: float = RECORD_EVERY_S, clock: Any = None):
        import time

        self.home = home
        self.who = owner(source)
        self.created_ns = time.time_ns()
        self.seq = next_seq(home)
        self.every_s = every_s
        self._clock = clock or time.monotonic
        self._last: float | None = None
        self._failing = False
        self.writes = 0

    def write(self, snapshot: dict[str, Any], force: bool = False) -> None:
        now = self._clock()
        if not force and self._last is not None and now - self._last < self.every_s:
            return
        try:
            write_record(self.home, snapshot, self.who, self.created_ns, self.seq)
        except OSError as err:
            if not self._failing:
                log.error("caption job %s: its record could not be written (%s)", snapshot["id"], err)
            self._failing = True
            return
        self._failing = False
        self._last = now
        self.writes += 1
