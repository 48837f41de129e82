"""The asynchronous generations' records (jobs/generation_records.py): what is not a record reads
as none, a record a writer left in flight reads as interrupted, and the newest KEEP are kept by
their sequence number, never by the wall clock. In process, no torch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lorastudio.errors import GenerationFailed
from lorastudio.jobs import generation_records
from lorastudio.jobs.generation_records import GenerationRecords, records_dir


def test_what_is_not_a_record_reads_as_none_and_one_left_in_flight_as_interrupted(tmp_path: Path) -> None:
    records = GenerationRecords(tmp_path)
    folder = records_dir(tmp_path)
    folder.mkdir(parents=True)
    flight = {"request_id": "cut", "seq": 1, "created": 1.0, "step": 0, "steps": 0}  # no outcome, no ended
    (folder / "cut.json").write_text(json.dumps(flight))
    (folder / "garbage.json").write_text("{not json")
    (folder / "deep.json").write_text("[" * 100_000)
    os.mkfifo(folder / "fifo.json")
    os.symlink(folder / "cut.json", folder / "link.json")
    (folder / "named.json").write_text(json.dumps(flight))  # its request_id is another's
    (folder / "empty.json").write_text(json.dumps({**flight, "request_id": "empty", "outcome": "done"}))
    for rid in ("garbage", "deep", "fifo", "link", "named", "empty", "../cut", "nobody"):
        assert records.read(rid) is None, rid
    status, error = records.read("cut")  # type: ignore[misc]
    assert (status["state"], status["ended"], status["result"]) == ("interrupted", None, None)
    assert error is not None and error.kind == "ServerStopping" and "nothing of it was kept" in str(error)


def test_an_ended_record_keeps_its_error_and_the_newest_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generation_records, "KEEP", 2)
    records = GenerationRecords(tmp_path)
    for rid in ("a", "b", "c"):
        records.write({"request_id": rid, "state": "queued", "created": 5.0 - ord(rid)}, new=True)
    records.write(
        {"request_id": "c", "state": "failed", "created": 1.0, "ended": 2.0, "step": 3, "steps": 4},
        GenerationFailed("generation failed: RuntimeError: boom"),
    )
    assert records.read("a") is None  # the oldest by its number (its created stamp is the newest)
    status, error = records.read("c")  # type: ignore[misc]
    assert (status["state"], status["step"], status["ended"]) == ("failed", 3, 2.0)
    assert error is not None and (error.kind, str(error)) == (
        "GenerationFailed",
        "generation failed: RuntimeError: boom",
    )
    assert error.error_class() is GenerationFailed
    assert records.read("b")[0]["state"] == "interrupted"  # type: ignore[index]
    assert not [p.name for p in records_dir(tmp_path).iterdir() if p.name.startswith(".")]  # no staging left


def test_a_planted_record_of_the_wrong_shape_reads_as_none_and_new_ones_are_still_written(
    tmp_path: Path,
) -> None:
    """RELIABILITY 1160: a record whose result was not an object (`[1]`, `"abc"`) raised
    AttributeError in the check, and one whose problems was a number TypeError: the GET of it
    answered 500, and so did every later POST /api/generations (its numbering reads all records).
    NaN and Infinity (json reads them) and negative steps were answered as they were."""
    folder = records_dir(tmp_path)
    folder.mkdir(parents=True)
    base = {"seq": 1, "created": 1.0, "step": 0, "steps": 0}
    planted = {
        "list": {**base, "outcome": "done", "result": [1]},
        "text": {**base, "outcome": "done", "result": "abc"},
        "problems": {**base, "outcome": "failed", "error": {"kind": "X", "detail": "d", "problems": 5}},
        "kind": {**base, "outcome": "failed", "error": {"kind": 3, "detail": "d"}},
        "negative": {**base, "steps": -5},
    }
    for rid, record in planted.items():
        (folder / f"{rid}.json").write_text(json.dumps({**record, "request_id": rid}))
    (folder / "nan.json").write_text('{"request_id": "nan", "seq": 1, "created": NaN, "step": 0, "steps": 0}')
    (folder / "inf.json").write_text(
        '{"request_id": "inf", "seq": 1, "created": 1e400, "step": 0, "steps": 0}'
    )
    records = GenerationRecords(tmp_path)
    for rid in (*planted, "nan", "inf"):
        assert records.read(rid) is None, rid
    records.write({"request_id": "new", "state": "queued", "created": 2.0}, new=True)
    status, _ = records.read("new")  # type: ignore[misc]
    assert status["state"] == "interrupted"


def test_files_that_are_not_records_are_read_once_per_change_not_by_every_new_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1181: each new request's numbering and prune read every file of the folder
    again, records or not (5000 small files a hand left there: ~0.24 s a POST). Now an entry is
    read once per change of its name, size, times or inode."""
    folder = records_dir(tmp_path)
    folder.mkdir(parents=True)
    for i in range(5):
        (folder / f"junk{i}.json").write_text("{not json")
    reads: list[str] = []
    real = generation_records.read_small_file
    monkeypatch.setattr(
        generation_records, "read_small_file", lambda path, cap: reads.append(path.name) or real(path, cap)
    )
    records = GenerationRecords(tmp_path)
    for rid in ("a", "b", "c"):
        records.write({"request_id": rid, "state": "queued", "created": 1.0}, new=True)
    assert sorted(n for n in reads if n.startswith("junk")) == [f"junk{i}.json" for i in range(5)], reads
    assert reads.count("a.json") <= 2  # its first listing, then once for its own rewrite at most
    reads.clear()
    (folder / "junk0.json").write_text("{still not json, longer}")  # changed: read again
    records.write({"request_id": "d", "state": "queued", "created": 1.0}, new=True)
    assert [n for n in reads if n.startswith("junk")] == ["junk0.json"], reads
    assert [records.read(rid)[0]["state"] for rid in "abcd"] == ["interrupted"] * 4  # type: ignore[index]


def _done(records: GenerationRecords, rid: str) -> None:
    status = {"request_id": rid, "state": "done", "created": 1.0, "ended": 2.0, "result": {"file": "x.png"}}
    records.write(status, new=True)


def test_records_an_older_server_may_have_overtaken_are_not_answered_after_a_roll_back(
    tmp_path: Path,
) -> None:
    """RELIABILITY 1182: after a roll-back to a version that keeps no records (before 1095) and took
    a request_id recorded here, the next upgrade answered that id from the first generation's
    record. The home lock's epoch now tells such a gap: this version's holders carry it over (a
    restart, a kill -9, a CLI command between), an older holder's rewrite of the file drops it."""
    from lorastudio.jobs.homelock import LOCK_NAME, HomeLock

    server = HomeLock.for_server(tmp_path, 8000)
    _done(GenerationRecords(tmp_path), "r")
    server.release()
    with HomeLock.for_command(tmp_path, "cache prune"):  # this version's command between: same epoch
        pass
    killed = HomeLock.for_server(tmp_path, 8000)
    assert GenerationRecords(tmp_path).read("r") is not None  # a restart keeps it (fix 1095)
    os.close(killed._fd)  # type: ignore[arg-type]  # a kill -9: the file keeps the holder's fields
    killed._fd = None
    assert GenerationRecords(tmp_path).read("r") is not None

    lock = tmp_path / LOCK_NAME  # an older server's start and release (its homelock.py, before 1182)
    lock.write_text(json.dumps({"pid": 1, "port": 8000, "kind": "server"}) + "\n")
    lock.write_text("")
    again = HomeLock.for_server(tmp_path, 8000)
    records = GenerationRecords(tmp_path)
    assert records.read("r") is None and not (records_dir(tmp_path) / "r.json").exists()
    _done(records, "r")  # the id is taken anew and kept across the next restart
    again.release()
    with HomeLock.for_server(tmp_path, 8000):
        assert GenerationRecords(tmp_path).read("r") is not None


def test_an_overtaken_record_that_cannot_be_removed_is_never_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1182: a record of another epoch that the start cannot remove (a permission) is
    not answered by this server, and the folder keeps the old epoch, so the next start tries again
    (keeping this server's records: each names its epoch, fix 1250)."""
    from lorastudio.jobs.homelock import LOCK_NAME, HomeLock

    with HomeLock.for_server(tmp_path, None):
        _done(GenerationRecords(tmp_path), "r")
    (tmp_path / LOCK_NAME).write_text("")  # an older server's start and release
    real = os.unlink

    def unlink(path: object, *args: object, **kwargs: object) -> None:
        if str(path).endswith("r.json"):
            raise PermissionError(13, "Permission denied", str(path))
        real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", unlink)
    with HomeLock.for_server(tmp_path, None):
        records = GenerationRecords(tmp_path)
        assert records.read("r") is None and (records_dir(tmp_path) / "r.json").exists()
        _done(records, "s")  # a new record is kept; the folder is not marked with the new epoch
        assert records.read("s") is not None
    monkeypatch.setattr(os, "unlink", real)
    with HomeLock.for_server(tmp_path, None):  # the next start: the same epoch, the folder's is older
        records = GenerationRecords(tmp_path)
        assert records.read("r") is None and not (records_dir(tmp_path) / "r.json").exists()
        assert records.read("s") is not None


@pytest.mark.parametrize("kind", ["link", "huge"])
def test_an_epoch_file_that_is_not_one_is_another_epoch(tmp_path: Path, kind: str) -> None:
    """RELIABILITY 1244: an `.epoch` that the capped read refuses (a link, a file over 256 bytes)
    read as no `.epoch` at all, a folder of a version before epochs: its records were kept and
    answered whatever epoch they were written under. It now names another epoch: they go."""
    from lorastudio.jobs.homelock import LOCK_NAME, HomeLock

    with HomeLock.for_server(tmp_path, None):
        _done(GenerationRecords(tmp_path), "r")
    (tmp_path / LOCK_NAME).write_text("")  # an older server's start and release: a new epoch next
    epoch = records_dir(tmp_path) / generation_records.EPOCH_FILE
    epoch.unlink()
    if kind == "link":
        (tmp_path / "elsewhere").write_text("x")
        epoch.symlink_to(tmp_path / "elsewhere")
    else:
        epoch.write_bytes(b"\xff" * 100_000)
    with HomeLock.for_server(tmp_path, None):
        records = GenerationRecords(tmp_path)
        assert records.read("r") is None and not (records_dir(tmp_path) / "r.json").exists()
        assert epoch.is_file() and not epoch.is_symlink()  # marked anew with this epoch


def test_a_roll_back_to_a_version_that_keeps_records_loses_none_of_them(tmp_path: Path) -> None:
    """RELIABILITY 1250: the session's starting version keeps records (fix 1095) and refuses an id
    recorded here, but rewrites the lock without the epoch; forward again, every record (this
    version's and the roll-back's) was removed as overtaken. A record without an epoch numbered
    above the mark now shows such a gap's server: nothing is removed. A gap with no such record
    (a version that keeps none) still removes them."""
    from lorastudio.jobs.homelock import LOCK_NAME, HomeLock

    folder = records_dir(tmp_path)
    folder.mkdir(parents=True)
    old = {"version": 1, "request_id": "pre", "seq": 1, "created": 1.0, "outcome": "cancelled", "step": 0}
    (folder / "pre.json").write_text(json.dumps({**old, "steps": 0}))  # from before the upgrade
    with HomeLock.for_server(tmp_path, None):
        _done(GenerationRecords(tmp_path), "new")
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "port": None, "kind": "server"}))  # the old one's
    (folder / "back.json").write_text(json.dumps({**old, "request_id": "back", "seq": 3, "steps": 0}))
    (tmp_path / LOCK_NAME).write_text("")
    with HomeLock.for_server(tmp_path, None):
        records = GenerationRecords(tmp_path)
        assert [records.read(r) is not None for r in ("pre", "new", "back")] == [True, True, True]
    (tmp_path / LOCK_NAME).write_text("")  # a gap with no record written: as fix 1182
    with HomeLock.for_server(tmp_path, None):
        records = GenerationRecords(tmp_path)
        assert [records.read(r) is not None for r in ("pre", "new", "back")] == [False, False, False]
