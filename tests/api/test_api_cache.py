"""/api/cache: the on-disk latent and caption cache listed per encoder and cleared (all, or one
model's), refused while a training job is live (it may be reading the shards)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from api_helpers import LiveServer
from safetensors.torch import save_file

from lorastudio.data.disk_cache import cache_root
from lorastudio.jobs.service import JobService
from lorastudio.settings import Settings

VAE_A, VAE_B, ENC_A = "a" * 20, "b" * 20, "c" * 20  # fingerprints, as disk_cache names model folders


def _shard(settings: Settings, kind: str, model: str, name: str) -> Path:
    name = name.ljust(64, "0")  # a sha256 hex key
    path = cache_root(settings) / kind / model / name[:2] / f"{name}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"mean": torch.zeros(4, 2, 2)}, str(path))
    return path


def test_the_cache_is_listed_and_cleared(server: LiveServer, settings: Settings, monkeypatch) -> None:
    a = _shard(settings, "latents", VAE_A, "aa11")
    _shard(settings, "latents", VAE_B, "bb22")
    _shard(settings, "text", ENC_A, "cc33")
    listed = server.client.get("/api/cache")
    assert listed.status_code == 200
    body = listed.json()
    assert body["folder"] == str(cache_root(settings))
    assert [(e["kind"], e["model"], e["files"]) for e in body["entries"]] == [
        ("latents", VAE_A, 1),
        ("latents", VAE_B, 1),
        ("text", ENC_A, 1),
    ]
    assert body["bytes"] == 3 * a.stat().st_size
    assert server.client.delete("/api/cache", params={"model": "nope"}).status_code == 404
    monkeypatch.setattr(JobService, "datasets_in_use", lambda self: {Path("/data/set")})  # a live job
    assert server.client.delete("/api/cache").status_code == 409 and a.is_file()
    monkeypatch.undo()
    size = a.stat().st_size
    one = server.client.delete("/api/cache", params={"model": VAE_A})
    assert one.status_code == 200 and one.json()["freed_bytes"] == size and not a.exists()
    assert [e["model"] for e in server.client.get("/api/cache").json()["entries"]] == [VAE_B, ENC_A]
    rest = server.client.delete("/api/cache")
    assert rest.status_code == 200 and rest.json()["freed_bytes"] > 0
    assert server.client.get("/api/cache").json() == {
        "folder": str(cache_root(settings)),
        "entries": [],
        "bytes": 0,
    }


@pytest.mark.parametrize("path", ["/api/cache"])
def test_the_cache_routes_need_the_token_when_one_is_set(studio_home: Path, path: str) -> None:
    from api_helpers import live_server

    from lorastudio.api.app import create_app

    with live_server(create_app(Settings(home=studio_home, api_token="t0ken"))) as live:
        assert live.client.get(path).status_code == 401
        assert live.client.delete(path).status_code == 401
