"""Server-sent events read as the HTML spec's EventSource reads them (tests' one SSE parser).

A message is the lines up to a blank line: `id:` sets the last event id, `event:` the type,
`data:` appends to the data; a line starting with `:` is a comment. A message without a `data:`
line dispatches NO event, but its `id:` still becomes the last event id (the spec's "set the last
event ID string ... If the data buffer is an empty string, ... return"): api/sse.py opens every
stream with such an `id: <start>` (RELIABILITY 2050) and ends an idle one with another. Counting
`id:` lines as events counts those too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: its id (the last event id when it was dispatched), type and data."""

    id: str
    type: str
    data: str


class SseReader:
    """Feeds lines (without their line ends) one by one; `last_id` is the Last-Event-ID a
    browser would reconnect with, `comments` every comment line seen."""

    def __init__(self) -> None:
        self.last_id = ""
        self.comments: list[str] = []
        self._id: str | None = None
        self._type = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        """The event a blank line dispatches, else None (an id-only message dispatches none)."""
        if line == "":
            if self._id is not None:
                self.last_id = self._id
            self._id = None
            data, kind = self._data, self._type or "message"
            self._data, self._type = [], ""
            return SseEvent(self.last_id, kind, "\n".join(data)) if data else None
        if line.startswith(":"):
            self.comments.append(line)
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id" and "\0" not in value:
            self._id = value
        elif name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        return None


def sse_events(lines: Iterable[str], reader: SseReader | None = None) -> Iterator[SseEvent]:
    """The events of a stream's lines, as dispatched (`reader` keeps the last id between calls)."""
    reader = reader or SseReader()
    for line in lines:
        if (event := reader.feed(line)) is not None:
            yield event


def sse_text_events(text: str, reader: SseReader | None = None) -> list[SseEvent]:
    """The events of a piece of a stream's text (whole messages: each ends with a blank line)."""
    return list(sse_events(text.split("\n"), reader))
