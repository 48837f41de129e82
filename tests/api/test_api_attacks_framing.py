"""An outside attacker of the HTTP layer (session 38): odd Host header forms, a request that frames
its body two ways (request smuggling), answers a browser could sniff into another type.

Before: `Host: localhost:80@evil.example`, `localhost:x`, `127.0.0.1 evil` and `[::1]evil` were
answered as loopback names (the text after the first ':' or ']' was never looked at); a request
with both Transfer-Encoding and Content-Length was read as chunked and its connection kept, so
the bytes after its chunked end were answered as a second request; no answer said
`X-Content-Type-Options: nosniff`."""

from __future__ import annotations

import socket

import pytest
from api_helpers import LiveServer
from fastapi.testclient import TestClient

from lorastudio.api.docs_pages import DOCS_CSP
from lorastudio.api.hosts import PAGE_CSP, HostPolicy
from lorastudio.settings import Settings

MALFORMED_HOSTS = [
    "localhost:80@evil.example",
    "localhost:x",
    "127.0.0.1:7860 evil.example",
    "[::1]evil.example",
    "[::1]:80@evil.example",
    "localhost:80:90",
    "evil.example#@localhost",
    "localhost/evil",
]


def test_a_malformed_host_is_refused_and_well_formed_loopback_ones_answered() -> None:
    policy = HostPolicy(frozenset({"studio.lan"}))
    assert [h for h in MALFORMED_HOSTS if policy.accepts(h)] == []
    assert not policy.accepts("studio.lan@evil.example") and not policy.accepts("café.lan")
    good = ["localhost", "LOCALHOST:7860", "localhost.", "127.0.0.1:", "[::1]:7860", "::1", "studio.lan.:1"]
    assert [h for h in good if not policy.accepts(h)] == []


@pytest.mark.parametrize("named", ["127.0.0.1", "evil.example"])
def test_a_request_framed_by_both_transfer_encoding_and_content_length_is_refused_and_closed(
    server: LiveServer, named: str
) -> None:
    """`evil.example`: a Host the guard refuses (a proxy that passes the client's Host on). Its
    421 came first and kept the connection open, and the smuggled GET, naming an accepted Host,
    was answered (RELIABILITY 1883)."""
    host, port = server.url.removeprefix("http://").split(":")
    smuggled = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    first = (
        b"POST /api/train/preflight HTTP/1.1\r\nHost: " + named.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(first + smuggled)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection: recv ends
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ") and b"AmbiguousFraming" in answer
    assert answer.count(b"HTTP/1.1") == 1  # the smuggled GET was never answered
    assert b"\r\nx-content-type-options: nosniff\r\n" in answer.lower()  # the guard's headers too


def test_every_answer_tells_the_browser_not_to_sniff_its_type(client: TestClient) -> None:
    answers = [
        client.get("/api/info"),
        client.get("/gallery/none.png"),  # 404
        client.get("/api/info", headers={"Host": "evil.example"}),  # 421 from the Host guard
    ]
    assert [r.headers.get("x-content-type-options") for r in answers] == ["nosniff"] * 3


def test_no_other_sites_page_may_embed_an_answer(client: TestClient) -> None:
    """A page of another site told a dataset's file that exists from one that does not by an
    <img>'s onload / onerror (checked in Chromium with private-network checks off, as Firefox)."""
    answers = [client.get("/api/info"), client.get("/gallery/none.png"), client.get("/")]
    assert [r.headers.get("cross-origin-resource-policy") for r in answers] == ["same-origin"] * 3


@pytest.mark.parametrize("host", ["localhost:80@evil.example", "[::1]evil.example"])
def test_a_malformed_host_is_a_421_naming_it(client: TestClient, host: str) -> None:
    resp = client.get("/api/info", headers={"Host": host})
    assert resp.status_code == 421 and host in resp.json()["detail"]


def test_answers_carry_the_page_policy_and_the_docs_pages_keep_their_own(client: TestClient) -> None:
    ui = client.get("/api/info").headers["content-security-policy"]
    assert ui == PAGE_CSP.decode() and "script-src 'self';" in ui and "object-src 'none'" in ui
    docs = client.get("/docs").headers.get_list("content-security-policy")
    assert docs == [DOCS_CSP, "frame-ancestors 'self'"]  # its own (ReDoc's blob: worker), and no framing


def test_a_lora_that_is_a_link_downloads_under_its_own_name(client: TestClient, settings: Settings) -> None:
    """The download took the link target's name (here one holding CRLF, sent percent-encoded)."""
    run = settings.outputs_dir / "mine"
    run.mkdir(parents=True)
    target = run / "evil\r\nSet-Cookie: a=b.safetensors"
    target.write_bytes(b"0" * 16)
    (run / "mine.safetensors").symlink_to(target.name)
    resp = client.get("/api/loras/mine/file")
    assert resp.status_code == 200 and resp.content == b"0" * 16
    assert resp.headers["content-disposition"] == 'attachment; filename="mine.safetensors"'
    assert "set-cookie" not in resp.headers


def test_a_steps_lora_that_is_a_link_downloads_under_its_own_name(
    client: TestClient, settings: Settings
) -> None:
    """A step's snapshot that is a link downloaded under the target's name (RELIABILITY 1771)."""
    loras = settings.outputs_dir / "mine" / "loras"
    loras.mkdir(parents=True)
    target = loras / "evil\r\nSet-Cookie: a=b.safetensors"
    target.write_bytes(b"0" * 16)
    (loras / "mine-step-000005.safetensors").symlink_to(target.name)
    (loras / "mine-step-000005.json").write_text('{"steps": 5}', encoding="utf-8")
    resp = client.get("/api/loras/mine/file", params={"step": 5})
    assert resp.status_code == 200 and resp.content == b"0" * 16, resp.text
    assert resp.headers["content-disposition"] == 'attachment; filename="mine-step-000005.safetensors"'


def test_a_read_another_sites_page_makes_is_refused_but_a_link_followed_is_answered(
    client: TestClient,
) -> None:
    """Another site's <img> of a thumbnail made the studio decode it (its timing told which files
    exist, CORP only hides the answer)."""

    def status(site: str, mode: str) -> int:
        return client.get("/api/info", headers={"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode}).status_code

    assert [status("cross-site", m) for m in ("no-cors", "cors", "navigate")] == [403, 403, 200]
    assert [status("same-site", m) for m in ("no-cors", "navigate")] == [403, 200]
    assert [status(s, "no-cors") for s in ("same-origin", "none")] == [200, 200]
    assert client.get("/api/info").status_code == 200  # no fetch metadata: a script, curl
