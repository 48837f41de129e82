"""An outside attacker of the HTTP layer (session 19): bodies of the wrong media type, bodies JSON
cannot be read from, headers sent twice, event streams opened and abandoned by the hundred,
uploads cut off mid-body. Each fails clearly with its status and the project's error shape,
leaves nothing behind and no traceback in the server's log, and the server answers after.

Before: a JSON route validated a text/plain (or form, or multipart) body as raw bytes and echoed
all of it back in a 422; a body that is not UTF-8, nested past the parser or holding a
5000-digit number was a bare 400 "There was an error parsing the body"; `Origin: evil` followed
by `Origin: <own>` passed the same-origin check of a write (the last one was compared); each
event stream a client abandoned while it waited logged a "Lock is not acquired" traceback
(~1 in 3 of 900); each upload cut off mid-body logged a ClientDisconnect traceback."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
from api_helpers import LiveServer
from fastapi.testclient import TestClient
from tests.polling import until

from lorastudio.api import sse
from lorastudio.settings import Settings

JSON = {"content-type": "application/json"}
PREFLIGHT = "/api/train/preflight"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_log() -> Iterator[list[logging.LogRecord]]:
    """What uvicorn's error logger (tracebacks of the app: "Exception in ASGI application") and
    lorastudio's API logger record during the test."""
    handler = _Records()
    loggers = [logging.getLogger("uvicorn.error"), logging.getLogger("lorastudio.api")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    yield handler.records
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", b'{"config": {}}'),
        (None, b'{"config": {}}'),
        ("application/x-www-form-urlencoded", b"config=%7B%7D"),
        (
            "multipart/form-data; boundary=x",
            b'--x\r\nContent-Disposition: form-data; name="config"\r\n\r\n{}\r\n--x--\r\n',
        ),
    ],
)
def test_a_json_route_refuses_another_media_type_with_415_without_echoing_it(
    client: TestClient, content_type: str | None, body: bytes
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    secret = (
        b'{"config": {"x": "' + b"s3cr3t" * 1000 + b'"}}'
        if content_type != "multipart/form-data; boundary=x"
        else body
    )
    resp = client.post(
        PREFLIGHT, content=secret if content_type in (None, "text/plain") else body, headers=headers
    )
    assert resp.status_code == 415, resp.text
    shown = content_type or "none"
    assert resp.json() == {
        "error": "UnsupportedMediaType",
        "detail": f"this route takes a JSON body: send it as Content-Type: application/json (got {shown})",
    }
    assert b"s3cr3t" not in resp.content
    # the same text as JSON reaches the route (its config is refused for what it lacks)
    assert client.post(PREFLIGHT, content=b'{"config": {}}', headers=JSON).status_code == 400


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        (
            b'{"config": {"data_dir": "\xff\xfe"}}',
            "the body is not UTF-8 text (invalid start byte at byte 25)",
        ),
        (
            b'{"config": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "the body nests arrays or objects deeper than the parser goes",
        ),
        (b'{"config": {"steps": 1' + b"0" * 5000 + b"}}", "a number in the body is too long"),
    ],
)
def test_a_json_body_that_cannot_be_read_is_a_422_naming_why(
    client: TestClient, body: bytes, cause: str
) -> None:
    resp = client.post(PREFLIGHT, content=body, headers=JSON)
    assert resp.status_code == 422, resp.text
    [entry] = resp.json()["detail"]
    assert entry["type"] == "json_invalid" and entry["loc"] == ["body"]
    assert entry["ctx"]["error"].startswith(cause), entry
    assert client.get("/api/info").status_code == 200


def test_a_syntax_error_and_a_large_number_answer_as_before(client: TestClient) -> None:
    bad = client.post(PREFLIGHT, content=b'{"config":', headers=JSON)
    assert bad.status_code == 422 and bad.json()["detail"][0]["type"] == "json_invalid"
    big = client.post(PREFLIGHT, content=b'{"config": {"steps": 1' + b"0" * 400 + b"}}", headers=JSON)
    assert big.status_code == 400, big.text  # a number Python reads: the config refuses its value
    assert {"field": "steps", "message": "Input should be less than or equal to 10000000"} in big.json()[
        "problems"
    ]


@pytest.mark.parametrize("name", ["origin", "host", "sec-fetch-site"])
def test_a_write_with_a_same_origin_header_sent_twice_is_refused(client: TestClient, name: str) -> None:
    values = {
        "origin": ["http://evil.example", "http://127.0.0.1"],
        "host": ["127.0.0.1", "127.0.0.1"],
        "sec-fetch-site": ["cross-site", "same-origin"],
    }[name]
    for order in (values, values[::-1]):
        headers = [("content-type", "application/json"), *((name, v) for v in order)]
        resp = client.post(PREFLIGHT, content=b'{"config": {}}', headers=headers)
        assert resp.status_code == 403, resp.text
        assert resp.json() == {
            "error": "CrossOriginRefused",
            "detail": f"request refused: header(s) {name} sent twice",
        }
    own = client.post(PREFLIGHT, content=b'{"config": {}}', headers={**JSON, "origin": "http://127.0.0.1"})
    assert own.status_code == 400, own.text  # one Origin, this server's: the route answers


def _raw(live: LiveServer, request: bytes) -> socket.socket:
    host, port = live.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(request)
    return sock


def _streams() -> int | None:
    """Event streams open in this process now (api/sse.py's fan-outs' subscribers); None when a
    stream opened or closed while they were counted."""
    try:
        return sum(f.subscribers for per_loop in list(sse._FANOUTS.values()) for f in list(per_loop.values()))
    except RuntimeError:  # changed size during the count
        return None


def _reset(sock: socket.socket) -> None:
    """Close with a RST, as a killed client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


def test_event_streams_abandoned_by_the_hundred_leave_no_traceback(
    server: LiveServer, server_log: list[logging.LogRecord]
) -> None:
    from lorastudio.api.sse_slots import StreamSlots

    server.app.state.sse_slots = StreamSlots(
        per_client=300, total=300
    )  # past the caps (test_api_sse_caps.py)
    host = server.url.removeprefix("http://").encode()
    before = _streams()
    for path in (b"/api/train/events", b"/api/models/events"):
        socks = [
            _raw(server, b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n") for _ in range(300)
        ]
        # every stream waits on the fan-out's condition, waking each second (before: a fixed 2 s,
        # and 10 s for the first answers, which 300 streams on a loaded 2-core host passed)
        until(lambda: _streams() == before + 300, 120, "300 open event streams")
        for sock in socks[:5]:
            sock.settimeout(10)
            assert sock.recv(12) == b"HTTP/1.1 200"
        for sock in socks:
            _reset(sock)
        # each notices within SSE_IDLE_CHECK_S and ends (before: read after a fixed 3 s)
        until(lambda: _streams() == before, 120, "every stream's end")
    assert server.client.get("/api/train/status").status_code == 200
    errors = [r for r in server_log if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors][:3]


def test_an_upload_cut_off_mid_body_leaves_nothing_and_no_traceback(
    server: LiveServer, settings: Settings, server_log: list[logging.LogRecord]
) -> None:
    host = server.url.removeprefix("http://").encode()
    head = (
        b"POST /api/datasets/cut/files HTTP/1.1\r\nHost: " + host + b"\r\n"
        b"Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 100000\r\n\r\n"
        b'--XX\r\nContent-Disposition: form-data; name="files"; filename="a.png"\r\n\r\n\x89PNG'
    )
    for _ in range(5):
        sock = _raw(server, head)
        time.sleep(0.3)  # the route is reading the body
        _reset(sock)
    staging = settings.datasets_dir / ".uploads"

    def cleaned_up() -> list[str]:  # the server noticed a cut (a loaded host: later) and kept nothing
        if staging.exists() and list(staging.iterdir()):
            return []
        return [r.getMessage() for r in list(server_log) if "the client went" in r.getMessage()]

    gone = until(cleaned_up, 60, "cut upload noticed by the server with its staging removed")
    assert server.client.get("/api/datasets").json()["datasets"] == []
    errors = [r for r in server_log if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors][:3]
    assert gone and all(
        m == "POST /api/datasets/cut/files: the client went before its request body was read" for m in gone
    )


def _downloads(settings: Settings) -> dict[str, bytes]:
    """A LoRA file of run output `my-lora` and a gallery image, written as training and
    generation leave them."""
    lora = settings.outputs_dir / "my-lora" / "my-lora.safetensors"
    lora.parent.mkdir(parents=True)
    lora.write_bytes(bytes(range(256)) * 400)  # 102,400 bytes
    gallery = settings.home / "gallery" / "g.png"
    gallery.parent.mkdir(parents=True)
    gallery.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(200)))
    return {"/api/loras/my-lora/file": lora.read_bytes(), "/gallery/g.png": gallery.read_bytes()}


@pytest.mark.parametrize(
    "header",
    ["bytes=5-1", "items=0-5", "bytes=abc", "bytes=1-2-3", "bytes", "bytes=" + "0" * 5000 + "-1", "bytes=,"],
)
def test_a_range_header_that_cannot_be_parsed_is_ignored(
    client: TestClient, settings: Settings, header: str
) -> None:
    """RFC 9110 14.2: a Range the server does not understand is ignored (the whole file, 200);
    Starlette answered 400 in plain text."""
    for url, data in _downloads(settings).items():
        resp = client.get(url, headers={"range": header})
        assert resp.status_code == 200, (url, header, resp.text[:100])
        assert resp.content == data


def test_good_and_unsatisfiable_ranges_and_head_on_downloads(client: TestClient, settings: Settings) -> None:
    for url, data in _downloads(settings).items():
        size = len(data)
        part = client.get(url, headers={"range": "bytes=2-9"})
        assert (part.status_code, part.content, part.headers["content-range"]) == (
            206,
            data[2:10],
            f"bytes 2-9/{size}",
        )
        tail = client.get(url, headers={"range": "bytes=-4"})
        assert (tail.status_code, tail.content) == (206, data[-4:])
        past = client.get(url, headers={"range": f"bytes={size}-"})
        assert (past.status_code, past.headers["content-range"]) == (416, f"bytes */{size}")
        head = client.head(url)
        assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", str(size))
        assert head.headers["accept-ranges"] == "bytes"
        ranged_head = client.head(url, headers={"range": "bytes=0-0"})
        assert (ranged_head.status_code, ranged_head.headers["content-length"]) == (206, "1")


def test_head_answers_every_get_route_as_its_get_without_a_body(
    client: TestClient, settings: Settings
) -> None:
    """FastAPI routes took only GET: HEAD /api/info was 404 (from the static UI behind them)."""
    settings.ensure_dirs()
    for url in ("/api/info", "/api/datasets", "/api/runs", "/api/train/status"):
        get, head = client.get(url), client.head(url)
        assert (head.status_code, head.content) == (200, b""), url
        assert head.headers["content-type"] == get.headers["content-type"] == "application/json"
        assert int(head.headers["content-length"]) > 0
    missing = client.head("/api/datasets/none")
    assert (missing.status_code, missing.content) == (404, b"")
    assert client.head("/api/nothing-here").status_code == 404
    assert client.post("/api/train/stop", json={"save": True}).status_code == 404  # other methods unchanged


def test_head_on_an_event_stream_ends_at_once(server: LiveServer) -> None:
    started = time.monotonic()
    head = server.client.head("/api/train/events", timeout=10)
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
    assert time.monotonic() - started < 5
    assert server.client.get("/api/train/status").status_code == 200


def test_a_request_without_a_host_header_is_told_so(server: LiveServer) -> None:
    """HTTP/1.0 may leave Host out: "no Host header is not a name of this server" said it badly."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"GET /api/info HTTP/1.0\r\n\r\n")
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 421")
    assert b'"request refused: the request names no Host (send a Host header). lorastudio answers' in body


def test_a_json_body_over_the_cap_is_a_413_in_the_error_shape_naming_the_setting(settings: Settings) -> None:
    """Starlette's plain-text "Content Too Large" before (an app-wide cap answers from outside
    the app's middleware: the caps are the routers' now). Declared and chunked alike."""
    from live_server import LOOPBACK
    from lorastudio.api.app import create_app

    capped = settings.model_copy(update={"max_json_mb": 1})
    big = b'{"config": {"x": "' + b"a" * (2 * 2**20) + b'"}}'
    expected = {
        "error": "BodyTooLarge",
        "detail": "request body larger than the 1 MB this route takes (LORASTUDIO_MAX_JSON_MB)",
    }
    with TestClient(create_app(capped), base_url=LOOPBACK) as client:
        declared = client.post(PREFLIGHT, content=big, headers=JSON)
        chunked = client.post(PREFLIGHT, content=iter([big[:1000], big[1000:]]), headers=JSON)
        for resp in (declared, chunked):
            assert resp.status_code == 413
            assert resp.headers["content-type"] == "application/json"
            assert resp.json() == expected
        assert client.post(PREFLIGHT, content=b'{"config": {}}', headers=JSON).status_code == 400  # under it
        # the dataset upload keeps its own cap (max_upload_mb), far above the JSON one
        upload = client.post("/api/datasets/d/files", files=[("f", ("a.png", b"x" * (3 * 2**20)))])
        assert upload.status_code == 400 and "corrupt" in upload.text


TRAVERSALS = (
    "/api/runs/..%2f..",
    "/api/runs/..%2F..%2F",
    "/api/runs/%2e%2e",
    "/api/datasets/a%2Fb/files",
    "/api/loras/..%5cx/file",
    "/assets/%2e%2e",
    "/%2e",
    "/gallery/..%2F..%2Fetc%2Fpasswd",
)


@pytest.mark.parametrize("path", TRAVERSALS)
def test_an_encoded_path_traversal_is_a_404_not_a_redirect(settings: Settings, tmp_path, path: str) -> None:
    """Before: `/api/runs/..%2f..` fell through to the web UI's static mount, whose directory
    redirect answered 307 to `/api/runs/../../` (a browser resolves it to `/`), and
    `/api/runs/..%2F..%2F` was the UI's index.html (api/path_guard.py)."""
    from live_server import LOOPBACK
    from lorastudio.api.app import create_app

    dist = tmp_path / "web_dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<html>lorastudio ui</html>")
    (dist / "assets" / "app.js").write_text("// ui")
    with TestClient(create_app(settings, web_dist=dist), base_url=LOOPBACK) as client:
        for method in (client.get, client.post):
            resp = method(path, follow_redirects=False)
            assert resp.status_code == 404 and "location" not in resp.headers, (resp.status_code, resp.text)
            assert resp.json()["error"] == "NotFound" and "dot segment" in resp.json()["detail"]
        assert client.get("/", follow_redirects=False).text == "<html>lorastudio ui</html>"
        assert client.get("/assets/app.js").text == "// ui"
        assert client.get("/api/runs").json() == {"runs": [], "total": 0, "next_cursor": None}
        assert client.get("/api/runs/nope").json()["detail"] == "no run with id 'nope'"
    with TestClient(create_app(settings, web_dist=tmp_path / "absent"), base_url=LOOPBACK) as client:
        slash = client.get("/api/runs/", follow_redirects=False)  # the routes' trailing-slash redirect stays
        assert slash.status_code == 307 and slash.headers["location"].endswith("/api/runs")
        assert client.get(path, follow_redirects=False).status_code == 404


def test_a_dot_segment_sent_as_is_is_a_404(server: LiveServer) -> None:
    """A client that sends `..` without normalising it (curl --path-as-is) is answered alike."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"GET /api/runs/../.. HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404") and b"location" not in head.lower(), head
    assert b'"error": "NotFound"' in body
