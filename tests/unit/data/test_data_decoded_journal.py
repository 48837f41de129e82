"""data/decoded.py's journal (RELIABILITY 2210): a save of a dataset's decoded-images record wrote
every row of the record again (an upload batch of 32 into 25,000 images: 25,032 rows, 2.4 MB);
now a save appends its changed rows to `<key>.journal` beside the record and writes the record
whole only when the journal outgrows half of it. A writer killed mid-append, a journal of another
version and two writers at once never cost more than decodes again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lorastudio.data import decoded_journal, decoded_memo
from lorastudio.data.decoded import DecodedRecord, file_clock_ns, file_key
from lorastudio.data.decoded_files import forget_record, move_record
from lorastudio.data.images import DECODE_RULES, ImageInfo
from lorastudio.data.safe_open import folder_identity

LATER = 10**15  # keyed_ns far after every file's ctime: never racy (data/decoded.racy)
SRC = str(Path(decoded_journal.__file__).resolve().parents[2])


def _big(tmp_path: Path, rows: int = 3000) -> tuple[Path, Path, DecodedRecord]:
    """A dataset folder whose record holds `rows` (fake file versions) plus a.png, written whole."""
    folder = tmp_path / "set"
    folder.mkdir()
    records = tmp_path / "cache"
    record = DecodedRecord.load(records, folder, folder_identity(folder))
    for i in range(rows):
        record.files[f"img_{i:05d}.png"] = ((100, 1 + i, 10_000 + i, 1 + i), ImageInfo(64, 48, 1))
    _add(record, folder, "a.png")
    record.save()
    return folder, records, record


def _add(record: DecodedRecord, folder: Path, name: str) -> None:
    path = folder / name
    path.write_bytes(name.encode())
    assert record.add(path, file_key(path), ImageInfo(8, 6, 1), keyed_ns=file_clock_ns() + LATER)


def _fresh(folder: Path, records: Path) -> DecodedRecord:
    """The record as another process reads it (nothing kept in memory)."""
    decoded_memo.remember(Path("/"), None, None)
    return DecodedRecord.load(records, folder, folder_identity(folder))


def test_a_batch_into_a_large_record_appends_its_own_rows_and_leaves_the_record_file(tmp_path: Path) -> None:
    folder, records, first = _big(tmp_path)
    record_ident = decoded_memo.file_identity(first.path)
    journal = decoded_journal.journal_path(first.path)
    for batch in range(3):
        record = DecodedRecord.load(records, folder, folder_identity(folder))
        names = [f"new_{batch}_{i}.png" for i in range(2)]
        for name in names:
            _add(record, folder, name)
        size = journal.stat().st_size
        record.save()
        assert decoded_memo.file_identity(first.path) == record_ident  # the 3,001 rows not written again
        (line,) = journal.read_bytes()[size:].splitlines()
        assert json.loads(line) == {"drop": [], "set": {n: record._row(n) for n in names}}
    again = _fresh(folder, records)
    assert len(again.files) == 3001 + 6 and again.known(folder / "new_2_1.png") == ImageInfo(8, 6, 1)
    again.save({"a.png", "new_0_0.png"})  # the folder holds two of its images now: one line drops the rest
    assert decoded_memo.file_identity(first.path) == record_ident
    assert set(_fresh(folder, records).files) == {"a.png", "new_0_0.png"}


def test_a_journal_past_half_the_record_is_folded_into_it_at_a_save_and_at_a_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decoded_journal, "COMPACT_MIN_BYTES", 0)
    folder, records, first = _big(tmp_path, rows=20)
    journal = decoded_journal.journal_path(first.path)
    record = DecodedRecord.load(records, folder, folder_identity(folder))
    for i in range(40):  # more rows than the record's half: the save writes it whole
        _add(record, folder, f"n{i}.png")
    record.save()
    assert len(json.loads(first.path.read_text())["files"]) == 61
    assert journal.read_bytes() == decoded_journal.header()
    with journal.open("ab") as fh:  # another process's lines, past half the record
        for i in range(60):
            fh.write(decoded_journal.change_line([], {f"x{i}.png": [1, 2, 3, 4, 8, 6, 1]}))
    loaded = _fresh(folder, records)
    loaded.save()  # nothing changed since the load: still folded in
    assert len(json.loads(first.path.read_text())["files"]) == 121
    assert journal.read_bytes() == decoded_journal.header()


def test_a_writer_killed_mid_append_loses_its_own_line_only(tmp_path: Path) -> None:
    """A real kill -9 in the middle of the append's write: the torn line is left out, the rows
    before it read, and the next save's line after it reads whole."""
    folder, records, first = _big(tmp_path, rows=10)
    journal = decoded_journal.journal_path(first.path)
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from lorastudio.data import decoded_journal
        from lorastudio.data.decoded import DecodedRecord, file_clock_ns, file_key
        from lorastudio.data.images import ImageInfo
        from lorastudio.data.safe_open import folder_identity
        folder = Path({str(folder)!r})
        record = DecodedRecord.load(Path({str(records)!r}), folder, folder_identity(folder))
        for name in ("k1.png", "k2.png"):
            (folder / name).write_bytes(b"k")
            record.add(folder / name, file_key(folder / name), ImageInfo(8, 6, 1), keyed_ns=file_clock_ns() + {LATER})
        write = os.write
        def torn(fd, data):
            write(fd, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        os.write = torn
        record.save()
        """
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    assert not journal.read_bytes().endswith(b"\n")  # torn
    record = _fresh(folder, records)
    assert len(record.files) == 11 and record.known(folder / "k1.png") is None  # decoded again
    assert json.loads(first.path.read_text())["files"]  # the record itself untouched
    _add(record, folder, "k3.png")
    record.save()
    again = _fresh(folder, records)
    assert again.known(folder / "k3.png") == ImageInfo(8, 6, 1) and len(again.files) == 12


@pytest.mark.parametrize("version", [0, 2])
def test_a_journal_of_another_version_is_not_read_and_the_next_save_begins_one_of_this(
    tmp_path: Path, version: int
) -> None:
    folder, records, first = _big(tmp_path, rows=10)
    journal = decoded_journal.journal_path(first.path)
    (folder / "z.png").write_bytes(b"z")
    row = [*file_key(folder / "z.png"), 8, 6, 1]  # type: ignore[misc]
    head = json.dumps({"journal": version, "rules": DECODE_RULES}) + "\n"
    journal.write_text(head + json.dumps({"drop": ["a.png"], "set": {"z.png": row}}) + "\n")
    record = _fresh(folder, records)
    assert record.known(folder / "z.png") is None and record.known(folder / "a.png") is not None
    record.save()  # nothing added: the record is written whole all the same, the journal begun anew
    assert journal.read_bytes() == decoded_journal.header()
    _add(record := _fresh(folder, records), folder, "y.png")
    record.save()
    assert _fresh(folder, records).known(folder / "y.png") == ImageInfo(8, 6, 1)


def test_two_writers_loaded_together_keep_both_their_rows(tmp_path: Path) -> None:
    """Two loads of one record before either saves (the record has no lock: a scan and an upload
    may save together). Before, each save wrote the whole record it had loaded, and the last
    one's lacked the other's rows."""
    folder, records, _ = _big(tmp_path, rows=10)
    first, second = (DecodedRecord.load(records, folder, folder_identity(folder)) for _ in range(2))
    _add(first, folder, "p.png")
    _add(second, folder, "q.png")
    first.save()
    second.save()
    for record in (DecodedRecord.load(records, folder, folder_identity(folder)), _fresh(folder, records)):
        assert record.known(folder / "p.png") == record.known(folder / "q.png") == ImageInfo(8, 6, 1)
        assert len(record.files) == 13


@pytest.mark.slow
def test_two_processes_saving_at_once_keep_both_their_rows(tmp_path: Path) -> None:
    """Two writer processes of one record, 30 batches each at once (their appends race for real).
    The default test_two_writers_loaded_together_keep_both_their_rows covers the rule in one
    process (~0.1 s); this one ~1.5 CPU s."""
    folder, records, _ = _big(tmp_path, rows=10)
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from lorastudio.data.decoded import DecodedRecord, file_clock_ns, file_key
        from lorastudio.data.images import ImageInfo
        from lorastudio.data.safe_open import folder_identity
        folder, tag = Path({str(folder)!r}), sys.argv[1]
        (folder.parent / f"ready-{{tag}}").touch()
        while len(list(folder.parent.glob("ready-*"))) < 2:  # both imported: the batches overlap
            time.sleep(0.01)
        for batch in range(30):
            record = DecodedRecord.load(Path({str(records)!r}), folder, folder_identity(folder))
            path = folder / f"{{tag}}{{batch}}.png"
            path.write_bytes(tag.encode())
            record.add(path, file_key(path), ImageInfo(8, 6, 1), keyed_ns=file_clock_ns() + {LATER})
            record.save()
        """
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    writers = [subprocess.Popen([sys.executable, "-c", script, tag], env=env) for tag in ("p", "q")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    record = _fresh(folder, records)
    missing = [f"{t}{b}.png" for t in "pq" for b in range(30) if record.known(folder / f"{t}{b}.png") is None]
    assert missing == [] and len(record.files) == 11 + 60


def test_a_delete_and_a_rename_take_the_journal_with_the_record(tmp_path: Path) -> None:
    folder, records, first = _big(tmp_path, rows=2)
    journal = decoded_journal.journal_path(first.path)
    record = DecodedRecord.load(records, folder, folder_identity(folder))
    _add(record, folder, "b.png")
    record.save()
    renamed = folder.with_name("set2")
    fid = folder_identity(folder)
    folder.rename(renamed)
    move_record(records, folder, renamed, fid)
    assert sorted(p.suffix for p in records.iterdir()) == [".journal", ".json"] and not journal.exists()
    assert _fresh(renamed, records).known(renamed / "b.png") == ImageInfo(8, 6, 1)  # its journal's row
    forget_record(records, renamed, fid)
    assert list(records.iterdir()) == []


def test_a_record_of_a_newer_version_is_not_written_over_by_a_load_that_changes_nothing(
    tmp_path: Path,
) -> None:
    """An old home's record without a journal reads as before (its first save begins one); a
    roll-back's scan that records nothing leaves a newer version's record and journal as they are."""
    folder, records, first = _big(tmp_path, rows=3)
    journal = decoded_journal.journal_path(first.path)
    journal.unlink()  # a home of a version before the journal
    old = _fresh(folder, records)
    assert len(old.files) == 4
    _add(old, folder, "b.png")
    old.save()  # its first save writes the record whole and begins the journal
    assert (
        journal.read_bytes() == decoded_journal.header()
        and len(json.loads(first.path.read_text())["files"]) == 5
    )
    newer = json.loads(first.path.read_text()) | {"version": 99}
    first.path.write_text(json.dumps(newer))
    journal.write_text(json.dumps({"journal": 99}) + "\n")
    record = _fresh(folder, records)
    record.save({"a.png"})
    assert json.loads(first.path.read_text())["version"] == 99 and journal.read_text() == '{"journal": 99}\n'
