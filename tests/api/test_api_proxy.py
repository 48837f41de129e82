"""The studio behind a reverse proxy (session 31 remote-access audit): a proxied request needs a
token, the public origin may write (LORASTUDIO_ALLOWED_ORIGINS), a proxy that keeps its sub-path
(LORASTUDIO_ROOT_PATH), and the settings that cannot be honoured refused with the reason.

Requests are sent as nginx forwards them: `Host` of the upstream (nginx's default
`proxy_set_header Host $proxy_host`) or the public name (`$host`), X-Forwarded-* when configured,
the browser's Origin and Sec-Fetch-Site as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from live_server import LOOPBACK, LiveServer
from lorastudio.api import sse
from lorastudio.api.app import check_bind, create_app
from lorastudio.api.hosts import HostPolicy
from lorastudio.errors import ConfigError
from lorastudio.remote_access import origin_entry, root_path_entry
from lorastudio.settings import Settings

TOKEN = "tok-proxy"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
PUBLIC = "https://studio.example"
# a browser's same-origin write from the public page, as a proxy that sets Host to the upstream
# (127.0.0.1, the test client's) forwards it
FROM_PUBLIC = {"Origin": PUBLIC, "Sec-Fetch-Site": "same-origin", "X-Forwarded-Proto": "https"}


@pytest.mark.parametrize(
    "header",
    [
        ("X-Forwarded-For", "203.0.113.9"),
        ("Forwarded", "for=203.0.113.9;proto=https"),
        ("X-Real-IP", "203.0.113.9"),
        ("X-Forwarded-Host", "studio.example"),
        ("Via", "1.1 proxy"),
    ],
)
def test_a_proxied_request_without_a_token_is_refused(settings: Settings, header: tuple[str, str]) -> None:
    """Behind `proxy_pass http://127.0.0.1:7860` a token-less studio answered everyone who reached
    the proxy as a client of this machine: runs, datasets and LoRAs read, a curl write done."""
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        assert client.get("/api/info").status_code == 200  # on this machine, no proxy: as before
        for method, path in (("GET", "/api/runs"), ("POST", "/api/train/stop"), ("GET", "/")):
            res = client.request(method, path, headers=dict([header]), json={} if method == "POST" else None)
            assert res.status_code == 403, (method, path, res.text)
            assert res.json()["error"] == "ProxyNeedsToken"
            assert header[0].lower() in res.json()["detail"].lower()
            assert "LORASTUDIO_API_TOKEN" in res.json()["detail"]
            assert res.headers.get_list("x-frame-options") == ["DENY"]  # once: HostGuard's
    secured = settings.model_copy(update={"api_token": TOKEN})
    with TestClient(create_app(secured), base_url=LOOPBACK) as client:
        assert client.get("/api/runs", headers={**BEARER, header[0]: header[1]}).status_code == 200


def test_the_public_origin_may_write_and_no_other(settings: Settings) -> None:
    """A proxy that sends Host of the upstream (or terminates TLS): the browser's Origin
    (https://studio.example) was never the server's `http://127.0.0.1`, so every write of the
    web UI was refused 403 with no setting to change it. Listed in LORASTUDIO_ALLOWED_ORIGINS,
    that origin writes; another site still cannot."""
    plain = settings.model_copy(update={"api_token": TOKEN})
    with TestClient(create_app(plain), base_url=LOOPBACK) as client:  # the refusal says what to set
        res = client.post("/api/train/preflight", json={"config": {}}, headers={**BEARER, **FROM_PUBLIC})
        assert res.status_code == 403 and "LORASTUDIO_ALLOWED_ORIGINS" in res.json()["detail"], res.text
    secured = Settings(home=settings.home, api_token=TOKEN, allowed_origins=f"{PUBLIC}:443/")
    assert secured.allowed_origins == [PUBLIC]  # as a browser sends it: no default port, no slash
    with TestClient(create_app(secured), base_url=LOOPBACK) as client:
        body = {"config": {}}
        ok = client.post("/api/train/preflight", json=body, headers={**BEARER, **FROM_PUBLIC})
        assert ok.status_code == 400 and ok.json()["error"] != "CrossOriginRefused", ok.text  # the config's
        for origin, site in (("https://evil.example", "cross-site"), ("http://studio.example", "same-site")):
            res = client.post(
                "/api/train/preflight",
                json=body,
                headers={**BEARER, "Origin": origin, "Sec-Fetch-Site": site},
            )
            assert res.status_code == 403 and res.json()["error"] == "CrossOriginRefused", origin
        # a proxy that keeps the public Host (nginx `proxy_set_header Host $host`, Caddy, Traefik)
        kept = client.get("/api/runs", headers={**BEARER, "Host": "studio.example"})
        assert kept.status_code == 200
        assert client.get("/api/runs", headers={**BEARER, "Host": "evil.example"}).status_code == 421


def test_listed_origins_add_hosts_and_never_narrow_a_wildcard_bind(settings: Settings) -> None:
    """A token and a 0.0.0.0 bind answer any Host (LAN address, name) unless hosts are listed; the
    origins listed for a proxy add their hosts and take none of the others away."""
    wild = settings.model_copy(update={"api_token": TOKEN, "host": "0.0.0.0", "allowed_origins": [PUBLIC]})
    assert HostPolicy.from_settings(wild).accepts("192.168.1.10:7860")
    loop = settings.model_copy(update={"api_token": TOKEN, "allowed_origins": [PUBLIC]})
    assert HostPolicy.from_settings(loop).accepts("studio.example")
    assert not HostPolicy.from_settings(loop).accepts("192.168.1.10:7860")


@pytest.mark.parametrize(
    "value",
    ["*", "null", "https://*.example", "https://studio.example/app", "ftp://studio.example",
     "https://user:pw@studio.example", "studio.example", "https://studio.example:99999", "https://x?a=1"],
)  # fmt: skip
def test_an_allowed_origin_that_is_no_origin_is_refused(value: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allowed origin"):
        origin_entry(value)
    with pytest.raises((ValidationError, ValueError)):
        Settings(home=tmp_path, allowed_origins=[value])


@pytest.mark.parametrize(
    ("value", "reason"),
    [("studio", "start with '/'"), ("/a/../b", "segment"), ("/a//b", "segment"), ("/a b", "letters"),
     ("/api", "server's own"), ("/docs/x", "server's own"), ("/assets", "server's own"),
     ("/docs-assets/x", "server's own"), ("/a?x=1", "letters")],
)  # fmt: skip
def test_a_root_path_that_cannot_be_honoured_is_refused(value: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        root_path_entry(value)
    assert root_path_entry(" /studio/ ") == "/studio" and root_path_entry("/") == ""


def test_reaching_the_studio_through_a_proxy_needs_a_token(settings: Settings) -> None:
    """`serve` refuses allowed origins or a root path without a token, naming each setting."""
    proxied = settings.model_copy(update={"allowed_origins": [PUBLIC], "root_path": "/studio"})
    with pytest.raises(ConfigError) as err:
        check_bind("127.0.0.1", proxied)
    assert [p.field for p in err.value.problems] == ["allowed_origins", "root_path"]
    check_bind("127.0.0.1", proxied.model_copy(update={"api_token": TOKEN}))


def test_a_proxy_that_keeps_the_sub_path(settings: Settings, tmp_path: Path) -> None:
    """`location /studio/ { proxy_pass http://127.0.0.1:7860; }` (no URI: the prefix is kept)
    reached every path of the studio as `/studio/...`: all 404. With LORASTUDIO_ROOT_PATH=/studio
    the API, the UI, the docs, redirects and 405's Allow work under it, and at the root too."""
    web = tmp_path / "web"
    (web / "assets").mkdir(parents=True)
    (web / "index.html").write_text('<script src="./assets/app.js"></script>')
    (web / "assets" / "app.js").write_text("//app")
    rooted = settings.model_copy(update={"root_path": "/studio"})
    with TestClient(create_app(rooted, web_dist=web), base_url=LOOPBACK, follow_redirects=False) as client:
        assert client.get("/studio/api/info").json() == client.get("/api/info").json()
        assert client.get("/studio/").text.startswith("<script")
        assert client.get("/studio/assets/app.js").text == "//app"
        moved = client.get("/studio", params={"a": "1"})
        assert moved.status_code == 308 and moved.headers["location"] == "/studio/?a=1"
        slash = client.get("/studio/api/runs/")
        assert slash.status_code == 307 and slash.headers["location"].endswith("/studio/api/runs")
        wrong = client.patch("/studio/api/runs/x")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "DELETE, GET, HEAD"
        assert client.get("/studio/api/nothing").status_code == 404  # a server path: not the UI
        assert '"openapi.json"' in client.get("/studio/docs").text  # relative: /studio/openapi.json
        assert client.get("/studio/openapi.json").status_code == 200
        assert client.get("/studioz/api/info").status_code == 404  # only the path itself is a root


def test_an_idle_event_stream_keeps_a_proxy_reading(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held (session 31): an idle stream (a long caching phase) writes a comment before a proxy's
    read timeout (nginx 60 s; every 15 s here, shortened), and says no proxy may buffer or cache it."""
    assert sse.SSE_KEEPALIVE_S <= 15  # a quarter of nginx's default proxy_read_timeout at most
    monkeypatch.setattr(sse, "SSE_IDLE_CHECK_S", 0.05)
    monkeypatch.setattr(sse, "SSE_KEEPALIVE_S", 0.2)
    with server.client.stream("GET", "/api/train/events", timeout=30) as res:
        assert res.headers["cache-control"] == "no-cache" and res.headers["x-accel-buffering"] == "no"
        seen = []
        for line in res.iter_lines():
            seen.append(line)
            if seen.count(": keep-alive") == 2:
                break
    assert seen[0] == ": connected"
