"""A synchronous generation (POST /api/generate) cut by a reverse proxy's read timeout (RELIABILITY
2291): it used to be cancelled as a client that left, losing the whole image (and again at each
retry). A proxied request is now kept: it lands in the gallery with a `note`; a direct client that
leaves still cancels its own (test_api_attacks_generate_cancel.py). Read from a real uvicorn: the
disconnect is the server's own."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from api_helpers import live_server
from test_api_attacks_generate_cancel import _Blocking
from tests.polling import until

from lorastudio.api.app import create_app
from lorastudio.api.routes.generate import LEFT_NOTE
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings

TOKEN = "tok-proxy-cut"


def _post_then_leave(url: str, body: dict, headers: dict[str, str]) -> socket.socket:
    """Send POST /api/generate on a raw connection (closed by the caller: the proxy's cut)."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = ["POST /api/generate HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in headers.items())]
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    return conn


@pytest.mark.timeout(60)
def test_a_proxied_generation_cut_by_the_proxy_lands_in_the_gallery_with_a_note(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lorastudio.api")
    app = create_app(settings.model_copy(update={"api_token": TOKEN}))
    with live_server(app) as server:
        app.state.generation = service = _Blocking(settings, GpuArbiter())
        body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "203.0.113.9"}
        conn = _post_then_leave(server.url, {**body, "request_id": "cut-1"}, headers)
        assert service.running.wait(10)
        conn.close()  # the proxy's read timeout: it closes the connection to the studio
        until(
            lambda: "its client left (through a proxy" in caplog.text or service._flight.cancelled("cut-1"),
            20,
            "the server seeing the client go",
        )
        service.release.set()
        until(lambda: service.in_flight == 0, 20, "the generation's end")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        page = server.client.get("/api/gallery", headers=bearer).json()
        assert [img["note"] for img in page["images"]] == [LEFT_NOTE], page  # was: cancelled, nothing kept
        sidecar = json.loads(
            (settings.home / "gallery" / page["images"][0]["file"]).with_suffix(".json").read_text()
        )
        assert sidecar["note"] == LEFT_NOTE and sidecar["request_id"] == "cut-1" and "warnings" in sidecar
        # the kept image's sidecar is still a request body as it stands (README), note and all
        again = server.client.post("/api/generate", json=sidecar, headers=bearer)
        assert again.status_code == 201, again.text
