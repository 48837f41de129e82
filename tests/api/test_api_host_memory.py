"""The host RAM forecast in the API: the preflight shows it beside the available memory, and a
start that will not fit is refused with 409 naming both (issue 31 item 5)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from api_helpers import LiveServer, upload_folder

from lorastudio.api.schemas_preflight import PreflightOut
from lorastudio.jobs import hardware, host_memory
from lorastudio.jobs.hardware import HostInfo, precisions_for


def test_preflight_shows_the_forecast_and_start_refuses_a_run_that_will_not_fit(
    server: LiveServer,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hardware, "host_info", lambda: HostInfo("cpu", "cpu", None, precisions_for("cpu")))
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 1_000_000_000)
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    big = flux_config(resolution=2048, output_name="big")
    answer = client.post("/api/train/preflight", json={"config": big})
    assert answer.status_code == 200, answer.text
    memory = PreflightOut.model_validate(answer.json()).model_dump()["memory"]
    assert memory["host_gb"] > 1.0 and memory["available_gb"] == 1.0 and memory["host_certain"] is True
    assert (
        "1.00 GB is available" in memory["host_warning"] and "resolution (now 2048)" in memory["host_warning"]
    )

    refused = client.post("/api/train/start", json={"config": big})
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["error"] == "HostMemoryShort" and body["available_gb"] == 1.0
    assert body["forecast_gb"] == memory["host_gb"] and "GB of host RAM" in body["detail"]
    assert "big" not in client.get("/api/runs").text  # nothing recorded, nothing queued
