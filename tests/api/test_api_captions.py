"""Caption jobs through the API on a real server with the tiny random Qwen2.5-VL: start, the
event stream to the end, status and preview, files written only for uncaptioned images; the
refusals (no dataset, remote code, training holding the GPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from api_helpers import LiveServer
from PIL import Image

from lorastudio.jobs.caption_gpu import TrainingMemory
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.settings import Settings


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lorastudio.tiny.vlm import save_tiny_vlm

    return save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-vlm")


def _dataset(settings: Settings) -> Path:
    folder = settings.ensure_dirs().datasets_dir / "cards"
    folder.mkdir()
    for i, rgb in enumerate([(200, 20, 20), (20, 200, 20), (20, 20, 200)]):
        Image.new("RGB", (48, 40), rgb).save(folder / f"card{i}.png")
    (folder / "card1.txt").write_text("my own caption\n", encoding="utf-8")
    return folder


def _events(client: httpx.Client, job_id: str) -> list[dict]:
    events = []
    with client.stream("GET", "/api/captions/events", params={"after": 0}, timeout=120) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: ") and (event := json.loads(line[6:]))["job_id"] == job_id:
                events.append(event)
                if event["type"] == "caption_end":
                    return events
    raise AssertionError("event stream ended early")


def test_caption_job_end_to_end(server: LiveServer, settings: Settings, tiny_vlm: Path) -> None:
    folder = _dataset(settings)
    body = {"model": str(tiny_vlm), "prefix": "sks", "max_tokens": 6}
    started = server.client.post("/api/datasets/cards/caption", json=body)
    assert started.status_code == 202, started.text
    job = started.json()
    assert (job["status"], job["device"], job["dataset"]) == ("running", "cpu", "cards")
    events = _events(server.client, job["id"])
    kinds = [e["type"] for e in events]
    assert kinds == [
        "caption_job",
        "caption_started",
        "caption_progress",
        "caption_progress",
        "caption_summary",
        "caption_end",
    ]
    final = server.client.get(f"/api/captions/{job['id']}").json()
    assert (final["status"], final["total"], final["captioned"], final["skipped"], final["failures"]) == (
        "completed", 2, 2, 1, [],
    )  # fmt: skip
    assert server.client.get("/api/datasets/cards/caption").json()["id"] == job["id"]
    written = {p.stem: p.read_text(encoding="utf-8").strip() for p in folder.glob("*.txt")}
    assert written["card1"] == "my own caption"
    assert [p["file"] for p in final["preview"]] == ["card0.png", "card2.png"]
    for item in final["preview"]:
        assert item["caption"].startswith("sks, ") and written[item["file"][:-4]] == item["caption"]
    assert server.client.get("/api/datasets/cards").json()["captions"] == 3


def test_caption_refusals(server: LiveServer, settings: Settings, tmp_path: Path) -> None:
    _dataset(settings)
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text('{"model_type": "florence2", "auto_map": {"AutoModel": "m.M"}}')
    missing = server.client.post("/api/datasets/nope/caption", json={"model": str(remote)})
    assert missing.status_code == 404
    refused = server.client.post("/api/datasets/cards/caption", json={"model": str(remote)})
    assert refused.status_code == 400 and "trust_remote_code" in refused.text
    not_fetched = server.client.post(
        "/api/datasets/cards/caption", json={"model": "florence-community--Florence-2-base"}
    )
    assert not_fetched.status_code == 400, not_fetched.text
    assert "`lorastudio models fetch florence-community/Florence-2-base`" in not_fetched.json()["detail"]
    unknown_id = server.client.post("/api/datasets/cards/caption", json={"model": "no-such-captioner"})
    assert unknown_id.status_code == 400 and "a captioner of the catalogue" in unknown_id.text
    unknown = server.client.post("/api/datasets/cards/caption", json={"model": str(remote), "beams": 4})
    assert unknown.status_code == 422 and "beams" in unknown.text  # strict body: unknown keys refused
    assert server.client.get("/api/datasets/cards/caption").status_code == 404
    # a GPU host whose GPU a training run holds: the caption job is refused, on the CPU it may run
    state = server.app.state
    # (one GPU of 24 GiB; the run's planned peak 20 GiB: 24 - (20 x 1.1 + 0.5) = 1.5 GiB free,
    # and a catalogue captioner sized by its row: 3.75 B params -> 7.0 GiB bf16 x 1.2 + 0.5 = 8.9)
    state.captions = CaptionJobs(
        settings, state.arbiter, state.service.datasets_in_use, host_device=lambda: "cuda",
        gpus=lambda: (24.0,), training_memory=lambda: TrainingMemory("train1", 20.0, "its memory_budget_gb"),
    )  # fmt: skip
    state.arbiter.begin_training("train1")
    try:
        (remote / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
        busy = server.client.post("/api/datasets/cards/caption", json={"model": str(remote)})
        assert busy.status_code == 409 and "training job train1 holds GPU 0" in busy.text
        assert "size of" in busy.json()["detail"]  # nothing on disk says how big it is
        known = settings.models_dir / "Qwen--Qwen2.5-VL-3B-Instruct"
        shutil.copytree(remote, known)  # a fetched catalogue captioner, by its catalogue id
        (known / "lorastudio_fetch.json").write_text(
            '{"repo_id": "Qwen/Qwen2.5-VL-3B-Instruct", "revision": null}'
        )
        busy = server.client.post("/api/datasets/cards/caption", json={"model": known.name})
        assert busy.status_code == 409, busy.text
        detail = busy.json()["detail"]
        assert "needs about 8.9 GiB" in detail and "1.5 GiB is free beside the run" in detail, detail
        assert "training job train1 holds GPU 0 (24.0 GiB)" in detail and "its memory_budget_gb" in detail
    finally:
        state.arbiter.end_training("train1")
