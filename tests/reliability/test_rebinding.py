"""DNS rebinding against a real `lorastudio serve` (loopback, no token): a page whose host name
the attacker resolves to 127.0.0.1 sends `Host: evil.example:<port>` with a matching Origin.
Every route (API reads and writes, both event streams, the static UI, gallery files, LoRA
downloads) must refuse it; loopback Host forms and LORASTUDIO_ALLOWED_HOSTS must pass; writes
marked cross-site by the browser (Sec-Fetch-Site) are refused; every answer forbids framing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from reliability_helpers import record_figure, serve_process

from lorastudio.api.hosts import PAGE_CSP
from lorastudio.settings import Settings

EVIL = "evil.example"
ALLOWED = "studio.lan"


@pytest.fixture
def studio(settings: Settings, shapes: Path) -> Iterator[tuple[httpx.Client, int]]:
    """A real `lorastudio serve` (with the built UI) allowing ALLOWED besides loopback."""
    with serve_process(settings, {"LORASTUDIO_ALLOWED_HOSTS": f"{ALLOWED}, other.lan"}) as (_, client):
        yield client, client.base_url.port


def _requests(run_id: str) -> list[tuple[str, str, dict | None]]:
    """(method, path, json body) of what a rebinding page would want: read everything, stream
    the events, fetch files, and write."""
    return [
        ("GET", "/", None),
        ("GET", "/index.html", None),
        ("GET", "/api/runs", None),
        ("GET", "/api/datasets", None),
        ("GET", "/api/datasets/shapes", None),
        ("GET", "/api/datasets/shapes/thumbnails/shape_00.png", None),
        ("GET", "/api/info", None),
        ("GET", "/api/train/events", None),
        ("GET", "/api/models/events", None),
        ("GET", "/gallery/x.png", None),
        ("GET", "/api/loras/x/file", None),
        ("GET", "/docs", None),
        ("GET", "/openapi.json", None),
        ("POST", "/api/train/start", {"config": {"family": "flux", "data_dir": "shapes"}}),
        ("POST", "/api/train/preflight", {"config": {"family": "flux", "data_dir": "shapes"}}),
        ("PUT", "/api/datasets/shapes/captions/shape_00.png", {"caption": "pwned"}),
        ("DELETE", "/api/datasets/shapes/images/shape_00.png", None),
        ("DELETE", f"/api/runs/{run_id}", None),
        ("POST", "/api/generate", {"family": "flux", "base_model": "x", "prompt": "x", "request_id": "r"}),
        ("POST", "/api/generate/r/cancel", None),
        ("POST", "/api/generate/references", None),
        ("DELETE", "/api/gallery/x.png", None),
        ("GET", "/gallery/references/x.png", None),
    ]


def _status(client: httpx.Client, method: str, path: str, body: dict | None, headers: dict) -> httpx.Response:
    """The response (an open event stream is closed as soon as its status is known)."""
    with client.stream(method, path, json=body, headers=headers, timeout=30) as resp:
        if not path.endswith("/events") or resp.status_code != 200:
            resp.read()
        return resp


def test_a_rebinding_page_gets_nothing_and_changes_nothing(
    studio: tuple[httpx.Client, int], settings: Settings
) -> None:
    client, port = studio
    before = sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir())
    forged = {"Host": f"{EVIL}:{port}", "Origin": f"http://{EVIL}:{port}", "Sec-Fetch-Site": "same-origin"}
    refused = 0
    for method, path, body in _requests("x"):
        resp = _status(client, method, path, body, forged)
        assert resp.status_code == 421, (method, path, resp.status_code)
        detail = resp.json()["detail"]
        assert f"{EVIL}:{port}" in detail and "LORASTUDIO_ALLOWED_HOSTS" in detail, detail
        assert resp.headers["x-frame-options"] == "DENY"
        refused += 1
    # a Host-less request (HTTP/1.0 style) and one naming a different port's loopback-lookalike
    for host in (f"127.0.0.1.{EVIL}:{port}", f"localhost.{EVIL}", f"{EVIL}"):
        assert _status(client, "GET", "/api/runs", None, {"Host": host}).status_code == 421, host
        refused += 1
    assert sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir()) == before
    assert (settings.datasets_dir / "shapes" / "shape_00.txt").read_text() != "pwned\n"
    assert client.get("/api/train/status").json()["job"] is None

    accepted = 0
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"LOCALHOST:{port}",
        f"127.7.8.9:{port}",
        f"[::1]:{port}",
        "127.0.0.1",
        f"{ALLOWED}:{port}",
        ALLOWED.upper(),
        "other.lan",
    ):
        origin = {"Host": host, "Origin": f"http://{host}"}
        for method, path, body in _requests("nope"):
            if method == "DELETE" and "images" in path:
                continue  # would delete the image the other requests read
            resp = _status(client, method, path, body, origin)
            assert resp.status_code not in (403, 421), (host, method, path, resp.status_code, resp.text)
            accepted += 1
    record_figure(
        "dns_rebinding",
        {"forged_host_requests_refused": refused, "loopback_or_allowed_requests_answered": accepted},
    )


def test_every_answer_forbids_framing_and_cross_site_writes_are_refused(
    studio: tuple[httpx.Client, int], settings: Settings
) -> None:
    client, port = studio
    for path in ("/", "/api/runs", "/api/runs/nope", "/gallery/x.png"):
        resp = client.get(path)
        assert resp.headers["x-frame-options"] == "DENY", path
        assert resp.headers["content-security-policy"] == PAGE_CSP.decode(), path
        assert resp.headers["x-content-type-options"] == "nosniff", path
    before = sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir())
    gallery = settings.home / "gallery"
    gallery.mkdir(exist_ok=True)
    (gallery / "kept.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    body = {"caption": "pwned"}
    caption = "/api/datasets/shapes/captions/shape_00.png"
    sibling = f"http://127.0.0.1:{port + 1}"
    for headers in (
        {"Sec-Fetch-Site": "cross-site"},  # a browser that sends no Origin still marks it
        {"Sec-Fetch-Site": "cross-site", "Origin": f"http://127.0.0.1:{port}"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": sibling},  # another port of this host
    ):
        resp = client.put(caption, json=body, headers=headers)
        assert resp.status_code == 403, (headers, resp.status_code)
        assert "cross-site" in resp.json()["detail"] or "cross-origin" in resp.json()["detail"]
        resp = client.post("/api/train/start", json={"config": {}}, headers=headers)
        assert resp.status_code == 403, headers
        assert client.delete("/api/gallery/kept.png", headers=headers).status_code == 403, headers
        assert client.post("/api/generate/r/cancel", headers=headers).status_code == 403, headers
    assert (gallery / "kept.png").is_file()
    assert sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir()) == before
    # the UI (same origin), a typed navigation (none) and clients without the header still work
    own = {"Sec-Fetch-Site": "same-origin", "Origin": f"http://127.0.0.1:{port}"}
    assert client.put(caption, json={"caption": "a red circle"}, headers=own).status_code == 200
    assert client.delete("/api/gallery/kept.png", headers=own).json() == {"deleted": ["kept.png"]}
    assert client.post("/api/train/stop", json={}, headers={"Sec-Fetch-Site": "none"}).status_code == 404
    # a read another site's page makes by itself is refused too (fix 1717); a link followed is answered
    assert client.get("/api/runs", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    navigate = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert client.get("/api/runs", headers=navigate).status_code == 200
