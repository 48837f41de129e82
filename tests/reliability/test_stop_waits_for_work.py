"""Stop-and-save during a slow sample round (jobs/busy.py): the stop waits for the round in
flight, then the run stops and saves its LoRA; the job's snapshot says what it waits for. With
a stop grace far shorter than the round (0.5 s here; 30 s in production, where a long sample
round on a large model once ran past it and the LoRA was lost), the worker must not be ended."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from reliability_helpers import FINAL, live_server, record_figure, wait_for

from lorastudio.api.app import create_app
from lorastudio.jobs.process import Timeouts
from lorastudio.settings import Settings

GRACE_S = 0.5


def test_stop_and_save_waits_for_the_sample_round_in_flight(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict]
) -> None:
    config = flux_config(
        output_name="slow-samples",
        steps=8,
        sample_every=3,
        sample_prompts=["a red square", "a blue circle", "a green triangle", "a yellow star"],
        sample_steps=100,  # a round of several seconds on the tiny model (400 denoiser calls)
    )
    timeouts = Timeouts(stop_grace_s=GRACE_S, kill_grace_s=0.5)
    with live_server(create_app(settings, timeouts=timeouts)) as server:
        client, service = server.client, server.app.state.service
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        job_id = started.json()["id"]
        wait_for(lambda: service.job(job_id)["steps_run"] >= 3, 180, "step 3 (a sample round)", 0.01)

        t0 = time.monotonic()
        stopping = client.post("/api/train/stop", json={"save": True}).json()
        assert stopping["status"] == "stopping"
        shown = wait_for(  # what the API says the stop waits for
            lambda: (
                (j := client.get("/api/train/status").json()["job"]).get("busy") or j["status"] in FINAL and j
            ),
            60,
            "the work in flight",
            0.01,
        )
        done = wait_for(lambda: (j := service.job(job_id))["status"] in FINAL and j, 120, "the stop", 0.02)
        stop_s = time.monotonic() - t0
    assert done["status"] == "stopped" and done["error"] is None, done
    assert done["lora_path"] and Path(done["lora_path"]).is_file()
    assert done["steps_run"] == 3 and done["busy"] is None
    assert done["samples"]["step"] == 3  # the round it waited for was finished and kept
    assert stop_s > 2 * GRACE_S, f"the round ended within the plain grace ({stop_s:.1f} s): nothing was shown"
    assert shown["work"] == "sample round" and shown["step"] == 3, shown
    record_figure("stop_waits_for_sample_round", {"grace_s": GRACE_S, "stop_to_saved_s": round(stop_s, 2)})
