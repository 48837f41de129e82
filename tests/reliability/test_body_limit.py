"""Request bodies cannot exhaust the server: a 1.5 GB JSON body sent to a real `lorastudio serve`
(declared with Content-Length, or chunked without one) is refused with 413 after at most
settings.max_json_mb of it was read, and the server's peak memory stays within 300 MB of idle
(it was read whole before: +4.5 GB). The upload route keeps its own, larger cap."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

from reliability_helpers import record_figure, serve_process

from lorastudio.settings import Settings

BODY = 1536 * 2**20  # 1.5 GB
CHUNK = b"[" + b"0," * (2**19 - 1) + b"0"  # 1 MB of a JSON array, never closed


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _send_big_body(port: int, method: str, path: str, total: int, chunked: bool) -> tuple[int, int]:
    """Send `total` bytes of JSON to `path` over a raw socket, reading the answer as soon as
    the server sends one (a client stops sending then, or the server closes). Returns (status,
    bytes of body sent)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {total}\r\n\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head.encode())
        answer = b""
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered before the body ended
            piece = CHUNK[: total - sent]
            frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        if chunked and sent >= total:
            sock.sendall(b"0\r\n\r\n")
        deadline = time.monotonic() + 120
        while b"\r\n" not in answer and time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    status_line = answer.split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1]), sent


def test_a_1_5_gb_json_body_is_refused_with_bounded_memory(settings: Settings, shapes: Path) -> None:
    with serve_process(settings, client_timeout=120) as (proc, client):
        port = client.base_url.port
        idle = _peak_rss_mb(proc.pid)
        figures: dict = {"body_mb": BODY // 2**20}
        for label, method, path, chunked in (
            ("declared", "POST", "/api/train/preflight", False),
            ("chunked", "POST", "/api/train/preflight", True),
            ("chunked_caption", "PUT", "/api/datasets/shapes/captions/shape_00.png", True),
        ):
            t0 = time.monotonic()
            status, sent = _send_big_body(port, method, path, BODY, chunked)
            figures[label] = {
                "status": status,
                "sent_mb": round(sent / 2**20, 1),
                "seconds": round(time.monotonic() - t0, 2),
            }
        # the server still serves, a normal body still works, and its peak memory stayed low
        after = client.post("/api/train/preflight", json={"config": {}}).status_code
        peak = _peak_rss_mb(proc.pid)
    figures |= {"server_rss_idle_mb": round(idle, 1), "server_peak_rss_mb": round(peak, 1)}
    record_figure("json_body_cap", figures)
    for label in ("declared", "chunked", "chunked_caption"):
        assert figures[label]["status"] == 413, figures
        assert figures[label]["sent_mb"] < BODY / 2**20, figures
    assert after == 400
    assert peak - idle < 300, figures
