"""A dataset folder removed by hand left its decoded-images record in `cache/decoded/` for ever
(fix 711 covers the studio's own deletes; RELIABILITY Known problems). Now a server start sweeps
the records of folders that are gone, and only those: a record whose dataset root is missing
(a drive not mounted), is another file system than the folder's (a root that is a mount point
of its own, not mounted now) or, for a record written before the device was saved, is empty,
is kept."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

from PIL import Image

from lorastudio.data.uploads import UploadBatch
from lorastudio.jobs.leftovers import start_leftover_cleanup
from lorastudio.settings import Settings


def _upload(settings: Settings, dataset: Path) -> Path:
    """Upload one image into `dataset` (made), recording its full decode: the record's path."""
    before = set(settings.decoded_record_dir.glob("*.json"))
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 30)).save(buf, format="PNG")
    with UploadBatch(dataset.parent, dataset, 10**8, decoded_dir=settings.decoded_record_dir) as batch:
        batch.add("a.png", io.BytesIO(buf.getvalue()))
        batch.add("a.txt", io.BytesIO(b"a green square"))
        batch.commit()
    (record,) = set(settings.decoded_record_dir.glob("*.json")) - before
    return record


def _start(settings: Settings) -> None:
    cleanup = start_leftover_cleanup(settings)
    if cleanup is not None:
        cleanup.join(timeout=60)


def _planted(record: Path, name: str, folder: Path, device: int | None) -> Path:
    """A copy of `record` under `name` naming `folder` (and `device`, or none: an older record)."""
    body = json.loads(record.read_text(encoding="utf-8"))
    body["folder"] = str(folder)
    body.pop("device", None)
    if device is not None:
        body = {k: body[k] for k in ("version", "rules", "folder")} | {
            "device": device,
            "files": body["files"],
        }
    planted = record.with_name(name)
    planted.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
    return planted


def test_a_start_sweeps_the_record_of_a_dataset_removed_by_hand_and_no_other(
    settings: Settings, tmp_path: Path
) -> None:
    root = settings.datasets_dir
    gone = _upload(settings, root / "pets")
    kept = _upload(settings, root / "cats")
    shutil.rmtree(root / "pets")  # by hand, not through the studio
    device = os.stat(root).st_dev
    empty_root = tmp_path / "usb"  # a mount point with its drive not mounted: empty
    empty_root.mkdir()
    unmounted = [
        _planted(gone, "0" * 32 + ".json", tmp_path / "not-mounted" / "pets", device),  # no root
        _planted(gone, "1" * 32 + ".json", root / "dogs", device + 1),  # the root: another device
        _planted(gone, "2" * 32 + ".json", empty_root / "pets", None),  # older, in an empty root
    ]
    older_gone = _planted(gone, "3" * 32 + ".json", root / "birds", None)  # older, beside cats
    _start(settings)  # the next server start
    assert not gone.exists() and not older_gone.exists()
    assert kept.exists() and all(p.exists() for p in unmounted)
    assert json.loads(kept.read_text(encoding="utf-8"))["device"] == device


def test_a_start_sweeps_a_gone_folder_s_journal_with_its_record_and_a_journal_whose_record_is_gone(
    settings: Settings,
) -> None:
    """RELIABILITY 2210: a record's journal (`<key>.journal`) goes with its record, and one left
    without its record (removed by a lorastudio before the journal) goes too; a live one stays."""
    root = settings.datasets_dir
    gone = _upload(settings, root / "pets")
    kept = _upload(settings, root / "cats")
    journals = [p.with_suffix(".journal") for p in (gone, kept)]
    assert all(j.is_file() for j in journals)
    alone = settings.decoded_record_dir / ("5" * 32 + ".journal")
    alone.write_bytes(journals[1].read_bytes())
    shutil.rmtree(root / "pets")
    _start(settings)
    assert not gone.exists() and not journals[0].exists() and not alone.exists()
    assert kept.exists() and journals[1].exists()
