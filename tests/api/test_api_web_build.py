"""The served web UI's build id on /api answers, and a stale page's settings refused (RELIABILITY
2061, api/web_build.py): a tab left open across an upgrade started a "Train again" without the
settings its bundle did not know, with nothing said."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


def _dist(tmp_path: Path, build: str | None) -> Path:
    dist = tmp_path / "web_dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<html>lorastudio ui</html>")
    if build is not None:
        (dist / "build-id.txt").write_text(build + "\n")
    return dist


def test_a_page_of_another_build_is_told_and_its_settings_writes_are_refused(
    settings: Settings, tmp_path: Path
) -> None:
    """Every /api answer names the served bundle's build; a run's start, a resume and a
    generation sent by a page of another build are a 409 PageOutdated, nothing started; the same
    build, no header (the CLI, curl, an older bundle) and other writes go on as before; a rebuild
    under the running server is said at once."""
    dist = _dist(tmp_path, "b1")
    old = {"X-Lorastudio-Build": "b0"}
    with TestClient(create_app(settings, web_dist=dist), base_url=LOOPBACK) as client:
        assert client.get("/api/runs").headers["x-lorastudio-build"] == "b1"
        assert "x-lorastudio-build" not in client.get("/").headers  # the UI's files: not an answer of the API
        for path, body in [
            ("/api/train/start", {"config": {}}),
            ("/api/runs/r1/resume", {}),
            ("/api/generations", {"prompt": "x"}),
            ("/api/generate", {"prompt": "x"}),
        ]:
            refused = client.post(path, json=body, headers=old)
            assert refused.status_code == 409, (path, refused.text)
            assert refused.json()["error"] == "PageOutdated" and "Reload the page" in refused.json()["detail"]
            assert refused.headers["x-lorastudio-build"] == "b1"
            # the same build and no header reach the route (its own refusal of this body)
            for headers in ({"X-Lorastudio-Build": "b1"}, {}):
                passed = client.post(path, json=body, headers=headers)
                assert passed.json().get("error") != "PageOutdated", (path, passed.text)
        assert client.get("/api/train/status").json()["job"] is None  # nothing started
        # a write that carries no settings goes on (stopping a run from a stale tab works)
        stop = client.post("/api/train/stop", json={}, headers=old)
        assert stop.status_code == 404 and stop.json()["error"] == "NotFound"
        # rebuilt under the running server: the next answer names the new build
        (dist / "build-id.txt").write_text("b2-longer\n")
        os.utime(dist / "build-id.txt", ns=(1, 1))
        assert client.get("/api/runs").headers["x-lorastudio-build"] == "b2-longer"
        stale = client.post("/api/train/start", json={"config": {}}, headers={"X-Lorastudio-Build": "b1"})
        assert stale.status_code == 409


def test_an_answer_without_the_token_names_no_build(studio_home: Path, tmp_path: Path) -> None:
    """A 401 (the token missing) says nothing of the install, nor do the answers given before a
    route's token check, whatever token they carry (an unknown /api path's 404, a GET of a write
    route's 405: RELIABILITY 2231); the answers of a route the token let by do."""
    secured = Settings(home=studio_home, api_token="s3cret")
    with TestClient(create_app(secured, web_dist=_dist(tmp_path, "b1")), base_url=LOOPBACK) as client:
        refused = client.get("/api/runs")
        assert refused.status_code == 401 and "x-lorastudio-build" not in refused.headers
        for path, status in (("/api/no-such-route", 404), ("/api/train/start", 405)):
            for headers in ({}, {"Authorization": "Bearer wrong"}):  # answered before any token check
                early = client.get(path, headers=headers)
                assert early.status_code == status and "x-lorastudio-build" not in early.headers, path
        answer = client.get("/api/runs", headers={"Authorization": "Bearer s3cret"})
        assert answer.status_code == 200 and answer.headers["x-lorastudio-build"] == "b1"


def test_no_build_id_no_header_and_nothing_refused(settings: Settings, tmp_path: Path) -> None:
    """No UI, a build without an id, or a file that is not an id: no header, no refusal."""
    for dist in (tmp_path / "absent", _dist(tmp_path / "a", None), _dist(tmp_path / "b", "not an id\x00")):
        with TestClient(create_app(settings, web_dist=dist), base_url=LOOPBACK) as client:
            answer = client.get("/api/runs")
            assert "x-lorastudio-build" not in answer.headers
            start = client.post("/api/train/start", json={"config": {}}, headers={"X-Lorastudio-Build": "b0"})
            assert start.json().get("error") != "PageOutdated", start.text
