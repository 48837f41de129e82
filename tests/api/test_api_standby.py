"""A run started through the API on a server with a standby training worker (jobs/standby.py):
the job is handed the waiting process (its pid is the job's), a stop with save works on it as on
a fresh worker, and a new standby is spawned after. (Same final loss as a fresh process, a
standby killed while waiting, a changed environment: tests/unit/jobs/test_jobs_standby.py; no
orphan: tests/reliability/test_standby_worker.py.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from api_helpers import FINAL, LiveServer, live_server, upload_folder, wait_idle, wait_status
from tests.polling import until

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

pytestmark = pytest.mark.spawned_workers  # the standby is the product's own preloaded worker


@pytest.fixture
def standby_server(settings: Settings) -> Iterator[LiveServer]:
    with live_server(create_app(settings.model_copy(update={"standby_worker": True}))) as live:
        yield live


def test_a_run_is_handed_the_standby_and_stops_with_save(
    standby_server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = standby_server.client
    keeper = standby_server.app.state.service._standby
    assert keeper is not None
    waiting = until(lambda: keeper.current_pid, 30, "standby worker")
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post(
        "/api/train/start", json={"config": flux_config(output_name="handed", steps=100_000)}
    )
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    running = wait_status(client, job_id, {"running"})
    assert standby_server.app.state.service.job(job_id)["pid"] == waiting
    assert client.post("/api/train/stop", json={"save": True}).status_code == 200
    job = wait_status(client, job_id, FINAL)
    assert job["status"] == "stopped" and job["steps_run"] >= running["steps_run"] >= 1
    assert job["lora_path"] and Path(job["lora_path"]).is_file()
    wait_idle(client)
    after = until(lambda: keeper.current_pid, 30, "next standby worker")
    assert after != waiting


@pytest.mark.slow
def test_an_edit_run_on_the_standby_stopped_and_resumed_over_http_is_the_uninterrupted_run(
    standby_server: LiveServer, tiny_model: Callable[[str], Path], sample_dataset: Path
) -> None:
    """Session 25 resume audit: FLUX.1 Kontext with controls, masks, EMA, samples and the disk
    cache, handed the standby, stopped with save (POST /api/train/stop) and resumed (POST
    /api/runs/{id}/resume, handed the next standby): the losses per step, the LoRA, the raw EMA
    file and every sample PNG of the uninterrupted run, bitwise."""
    import torch
    from PIL import Image, ImageOps
    from safetensors.torch import load_file

    client, app = standby_server.client, standby_server.app
    keeper = app.state.service._standby
    data = app.state.settings.datasets_dir / "pairs"
    (data / "control").mkdir(parents=True)
    (data / "masks").mkdir()
    for image in sorted(sample_dataset.glob("*.png")):
        (data / image.name).write_bytes(image.read_bytes())
        (data / f"{image.stem}.txt").write_bytes(image.with_suffix(".txt").read_bytes())
        with Image.open(image) as source:
            ImageOps.invert(source.convert("RGB")).save(data / "control" / image.name)
            mask = Image.new("L", source.size, 0)
            mask.paste(255, (0, 0, source.size[0] // 2, source.size[1]))
            mask.save(data / "masks" / image.name)
    config = {
        "family": "flux-kontext", "base_model": str(tiny_model("flux-kontext")), "data_dir": "pairs",
        "control_resolution": "target", "resolution": 32, "steps": 8, "batch_size": 2, "seed": 7,
        "learning_rate": 5e-3, "lora_rank": 4, "max_sequence_length": 16, "ema_decay": 0.9,
        "sample_prompts": ["make it red"], "sample_every": 2, "sample_steps": 2, "save_every": 1,
        "latent_cache": "disk",
    }  # fmt: skip

    def handed(body: dict, path: str = "/api/train/start") -> str:
        waiting = until(lambda: keeper.current_pid, 60, "a standby worker")
        started = client.post(path, json=body)
        assert started.status_code == 201, started.text
        job_id = started.json()["id"]
        wait_status(client, job_id, {"running", "stopping", *FINAL})
        assert app.state.service.job(job_id)["pid"] == waiting  # the job ran in the standby
        return job_id

    full = handed({"config": {**config, "output_name": "full"}})
    assert wait_status(client, full, FINAL, 240)["status"] == "completed"
    wait_idle(client)
    part = handed({"config": {**config, "output_name": "part"}})
    until(lambda: (app.state.service.job(part)["progress"] or {}).get("step", 0) >= 2, 120, "step 2")
    assert client.post("/api/train/stop", json={"save": True}).status_code == 200
    stopped = wait_status(client, part, FINAL)
    assert stopped["status"] == "stopped" and stopped["steps_run"] < 8, stopped
    wait_idle(client)
    resumed = handed({}, f"/api/runs/{part}/resume")
    assert wait_status(client, resumed, FINAL, 240)["status"] == "completed"

    def losses(job_id: str) -> list[float]:
        return [float(m["loss"]) for m in app.state.service.store.get_run(job_id)["metrics"] if "loss" in m]

    assert losses(resumed) == losses(full) and len(losses(full)) == 8
    outputs = app.state.settings.outputs_dir
    files = {
        str(p.relative_to(outputs / "full")).replace("full", "RUN")
        for p in (outputs / "full").rglob("*")
        if p.suffix in (".safetensors", ".png") and "checkpoints" not in p.parts
    }
    assert any(f.endswith(".raw.safetensors") for f in files) and any(f.endswith(".png") for f in files)
    for rel in files:
        a, b = outputs / "full" / rel.replace("RUN", "full"), outputs / "part" / rel.replace("RUN", "part")
        if a.suffix == ".png":
            assert Image.open(a).tobytes() == Image.open(b).tobytes(), rel
        else:
            one, two = load_file(str(a)), load_file(str(b))
            assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one), rel
