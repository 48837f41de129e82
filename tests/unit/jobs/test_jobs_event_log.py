"""EventLog: consecutive ids, bounded memory, slices after an id, and waiting for new events."""

from __future__ import annotations

import threading
import time

import pytest

from lorastudio.event_log import EventLog


def test_ids_are_consecutive_and_old_events_drop_off() -> None:
    log = EventLog(size=3)
    assert log.seq == 0 and log.after(0) == []
    ids = [log.append({"type": "status", "n": n}) for n in range(5)]
    assert ids == [1, 2, 3, 4, 5] and log.seq == 5
    assert [(i, e["n"]) for i, e in log.after(0)] == [(3, 2), (4, 3), (5, 4)]  # only the last 3 kept
    assert [i for i, _ in log.after(3)] == [4, 5]
    assert log.after(5) == [] and log.after(99) == []


def test_wait_after_wakes_on_append_and_times_out_without() -> None:
    log = EventLog()
    t0 = time.monotonic()
    assert log.wait_after(0, timeout=0.1) == 0
    assert time.monotonic() - t0 >= 0.09
    timer = threading.Timer(0.05, log.append, args=({"type": "status"},))
    timer.start()
    t0 = time.monotonic()
    assert log.wait_after(0, timeout=60.0) == 1
    assert time.monotonic() - t0 < 30.0  # woken by the append, not at its timeout (a loaded host: slow)
    timer.join()


def test_a_log_needs_room_for_one_event() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        EventLog(size=0)
