"""Sample previews through HTTP on a real server with a real worker (tiny FLUX.1): the
sample_ready event reaches the event stream and the status snapshot, the run lists its samples
and serves the PNGs, and nothing outside the run's samples/ folder is served."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from api_helpers import LiveServer, read_events, upload_folder, wait_idle, wait_status
from PIL import Image

PROMPTS = ["a red circle", "a blue square"]


def test_samples_reach_status_and_are_served(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    config = flux_config(
        output_name="previews",
        steps=3,
        sample_prompts=PROMPTS,
        sample_every=2,
        sample_steps=1,
        max_sequence_length=16,
    )
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    events = read_events(client, job_id)
    ready = [e for e in events if e["type"] == "sample_ready"]
    assert [(e["step"], len(e["images"])) for e in ready] == [(2, 2), (3, 2)]
    job = wait_status(client, job_id, {"completed"})
    wait_idle(client)
    assert job["samples"] == {"step": 3, "images": ["samples/step-000003-0.png", "samples/step-000003-1.png"]}

    listed = client.get(f"/api/runs/{job_id}/samples")
    assert listed.status_code == 200
    samples = listed.json()["samples"]
    assert [(s["step"], s["index"], s["prompt"]) for s in samples] == [
        (2, 0, PROMPTS[0]),
        (2, 1, PROMPTS[1]),
        (3, 0, PROMPTS[0]),
        (3, 1, PROMPTS[1]),
    ]
    outputs = Path(client.get("/api/info").json()["outputs_root"])
    for sample in samples:
        served = client.get(sample["url"])
        assert served.status_code == 200 and served.headers["content-type"] == "image/png"
        assert served.content == (outputs / "previews" / "samples" / sample["name"]).read_bytes()
        assert Image.open(io.BytesIO(served.content)).size == (32, 32)

    # only sample files directly in that run's samples/ folder are served
    (outputs / "previews" / "previews.json").read_bytes()  # exists beside samples/, must not be served
    for bad in ("..%2Fpreviews.json", "previews.json", "step-000003-0.jpg", "step-000009-0.png"):
        assert client.get(f"/api/runs/{job_id}/samples/{bad}").status_code == 404, bad
    (outputs / "secret.png").write_bytes(b"not yours")
    (outputs / "previews" / "samples" / "step-000004-0.png").symlink_to(outputs / "secret.png")
    assert client.get(f"/api/runs/{job_id}/samples/step-000004-0.png").status_code == 404
    assert client.get("/api/runs/nope/samples").status_code == 404
    assert client.get("/api/runs/nope/samples/step-000003-0.png").status_code == 404
