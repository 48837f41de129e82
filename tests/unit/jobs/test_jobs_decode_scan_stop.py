"""A server job's decode scan (RELIABILITY 170): the real training worker reports the run's scan
of images no check decoded as the job's phase (Preparing "decoding"), and a Stop during it ends
the job as stopped within a decode, before any model loads, not after the stop grace."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import decoded
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from polling import until

IMAGES = 300  # 2048 x 2048 gradients: ~40 ms each to decode fully, 16 KB each on disk
FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}


@pytest.mark.slow
def test_a_stop_during_the_workers_decode_scan_ends_the_job_before_any_model_loads(
    settings: Settings, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)  # the service's check leaves all to the run
    data = settings.datasets_dir / "big"
    data.mkdir()
    buf = io.BytesIO()
    Image.fromarray(np.tile(np.arange(2048, dtype=np.uint8)[None, :, None], (2048, 1, 3))).save(buf, "PNG")
    for i in range(IMAGES):
        (data / f"g{i:03d}.png").write_bytes(buf.getvalue())
        (data / f"g{i:03d}.txt").write_text(f"gradient {i}")
    service = JobService(settings, RunStore.open(settings.db_path), GpuArbiter()).start()
    try:
        cfg = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "big", "resolution": 32}
        job = service.submit({**cfg, "steps": 2, "output_name": "big-run"})

        def decoding() -> dict | None:
            phase = service.job(job["id"])["phase"]
            return phase if phase and phase["type"] == "preparing" and phase["phase"] == "decoding" else None

        seen = until(decoding, 180, "decoding phase")
        assert seen["total"] == IMAGES and 0 < seen["done"] < IMAGES  # type: ignore[index]
        service.stop(save=True)
        snap = until(lambda: (s := service.job(job["id"]))["status"] in FINAL and s, 60, "final status")
        assert snap["status"] == "stopped" and snap["error"] is None and snap["lora_path"] is None  # type: ignore[index]
        kinds = [e["type"] for _, e in service.events_after(0)]
        assert "model_load_started" not in kinds
        assert not (settings.outputs_dir / "big-run").exists()
        (record,) = settings.decoded_record_dir.glob("*.json")
        kept = len(json.loads(record.read_text())["files"])
        assert 0 < kept < IMAGES  # the scan ended early; what it decoded stays recorded
    finally:
        service.shutdown()
