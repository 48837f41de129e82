"""/api/cache: the on-disk latent and caption cache listed per encoder and cleared (all, or one
model's), refused while a training job is live (it may be reading the shards)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from api_helpers import LiveServer
from safetensors.torch import save_file

from lorastudio.data.cache_io import hold_entry
from lorastudio.data.disk_cache import ENTRY_LOCK, cache_root
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


def test_the_cache_is_pruned_least_recently_used_first_never_an_entry_in_use(
    server: LiveServer, settings: Settings
) -> None:
    root = cache_root(settings)
    for n, (kind, model) in enumerate([("latents", VAE_A), ("latents", VAE_B), ("text", ENC_A)]):
        shard = _shard(settings, kind, model, f"{n}{n}")
        os.close(hold_entry(root, kind, model))
        os.utime(root / kind / model / ENTRY_LOCK, (1000 + n, 1000 + n))
    size = shard.stat().st_size
    listed = server.client.get("/api/cache").json()["entries"]
    assert [e["last_used"] for e in listed] == [1000, 1001, 1002]
    held = hold_entry(root, "latents", VAE_A)  # a live run reads VAE_A (now its newest use)
    os.utime(root / "latents" / VAE_A / ENTRY_LOCK, (1000, 1000))
    try:
        assert server.client.post("/api/cache/prune", params={"max_gb": -1}).status_code == 422
        pruned = server.client.post("/api/cache/prune", params={"max_gb": size / 1e9})
    finally:
        os.close(held)
    assert pruned.status_code == 200, pruned.text
    body = pruned.json()
    assert [e["model"] for e in body["removed"]] == [VAE_B, ENC_A]
    assert [e["model"] for e in body["in_use"]] == [VAE_A]
    assert (body["before_bytes"], body["after_bytes"], body["freed_bytes"]) == (3 * size, size, 2 * size)
    assert [e["model"] for e in server.client.get("/api/cache").json()["entries"]] == [VAE_A]
    assert server.client.post("/api/cache/prune").json()["removed"] == []  # under the default cap


def test_a_server_start_prunes_the_cache_to_its_cap(studio_home: Path) -> None:
    import time

    from api_helpers import live_server

    from lorastudio.api.app import create_app

    capped = Settings(home=studio_home, cache_max_gb=0)  # LORASTUDIO_CACHE_MAX_GB=0
    shard = _shard(capped, "latents", VAE_A, "aa11")
    kept = _shard(Settings(home=studio_home), "text", ENC_A, "cc33")
    held = hold_entry(cache_root(capped), "text", ENC_A)  # a CLI run of another home reads it
    try:
        with live_server(create_app(capped)):
            deadline = time.monotonic() + 30
            while shard.exists():
                assert time.monotonic() < deadline, "the server start did not prune the cache"
                time.sleep(0.05)
            assert kept.is_file()
    finally:
        os.close(held)
