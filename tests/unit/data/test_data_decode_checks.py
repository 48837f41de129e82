"""data/decode_checks.py: a check loop's full decodes run on both decode threads (RELIABILITY 210),
at most DECODE_SLOTS of one loop at once, its answers in the files' order; a WebP above the
decode budget is left undecided by a check with a time budget and decoded alone by the run's
own scan (RELIABILITY 211)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from lorastudio.data import images
from lorastudio.data.decode_slots import DECODE_SLOTS
from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.safe_open import folder_identity
from lorastudio.data.scan import scan_dataset
from lorastudio.errors import DatasetError
from undecodable_images import idat_ends_early, noisy, webp

SIZE = 32
WEBP_BUDGET = SIZE * SIZE * 2  # a 32 px PNG fits it (1,024 pixels), a 32 px WebP (4x: 4,096) does not


def _folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for name, body in files.items():
        (data / name).write_bytes(body)
        (data / name).with_suffix(".txt").write_text(f"caption {name}")
    return data


def _scan(data: Path, tmp_path: Path, budget: float | None, **kw: object) -> object:
    return scan_dataset(
        data, resolution=SIZE, multiple=16, decoded_dir=tmp_path / "records", decode_budget_s=budget, **kw
    )


class _Watch:
    """images._full_decode wrapped: the files it decodes, and how many ran at once with each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gate: threading.Barrier | None = None) -> None:
        self.real = images._full_decode
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.alone: dict[str, bool] = {}  # name -> whether nothing else was decoding with it
        self.gate = gate
        monkeypatch.setattr(images, "_full_decode", self)

    def __call__(self, path: Path, *args: object) -> bool:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.alone[path.name] = self.running == 1
        try:
            if self.gate is not None:
                self.gate.wait()  # the other decode thread's decode arrives (breaks if none can)
            decided = self.real(path, *args)  # type: ignore[arg-type]
            with self.lock:
                self.alone[path.name] = self.alone[path.name] and self.running == 1
            return decided
        finally:
            with self.lock:
                self.running -= 1


def test_a_scans_full_decodes_run_on_both_decode_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each decode waits at a barrier for a second one: a scan that decodes one after another
    (the scan's own loop, before RELIABILITY 210) never gets past the first (the barrier breaks)."""
    data = _folder(tmp_path, {f"img{i}.png": noisy("PNG", SIZE, seed=i) for i in range(6)})
    watch = _Watch(monkeypatch, threading.Barrier(DECODE_SLOTS, timeout=60))
    scan = _scan(data, tmp_path, math.inf)
    assert [it.path.name for it in scan.items] == [f"img{i}.png" for i in range(6)]
    assert all(it.decoded for it in scan.items)
    assert watch.most == DECODE_SLOTS  # both threads, never more of this scan at once
    record = DecodedRecord.load(tmp_path / "records", data, folder_identity(data))
    assert all(record.known(it.path) is not None for it in scan.items)  # each one recorded


def test_the_failures_are_named_in_the_files_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first bad file's decode ends last (it waits for the second's): the scan still names
    them in the folder's order, as one decode at a time did."""
    data = _folder(
        tmp_path,
        {"a.png": idat_ends_early(SIZE), "b.png": idat_ends_early(SIZE), "c.png": noisy("PNG", SIZE)},
    )
    b_done = threading.Event()
    real = images._full_decode

    def ordered(path: Path, *args: object) -> bool:
        if path.name == "a.png":
            assert b_done.wait(60)
        try:
            return real(path, *args)  # type: ignore[arg-type]
        finally:
            if path.name == "b.png":
                b_done.set()

    monkeypatch.setattr(images, "_full_decode", ordered)
    with pytest.raises(DatasetError) as info:
        _scan(data, tmp_path, math.inf)
    assert [p.split(":")[0] for p in info.value.problems] == ["a.png", "b.png"]


def test_a_webp_above_the_decode_budget_is_undecided_by_a_check_and_decoded_alone_by_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _folder(
        tmp_path, {"a.png": noisy("PNG", SIZE), "w.webp": webp(), "z.png": noisy("PNG", SIZE, seed=1)}
    )
    watch = _Watch(monkeypatch)
    checked = _scan(data, tmp_path, None, decode_pixels=WEBP_BUDGET)  # a check: 30 s budget
    assert {it.path.name: it.decoded for it in checked.items} == {
        "a.png": True,
        "w.webp": False,
        "z.png": True,
    }
    record = DecodedRecord.load(tmp_path / "records", data, folder_identity(data))
    assert record.known(data / "w.webp") is None  # not recorded: the next check leaves it too
    watch.alone.clear()
    run = _scan(data, tmp_path, math.inf, decode_pixels=WEBP_BUDGET)  # the run's own scan
    assert all(it.decoded for it in run.items)
    assert watch.alone == {"w.webp": True}  # decoded at full size with nothing else in flight
    record = DecodedRecord.load(tmp_path / "records", data, folder_identity(data))
    assert record.known(data / "w.webp") is not None


def test_a_broken_webp_above_the_decode_budget_fails_the_run_naming_it(tmp_path: Path) -> None:
    data = _folder(tmp_path, {"a.png": noisy("PNG", SIZE), "w.webp": webp(truncated=True)})
    checked = _scan(data, tmp_path, None, decode_pixels=WEBP_BUDGET)  # the header passes it, undecided
    assert {it.path.name: it.decoded for it in checked.items} == {"a.png": True, "w.webp": False}
    with pytest.raises(DatasetError) as info:
        _scan(data, tmp_path, math.inf, decode_pixels=WEBP_BUDGET)
    assert [p.split(":")[0] for p in info.value.problems] == ["w.webp"]
    assert "corrupt" in info.value.problems[0]
    with pytest.raises(DatasetError):  # within the budget the check refuses it too
        _scan(data, tmp_path, None)
