"""/api/models and `lorastudio models` on a real uvicorn server, fetching with the real
huggingface_hub client from the fake hub of tests/unit/basemodels on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import typer
from api_helpers import LiveServer
from pydantic import SecretStr
from typer.testing import CliRunner

from lorastudio.errors import ModelAccessDenied
from lorastudio.settings import Settings, get_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "basemodels"))
from fake_hub import FakeHub, FakeHubServer, FakeRepo, flux_repo_files  # noqa: E402

from zygote import START_ENV  # noqa: E402  (tests/zygote.py: the environment its workers' imports read)

SECRET = "hf_api_secret_not_valid_on_the_hub_42"  # the studio's token: the fake hub accepts another
ENTRY_KEYS = {"id", "name", "source", "path", "family", "trainable", "reason", "size_bytes", "complete",
              "missing", "deletable", "checkpoint", "distilled", "kind", "repo_id", "licence"}  # fmt: skip


@pytest.fixture
def settings(studio_home: Path) -> Settings:
    """The served studio's settings with the hub token (the CLI's test sets its variable: a
    worker of a server test then forks from the preloaded zygote, tests/zygote.py)."""
    return Settings(home=studio_home, hf_token=SecretStr(SECRET))


@pytest.fixture
def hub(
    tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[FakeHub]:
    from huggingface_hub import constants

    fake = FakeHub(token="hf_the_hub_wants_this_one")
    fake.repos["acme/flux"] = FakeRepo(flux_repo_files(tiny_model("flux")))
    fake.repos["acme/gated"] = FakeRepo(dict(fake.repos["acme/flux"].files), gated=True)
    with FakeHubServer(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield fake


def _hub_environment_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_ENDPOINT and HF_HUB_CACHE back to the test process's start, once the fetches are done
    and before a job's worker loads the fetched folder from models/ (no hub call): the worker is
    then forked from the preloaded zygote, whose huggingface_hub read them at its import (a real
    spawn otherwise, ~6 CPU s of imports; tests/unit/test_zygote.py proves that a worker gets
    one when these differ)."""
    for name in ("HF_ENDPOINT", "HF_HUB_CACHE"):
        if name in START_ENV:
            monkeypatch.setenv(name, START_ENV[name])
        else:
            monkeypatch.delenv(name, raising=False)


def _wait_fetch(client: httpx.Client, fetch_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fetch = client.get(f"/api/models/fetch/{fetch_id}").json()
        if fetch["status"] != "running":
            return fetch
        time.sleep(0.05)
    raise AssertionError(f"fetch {fetch_id} still running after {timeout}s")


def _fetch_events(client: httpx.Client) -> list[dict]:
    events: list[dict] = []
    with client.stream("GET", "/api/models/events", params={"after": 0}, timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] in ("fetch_complete", "fetch_error", "fetch_cancelled"):
                    return events
    raise AssertionError("event stream ended early")


def test_catalogue_add_forget_and_delete_rules(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    client = server.client
    shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux")
    gguf = settings.models_dir / "flux-gguf"
    gguf.mkdir()
    (gguf / "flux1-dev-Q4_0.gguf").write_bytes(b"GGUF")
    models = [m for m in client.get("/api/models").json() if m["source"] != "catalogue"]
    assert [m["id"] for m in models] == ["flux-gguf", "tiny-flux"] and all(
        set(m) == ENTRY_KEYS for m in models
    )
    bad, tiny = models
    assert (tiny["source"], tiny["family"], tiny["trainable"], tiny["deletable"]) == (
        "tiny",
        "flux",
        True,
        True,
    )
    assert (bad["family"], bad["trainable"], bad["deletable"]) == (None, False, False) and "GGUF" in bad[
        "reason"
    ]

    theirs = client.delete("/api/models/flux-gguf")
    assert theirs.status_code == 403 and theirs.json()["error"] == "ModelNotDeletable" and gguf.is_dir()
    assert client.delete("/api/models/nothing").status_code == 404
    assert client.get("/api/models/tiny-flux").json() == tiny

    outside = Path(shutil.copytree(tiny_model("z-image"), tmp_path / "zimage"))
    added = client.post("/api/models/added", json={"path": str(outside)})
    assert (
        added.status_code == 201 and added.json()["family"] == "z-image" and added.json()["source"] == "added"
    )
    assert client.post("/api/models/added", json={"path": "relative"}).status_code == 400
    for folder, why in (("/", "is a system folder"), ("/usr", "is a system folder"),
                        (str(settings.home), "holds the studio home"),
                        (str(settings.home.parent), "holds the studio home"),
                        (str(settings.outputs_dir), "inside the studio home")):  # fmt: skip
        refused = client.post("/api/models/added", json={"path": folder})
        assert refused.status_code == 400 and why in refused.json()["problems"][0]["message"], refused.text
    assert client.delete(f"/api/models/{added.json()['id']}").status_code == 403
    assert client.delete(f"/api/models/added/{added.json()['id']}").json()["path"] == str(outside)
    assert outside.is_dir()

    deleted = client.delete("/api/models/tiny-flux")
    assert deleted.status_code == 200 and deleted.json()["deleted"] == "tiny-flux"
    assert [m["id"] for m in client.get("/api/models").json() if m["source"] != "catalogue"] == ["flux-gguf"]


def test_fetch_in_the_background_with_progress_then_train_refuses_a_bad_base(
    server: LiveServer,
    settings: Settings,
    hub: FakeHub,
    sample_dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = server.client
    started = client.post("/api/models/fetch", json={"repo_id": "acme/flux"})
    assert started.status_code == 202, started.text
    fetch = _wait_fetch(client, started.json()["id"])
    assert (fetch["status"], fetch["model_id"], fetch["family"]) == ("completed", "acme--flux", "flux")
    assert fetch["bytes_done"] == fetch["bytes_total"] > 0 and fetch["files_done"] == fetch["files_total"]
    events = _fetch_events(client)
    assert [e["type"] for e in events][0] == "fetch_started" and events[-1]["type"] == "fetch_complete"
    assert {e["fetch_id"] for e in events} == {fetch["id"]}
    entry = client.get("/api/models/acme--flux").json()
    assert (entry["name"], entry["trainable"], entry["deletable"], entry["source"]) == (
        "acme/flux",
        True,
        True,
        "local",
    )

    again = client.post("/api/models/fetch", json={"repo_id": "acme/flux"})
    assert _wait_fetch(client, again.json()["id"])["already_present"] is True

    gated = client.post("/api/models/fetch", json={"repo_id": "acme/gated"})
    assert gated.status_code == 403 and gated.json()["error"] == "ModelAccessDenied"
    assert gated.json()["hub_status"] == 403 and "gated" in gated.json()["detail"]
    assert client.post("/api/models/fetch", json={"repo_id": "no id"}).status_code == 400
    assert client.post("/api/models/fetch", json={"repo_id": "acme/flux", "x": 1}).status_code == 422
    listed = client.get("/api/models/fetch").json()
    assert listed["offline"] is False and [f["status"] for f in listed["fetches"]] == [
        "completed",
        "completed",
    ]
    every_answer = json.dumps([listed, events, client.get("/api/models").json(), gated.json()])
    assert SECRET not in every_answer

    _hub_environment_ends(monkeypatch)
    image = client.post(
        "/api/generate",
        json={
            "family": "flux",
            "base_model": "acme--flux",
            "prompt": "a red circle",
            "steps": 2,
            "width": 32,
            "height": 32,
        },  # fmt: skip
    )
    assert image.status_code == 201, image.text  # the fetched folder loads as a real pipeline
    assert server.app.state.generation.loaded is not None

    gguf = settings.models_dir / "flux-gguf"
    gguf.mkdir()
    (gguf / "flux1-dev-Q4_0.gguf").write_bytes(b"GGUF")
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    config = {"family": "flux", "base_model": str(gguf), "data_dir": "shapes", "resolution": 32, "steps": 1,
              "output_name": "never"}  # fmt: skip
    refused = client.post("/api/train/start", json={"config": config})
    assert refused.status_code == 400
    problem = next(p for p in refused.json()["problems"] if p["field"] == "base_model")
    assert "GGUF" in problem["message"] and "FluxPipeline" in problem["message"]
    assert (
        not (settings.outputs_dir / "never").exists()
        and client.get("/api/train/status").json()["job"] is None
    )
    assert client.delete("/api/models/acme--flux").status_code == 200
    assert not (settings.models_dir / "acme--flux").exists()


def test_cli_fetch_list_rm(
    cli: typer.Typer, settings: Settings, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", SECRET)  # the studio's token, as the CLI reads it
    get_settings.cache_clear()
    runner = CliRunner()
    fetched = runner.invoke(cli, ["models", "fetch", "acme/flux"])
    assert fetched.exit_code == 0, fetched.output
    assert "fetched acme/flux" in fetched.output and SECRET not in fetched.output
    listed = runner.invoke(cli, ["models", "list", "--json", "--no-hub-cache"])
    entries = json.loads(listed.output)
    assert [(e["id"], e["family"], e["trainable"]) for e in entries if e["kind"] != "captioner"] == [
        ("acme--flux", "flux", True)
    ]
    assert "already on disk" in runner.invoke(cli, ["models", "fetch", "acme/flux"]).output

    refused = runner.invoke(cli, ["models", "fetch", "acme/gated"])
    assert isinstance(refused.exception, ModelAccessDenied) and SECRET not in str(refused.exception)
    removed = runner.invoke(cli, ["models", "rm", "acme--flux", "--yes"])
    assert removed.exit_code == 0 and not (settings.models_dir / "acme--flux").exists()


def test_a_fetch_is_one_at_a_time_per_model_cancellable_and_resumable(
    server: LiveServer, settings: Settings, hub: FakeHub
) -> None:
    client = server.client
    weights = "transformer/diffusion_pytorch_model.safetensors"
    hub.hold[weights] = threading.Event()
    first = client.post("/api/models/fetch", json={"repo_id": "acme/flux"}).json()
    twice = client.post("/api/models/fetch", json={"repo_id": "acme/flux"})
    assert twice.status_code == 409 and twice.json()["error"] == "JobActive"
    deadline = time.monotonic() + 20
    staging = settings.models_dir / ".acme--flux.fetching"
    while not (staging / "vae/diffusion_pytorch_model.safetensors").is_file():  # other files arrive
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.post(f"/api/models/fetch/{first['id']}/cancel").json()["status"] == "running"
    hub.hold.pop(weights).set()
    cancelled = _wait_fetch(client, first["id"])
    assert (cancelled["status"], cancelled["resumable"], cancelled["model_id"]) == ("cancelled", True, None)
    assert client.post(f"/api/models/fetch/{first['id']}/cancel").status_code == 404
    assert [
        m["id"]
        for m in client.get("/api/models", params={}).json()
        if m["source"] not in ("hub-cache", "catalogue")
    ] == []

    resumed = _wait_fetch(
        client, client.post("/api/models/fetch", json={"repo_id": "acme/flux"}).json()["id"]
    )
    assert resumed["status"] == "completed" and len(hub.gets(weights)) == 2
    assert len(hub.gets("vae/diffusion_pytorch_model.safetensors")) == 1  # done before the cancel: kept


def test_a_captioner_is_fetched_through_the_api_and_captions_by_its_catalogue_id(
    server: LiveServer, settings: Settings, hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base models' fetch route takes a captioning model (progress events, the catalogue
    entry of kind captioner), and a caption job runs with it by its catalogue id (the tiny
    random Qwen2.5-VL on this host's CPU)."""
    from PIL import Image

    from lorastudio.tiny.vlm import save_tiny_vlm

    vlm = save_tiny_vlm(tmp_path / "vlm")
    files = {p.relative_to(vlm).as_posix(): p.read_bytes() for p in vlm.rglob("*") if p.is_file()}
    files.pop("lorastudio_tiny_vlm.json")
    hub.repos["Qwen/Qwen2.5-VL-3B-Instruct"] = FakeRepo({**files, "README.md": b"#"})
    client = server.client
    listed = {m["id"]: m for m in client.get("/api/models").json()}
    assert listed["Qwen--Qwen2.5-VL-3B-Instruct"]["source"] == "catalogue"
    started = client.post("/api/models/fetch", json={"repo_id": "Qwen/Qwen2.5-VL-3B-Instruct"})
    assert started.status_code == 202, started.text
    assert started.json()["family"] is None
    kinds = [e["type"] for e in _fetch_events(client)]
    assert kinds[0] == "fetch_started" and kinds[-1] == "fetch_complete"
    done = _wait_fetch(client, started.json()["id"])
    assert (done["status"], done["model_id"]) == ("completed", "Qwen--Qwen2.5-VL-3B-Instruct")
    entry = client.get("/api/models/Qwen--Qwen2.5-VL-3B-Instruct").json()
    assert (entry["kind"], entry["source"], entry["complete"], entry["trainable"]) == (
        "captioner",
        "local",
        True,
        False,
    )
    assert entry["licence"] == "Qwen Research License (non-commercial)"

    folder = settings.ensure_dirs().datasets_dir / "cards"
    folder.mkdir()
    Image.new("RGB", (48, 40), (200, 20, 20)).save(folder / "card0.png")
    _hub_environment_ends(monkeypatch)
    job = client.post("/api/datasets/cards/caption", json={"model": entry["id"], "max_tokens": 4})
    assert job.status_code == 202, job.text
    deadline = time.monotonic() + 120
    while (state := client.get(f"/api/captions/{job.json()['id']}").json())["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (state["status"], state["captioned"], state["device"], state["gpu"]) == (
        "completed",
        1,
        "cpu",
        None,
    )
    assert (folder / "card0.txt").read_text(encoding="utf-8").strip()
    deleted = client.delete("/api/models/Qwen--Qwen2.5-VL-3B-Instruct")
    assert deleted.status_code == 200 and not (settings.models_dir / "Qwen--Qwen2.5-VL-3B-Instruct").exists()
