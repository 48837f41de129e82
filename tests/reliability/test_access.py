"""Access: loopback by default, no public bind without a token, the token on every route (API,
event streams, files) compared in constant time, CORS limited to the server's own origin (no
cross-origin headers, cross-origin writes refused), and secrets (API token, hub tokens) never in
logs, run records, events, checkpoints or sidecars."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from reliability_helpers import FINAL, record_figure, wait_for

import lorastudio.api.deps as deps
from cli_runner import run_cli_streams
from live_server import LOOPBACK, WORKER_TIMEOUT_S
from lorastudio.api.app import create_app
from lorastudio.settings import Settings
from ports import start_listening

TOKEN = "tok-Reliability-7f3a9c"


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


PNG_BYTES = _png()
SERVE = [sys.executable, "-c", "from lorastudio.cli.app import main; main()", "serve"]


@pytest.fixture
def secured(settings: Settings, shapes: Path) -> Iterator[TestClient]:
    with TestClient(
        create_app(settings.model_copy(update={"api_token": TOKEN})), base_url=LOOPBACK
    ) as client:
        yield client


def _routes(settings: Settings) -> list[tuple[str, str]]:
    """Every (method, path) of the API, path parameters filled with "x" (from the OpenAPI
    schema, which lists every route the routers define)."""
    paths = create_app(settings).openapi()["paths"]
    return sorted((m.upper(), re.sub(r"\{[^}]+\}", "x", p)) for p, ops in paths.items() for m in ops)


def test_every_route_requires_the_token(secured: TestClient, settings: Settings) -> None:
    routes = _routes(settings)
    assert ("GET", "/api/train/events") in routes and ("GET", "/gallery/x") in routes
    assert ("GET", "/api/loras/x/file") in routes and ("GET", "/api/models/events") in routes
    wrong = TOKEN[:-1] + ("0" if TOKEN[-1] != "0" else "1")
    refused = 0
    for method, path in routes:
        for headers, params in (
            ({}, {}),
            ({"Authorization": f"Bearer {wrong}"}, {}),
            ({"Authorization": f"Basic {TOKEN}"}, {}),
            ({}, {"token": wrong}),
        ):
            resp = secured.request(method, path, headers=headers, params=params, json={})
            assert resp.status_code == 401, (method, path, headers, params, resp.status_code)
            refused += 1
        if method != "GET":  # the query token is for EventSource/<img> GETs only
            resp = secured.request(method, path, params={"token": TOKEN}, json={})
            assert resp.status_code == 401, (method, path)
            refused += 1
        if path.endswith("/events"):
            continue  # an authorised stream never ends on its own (checked in the secrets test)
        resp = secured.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"}, json={})
        assert resp.status_code != 401, (method, path)
    record_figure("access_routes", {"routes": len(routes), "unauthorised_requests_refused": refused})


def test_the_token_is_compared_in_constant_time(secured: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = deps.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(deps.hmac, "compare_digest", spy)
    assert secured.get("/api/info", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert secured.get("/api/info", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert calls == [(b"nope", TOKEN.encode()), (TOKEN.encode(), TOKEN.encode())]


def test_cors_is_limited_to_the_own_origin(client_plain: TestClient, settings: Settings) -> None:
    evil = {"Origin": "http://evil.example"}
    pre = client_plain.options("/api/train/start", headers={**evil, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in pre.headers
    got = client_plain.get("/api/info", headers=evil)
    assert "access-control-allow-origin" not in got.headers
    before = sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir())
    # a cross-site form POST needs no CORS preflight: it must be refused by the server itself
    sneaky = client_plain.post(
        "/api/datasets/shapes/files", headers=evil, files=[("files", ("evil.png", PNG_BYTES))]
    )
    assert sneaky.status_code == 403, sneaky.text
    assert "origin" in sneaky.json()["detail"]
    assert sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir()) == before
    for method, path in (
        ("POST", "/api/train/stop"),
        ("DELETE", "/api/runs/x"),
        ("PUT", "/api/datasets/shapes/captions/red_circle.png"),
    ):
        assert client_plain.request(method, path, headers=evil, json={}).status_code == 403
    # the server's own origin (the UI) and clients that send no Origin (CLI, curl) still work
    own = client_plain.post("/api/train/stop", headers={"Origin": LOOPBACK}, json={})
    assert own.status_code == 404
    assert client_plain.post("/api/train/stop", json={}).status_code == 404


@pytest.fixture
def client_plain(settings: Settings, shapes: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        yield client


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_public_bind_without_a_token_refuses_to_start(settings: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LORASTUDIO_API_TOKEN"}
    env["LORASTUDIO_HOME"] = str(settings.home)
    port = _free_port()
    done = subprocess.run(
        [*SERVE, "--host", "0.0.0.0", "--port", str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "API token" in done.stdout + done.stderr
    assert Settings(home=settings.home).host == "127.0.0.1"


def test_secrets_never_appear_in_logs_records_events_or_files(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    hub = "hf_SecretHubToken0123456789"
    other = "svc-SecretOtherToken-42"
    env = {
        **os.environ,
        "LORASTUDIO_HOME": str(settings.home),
        "LORASTUDIO_API_TOKEN": TOKEN,
        "LORASTUDIO_HF_TOKEN": hub,
        "HF_TOKEN": hub,
        "MY_SERVICE_TOKEN": other,
    }
    log_path = tmp_path / "server.log"

    def start(port: int) -> subprocess.Popen:
        with log_path.open("a") as log_file:
            return subprocess.Popen(
                [*SERVE, "--port", str(port)], env=env, stdout=log_file, stderr=subprocess.STDOUT
            )

    proc, port = start_listening(start)
    try:
        url = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, timeout=30) as client:

            def up() -> bool:
                try:
                    return client.get("/api/info", headers=auth).status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(up, 60, "the server", poll=0.1)
            config = flux_config(output_name="secrets", steps=3, save_every=1)
            job = client.post("/api/train/start", headers=auth, json={"config": config}).json()
            events_text = []
            with client.stream("GET", "/api/train/events", params={"after": 0, "token": TOKEN}) as stream:
                for line in stream.iter_lines():
                    events_text.append(line)
                    if line.startswith("data: ") and json.loads(line[6:])["type"] in ("complete", "error"):
                        break
            final = wait_for(
                lambda: (
                    (j := client.get("/api/train/status", headers=auth).json()["job"]) is not None
                    and j["status"] in FINAL
                    and j
                ),
                60,
                "the run's end",
            )
            assert final["status"] == "completed", final
            record = client.get(f"/api/runs/{job['id']}", headers=auth).text
            lora = client.get("/api/loras/secrets/file", params={"token": TOKEN})
            assert lora.status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
    places = {
        "server log": log_path.read_bytes(),
        "event stream": "\n".join(events_text).encode(),
        "run record": record.encode(),
        "lora download": lora.content,
    }
    for path in settings.home.rglob("*"):
        if path.is_file():
            places[str(path.relative_to(settings.home))] = path.read_bytes()
    assert any(k.endswith("secrets.json") for k in places) and any("state.pt" in k for k in places)
    leaks = [(where, s) for where, data in places.items() for s in (TOKEN, hub, other) if s.encode() in data]
    assert leaks == [], leaks
    record_figure("secrets", {"places_searched": len(places), "secrets": 3, "leaks": len(leaks)})


@contextmanager
def _serve_with_token(settings: Settings, log: Path) -> Iterator[tuple[httpx.Client, int]]:
    """A real `lorastudio serve` with TOKEN set, logging to `log`; waits until it answers."""
    env = {**os.environ, "LORASTUDIO_HOME": str(settings.home), "LORASTUDIO_API_TOKEN": TOKEN}
    log.write_bytes(b"")

    def start(port: int) -> subprocess.Popen:
        with log.open("a", encoding="utf-8") as out:
            return subprocess.Popen(
                [*SERVE, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    proc, port = start_listening(start)
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=WORKER_TIMEOUT_S
        ) as client:  # a loaded CI host: 30 s was short

            def up() -> bool:
                try:
                    return client.get("/api/info").status_code == 401
                except httpx.TransportError:
                    return False

            wait_for(up, 60, "the server", poll=0.1)
            yield client, port
    finally:
        proc.terminate()
        proc.wait(30)


def test_docs_need_the_token_and_encoded_token_names_are_redacted(settings: Settings, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with _serve_with_token(settings, log) as (client, _):
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, params={"token": "wrong"}).status_code == 401, path
            assert client.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200, path
        page = client.get("/docs", params={"token": TOKEN})
        # relative: the page under a proxy's sub-path reads the schema under it (api/app.py)
        assert page.status_code == 200 and f'"openapi.json?token={TOKEN}"' in page.text
        assert "/api/train/start" in client.get("/openapi.json", params={"token": TOKEN}).text
        # the server decodes query names: these authenticate, so their values must not be logged
        for name in ("%74oken", "tok%65n", "%74%6F%6B%65%6E", "TOKEN"):
            resp = client.get(f"/api/runs?limit=1&{name}={TOKEN}")  # a parameter it takes first
            assert resp.status_code == (401 if name == "TOKEN" else 200), name
    text = log.read_text()
    assert "%74oken=***" in text and "tok%65n=***" in text, text[-2000:]
    assert TOKEN not in text
    record_figure("redaction", {"encoded_token_names": 4, "leaks": text.count(TOKEN)})


@pytest.mark.parametrize("blank", [" ", " \t "])
def test_a_blank_token_is_no_token_and_allows_no_public_bind(
    settings: Settings, blank: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lorastudio serve` run in this process (tests/cli_runner.py): the real process's refusal of
    a public bind, its exit status and words, is test_a_public_bind_without_a_token_refuses_to_start's."""
    import lorastudio.api.app as api_app

    assert Settings(home=settings.home, api_token=blank).api_token is None
    monkeypatch.setenv("LORASTUDIO_HOME", str(settings.home))
    monkeypatch.setenv("LORASTUDIO_API_TOKEN", blank)

    def served(*args: object, **kwargs: object) -> None:
        raise AssertionError("a blank token let the server start on 0.0.0.0")

    monkeypatch.setattr(api_app, "serve", served)
    code, out, err = run_cli_streams(
        capsys, monkeypatch, "serve", "--host", "0.0.0.0", "--port", str(_free_port())
    )
    assert code != 0
    out = out + err
    assert "API token" in out and "blank" in out, out


@pytest.mark.parametrize(("token", "host", "said"), [("abc", "0.0.0.0", True), ("abc", "127.0.0.1", False)])
def test_a_short_token_beyond_loopback_is_said(
    settings: Settings,
    token: str,
    host: str,
    said: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token of a few characters on a public bind was taken in silence: the server answers
    every wrong guess at once, with no limit on them (RELIABILITY 2235). It still starts."""
    import lorastudio.api.app as api_app

    monkeypatch.setenv("LORASTUDIO_HOME", str(settings.home))
    monkeypatch.setenv("LORASTUDIO_API_TOKEN", token)
    started: list[object] = []
    monkeypatch.setattr(api_app, "serve", lambda *args, **kwargs: started.append(args))
    code, out, err = run_cli_streams(
        capsys, monkeypatch, "serve", "--host", host, "--port", str(_free_port())
    )
    assert code == 0 and started, out + err
    assert ("LORASTUDIO_API_TOKEN is 3 character(s)" in err) is said, err
