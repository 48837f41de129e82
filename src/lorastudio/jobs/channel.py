"""The channel between the job service and the ranks of a data-parallel job, across the torchrun
boundary: a unix socket in a private (0700) folder the service creates, its path handed to the
ranks in LORASTUDIO_RANK_CHANNEL. No torch here.

Frames are length-prefixed (4-byte big-endian length, then the body). Every rank connects once:
  rank -> service  {"kind": "hello", "rank": r, "pid": p}
  service -> rank  one pickled RankJob (the job: worker args, event tag, device)
  rank 0 -> service  {"kind": "event", "item": [generation, pid, event dict]} per event
  service -> rank 0  {"kind": "stop", "save": bool} when a stop is requested
  rank -> service  {"kind": "done", "code": c, "message": m} just before the rank exits
A connection that ends without "done" is a rank that died. Ranks send JSON only (the service
never unpickles what a rank sends); the service's one pickle carries what a spawned worker gets.
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass
from typing import Any

from lorastudio import json_read
from lorastudio.jobs.worker import WorkerArgs

CHANNEL_ENV = "LORASTUDIO_RANK_CHANNEL"  # the socket path, for the ranks
AGENT_PID_ENV = "LORASTUDIO_AGENT_PID"  # pid of the torchrun agent (the ranks' parent)

_HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024


class ChannelError(Exception):
    """A malformed or truncated frame."""


@dataclass(frozen=True)
class RankJob:
    """What the service sends each rank after its hello. tag: (generation, pid) that rank 0
    puts on every event (pid = the agent's, the process the service started); device: "cpu"
    for gloo ranks on the CPU, None for one CUDA GPU per rank (cuda:LOCAL_RANK)."""

    args: WorkerArgs
    tag: tuple[int, int]
    device: str | None


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Send one frame (the caller serialises concurrent senders). Raises OSError."""
    sock.sendall(_HEADER.pack(len(body)) + body)


def recv_frame(sock: socket.socket) -> bytes | None:
    """The next frame's body; None when the peer closed the connection (or it was reset)
    between frames. Raises ChannelError for a truncated or oversized frame."""
    try:
        header = _recv_exact(sock, _HEADER.size)
        if header is None:
            return None
        (size,) = _HEADER.unpack(header)
        if size > MAX_FRAME:
            raise ChannelError(f"frame of {size} bytes exceeds {MAX_FRAME}")
        body = _recv_exact(sock, size)
    except ConnectionResetError:
        return None
    if body is None:
        raise ChannelError("connection closed inside a frame")
    return body


def send_json(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one JSON message (NaN / Infinity allowed: events may carry them). Raises OSError."""
    send_frame(sock, json.dumps(message).encode("utf-8"))


def recv_json(sock: socket.socket) -> dict[str, Any] | None:
    """The next JSON message; None at the end of the connection. Raises ChannelError when a
    frame is not a JSON object with a "kind"."""
    body = recv_frame(sock)
    if body is None:
        return None
    try:
        message = json_read.loads(body.decode("utf-8"))
    except ValueError as err:
        raise ChannelError(f"not a JSON message: {err}") from None
    if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
        raise ChannelError("a message must be a JSON object with a 'kind'")
    return message


def read_hello(sock: socket.socket) -> tuple[int, int]:
    """A rank's first message, {"kind": "hello", "rank", "pid"}: (rank, pid). Raises
    ChannelError (another message, or none), KeyError / ValueError / TypeError (bad fields)."""
    hello = recv_json(sock)
    if hello is None or hello["kind"] != "hello":
        raise ChannelError(f"expected a hello, got {hello}")
    return int(hello["rank"]), int(hello["pid"])


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    """Exactly `size` bytes; None if the connection ends before the first byte. Raises
    ChannelError if it ends after some of them."""
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ChannelError("connection closed inside a frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
