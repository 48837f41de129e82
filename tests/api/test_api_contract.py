"""The JSON API's answers against its own OpenAPI document, as a client author relies on it
(RELIABILITY 530-533): every route of the document is called with a valid request built from
fixtures and with requests it refuses, and each answer's status, media type and body must be
what the document declares (tests/api/openapi_check.py); every error answer is in the one
shape {"error", "detail", ...}; a query parameter a route does not take is refused."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from api_helpers import FINAL, LiveServer, upload_folder, wait_idle, wait_status
from fastapi.testclient import TestClient
from openapi_check import contract_problems
from PIL import Image

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings
from polling import until


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


class Walker:
    """Calls routes, checks each answer against the document, records the operations seen."""

    def __init__(self, client: TestClient):
        self.client = client
        self.doc = client.get("/openapi.json").json()
        self.seen: set[tuple[str, str]] = set()
        self.problems: list[str] = []

    def __call__(self, method: str, template: str, path: str | None = None, **kw: Any) -> Any:
        answer = self.client.request(method, path or template, **kw)
        self.seen.add((method.lower(), template))
        self.problems += contract_problems(self.doc, method, template, answer)
        return answer

    def unseen(self) -> list[str]:
        return sorted(
            f"{m.upper()} {p}" for p, ops in self.doc["paths"].items() for m in ops if (m, p) not in self.seen
        )


def test_every_route_answers_as_its_openapi_declares(
    client: TestClient, tiny_model: Callable[[str], Path]
) -> None:
    """Each operation of /openapi.json at least once; success and error answers checked (530-532)."""
    call = Walker(client)
    files = [
        f
        for i in range(3)
        for f in (("files", (f"a{i}.png", _png())), ("files", (f"a{i}.txt", b"a red square")))
    ]
    assert (
        call("POST", "/api/datasets/{name}/files", "/api/datasets/ds/files", files=files).status_code == 201
    )
    call(
        "POST",
        "/api/datasets/{name}/files",
        "/api/datasets/ds/files",
        files=[("files", ("x.png", b"junk"))],
        params={"strict": "true"},
    )
    call("GET", "/api/datasets")
    call("GET", "/api/datasets/{name}", "/api/datasets/ds")
    call("GET", "/api/datasets/{name}", "/api/datasets/ds", params={"offset": "x"})
    call("GET", "/api/datasets/{name}", "/api/datasets/nope")
    assert (
        call(
            "GET", "/api/datasets/{name}/thumbnails/{file}", "/api/datasets/ds/thumbnails/a0.png"
        ).status_code
        == 200
    )
    call("GET", "/api/datasets/{name}/masks/{file}", "/api/datasets/ds/masks/a0.png")
    call("GET", "/api/datasets/{name}/alpha/{file}", "/api/datasets/ds/alpha/a0.png")
    caption = "/api/datasets/{name}/captions/{file}"
    assert (
        call("PUT", caption, "/api/datasets/ds/captions/a0.png", json={"caption": "new"}).status_code == 200
    )
    stale = call("PUT", caption, "/api/datasets/ds/captions/a0.png", json={"caption": "x", "expected": "old"})
    assert stale.status_code == 409 and stale.json()["current"] == "new"
    call(
        "PUT",
        caption,
        "/api/datasets/ds/captions/a0.png",
        content=b"{}",
        headers={"content-type": "text/plain"},
    )
    call(
        "POST",
        "/api/datasets/{name}/captions",
        "/api/datasets/ds/captions",
        json={"find": "red", "replace": "blue", "dry_run": True},
    )
    call("DELETE", "/api/datasets/{name}/images/{file}", "/api/datasets/ds/images/a2.png")
    call("POST", "/api/datasets/{name}/rename", "/api/datasets/ds/rename", json={"to": "ds2"})
    call("POST", "/api/datasets/{name}/rename", "/api/datasets/ds2/rename", json={"to": "ds"})
    call("POST", "/api/datasets/{name}/caption", "/api/datasets/ds/caption", json={"model": "/nonexistent"})
    call("GET", "/api/datasets/{name}/caption", "/api/datasets/ds/caption")
    call("GET", "/api/captions")
    call("GET", "/api/captions/{job_id}", "/api/captions/abc")
    call("POST", "/api/captions/{job_id}/cancel", "/api/captions/abc/cancel")
    config = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": "ds",
        "resolution": 32,
        "steps": 2,
    }
    assert call("POST", "/api/train/preflight", json={"config": config}).status_code == 200
    call("POST", "/api/train/preflight", json={"config": {**config, "steps": -1, "nokey": 1}})
    call("POST", "/api/train/start", json={"config": {**config, "steps": 0}})
    job = (Path(__file__).resolve().parents[1] / "data" / "peer_configs" / "ai-toolkit_flux.yaml").read_text(
        "utf-8"
    )
    assert call("POST", "/api/config/import", json={"name": "job.yaml", "text": job}).status_code == 200
    call("POST", "/api/config/import", json={"name": "job.ini", "text": "a = 1"})
    call("POST", "/api/train/stop", json={})
    call("GET", "/api/train/status")
    call("GET", "/api/train/status", params={"since": "x"})
    for run_route in ("", "/checkpoints", "/loras", "/samples", "/samples/a.png", "/config", "/log"):
        call("GET", "/api/runs/{run_id}" + run_route.replace("a.png", "{name}"), f"/api/runs/abc{run_route}")
    call("POST", "/api/runs/{run_id}/resume", "/api/runs/abc/resume", json={})
    call("DELETE", "/api/runs/{run_id}", "/api/runs/abc")
    call("GET", "/api/runs")
    call("GET", "/api/loras")
    call("GET", "/api/loras/{name}/steps", "/api/loras/x/steps")
    call("GET", "/api/loras/{name}/file", "/api/loras/x/file")
    call("GET", "/api/loras/{name}/sidecar", "/api/loras/x/sidecar")
    call("POST", "/api/loras/{name}/push", "/api/loras/x/push", json={"repo": "a/b"})
    call("POST", "/api/generate", json={"prompt": "x", "width": 70})
    call("POST", "/api/generate/{request_id}/cancel", "/api/generate/abc/cancel")
    call("POST", "/api/generations", json={"prompt": "x", "width": 70})
    call("GET", "/api/generations/{request_id}", "/api/generations/abc")
    call("POST", "/api/generations/{request_id}/cancel", "/api/generations/abc/cancel")
    refs = call("POST", "/api/generate/references", files=[("files", ("r.png", _png()))])
    ref = refs.json()["references"][0]["id"]
    assert call("GET", "/gallery/references/{ref_id}", f"/gallery/references/{ref}").status_code == 200
    ranged = call(
        "GET", "/gallery/references/{ref_id}", f"/gallery/references/{ref}", headers={"range": "bytes=0-9"}
    )
    assert ranged.status_code == 206
    call(
        "GET", "/gallery/references/{ref_id}", f"/gallery/references/{ref}", headers={"range": "bytes=99999-"}
    )
    call("GET", "/api/gallery")
    call("GET", "/gallery/{file}", "/gallery/none.png")
    call("DELETE", "/api/gallery/{file}", "/api/gallery/none.png")
    call("GET", "/api/info")
    call("GET", "/api/models")
    call("GET", "/api/models/fetch")
    call("POST", "/api/models/fetch", json={"repo_id": "a/b"})
    call("GET", "/api/models/fetch/{fetch_id}", "/api/models/fetch/abc")
    call("POST", "/api/models/fetch/{fetch_id}/cancel", "/api/models/fetch/abc/cancel")
    call("POST", "/api/models/added", json={"path": "/nonexistent"})
    call("DELETE", "/api/models/added/{model_id}", "/api/models/added/abc")
    call("GET", "/api/models/{model_id}", "/api/models/abc")
    call("DELETE", "/api/models/{model_id}", "/api/models/abc")
    call("GET", "/api/cache")
    call("POST", "/api/cache/prune", params={"max_gb": 1})
    call("DELETE", "/api/cache")
    call("DELETE", "/api/datasets/{name}", "/api/datasets/ds")
    call("GET", "/api/datasets", params={"limt": 1})
    call("POST", "/api/session")
    call("DELETE", "/api/session")
    for stream in ("/api/train/events", "/api/captions/events", "/api/models/events"):
        call("HEAD", stream)  # the stream's headers alone (HeadAsGet)
        call("GET", stream, params={"after": "x"})
    assert call.problems == []
    assert call.unseen() == [], "routes of the document this test does not call"


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "error"),
    [
        ("PUT", "/api/datasets", {}, 405, "MethodNotAllowed"),
        ("POST", "/api/info", {}, 405, "MethodNotAllowed"),
        ("GET", "/api/nothing", {}, 404, "NotFound"),
        ("GET", "/api/runs", {"params": {"limit": "x"}}, 422, "RequestValidationError"),
        (
            "POST",
            "/api/train/stop",
            {"content": b"{", "headers": {"content-type": "application/json"}},
            422,
            "RequestValidationError",
        ),
        (
            "POST",
            "/api/train/stop",
            {"content": b"{}", "headers": {"content-type": "text/plain"}},
            415,
            "UnsupportedMediaType",
        ),
    ],
)
def test_http_refusals_have_the_error_shape(
    client: TestClient, method: str, path: str, kw: dict, status: int, error: str
) -> None:
    """Starlette's and FastAPI's own refusals are {"error", "detail"} like a domain error (530)."""
    answer = client.request(method, path, **kw)
    assert answer.status_code == status
    assert answer.json()["error"] == error, answer.text
    assert isinstance(answer.json()["detail"], list if status == 422 else str), answer.text
    if status == 405:
        assert answer.headers["allow"] == "GET, HEAD"


def test_a_wrong_token_is_refused_in_the_error_shape(studio_home: Path) -> None:
    """401 with WWW-Authenticate and the error shape the document declares (530)."""
    app = create_app(Settings(home=studio_home, api_token="s3cret"))
    with TestClient(app, base_url=LOOPBACK) as client:
        answer = client.get("/api/info", headers={"authorization": "Bearer wrong"})
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert answer.json() == {"error": "Unauthorized", "detail": "missing or wrong API token"}
        doc = client.get("/openapi.json", headers={"authorization": "Bearer s3cret"}).json()
        assert contract_problems(doc, "GET", "/api/info", answer) == []


def test_a_query_parameter_a_route_does_not_take_is_refused(client: TestClient) -> None:
    """`?limt=` (a typo) was ignored: the whole listing answered (533). `token` is always taken."""
    typo = client.get("/api/runs", params={"limt": 1, "also": "x"})
    assert typo.status_code == 422 and typo.json()["error"] == "RequestValidationError"
    assert [(e["type"], e["loc"]) for e in typo.json()["detail"]] == [
        ("unknown_parameter", ["query", "also"]),
        ("unknown_parameter", ["query", "limt"]),
    ]
    assert client.get("/api/runs", params={"limit": 1, "token": "x"}).status_code == 200
    assert client.post("/api/train/stop", params={"save": "false"}, json={}).status_code == 422


@pytest.mark.parametrize("with_ui", [False, True])
def test_a_method_a_path_does_not_take_is_405_naming_every_method_it_takes(
    studio_home: Path, tmp_path: Path, with_ui: bool
) -> None:
    """With the UI built, its mount at "/" answered the server's paths' other methods (404 or
    `Allow: GET, HEAD`), and Allow named one route's methods, never HEAD (534, 535)."""
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("<!doctype html><title>ui</title>")
    app = create_app(Settings(home=studio_home), web_dist=web if with_ui else tmp_path / "none")
    with TestClient(app, base_url=LOOPBACK, follow_redirects=False) as client:
        for method, path, allow in [
            ("GET", "/api/train/stop", "POST"),
            ("HEAD", "/api/train/stop", "POST"),
            ("PATCH", "/api/runs/abc", "DELETE, GET, HEAD"),
            ("POST", "/api/datasets", "GET, HEAD"),
            ("PUT", "/gallery/x.png", "GET, HEAD"),
            ("DELETE", "/api/datasets/ds/files", "POST"),
        ]:
            answer = client.request(method, path)
            assert (answer.status_code, answer.headers.get("allow")) == (405, allow), (
                method,
                path,
                answer.text,
            )
        assert client.get("/api/runs/").headers.get("location", "").endswith("/api/runs")
        assert client.get("/api/nothing").json()["error"] == "NotFound"
        assert (client.get("/").status_code == 200) is with_ui


def test_a_body_a_route_does_not_take_is_refused(client: TestClient) -> None:
    """`DELETE /api/runs/ID` with `{"keep_files": true}` deleted the files (the body was ignored),
    and a gzip-encoded JSON body was parsed as its compressed bytes (538)."""
    keep = client.request("DELETE", "/api/runs/abc", json={"keep_files": True})
    assert keep.status_code == 422, keep.text
    assert keep.json()["detail"][0]["type"] == "unexpected_body"
    assert "keep_files" in keep.json()["detail"][0]["msg"]
    assert client.post("/api/captions/abc/cancel", content=b"x=1").status_code == 422
    assert (
        client.post("/api/models/fetch/abc/cancel", json={}).status_code == 404
    )  # the web UI's empty object
    assert client.request("DELETE", "/api/runs/abc").status_code == 404
    gzipped = client.post("/api/train/stop", json={}, headers={"content-encoding": "gzip"})
    assert gzipped.status_code == 415 and gzipped.json()["error"] == "UnsupportedMediaType"


def test_the_upload_routes_declare_their_multipart_body(client: TestClient) -> None:
    """They read the upload themselves, so the document said they take no body (538)."""
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/datasets/{name}/files", "/api/generate/references"):
        body = paths[path]["post"]["requestBody"]
        assert body["required"] and "multipart/form-data" in body["content"], path


@pytest.mark.slow
def test_a_real_runs_answers_are_as_declared(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    """The success answers a fresh home cannot give (a run's detail, checkpoints, samples, LoRA
    file and steps, a resume, a stop, a generation and its gallery image), from one real tiny
    FLUX.1 run on a live server, each checked against the document (531, 532)."""
    call = Walker(server.client)  # type: ignore[arg-type]
    assert upload_folder(server.client, "shapes", sample_dataset).status_code == 201
    config = flux_config(sample_prompts=["a red circle"], sample_every=2, sample_steps=1, save_every=2)
    started = call("POST", "/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    call("GET", "/api/train/status")
    assert (
        call(
            "POST", "/api/train/start", json={"config": {**config, "output_name": "other"}, "queue": False}
        ).status_code
        == 409
    )
    assert wait_status(server.client, run_id, FINAL)["status"] == "completed"
    wait_idle(server.client)
    call("GET", "/api/train/status")
    call("GET", "/api/runs")
    for route in ("", "/checkpoints", "/loras", "/samples", "/log"):
        assert call("GET", "/api/runs/{run_id}" + route, f"/api/runs/{run_id}{route}").status_code == 200, (
            route
        )
    for fmt in ("json", "toml"):
        call("GET", "/api/runs/{run_id}/config", f"/api/runs/{run_id}/config", params={"format": fmt})
    sample = server.client.get(f"/api/runs/{run_id}/samples").json()["samples"][0]["name"]
    png = call("GET", "/api/runs/{run_id}/samples/{name}", f"/api/runs/{run_id}/samples/{sample}")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    lora = call("GET", "/api/loras").json()["loras"][0]["name"]
    call("GET", "/api/loras/{name}/steps", f"/api/loras/{lora}/steps")
    assert call("GET", "/api/loras/{name}/file", f"/api/loras/{lora}/file").status_code == 200
    assert call("GET", "/api/loras/{name}/sidecar", f"/api/loras/{lora}/sidecar").status_code == 200
    image = call("POST", "/api/generate", json={**_generation(config), "loras": [{"name": lora}]})
    assert image.status_code == 201, image.text
    file = image.json()["file"]
    sent = call("POST", "/api/generations", json={**_generation(config), "request_id": "async-1"})
    assert sent.status_code == 202, sent.text
    until(
        lambda: (
            call("GET", "/api/generations/{request_id}", "/api/generations/async-1").json()["state"] == "done"
        ),
        60,
        "the asynchronous generation done",
    )
    call("POST", "/api/generations/{request_id}/cancel", "/api/generations/async-1/cancel")  # 404: ended
    call("GET", "/api/gallery")
    assert call("GET", "/gallery/{file}", f"/gallery/{file}").status_code == 200
    assert call("DELETE", "/api/gallery/{file}", f"/api/gallery/{file}").status_code == 200
    resumed = call(
        "POST", "/api/runs/{run_id}/resume", f"/api/runs/{run_id}/resume", json={"settings": {"steps": 40}}
    )
    assert resumed.status_code == 201, resumed.text
    assert call("POST", "/api/train/stop", json={"save": False}).status_code == 200
    wait_status(server.client, resumed.json()["id"], FINAL)
    wait_idle(server.client)
    assert call("DELETE", "/api/runs/{run_id}", f"/api/runs/{run_id}").status_code == 200
    assert call.problems == []


def _generation(config: dict) -> dict:
    return {
        "family": "flux",
        "base_model": config["base_model"],
        "prompt": "x",
        "steps": 1,
        "width": 32,
        "height": 32,
    }


@pytest.mark.slow
def test_a_caption_jobs_answers_are_as_declared(
    server: LiveServer, sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A caption job with the tiny captioner (202, its record while it runs and once it ended,
    the dataset's job, the listing, a cancel after its end), each checked against the document."""
    from lorastudio.tiny.vlm import save_tiny_vlm

    vlm = save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-vlm")
    call = Walker(server.client)  # type: ignore[arg-type]
    assert upload_folder(server.client, "shapes", sample_dataset).status_code == 201
    body = {"model": str(vlm), "max_tokens": 4, "overwrite": True}
    started = call("POST", "/api/datasets/{name}/caption", "/api/datasets/shapes/caption", json=body)
    assert started.status_code == 202, started.text
    job = started.json()["id"]
    call("GET", "/api/captions/{job_id}", f"/api/captions/{job}")
    call("GET", "/api/datasets/{name}/caption", "/api/datasets/shapes/caption")
    final = until(
        lambda: (r := server.client.get(f"/api/captions/{job}").json())["status"] != "running" and r,
        120,
        "the caption job's end",
    )
    assert final["status"] == "completed", final
    call("GET", "/api/captions/{job_id}", f"/api/captions/{job}")
    call("GET", "/api/captions")
    call("POST", "/api/captions/{job_id}/cancel", f"/api/captions/{job}/cancel")
    assert call.problems == []
