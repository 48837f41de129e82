"""A bounded, thread-safe log of events (job service, model fetches), read by the event streams.

Events get consecutive ids starting at 1; the log keeps only the most recent `size` of them, so
`after(seq)` is a slice (no scan: hundreds of event-stream clients read it). No torch, no HTTP.
"""

from __future__ import annotations

import collections
import itertools
import threading
from typing import Any


class EventLog:
    """The most recent events as (id, event dict), oldest first."""

    def __init__(self, size: int = 5000) -> None:
        """size: how many events are kept (older ones are dropped). Raises ValueError if < 1."""
        if size < 1:
            raise ValueError(f"an event log keeps at least 1 event, not {size}")
        self._cond = threading.Condition()
        self._events: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=size)
        self._seq = 0

    @property
    def seq(self) -> int:
        """Id of the latest event (0 before the first)."""
        with self._cond:
            return self._seq

    def append(self, event: dict[str, Any]) -> int:
        """Add `event` (kept as given, not copied); returns its id and wakes `wait_after`."""
        with self._cond:
            self._seq += 1
            self._events.append((self._seq, event))
            self._cond.notify_all()
            return self._seq

    def after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Events with id > seq still in the log, oldest first."""
        with self._cond:
            if not self._events or seq >= self._seq:
                return []
            skip = max(0, seq - self._events[0][0] + 1)
            return list(itertools.islice(self._events, skip, None))

    def wait_after(self, seq: int, timeout: float) -> int:
        """Block up to `timeout` s until an event newer than `seq` exists; returns the latest id."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > seq, timeout=timeout)
            return self._seq
