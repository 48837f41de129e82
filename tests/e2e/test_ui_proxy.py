"""The studio behind a reverse proxy under a sub-path, in a real browser (session 31 proxy, fixes
991, 992): a proxy that strips `/studio/` and sends Host of the upstream and X-Forwarded-For, as
nginx's `location /studio/ { proxy_pass http://127.0.0.1:PORT/; proxy_set_header X-Forwarded-For
...; }` does; the studio with a token and the proxy's origin in LORASTUDIO_ALLOWED_ORIGINS."""

from __future__ import annotations

import http.client
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.e2e.conftest import _require_ui, _running_studio
from tests.e2e.ui_pages import open_page

PREFIX = "/studio"
HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "host",
}


class _Proxy(ThreadingHTTPServer):
    upstream: tuple[str, int] = ("127.0.0.1", 0)  # set once the studio listens
    log: list[str]  # the request line of each request, as a proxy's access log keeps it


def _proxy() -> _Proxy:
    """A stripping reverse proxy to its `upstream` (streams answers: the event stream passes)."""

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; a body ends with the connection

        def _forward(self) -> None:
            self.server.log.append(self.requestline)  # type: ignore[attr-defined]
            if not self.path.startswith(PREFIX + "/"):
                self.send_error(404)
                return
            upstream = self.server.upstream  # type: ignore[attr-defined]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers |= {"Host": f"{upstream[0]}:{upstream[1]}", "X-Forwarded-For": self.client_address[0]}
            conn = http.client.HTTPConnection(*upstream, timeout=60)
            conn.request(self.command, self.path[len(PREFIX) :], body=body, headers=headers)
            res = conn.getresponse()
            self.send_response_only(res.status, res.reason)
            for key, value in res.getheaders():
                if key.lower() == "location":  # as nginx's proxy_redirect default
                    value = PREFIX + urlsplit(value).path
                if key.lower() not in HOP:
                    self.send_header(key, value)
            self.end_headers()
            while chunk := res.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
            conn.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = _Proxy(("127.0.0.1", 0), Forward)
    server.log = []
    return server


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    _require_ui()
    home = tmp_path_factory.mktemp("home-proxy")
    token = "e2e-" + os.urandom(8).hex()
    server = _proxy()  # its port first: the studio lists its origin
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    env = {"LORASTUDIO_API_TOKEN": token, "LORASTUDIO_ALLOWED_ORIGINS": origin}
    with _running_studio(home, env) as url:
        up = urlsplit(url)
        server.upstream = (up.hostname or "", up.port or 0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield {"url": f"{origin}{PREFIX}/", "origin": origin, "token": token, "log": server.log}
        finally:
            server.shutdown()
            server.server_close()


@pytest.mark.timeout(120)
def test_the_ui_works_under_a_proxys_sub_path(proxied, browser, artifacts: Path) -> None:
    requested: list[str] = []
    with open_page(browser, viewport={"width": 1280, "height": 900}) as page:
        page.on("request", lambda req: requested.append(req.url))
        try:
            page.goto(proxied["url"] + "#/datasets")
            dialog = page.get_by_role("dialog", name="API token required")
            dialog.get_by_label("API token").fill(proxied["token"])
            # the stream the token opens (a request the page made before it may answer 401 after it)
            with page.expect_response(
                lambda res: "/api/train/events" in res.url and res.status == 200
            ) as stream:
                dialog.get_by_label("API token").press("Enter")
            assert stream.value.url.startswith(proxied["url"] + "api/")
            page.get_by_text("No datasets yet").wait_for()
            # a write from the page (its Origin: the proxy's) is the route's answer, not a 403
            status = page.evaluate(
                """async (token) => (await fetch('api/train/stop', {method: 'POST', body: '{}',
                  headers: {'Content-Type': 'application/json', Authorization: `Bearer ${token}`}})).status""",
                proxied["token"],
            )
            assert status == 404  # no job to stop
            page.reload()  # the hash route survives a reload under the sub-path
            page.get_by_text("No datasets yet").wait_for()
            # the session cookie goes to the studio's folder only, not to the proxy's other apps
            cookies = [c for c in page.context.cookies() if c["name"].startswith("lorastudio_session")]
            assert [c["path"] for c in cookies] == [PREFIX + "/"], cookies
        except Exception:
            page.screenshot(path=artifacts / "failure-proxy.png", full_page=True)
            raise
    outside = [u for u in requested if u.startswith(proxied["origin"]) and not u.startswith(proxied["url"])]
    assert outside == [] and any("/studio/api/info" in u for u in requested), requested
    # the API token is in no URL: not in the page's requests, not in the proxy's access log (the
    # event stream carried `?token=<the API token>`; now the session cookie stands for it)
    log = proxied["log"]
    assert any("/studio/api/train/events" in line for line in log), log
    assert any(line.startswith("POST /studio/api/session") for line in log), log
    assert [u for u in requested if proxied["token"] in u or "token=" in u] == [], requested
    assert [line for line in log if proxied["token"] in line or "token=" in line] == [], log
