"""A TCP relay in front of a studio for the browser tests, that keeps what passed each way on each
connection and can cut a connection as a network blip or a proxy restart does (the browser sees
its stream end): `with CutProxy(upstream_port) as proxy:` then open `proxy.url` in the browser."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Relayed:
    """One browser connection: the bytes the browser sent (`request`) and the studio answered."""

    browser: socket.socket
    studio: socket.socket
    request: bytearray = field(default_factory=bytearray)
    answer: bytearray = field(default_factory=bytearray)

    def cut(self) -> None:
        """End both sides now (a FIN to the browser: an event stream ends and reconnects)."""
        for sock in (self.browser, self.studio):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class CutProxy:
    """Relays 127.0.0.1:<free port> to 127.0.0.1:`upstream`; `connections` in accept order."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.connections: list[Relayed] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> CutProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        with self._lock:
            for conn in self.connections:
                conn.cut()

    def _accept(self) -> None:
        while True:
            try:
                browser, _ = self._listener.accept()
            except OSError:  # closed by __exit__
                return
            studio = socket.create_connection(("127.0.0.1", self.upstream))
            conn = Relayed(browser, studio)
            with self._lock:
                self.connections.append(conn)
            threading.Thread(target=self._pump, args=(browser, studio, conn.request), daemon=True).start()
            threading.Thread(target=self._pump, args=(studio, browser, conn.answer), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, kept: bytearray) -> None:
        try:
            while chunk := src.recv(65536):
                with self._lock:
                    kept += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        for sock in (src, dst):  # one side ended: so does the other (as a proxy's connection)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def requests(self, request_line: bytes) -> list[tuple[Relayed, bytes]]:
        """Each request that starts with `request_line` (e.g. b"GET /api/x "), with its connection
        and its head (request line and headers), connection by connection (a browser sends several
        requests on one kept-alive connection)."""
        found = []
        with self._lock:
            for conn in self.connections:
                data = bytes(conn.request)
                at = data.find(request_line)
                while at >= 0 and (at == 0 or data[at - 2 : at] == b"\r\n"):
                    end = data.find(b"\r\n\r\n", at)
                    if end < 0:
                        break  # its head not all in yet
                    found.append((conn, data[at:end]))
                    at = data.find(request_line, end)
        return found

    def wait_for(
        self, request_line: bytes, count: int, timeout_s: float = 30.0
    ) -> list[tuple[Relayed, bytes]]:
        """requests(request_line) once there are at least `count`; TimeoutError (what came)
        after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(found := self.requests(request_line)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)} of {count} requests {request_line!r}: {found}")
            time.sleep(0.05)
        return found

    def answer(self, conn: Relayed) -> bytes:
        """What the studio answered on `conn` so far."""
        with self._lock:
            return bytes(conn.answer)
