"""Edits through the API go through the dataset's write claim (jobs/dataset_claims.py): while a
caption job of the server writes a dataset, a caption edit, a bulk edit, an upload and a delete
of it are refused (409 naming the dataset and the job) and change nothing; edits of another
dataset go on; two edits of one dataset wait for each other instead of refusing."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.captioning.options import CaptionOptions
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
from lorastudio.settings import Settings

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "jobs"))
from caption_fake_workers import waiting_fake_captioner  # noqa: E402  (a real spawned worker)


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), "red").save(buf, format="PNG")
    return buf.getvalue()


def _upload(client: TestClient, name: str, files: list) -> int:
    return client.post(f"/api/datasets/{name}/files", files=files).status_code


def test_edits_are_refused_while_a_caption_job_writes_the_dataset(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    for name in ("pets", "other"):
        assert _upload(client, name, [("f", ("a.png", _png())), ("f", ("a.txt", b"a dog"))]) == 201
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    state = client.app.state
    jobs = CaptionJobs(settings, state.arbiter, state.service.datasets_in_use, target=waiting_fake_captioner)
    state.service.watch_captioning(jobs.busy_jobs)
    state.captions = jobs  # as api/routes/captions.py builds it, with a worker that waits
    job = jobs.start("pets", CaptionOptions(model=str(vlm), device="cpu"))
    try:
        holder = f"dataset 'pets' ({settings.datasets_dir.resolve() / 'pets'}) is having its captions written by caption job {job['id']}"
        edits = [
            client.put("/api/datasets/pets/captions/a.png", json={"caption": "a cat"}),
            client.post("/api/datasets/pets/captions", json={"append": ", outdoors"}),
            client.post("/api/datasets/pets/files", files=[("f", ("b.png", _png()))]),
            client.delete("/api/datasets/pets/images/a.png"),
            client.delete("/api/datasets/pets"),
        ]
        for resp in edits:
            assert resp.status_code == 409 and holder in resp.json()["detail"], resp.text
        dry = client.post("/api/datasets/pets/captions", json={"append": "!", "dry_run": True})
        assert dry.status_code == 200  # a dry run reads only
        pets = settings.datasets_dir / "pets"
        assert sorted(p.name for p in pets.iterdir()) == ["a.png", "a.txt"]
        assert (pets / "a.txt").read_text(encoding="utf-8") == "a dog"
        other = client.put("/api/datasets/other/captions/a.png", json={"caption": "a cat"})
        assert other.status_code == 200  # another dataset is edited meanwhile
    finally:
        jobs.cancel(job["id"])
        assert jobs.wait(job["id"], 60)["status"] == "cancelled"
    assert client.put("/api/datasets/pets/captions/a.png", json={"caption": "a cat"}).status_code == 200


def test_an_edit_waits_for_a_brief_one(client: TestClient, settings: Settings) -> None:
    assert _upload(client, "pets", [("f", ("a.png", _png()))]) == 201
    brief = DatasetClaim.take(settings.home, settings.datasets_dir, ["pets"], WRITE, "an upload", brief=True)
    result: dict[str, int] = {}
    put = threading.Thread(
        target=lambda: result.update(
            code=client.put("/api/datasets/pets/captions/a.png", json={"caption": "x"}).status_code
        )
    )
    put.start()
    put.join(0.5)
    assert put.is_alive()  # waiting, not refused
    brief.release()
    put.join(30)
    assert result == {"code": 200}
    assert list((settings.home / "claims").glob("*")) == []  # the last holder left no trace


def test_a_delete_or_rename_refused_under_a_read_says_what_was_refused(
    client: TestClient, settings: Settings
) -> None:
    # a dataset a live run read (a control folder) refused its delete with "its captions cannot be
    # written until that ends" (session 39 journey4, RELIABILITY 1998)
    from lorastudio.jobs.dataset_claims import READ

    assert _upload(client, "ctl", [("f", ("a.png", _png()))]) == 201
    with DatasetClaim.take(settings.home, settings.datasets_dir, ["ctl"], READ, "training job 1a2b"):
        deleted = client.delete("/api/datasets/ctl")
        renamed = client.post("/api/datasets/ctl/rename", json={"to": "x"})
        edited = client.put("/api/datasets/ctl/captions/a.png", json={"caption": "x"})
    assert deleted.status_code == renamed.status_code == edited.status_code == 409
    assert deleted.json()["detail"].endswith(
        f"training job 1a2b (pid {os.getpid()}); it cannot be deleted until that ends"
    )
    assert "it cannot be renamed until that ends" in renamed.json()["detail"]
    assert "its captions cannot be written until that ends" in edited.json()["detail"]
    assert (settings.datasets_dir / "ctl" / "a.png").is_file()
