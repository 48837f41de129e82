"""The run's own decode scan reports its progress and honours a stop (RELIABILITY 170).

The run's preflight decodes every pixel of each image no check recorded (RELIABILITY 165, 166)
before any model loads: minutes for a large dataset copied in by hand. It reports that work as
Preparing("decoding", done, total) events (targets, then each folder's control images and loss
masks, at a bounded rate: data/decode_progress.py) and looks for a stop before each decode: a
stop ends the run there, before any model loads, and what was decoded stays recorded.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.config import TrainConfig
from lorastudio.data import decode_progress
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.data.decode_slots import DECODE_SLOTS
from lorastudio.settings import get_settings
from lorastudio.training.events import Complete, Event, StopRequest
from lorastudio.training.loop import train
from undecodable_images import noisy, record_full_decodes

TARGETS = 240
MASKS = 40  # the first MASKS targets have a masks/ file


@pytest.fixture
def full_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files (folder/name) whose every pixel the process decodes (images._full_decode)."""
    return record_full_decodes(monkeypatch, with_folder=True)


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    """A dataset copied in by hand (no check has seen it): TARGETS 32 px noise PNGs with
    captions, MASKS of them with a loss mask."""
    data = tmp_path / "copied"
    (data / "masks").mkdir(parents=True)
    png = noisy("PNG", 32)
    grey = np.random.default_rng(1).integers(0, 255, (32, 32), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(grey, "L").save(buf, format="PNG")
    for i in range(TARGETS):
        (data / f"img{i:03d}.png").write_bytes(png)  # a file (an inode) of its own: decoded each
        (data / f"img{i:03d}.txt").write_text(f"picture {i}")
        if i < MASKS:
            (data / "masks" / f"img{i:03d}.png").write_bytes(buf.getvalue())
    return data


def _decoding(events: list[Event]) -> list[tuple[int, int]]:
    return [(e.done, e.total) for e in events if e.type == "preparing" and e.phase == "decoding"]


def test_the_decode_scan_reports_its_counts_before_any_model_loads(
    copied: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decode_progress, "REPORT_AFTER_S", 0.0)  # every count, to see each
    monkeypatch.setattr(decode_progress, "REPORT_EVERY_S", 0.0)
    events: list[Event] = []
    everything = (TARGETS + MASKS, TARGETS + MASKS)

    def stop_once_scanned() -> StopRequest | None:  # the first stop poll after the scan: no model loads
        return StopRequest(save=False) if _decoding(events)[-1:] == [everything] else None

    raw = run_settings("flux", tiny_model("flux"), copied, {})
    train(TrainConfig.model_validate(raw), events.append, stop_once_scanned, device="cpu")
    counts = _decoding(events)
    assert counts[0] == (0, TARGETS)  # the scan begins: the targets it will decode
    assert counts[-1] == everything  # the masks joined the total; the last count is final
    dones = [d for d, _ in counts]
    assert dones == sorted(dones) and set(dones) == set(range(TARGETS + MASKS + 1))  # each count at rate 0
    assert (TARGETS, TARGETS + MASKS) in counts  # the masks expected: the total grew
    assert all(a[1] <= b[1] for a, b in zip(counts, counts[1:], strict=False))  # the total only grows
    assert len(full_decodes) == TARGETS + MASKS
    first_load = next((i for i, e in enumerate(events) if e.type == "model_load_started"), len(events))
    assert all(
        i < first_load for i, e in enumerate(events) if e.type == "preparing" and e.phase == "decoding"
    )


def test_a_stop_during_the_decode_scan_ends_the_run_before_any_model_loads(
    copied: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decode_progress, "REPORT_AFTER_S", 0.0)
    monkeypatch.setattr(decode_progress, "REPORT_EVERY_S", 0.0)
    events: list[Event] = []

    def stop_at_100() -> StopRequest | None:
        return StopRequest(save=True) if any(d >= 100 for d, _ in _decoding(events)) else None

    raw = run_settings("flux", tiny_model("flux"), copied, {})
    result = train(TrainConfig.model_validate(raw), events.append, stop_at_100, device="cpu")
    assert result.stopped and result.lora_path is None and result.steps_run == 0
    stopped_at = len(full_decodes)  # seen once 100 were done: those still decoding on the other thread finish
    assert 100 <= stopped_at < 100 + DECODE_SLOTS
    assert not any(e.type in ("model_load_started", "error") for e in events)
    assert events[-1] == Complete(lora_path=None, steps_run=0, stopped=True)
    assert not (get_settings().outputs_dir / "run").exists()  # nothing claimed or written
    full_decodes.clear()
    events.clear()  # the next run decodes only what the stopped one left: its decodes were recorded
    left = TARGETS - stopped_at + MASKS  # each decode that finished was recorded, no other

    def stop_once_scanned() -> StopRequest | None:
        return StopRequest(save=False) if _decoding(events)[-1:] == [(left, left)] else None

    train(TrainConfig.model_validate(raw), events.append, stop_once_scanned, device="cpu")
    assert len(full_decodes) == left
    assert _decoding(events)[0] == (0, TARGETS - stopped_at)
    assert _decoding(events)[-1] == (left, left)


def test_the_counts_come_after_a_second_at_a_bounded_rate() -> None:
    now = [0.0]
    sent: list[tuple[int, int]] = []

    def progress() -> DecodeProgress:
        return DecodeProgress(
            lambda d, t: sent.append((d, t)), every_s=0.5, after_s=1.0, clock=lambda: now[0]
        )

    quick = progress()
    quick.finish()
    quick.expect(50)
    for _ in range(50):  # 50 decodes of 10 ms: done before a report is due
        now[0] += 0.01
        quick.advance()
    quick.finish()
    assert sent == []  # a short scan says nothing
    slow = progress()
    slow.expect(1000)
    for _ in range(1000):  # 1,000 decodes of 10 ms: 10 s
        now[0] += 0.01
        slow.advance()
    slow.expect(200)  # e.g. the loss masks: the total grows
    for _ in range(200):
        now[0] += 0.01
        slow.advance()
    slow.finish()
    assert sent[0] == (100, 1000)  # after a second
    assert sent[-1] == (1200, 1200)
    assert len(sent) <= 1 + 11 / 0.5 + 1  # the first, one per half second after it, the last
    assert [d for d, _ in sent] == sorted({d for d, _ in sent})
