"""The memory plan in the API: the preflight's `plan` section (settings fixed by the config, plain
defaults, settings left to a memory budget), its rough memory estimate (precisions, checkpointing,
block swap, micro-batches), and the plan a run reports (the engine's PlanChosen event) kept in the
job status, the event stream and the run record. The plan a real tiny CPU run records is checked
on test_api_training.py's full job (one real worker for both)."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import diffusers
import pytest
from api_helpers import FINAL, LiveServer, live_server, read_events, upload_folder, wait_idle, wait_status
from plan_workers import MEASURED, report_a_measured_plan

from lorastudio import families
from lorastudio.api.app import create_app
from lorastudio.api.schemas_preflight import PreflightOut
from lorastudio.api.schemas_runs import JobOut, RunDetail
from lorastudio.config import TrainConfig
from lorastudio.config_rules import PLAN_FIELDS
from lorastudio.jobs import host_rules, preflight, validation
from lorastudio.jobs.hardware import HostInfo, host_info
from lorastudio.jobs.preflight import (
    DEVICE_ACTIVATION_FACTOR,
    IN_FLIGHT_BLOCKS,
    WEIGHT_BYTES,
    PlanValues,
    denoiser_param_split,
    estimate_memory_gb,
)
from lorastudio.jobs.records import now_iso
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from lorastudio.training.events import PlanChosen
from lorastudio.training.speed.compile import repeated_blocks
from old_store import first_version_store

# -- the preflight's plan section ----------------------------------------------------------------


def _preflight(client: Any, config: dict) -> dict:
    answer = client.post("/api/train/preflight", json={"config": config})
    assert answer.status_code == 200, answer.text
    PreflightOut.model_validate(answer.json())  # the declared shape (the UI's generated types)
    return answer.json()


def _fields(report: dict) -> dict[str, dict]:
    assert [f["name"] for f in report["plan"]["fields"]] == list(PLAN_FIELDS)
    return {f["name"]: f for f in report["plan"]["fields"]}


def test_preflight_plan_shows_plain_defaults_and_fixed_settings(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201

    report = _preflight(client, flux_config(batch_size=2))
    fields = _fields(report)
    assert {f["source"] for f in fields.values()} == {"default"}
    assert fields["base_precision"]["value"] == report["precision"]["base_dtype"] == "fp32"  # CPU host
    assert fields["gradient_checkpointing"]["value"] == "off"
    assert fields["offload_blocks"]["value"] == 0
    assert fields["micro_batch_size"]["value"] == 2  # = batch_size
    assert fields["offload_blocks"]["requested"] is None and fields["base_precision"]["requested"] == "auto"
    assert report["plan"]["decided_by"] == "settings" and report["plan"]["memory_budget_gb"] is None
    assert report["plan"]["compile"] is False  # auto = off without CUDA
    assert report["plan"]["fuse_projections"] is False  # auto = off without CUDA
    assert _preflight(client, flux_config(fuse_projections="on"))["plan"]["fuse_projections"] is True
    assert report["memory"]["lightest_gb"] is None and report["memory"]["estimated_gb"] > 0
    assert "rough" in report["memory"]["note"]
    timing = report["time"]  # no run on this home yet: the model, labelled a guess
    assert timing["source"] == "model" and timing["confidence"] == "guess" and timing["total_s"] > 0
    assert {p["name"] for p in timing["phases"]} >= {"weights_load", "steps", "first_step"}

    fixed = flux_config(
        batch_size=2,
        base_precision="bf16",
        gradient_checkpointing="selective",
        offload_blocks=0,
        micro_batch_size=1,
    )
    fields = _fields(report := _preflight(client, fixed))
    assert {n: (f["source"], f["value"]) for n, f in fields.items()} == {
        "base_precision": ("settings", "bf16"),
        "gradient_checkpointing": ("settings", "selective"),
        "offload_blocks": ("settings", 0),
        "micro_batch_size": ("settings", 1),
    }
    assert report["precision"]["gradient_checkpointing"] == "selective"
    assert report["plan"]["decided_by"] == "settings"

    # the older boolean form still works: true = full
    fields = _fields(_preflight(client, flux_config(gradient_checkpointing=True)))
    assert fields["gradient_checkpointing"] == {
        "name": "gradient_checkpointing",
        "requested": "full",
        "value": "full",
        "source": "settings",
    }

    # a micro-batch that does not divide the batch is refused on its field
    refused = client.post(
        "/api/train/preflight", json={"config": flux_config(batch_size=2, micro_batch_size=3)}
    )
    assert refused.status_code == 400
    problems = {p["field"]: p["message"] for p in refused.json()["problems"]}
    assert "multiple" in problems["micro_batch_size"]


@pytest.fixture
def cuda_host(monkeypatch: pytest.MonkeyPatch) -> HostInfo:
    """The server sees a CUDA host (an H200 that runs int8 / nf4): what validation and the
    preflight read of the host is replaced, the rest of the server is real."""
    host = dataclasses.replace(
        host_info(),
        device="cuda",
        name="NVIDIA H200",
        memory_gb=139.8,
        precisions=("auto", "fp32", "fp16", "bf16", "fp8", "int8", "nf4"),
    )
    monkeypatch.setattr(validation, "host_info", lambda: host)
    monkeypatch.setattr(host_rules, "host_info", lambda: host)
    monkeypatch.setattr(preflight, "host_info", lambda: host)
    return host


def test_preflight_plan_leaves_auto_settings_to_a_memory_budget(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict], cuda_host: HostInfo
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    config = flux_config(batch_size=2, memory_budget_gb=20, gradient_checkpointing="full")
    report = _preflight(client, config)
    fields = _fields(report)
    assert {n: (f["source"], f["value"]) for n, f in fields.items()} == {
        "base_precision": ("budget", None),  # measured at start
        "gradient_checkpointing": ("settings", "full"),  # the user's setting is kept
        "offload_blocks": ("budget", None),
        "micro_batch_size": ("budget", None),
    }
    assert report["plan"] == {
        **report["plan"],
        "decided_by": "measured",
        "memory_budget_gb": 20.0,
        "compile": True,
        "fuse_projections": False,  # full checkpointing: auto does not fuse, whatever is measured
    }
    light = _preflight(client, flux_config(batch_size=2, memory_budget_gb=20))
    assert light["plan"]["fuse_projections"] is None  # fused if the measured plan is the plain one
    assert report["host"]["device"] == "cuda" and report["precision"]["base_dtype"] == "bf16"
    memory = report["memory"]
    assert memory["lightest_gb"] is not None and memory["lightest_gb"] <= memory["estimated_gb"]
    assert "memory budget" in memory["note"]

    # without a budget the same settings are the plain defaults of a bf16 GPU (fused: auto)
    fields = _fields(plain := _preflight(client, flux_config(batch_size=2)))
    assert plain["plan"]["fuse_projections"] is True
    assert _preflight(client, flux_config(base_precision="fp8"))["plan"]["fuse_projections"] is False
    assert {n: f["value"] for n, f in fields.items()} == {
        "base_precision": "bf16",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 2,
    }

    # a budget with nothing left to choose is refused on its field
    every = flux_config(
        memory_budget_gb=20,
        base_precision="bf16",
        gradient_checkpointing="off",
        offload_blocks=0,
        micro_batch_size=1,
    )
    refused = client.post("/api/train/preflight", json={"config": every})
    assert refused.status_code == 400
    assert "memory_budget_gb" in {p["field"] for p in refused.json()["problems"]}


# -- the memory estimate -------------------------------------------------------------------------


def _header_only_safetensors(path: Path, tensors: dict[str, int]) -> None:
    """A safetensors file holding only its header: `tensors` name -> element count (bf16). The
    estimate reads headers only, so a FLUX.1-sized model costs a few kB on disk."""
    header: dict[str, Any] = {}
    offset = 0
    for name, count in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [count], "data_offsets": [offset, offset + 2 * count]}
        offset += 2 * count
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


BLOCKS, BLOCK_PARAMS, OTHER_PARAMS = 40, 250_000_000, 2_000_000_000


@pytest.fixture
def big_flux(tmp_path: Path) -> Path:
    """A pipeline folder whose headers describe a 12B denoiser: 40 blocks of 250M + 2B outside."""
    blocks = {f"transformer_blocks.{i}.attn.to_q.weight": BLOCK_PARAMS for i in range(BLOCKS // 2)}
    blocks |= {f"single_transformer_blocks.{i}.proj_mlp.weight": BLOCK_PARAMS for i in range(BLOCKS // 2)}
    denoiser = {"x_embedder.weight": OTHER_PARAMS // 2, "proj_out.weight": OTHER_PARAMS // 2, **blocks}
    _header_only_safetensors(tmp_path / "transformer" / "diffusion_pytorch_model.safetensors", denoiser)
    _header_only_safetensors(tmp_path / "text_encoder" / "model.safetensors", {"w": 5_000_000_000})
    _header_only_safetensors(tmp_path / "vae" / "diffusion_pytorch_model.safetensors", {"w": 80_000_000})
    return tmp_path


def test_memory_estimate_follows_precision_checkpointing_block_swap_and_micro_batch(big_flux: Path) -> None:
    cfg = TrainConfig(family="flux", base_model=str(big_flux), data_dir="d", resolution=1024, lora_rank=16)
    base = PlanValues("bf16", "off", 0, 2)

    def gb(phase: str = "denoiser", **change: Any) -> float:
        return estimate_memory_gb(cfg, big_flux, dataclasses.replace(base, **change))["phases"][phase]

    params = OTHER_PARAMS + BLOCKS * BLOCK_PARAMS
    block_gb = BLOCK_PARAMS * WEIGHT_BYTES["bf16"] / 1e9
    assert denoiser_param_split(big_flux / "transformer") == (OTHER_PARAMS, [BLOCK_PARAMS] * BLOCKS)

    # precisions: fp32 doubles every weight; fp8 keeps bf16 weights; int8 / nf4 shrink the blocks only
    assert gb(base_precision="fp32") - gb() == pytest.approx(params * 2 / 1e9, abs=0.02)
    assert gb(base_precision="fp8") == gb()
    for quant in ("int8", "nf4"):
        saved = BLOCKS * BLOCK_PARAMS * (WEIGHT_BYTES["bf16"] - WEIGHT_BYTES[quant]) / 1e9
        assert gb() - gb(base_precision=quant) == pytest.approx(saved, abs=0.02)
        # the text encoders of a quantised plan load in the compute dtype (bf16)
        assert gb("conditioning", base_precision=quant) == gb("conditioning")
    assert gb(base_precision="nf4") < gb(base_precision="int8") < gb() < gb(base_precision="fp32")

    # block swap: swapped blocks leave the device except the ones in flight
    assert gb(offload_blocks=10) == pytest.approx(gb() - (10 - IN_FLIGHT_BLOCKS) * block_gb, abs=0.02)
    assert gb(offload_blocks=1) == gb()  # one swapped block is still always on the device
    assert gb(offload_blocks=10_000) == pytest.approx(gb(offload_blocks=BLOCKS), abs=0.001)
    assert gb(offload_blocks=BLOCKS) == pytest.approx(gb() - (BLOCKS - IN_FLIGHT_BLOCKS) * block_gb, abs=0.02)

    # activations: scaled by the checkpointing mode and by the samples per micro-batch
    activations = gb() - gb(micro_batch_size=1)  # one sample's worth at 1024 px
    assert activations > 1
    for mode in ("selective", "full"):
        expected = 2 * activations * (1 - DEVICE_ACTIVATION_FACTOR[mode])
        assert gb() - gb(gradient_checkpointing=mode) == pytest.approx(expected, abs=0.02)
    assert gb(gradient_checkpointing="full") < gb(gradient_checkpointing="selective") < gb()


@pytest.mark.parametrize("family", ["flux", "sdxl", "qwen-image", "z-image"])
def test_block_split_of_the_headers_matches_the_denoisers_repeated_blocks(
    family: str, tiny_model: Callable[[str], Path]
) -> None:
    spec = families.get(family).spec
    folder = tiny_model(family) / spec.denoiser
    other, blocks = denoiser_param_split(folder)
    model = getattr(diffusers, spec.denoiser_class).from_pretrained(folder)
    real = [sum(p.numel() for p in b.parameters()) for b in repeated_blocks(model)]
    assert sorted(blocks) == sorted(real) and len(real) > 1
    assert other + sum(blocks) == sum(p.numel() for p in model.parameters())


# -- the plan in the run record (the worker target: plan_workers.py) -----------------------------


@pytest.fixture
def plan_server(settings: Settings) -> Iterator[LiveServer]:
    with live_server(create_app(settings, worker_target=report_a_measured_plan)) as live:
        yield live


def _expected_record() -> dict:
    expected = MEASURED.model_dump(mode="python")
    expected["trials"][1]["seconds_per_sample"] = None
    return expected


def test_the_reported_plan_is_kept_in_status_events_and_run_record(
    plan_server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = plan_server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post("/api/train/start", json={"config": flux_config(output_name="planned")})
    assert started.status_code == 201, started.text
    assert started.json()["plan"] is None  # nothing reported yet
    job_id = started.json()["id"]
    events = read_events(client, job_id)
    job = wait_status(client, job_id, FINAL)
    wait_idle(client)
    assert job["status"] == "completed", job["error"]

    expected = _expected_record()
    streamed = [e for e in events if e["type"] == "plan_chosen"]
    assert len(streamed) == 1 and {k: v for k, v in streamed[0].items() if k != "job_id"} == expected
    assert job["plan"] == expected
    typed = JobOut.model_validate(job).plan
    assert typed is not None and typed.model_dump() == PlanChosen.model_validate(expected).model_dump()
    detail = client.get(f"/api/runs/{job_id}").json()
    assert detail["plan"] == expected
    assert RunDetail.model_validate(detail).plan is not None

    # the record outlives the server's memory: a fresh store reads the same plan back
    store = RunStore.open(plan_server.app.state.store.path, recover=False)
    try:
        assert store.get_run(job_id)["plan"] == expected
    finally:
        store.close()


def test_a_store_written_before_plans_is_upgraded_in_place(tmp_path: Path) -> None:
    db = first_version_store(tmp_path / "old.db", "r1", "older", now_iso())
    store = RunStore.open(db)
    try:
        assert store.get_run("r1")["plan"] is None
        store.set_plan("r1", _expected_record())
        assert store.get_run("r1")["plan"] == _expected_record()
        again = RunStore.open(db, recover=False)  # a second opener finds the column in place
        again.close()
    finally:
        store.close()


def test_preflight_counts_the_batch_shapes_compile_wide_compiles(
    server: LiveServer,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    cuda_host: HostInfo,
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    sdxl = {"family": "sdxl", "base_model": str(tiny_model("sdxl")), "resolution": 64, "batch_size": 3}
    report = _preflight(client, flux_config(**sdxl, compile="wide"))
    buckets = report["dataset"]["buckets"]
    assert report["plan"]["compile"] is True
    # every bucket: full batches of 3 and, unless its count divides by 3, one smaller tail batch
    assert report["plan"]["compile_shapes"] == sum(1 + (n > 3 and n % 3 > 0) for n in buckets.values())
    assert _preflight(client, flux_config(**sdxl, compile="on"))["plan"]["compile_shapes"] is None


def test_batch_shapes_are_full_batches_tails_and_micro_batches():
    from lorastudio.jobs.preflight import batch_shapes

    assert batch_shapes({"1024x1024": 8}, 4, None) == {("1024x1024", 4)}
    assert batch_shapes({"1024x1024": 9, "832x1216": 3}, 4, None) == {
        ("1024x1024", 4), ("1024x1024", 1), ("832x1216", 3)
    }  # fmt: skip
    assert batch_shapes({"1024x1024": 10}, 4, 3) == {("1024x1024", 3), ("1024x1024", 1), ("1024x1024", 2)}
