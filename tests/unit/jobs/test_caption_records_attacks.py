"""Hostile caption job records (jobs/caption_records.py; RELIABILITY 480-481): a record file
replaced by a FIFO, a link to /dev/zero, a sparse 1 GB file, deeply nested JSON, a folder, or
written by hand with fields no job has (an id naming another file, strings for counts, negative
counts, an owner pid that is no process) is skipped by GET /api/captions and
/api/captions/{id}, never hangs, exhausts memory or answers 500, and never makes a settle or a
prune write or remove a file outside the records folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.captioning.options import CaptionOptions
from lorastudio.jobs import caption_records
from lorastudio.jobs.caption_job import CaptionJob
from lorastudio.jobs.caption_records import list_records, prune, read_record, records_dir
from lorastudio.settings import get_settings

GOOD = "0000000000aa"


def _snapshot(job_id: str, **fields: Any) -> dict[str, Any]:
    job = CaptionJob(job_id, "ds", Path("/x"), CaptionOptions(model="m"), "cpu")
    return {**job.snapshot(), "status": "completed", **fields}


def _home_with_a_good_record() -> Path:
    home = get_settings().ensure_dirs().home
    caption_records.write_record(home, _snapshot(GOOD), caption_records.owner("server"))
    return home


def _answers(home: Path, job_id: str) -> tuple[list[str], int]:
    with TestClient(create_app(get_settings()), base_url=LOOPBACK) as client:
        listed = client.get("/api/captions")
        assert listed.status_code == 200, listed.text
        return [j["id"] for j in listed.json()], client.get(f"/api/captions/{job_id}").status_code


def test_a_record_file_that_is_no_regular_file_is_skipped_without_blocking_or_reading_it() -> None:
    home = _home_with_a_good_record()
    folder = records_dir(home)
    os.mkfifo(folder / "0000000000b1.json")  # the old read blocked here: the server never started
    (folder / "0000000000b2.json").symlink_to("/dev/zero")  # the old read filled the memory
    with open(folder / "0000000000b3.json", "wb") as sparse:  # 1 GB, no block used: read whole
        sparse.truncate(1 << 30)
    (folder / "0000000000b4.json").mkdir()
    (folder / "0000000000b5.json").write_text("[" * 200_000 + "]" * 200_000)  # RecursionError
    (folder / "0000000000b6.json").write_bytes(b"\xff\xfe not utf-8")
    for job_id in ("0000000000b1", "0000000000b2", "0000000000b3", "0000000000b4", "0000000000b5"):
        assert read_record(home, job_id) is None
    assert _answers(home, "0000000000b5") == ([GOOD], 404)
    assert (folder / "0000000000b3.json").stat().st_size == 1 << 30  # left as it is


@pytest.mark.parametrize(
    "fields",
    [
        {"done": "many"},
        {"captioned": -5},
        {"failed": True},
        {"total": 1.5},
        {"status": "exploded"},
        {"device": "tpu"},
        {"dataset": None},
        {"failures": [{"file": 3}]},
        {"preview": "x"},
        {"created_at": 7},
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_record_with_a_field_no_job_has_is_skipped_not_answered_500(fields: dict[str, Any]) -> None:
    home = _home_with_a_good_record()
    caption_records.write_record(home, _snapshot("0000000000bb", **fields), caption_records.owner("cli"))
    assert read_record(home, "0000000000bb") is None
    assert _answers(home, "0000000000bb") == ([GOOD], 404)  # the old list answered 500


def test_a_record_naming_another_id_neither_writes_nor_removes_outside_its_folder() -> None:
    home = _home_with_a_good_record()
    folder = records_dir(home)
    victim = home / "victim.json"
    victim.write_text("keep me", encoding="utf-8")
    dead = {"pid": 2**22 + 7, "start": None, "source": "cli"}  # no such process: settled
    escaping = {**_snapshot("0000000000cc"), "id": "../victim", "status": "running"}
    (folder / "0000000000cc.json").write_text(json.dumps({"job": escaping, "owner": dead}), encoding="utf-8")
    other = {**_snapshot("0000000000dd"), "id": GOOD, "created_at": "1999-01-01T00:00:00+00:00"}
    (folder / "0000000000dd.json").write_text(json.dumps({"job": other, "owner": dead}), encoding="utf-8")
    assert [j["id"] for j in list_records(home)] == [GOOD]
    prune(home, keep=0)  # the old prune removed ../victim.json and GOOD's record by their ids
    assert victim.read_text(encoding="utf-8") == "keep me"
    assert not (home / "..victim.json").exists() and not (folder / "../victim.json").resolve().is_dir()


@pytest.mark.parametrize(
    "who", [{"pid": "1"}, {"pid": 1, "start": 5}, {"pid": -1}, {"pid": 0}, {"pid": True}]
)
def test_a_running_record_whose_owner_is_no_process_reads_interrupted(who: dict[str, Any]) -> None:
    home = get_settings().ensure_dirs().home
    job = _snapshot("0000000000ee", status="running")
    caption_records.write_record(home, job, {"source": "cli", **who})
    assert read_record(home, "0000000000ee")["status"] == "interrupted"  # old: running forever, or 500
