"""Every error status the OpenAPI document declares on a route is one the route answers: each is
provoked here by a request, in process on the tiny fixtures (RELIABILITY 1690; the document had
400, 404, 409 and 507 on every route, `GET /api/info` answering none of them), and each answer
got here is declared (test_api_contract.py checks the answers of every route's usual calls).

The statuses of a route's kind (401, 403, 404 of a path parameter, 413, 415, 421, 422, 416) are
provoked on every route from its template; a route's own (api/route_errors.py) by a table of
requests, some while a training job is live (it waits for the GPU a generation holds: no worker
starts) or while every `writing` block fails with the kernel's ENOSPC / EFBIG. SLOW_PROVOKED names
each declared status test_api_declared_statuses_slow.py provokes (a spawned worker, a real run);
UNPROVOKED each that no test produces, and what does (none since RELIABILITY 1870)."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import FINAL, wait_idle, wait_status
from fastapi.testclient import TestClient
from huggingface_hub import constants as hf_constants
from PIL import Image
from status_conditions import decode_slots_busy, failing_writes
from status_stand_ins import cheap_stand_ins, fake_hub_fetches, server_stopping

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.api.sse_slots import StreamSlots
from lorastudio.jobs import gallery
from lorastudio.settings import Settings

Seen = set[tuple[str, str, int]]

# (method, path, status): declared, but produced only by what no test here can have, and what does
UNPROVOKED: dict[tuple[str, str, int], str] = {}
# (method, path, status): provoked by test_api_declared_statuses_slow.py (a spawned generation
# worker that hangs past a lowered allowance; a real run's checkpoint, its resume's writes refused)
GEN, RESUME = "/api/generate", "/api/runs/{run_id}/resume"
SLOW_PROVOKED: dict[tuple[str, str, int], str] = {
    ("POST", GEN, 504): "a stand-in generation worker hung past a lowered allowance",
    ("POST", RESUME, 500): "a real run's checkpoint, its resume's writes refused (EFBIG)",
    ("POST", RESUME, 507): "a real run's checkpoint, its resume's disk full (ENOSPC)",
}


CAPTION = "/api/datasets/{name}/captions/{file}"
BODIES = {  # a valid body of a route that reads one before its path's names
    ("PUT", "/api/datasets/{name}/captions/{file}"): {"caption": "x"},
    ("POST", "/api/datasets/{name}/captions"): {"find": "a"},
}


def _png(size: int = 32, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (size, size), (200, 10, 10, 128)[: len(mode)]).save(buf, format="PNG")
    return buf.getvalue()


def _concrete(template: str) -> str:
    return template.replace("{", "").replace("}", "")  # /api/runs/{run_id} -> /api/runs/run_id


def _routes(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


def _declared(doc: dict[str, Any], least: int = 300) -> Seen:
    return {(m, p, int(s)) for m, p, op in _routes(doc) for s in op["responses"] if int(s) >= least}


class Prober:
    """Sends requests, records (method, template, status) of each answer."""

    def __init__(self, client: TestClient, seen: Seen):
        self.client, self.seen = client, seen

    def __call__(self, method: str, template: str, path: str | None = None, **kw: Any) -> Any:
        answer = self.client.request(method, path or _concrete(template), **kw)
        self.seen.add((method, template, answer.status_code))
        return answer


def _kind_statuses(call: Prober, doc: dict[str, Any]) -> None:
    """421, 403 (a proxy; another origin), 422, 413, 415 on every route they apply to."""
    big = b"[" + b"0," * (1024 * 1024) + b"0]"  # past max_json_mb = 1
    for method, template, op in _routes(doc):
        call(method, template, headers={"host": "evil.example"})
        call(method, template, headers={"x-forwarded-for": "203.0.113.9"})
        call(method, template, params={"not_a_parameter": "1"})
        if method != "GET":
            call(method, template, headers={"origin": "https://evil.example"})
            call(method, template, content=big, headers={"content-type": "application/json"})
        if "415" in op["responses"]:
            call(method, template, content=b"{}", headers={"content-type": "text/plain"})
        if "{" in template:  # an encoded separator (404); a name the studio refuses (400 where named)
            body = BODIES.get((method, template), {}) if "415" in op["responses"] else None
            for value in ("a%5Cb", "%20a"):
                call(method, template, re.sub(r"\{[^}]+\}", value, template), json=body)
    over = [("files", ("big.png", b"\0" * (1024 * 1024 + 1)))]  # past max_upload_mb = 1
    call("POST", "/api/datasets/{name}/files", files=over)
    call("POST", "/api/generate/references", files=over)


@pytest.fixture
def home_client(studio_home: Path) -> Iterator[TestClient]:
    with TestClient(
        create_app(Settings(home=studio_home, max_json_mb=1, max_upload_mb=1)), base_url=LOOPBACK
    ) as client:
        yield client


def test_every_declared_status_of_every_route_is_provoked(
    home_client: TestClient,
    studio_home: Path,
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Each (route, declared status >= 300) of /openapi.json is answered to a request here, but
    the UNPROVOKED few (each saying what produces it)."""
    client = home_client
    monkeypatch.delenv("HF_TOKEN", raising=False)  # no hub login of this machine's user: a push is 400
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))
    doc = client.get("/openapi.json").json()
    seen: Seen = set()
    call = Prober(client, seen)
    _kind_statuses(call, doc)
    with TestClient(
        create_app(Settings(home=tmp_path / "gated", api_token="s3cret")), base_url=LOOPBACK
    ) as gated:
        for method, template, _ in _routes(doc):
            Prober(gated, seen)(method, template)
    base = shutil.copytree(
        tiny_model("flux"), studio_home / "models" / "tiny-flux"
    )  # lorastudio's: deletable
    model = next(m["id"] for m in client.get("/api/models").json() if Path(m["path"]) == base)
    config = {
        "family": "flux",
        "base_model": str(base),
        "data_dir": "ds",
        "resolution": 32,
        "steps": 2,
    }
    _fixtures(call, studio_home)
    _own_statuses(call, config)
    _full_stream_slots(call, client)
    with decode_slots_busy(monkeypatch):
        for kind, file in (("thumbnails", "a.png"), ("masks", "a.png"), ("alpha", "e.png")):
            call("GET", f"/api/datasets/{{name}}/{kind}/{{file}}", f"/api/datasets/ds/{kind}/{file}")
    run = _live_job(call, client, config, model, tmp_path / "captioner")
    sample = studio_home / "outputs" / client.get(f"/api/runs/{run}").json()["output_name"] / "samples"
    sample.mkdir(parents=True)
    (sample / "step-000001-0.png").write_bytes(_png())
    past = {"range": "bytes=999999-"}
    call(
        "GET", "/api/runs/{run_id}/samples/{name}", f"/api/runs/{run}/samples/step-000001-0.png", headers=past
    )
    refs = client.post("/api/generate/references", files=[("files", ("r.png", _png()))]).json()
    ref = refs["references"][0]["id"]
    call("GET", "/gallery/references/{ref_id}", f"/gallery/references/{ref}", headers=past)
    call("GET", "/gallery/{file}", "/gallery/g.png", headers=past)
    call("GET", "/api/loras/{name}/file", "/api/loras/lo/file", headers=past)
    call("GET", "/api/loras/{name}/sidecar", "/api/loras/lo/sidecar", headers=past)
    cheap_stand_ins(call, client, studio_home, run, monkeypatch)  # tests/api/status_stand_ins.py
    fake_hub_fetches(call, client, tiny_model("flux"), tmp_path, monkeypatch)
    _write_failures(call, client, run, model, tmp_path, monkeypatch)
    server_stopping(call, client, str(base))  # the last: a generation service that stops stays stopped
    unprovoked = _declared(doc) - seen - set(UNPROVOKED) - set(SLOW_PROVOKED)
    assert sorted(unprovoked) == [], f"declared statuses no request here produced: {sorted(unprovoked)}"
    assert sorted(seen - _declared(doc, 0)) == [], "answers the document does not declare"
    assert sorted(set(UNPROVOKED) & seen) == [], "UNPROVOKED entries that are provoked: remove them"
    assert sorted(set(UNPROVOKED) - _declared(doc)) == [], "UNPROVOKED entries no longer declared"
    assert sorted(set(SLOW_PROVOKED) & seen) == [], "SLOW_PROVOKED entries provoked here: remove them"
    assert sorted(set(SLOW_PROVOKED) - _declared(doc)) == [], "SLOW_PROVOKED entries no longer declared"


def _fixtures(call: Prober, home: Path) -> None:
    """Dataset `ds` (a.png with its mask, b.png, e.png with alpha, each captioned), gallery image
    g.png, LoRA `lo` (a file copied in by hand)."""
    files = [("files", (f"{n}.png", _png(mode="RGBA" if n == "e" else "RGB"))) for n in "abe"]
    files += [("files", (f"{n}.txt", b"red")) for n in "abe"]
    for upload in (files, [("mask", ("a.png", _png(mode="L")))]):
        answer = call("POST", "/api/datasets/{name}/files", "/api/datasets/ds/files", files=upload)
        assert answer.status_code == 201 and not answer.json()["refused"], answer.text
    (home / "gallery").mkdir(exist_ok=True)
    (home / "gallery" / "g.png").write_bytes(_png())
    (home / "outputs" / "lo").mkdir(parents=True)
    (home / "outputs" / "lo" / "lo.safetensors").write_bytes(b"\0" * 64)
    (home / "outputs" / "lo" / "lo.json").write_text('{"family": "flux"}')


def _own_statuses(call: Prober, config: dict) -> None:
    """Each route's own 400 / 404 / 409 (api/route_errors.py) that needs no live job."""
    bad = [("files", ("x.png", b"junk"))]
    call("POST", "/api/datasets/{name}/files", "/api/datasets/ds/files", files=bad, params={"strict": "true"})
    call("POST", "/api/generate/references", files=bad)
    call("POST", "/api/datasets/{name}/rename", "/api/datasets/nope/rename", json={"to": "x"})
    call("POST", "/api/datasets/{name}/rename", "/api/datasets/ds/rename", json={"to": "../x"})
    call("POST", "/api/datasets/{name}/caption", "/api/datasets/nope/caption", json={"model": "/nonexistent"})
    call("POST", "/api/datasets/{name}/caption", "/api/datasets/ds/caption", json={"model": "/nonexistent"})
    call(
        "PUT",
        "/api/datasets/{name}/captions/{file}",
        "/api/datasets/ds/captions/none.png",
        json={"caption": "x"},
    )
    stale = {"caption": "x", "expected": "old"}
    call("PUT", "/api/datasets/{name}/captions/{file}", "/api/datasets/ds/captions/a.png", json=stale)
    call("POST", "/api/datasets/{name}/captions", "/api/datasets/nope/captions", json={"find": "a"})
    call("POST", "/api/config/import", json={"name": "job.ini", "text": "a = 1"})
    call("DELETE", "/api/cache", params={"model": "nope"})
    call("POST", "/api/loras/{name}/push", json={"repo": "a/b"})
    pushed = call("POST", "/api/loras/{name}/push", "/api/loras/lo/push", json={"repo": "a/b"})
    assert pushed.json()["error"] == "HubTokenMissing", pushed.text
    call("POST", "/api/models/fetch", json={"repo_id": "not a repo"})
    call("POST", "/api/models/added", json={"path": "relative"})
    for template in ("/api/train/start", "/api/train/preflight"):
        call("POST", template, json={"config": {**config, "steps": -1}})
    gen = {"family": "flux", "base_model": config["base_model"], "prompt": "x"}
    for template in ("/api/generate", "/api/generations"):
        call("POST", template, json={**gen, "width": 4096, "height": 4096})
        call("POST", template, json={**gen, "loras": [{"name": "nope"}]})
    for method, template in [
        ("GET", "/api/datasets/{name}"),
        ("DELETE", "/api/datasets/{name}"),
        ("DELETE", "/api/datasets/{name}/images/{file}"),
        ("GET", "/api/datasets/{name}/thumbnails/{file}"),
        ("GET", "/api/datasets/{name}/masks/{file}"),
        ("GET", "/api/datasets/{name}/alpha/{file}"),
        ("GET", "/api/datasets/{name}/caption"),
        ("GET", "/api/runs/{run_id}"),
        ("GET", "/api/runs/{run_id}/checkpoints"),
        ("GET", "/api/runs/{run_id}/loras"),
        ("GET", "/api/runs/{run_id}/samples"),
        ("GET", "/api/runs/{run_id}/samples/{name}"),
        ("GET", "/api/runs/{run_id}/config"),
        ("GET", "/api/runs/{run_id}/log"),
        ("GET", "/api/captions/{job_id}"),
        ("GET", "/api/loras/{name}/steps"),
        ("GET", "/api/loras/{name}/file"),
        ("GET", "/gallery/references/{ref_id}"),
        ("GET", "/gallery/{file}"),
        ("GET", "/api/generations/{request_id}"),
        ("GET", "/api/models/fetch/{fetch_id}"),
        ("GET", "/api/models/{model_id}"),
        ("POST", "/api/captions/{job_id}/cancel"),
        ("POST", "/api/generate/{request_id}/cancel"),
        ("POST", "/api/generations/{request_id}/cancel"),
        ("POST", "/api/models/fetch/{fetch_id}/cancel"),
        ("DELETE", "/api/models/added/{model_id}"),
        ("DELETE", "/api/models/{model_id}"),
        ("DELETE", "/api/gallery/{file}"),
        ("DELETE", "/api/runs/{run_id}"),
        ("POST", "/api/runs/{run_id}/resume"),
    ]:
        call(method, template, json={} if method == "POST" and template.endswith("resume") else None)
    call("POST", "/api/train/stop", json={})


def _full_stream_slots(call: Prober, client: TestClient) -> None:
    """The event streams' 429 (this client's cap) and 503 (the server's) from full slots (1770):
    refused before any stream opens, so TestClient answers them (an open stream it would not)."""
    for per_client, total in ((0, 1), (1, 0)):
        client.app.state.sse_slots = StreamSlots(per_client, total)
        for kind in ("train", "models", "captions"):
            call("GET", f"/api/{kind}/events")
    client.app.state.sse_slots = StreamSlots()


def _live_job(call: Prober, client: TestClient, config: dict, model: str, captioner: Path) -> str:
    """The 409s of a live training job; its id once it ended. The job waits for the GPU (a
    generation holds it: jobs/gpu.py), so no worker starts: it is live, training on `ds`."""
    with client.app.state.arbiter.generation():  # type: ignore[attr-defined]
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        run = started.json()["id"]
        call("POST", "/api/train/start", json={"config": config, "queue": False})
        name = started.json()["output_name"]
        call("POST", "/api/loras/{name}/push", f"/api/loras/{name}/push", json={"repo": "a/b"})
        call("DELETE", "/api/runs/{run_id}", f"/api/runs/{run}")
        call("POST", "/api/runs/{run_id}/resume", f"/api/runs/{run}/resume", json={"queue": False})
        call("DELETE", "/api/datasets/{name}", "/api/datasets/ds")
        call("POST", "/api/datasets/{name}/rename", "/api/datasets/ds/rename", json={"to": "ds3"})
        call(
            "POST",
            "/api/datasets/{name}/files",
            "/api/datasets/ds/files",
            files=[("files", ("d.png", _png()))],
        )
        call(
            "PUT",
            "/api/datasets/{name}/captions/{file}",
            "/api/datasets/ds/captions/a.png",
            json={"caption": "z"},
        )
        call(
            "POST",
            "/api/datasets/{name}/captions",
            "/api/datasets/ds/captions",
            json={"find": "red", "replace": "r"},
        )
        call("DELETE", "/api/datasets/{name}/images/{file}", "/api/datasets/ds/images/a.png")
        call("DELETE", "/api/cache")
        call("DELETE", "/api/models/{model_id}", f"/api/models/{model}")  # the job's base model
        captioner.mkdir()  # a captioner's folder: refused for the job before its weights are read
        (captioner / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
        call(
            "POST", "/api/datasets/{name}/caption", "/api/datasets/ds/caption", json={"model": str(captioner)}
        )
        gen = {"family": "flux", "base_model": config["base_model"], "prompt": "x", "width": 32, "height": 32}
        gen["steps"] = 20  # not the family's 28 (RELIABILITY 1820): the suite's time
        call("POST", "/api/generate", json=gen)
        call("POST", "/api/generations", json=gen)
        assert client.post("/api/train/stop", json={"save": True}).status_code == 200
        call("POST", "/api/train/stop", json={"save": False})
    wait_status(client, run, FINAL)
    wait_idle(client)
    return run


def _write_failures(
    call: Prober, client: TestClient, run: str, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """507 and 500 of each route that writes, from a request that reaches its write."""
    added = client.post("/api/models/added", json={"path": str(tmp_path)})
    assert added.status_code == 201, added.text
    (tmp_path / "other").mkdir()
    config = {k: v for k, v in client.get(f"/api/runs/{run}/config").json().items() if k != "output_name"}
    gen = {"family": "flux", "base_model": config["base_model"], "prompt": "x", "width": 32, "height": 32}
    gen["steps"] = 1
    for code in (errno.ENOSPC, errno.EFBIG):
        with failing_writes(monkeypatch, code):
            files, caption, bulk = "/api/datasets/{name}/files", CAPTION, "/api/datasets/{name}/captions"
            call("POST", files, "/api/datasets/ds/files", files=[("files", ("c.png", _png()))])
            call("PUT", caption, "/api/datasets/ds/captions/a.png", json={"caption": "y"})
            call("POST", bulk, "/api/datasets/ds/captions", json={"find": "red", "replace": "r"})
            call("DELETE", "/api/datasets/{name}/images/{file}", "/api/datasets/ds/images/b.png")
            call("POST", "/api/datasets/{name}/rename", "/api/datasets/ds/rename", json={"to": "ds2"})
            call("DELETE", "/api/datasets/{name}", "/api/datasets/ds")
            call("POST", "/api/generate/references", files=[("files", ("r.png", _png()))])
            call("POST", "/api/models/added", json={"path": str(tmp_path / "other")})
            call("DELETE", "/api/models/added/{model_id}", f"/api/models/added/{added.json()['id']}")
            call("POST", "/api/train/start", json={"config": config})
            # the gallery folder's write refused: 507 (ENOSPC) / 500 WriteFailed, before any worker
            call("POST", GEN, json=gen)
            call("DELETE", "/api/runs/{run_id}", f"/api/runs/{run}")
            call("DELETE", "/api/models/{model_id}", f"/api/models/{model}")
    with monkeypatch.context() as patch:  # a read-only gallery folder (root writes through a chmod)
        patch.setattr(gallery.os, "rename", _refused_rename)
        call("DELETE", "/api/gallery/{file}", "/api/gallery/g.png")


def _refused_rename(src: object, dst: object) -> None:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src))
