"""The VRAM estimate (jobs/vram_estimate.py), the cold wall-time forecast (jobs/time_forecast.py) and
a consumer card's verdict on a run (jobs/card_fit.py) against what was measured on the H200 (issue 31
item 5; bench/RESULTS.md note 25): header-only pipeline folders of the released FLUX.1-dev,
Qwen-Image, Z-Image and SDXL configs (bench/header_pipelines.py: real shapes and file sizes,
sparse, no weights)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench.header_pipelines import build_flux1, build_qwen_image, build_sdxl, build_z_image

from lorastudio import families
from lorastudio.api.schemas_preflight import PreflightOut
from lorastudio.cli.train_check import print_report
from lorastudio.config import TrainConfig
from lorastudio.jobs.card_fit import CARD_RESERVE_GIB, card_fit
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import PlanValues, preflight_report
from lorastudio.jobs.time_forecast import time_forecast
from lorastudio.jobs.validation import validate_run
from lorastudio.jobs.vram_estimate import estimate_memory_gb, lora_param_count
from lorastudio.settings import Settings

GIB = 1024**3 / 1e9
BASELINE_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]  # the plain step's (bench/models.py)

# (family, precision, micro-batch, compiled, the LoRA targets (None: the family's), measured peak
# allocated GiB, where it was measured in bench/RESULTS.md); 1024 px, rank 16, no checkpointing
MEASURED = [
    ("flux", "bf16", 1, True, None, 47.2, "note 23: e2e run through the product, the default plan"),
    ("flux", "bf16", 1, True, BASELINE_TARGETS, 44.4, "run 2: engine-compile b1"),
    ("flux", "bf16", 2, True, BASELINE_TARGETS, 65.7, "run 2: engine-compile b2"),
    ("flux", "bf16", 1, False, BASELINE_TARGETS, 50.4, "run 2: engine-eager b1"),
    ("flux", "fp8", 1, True, BASELINE_TARGETS, 44.0, "note 23: fp8 + FA4 best plan"),
    ("qwen-image", "bf16", 1, True, BASELINE_TARGETS, 62.7, "run 2: engine-compile b1"),
    ("qwen-image", "bf16", 2, True, BASELINE_TARGETS, 86.2, "run 2: engine-compile b2"),
    ("qwen-image", "bf16", 1, False, BASELINE_TARGETS, 74.4, "run 2: engine-eager b1"),
    ("qwen-image", "fp8", 1, True, None, 62.5, "note 22: fp8 + cuDNN best plan"),
    ("qwen-image", "bf16", 1, False, BASELINE_TARGETS, 73.2, "run 2: the plain diffusers + peft step"),
    ("z-image", "bf16", 1, True, BASELINE_TARGETS, 30.0, "run 2: engine-compile b1"),
    ("z-image", "bf16", 2, True, BASELINE_TARGETS, 48.1, "run 2: engine-compile b2"),
    ("z-image", "bf16", 1, False, BASELINE_TARGETS, 49.1, "run 2: engine-eager b1"),
    ("z-image", "bf16", 1, False, BASELINE_TARGETS, 53.1, "run 2: the plain diffusers + peft step"),
    ("sdxl", "bf16", 4, True, BASELINE_TARGETS, 28.4, "run 2: engine-compile b4"),
    ("sdxl", "bf16", 8, True, BASELINE_TARGETS, 51.3, "run 2: engine-compile b8"),
    ("sdxl", "bf16", 4, False, BASELINE_TARGETS, 34.8, "run 2: engine-eager b4"),
    ("sdxl", "bf16", 1, False, BASELINE_TARGETS, 12.6, "run 2: the plain step b1"),
    ("sdxl", "bf16", 4, False, BASELINE_TARGETS, 34.6, "run 2: the plain step b4"),
]


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("headers")
    return {
        "flux": build_flux1(root),
        "qwen-image": build_qwen_image(root),
        "z-image": build_z_image(root),
        "sdxl": build_sdxl(root),
    }


def test_the_header_folders_have_the_real_sizes(pipelines: dict[str, Path]) -> None:
    # bf16 sizes of the released checkpoints: FLUX.1-dev's transformer 23.8 GB, T5-XXL 9.5 GB;
    # Qwen-Image's transformer 40.9 GB, Qwen2.5-VL-7B 16.6 GB
    def gb(folder: Path) -> float:
        return sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 1e9

    assert gb(pipelines["flux"] / "transformer") == pytest.approx(23.8, abs=0.1)
    assert gb(pipelines["flux"] / "text_encoder_2") == pytest.approx(9.52, abs=0.3)
    assert gb(pipelines["qwen-image"] / "transformer") == pytest.approx(40.86, abs=0.1)
    assert gb(pipelines["qwen-image"] / "text_encoder") == pytest.approx(16.58, abs=0.1)
    assert gb(pipelines["z-image"] / "transformer") == pytest.approx(12.31, abs=0.05)  # 6.15 B
    assert gb(pipelines["sdxl"] / "unet") == pytest.approx(5.14, abs=0.05)  # 2.57 B
    # sparse: nothing is written past the headers
    used = sum(f.stat().st_blocks * 512 for f in pipelines["flux"].rglob("*.safetensors"))
    assert used < 50_000_000


def test_lora_parameters_from_the_headers_match_the_measured_run(pipelines: dict[str, Path]) -> None:
    spec = families.get("flux").spec
    # note 24: LoRA r16 on FLUX.1's default targets trains 26.1 M parameters
    assert lora_param_count(pipelines["flux"] / "transformer", spec.lora_targets, 16) / 1e6 == pytest.approx(
        26.1, abs=0.1
    )


@pytest.mark.parametrize(
    ("family", "precision", "batch", "compiled", "targets", "measured", "where"), MEASURED
)
def test_the_estimate_is_within_15_percent_of_the_measured_peak(
    pipelines: dict[str, Path],
    family: str,
    precision: str,
    batch: int,
    compiled: bool,
    targets: list[str] | None,
    measured: float,
    where: str,
) -> None:
    folder = pipelines[family]
    cfg = TrainConfig(
        family=family,
        base_model=str(folder),
        data_dir="d",
        resolution=1024,
        lora_rank=16,
        lora_targets=targets,
    )
    plan = PlanValues(precision, "off", 0, batch)
    gib = estimate_memory_gb(cfg, folder, plan, 0, compiled=compiled)["estimated_gb"] / GIB
    assert gib == pytest.approx(measured, rel=0.15), f"{where}: estimated {gib:.1f} GiB, measured {measured}"


# The low-memory plans measured at real size (bench/RESULTS.md note 10: full checkpointing, eager,
# batch 1, 1024 px, the default LoRA targets at rank 16): (family, precision, the denoiser phase's peak
# allocated GiB)
LOW_MEMORY = [
    ("flux", "nf4", 9.04),
    ("qwen-image", "nf4", 13.22),
    ("z-image", "nf4", 5.90),
    ("sdxl", "int8", 3.70),
]


@pytest.mark.parametrize(("family", "precision", "measured"), LOW_MEMORY)
def test_a_low_memory_plan_is_forecast_above_its_measured_peak_by_at_most_a_fifth(
    pipelines: dict[str, Path], family: str, precision: str, measured: float
) -> None:
    # where a consumer card's memory is near these peaks (Qwen-Image's 13.2 GiB on a 16 GB card),
    # the forecast decides whether the card is said to fit: it was 18-43 % over (15.8 GiB there)
    folder = pipelines[family]
    cfg = TrainConfig(family=family, base_model=str(folder), data_dir="d", resolution=1024, lora_rank=16)
    plan = PlanValues(precision, "full", 0, 1)
    gib = estimate_memory_gb(cfg, folder, plan, 0, compiled=False)["phases"]["denoiser"] / GIB  # its phase
    assert measured <= gib <= measured * 1.2, (
        f"{family} {precision}: estimated {gib:.2f} GiB, measured {measured}"
    )


H200 = HostInfo("cuda", "NVIDIA H200", 139.8, precisions_for("cuda", (9, 0)), gpu_count=1)


@pytest.mark.parametrize(("attention", "measured"), [("auto", 179.5), ("cudnn", 157.8)])
def test_a_cold_h200_time_forecast_matches_the_end_to_end_flux1_run(
    pipelines: dict[str, Path], tmp_path: Path, attention: str, measured: float
) -> None:
    # RESULTS note 23: 16 images at 1024 px, 200 steps, a sample round (20 steps) and a checkpoint
    # every 100, bf16 default plan compiled; total 179.5 s (auto: the probe chose FA4), 157.8 s
    # (cudnn: no probe). The table's figures come from that run: this pins the model's phases
    # together (load rate, probe, compile, steps, sample rounds), it is not an independent check.
    folder = pipelines["flux"]
    cfg = TrainConfig(
        family="flux",
        base_model=str(folder),
        data_dir="d",
        resolution=1024,
        lora_rank=16,
        steps=200,
        sample_prompts=["a test pattern"],
        sample_every=100,
        sample_steps=20,
        save_every=100,
        attention_backend=attention,
    )
    plan = {
        "base_precision": "bf16",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 1,
    }
    work = {"steps": 200, "texts": 17, "images": 16, "buckets": {"1024x1024": 16}}
    forecast = time_forecast(cfg, folder, H200, plan, True, work, tmp_path)  # no history in tmp_path
    assert forecast["source"] == "model" and forecast["confidence"] == "scaled"
    assert forecast["total_s"] == pytest.approx(measured, rel=0.15)
    assert "H200 table from bench/RESULTS" in {p["name"]: p["basis"] for p in forecast["phases"]}["steps"]


def _card(name: str, gib: float, capability: tuple[int, int]) -> HostInfo:
    return HostInfo("cuda", name, gib, precisions_for("cuda", capability), gpu_count=1, gpu_memory_gb=(gib,))


RTX_3060 = _card("NVIDIA GeForce RTX 3060", 11.6, (8, 6))  # 12 GB
RTX_4060_TI = _card("NVIDIA GeForce RTX 4060 Ti", 15.6, (8, 9))  # 16 GB
RTX_4090 = _card("NVIDIA GeForce RTX 4090", 23.5, (8, 9))  # 24 GB
A100_40 = _card("NVIDIA A100-PCIE-40GB", 39.4, (8, 0))
GTX_1650 = _card("NVIDIA GeForce GTX 1650", 3.8, (7, 5))  # 4 GB, no bf16


def _default(family: str, folder: Path, **settings: object) -> TrainConfig:
    return TrainConfig(family=family, base_model=str(folder), data_dir="d", resolution=1024, **settings)


def test_a_default_run_over_a_consumer_card_is_planned_within_it_not_left_to_run_out_of_memory(
    pipelines: dict[str, Path],
) -> None:
    # the default plan (bf16, no checkpointing, no swap) of FLUX.1 is forecast at ~47 GiB (47.2
    # measured): a 12-40 GB card took it as it was and ran out of memory loading the denoiser
    flux = _default("flux", pipelines["flux"])
    for card in (RTX_3060, RTX_4060_TI, RTX_4090, A100_40):
        fit = card_fit(flux, pipelines["flux"], card, 0, compiled=True)
        assert fit is not None and fit.verdict == "planned", card.name
        assert fit.budget_gib == pytest.approx(card.memory_gb - CARD_RESERVE_GIB, abs=0.1)
        assert fit.lightest_gib <= fit.budget_gib < fit.default_gib
        assert f"{card.memory_gb:g} GiB of {card.name}" in fit.note and "memory_budget_gb" in fit.note
    # Qwen-Image's 7B text encoder (16.6 GB) does not fit a 16 GB card: a budget encodes on the CPU
    qwen = card_fit(_default("qwen-image", pipelines["qwen-image"]), pipelines["qwen-image"], RTX_4060_TI, 0)
    assert qwen is not None and qwen.verdict == "planned" and qwen.lightest_gib < 13.22 * 1.2
    # what fits stays as it was: SDXL (~12 GiB) on 24 GB, Z-Image on 40 GB
    sdxl = card_fit(_default("sdxl", pipelines["sdxl"]), pipelines["sdxl"], RTX_4090, 0, compiled=True)
    assert sdxl is not None and sdxl.verdict == "fits" and sdxl.budget_gib is None
    z_image = card_fit(
        _default("z-image", pipelines["z-image"]), pipelines["z-image"], A100_40, 0, compiled=True
    )
    assert z_image is not None and z_image.verdict == "fits"


def test_the_engine_takes_the_cards_memory_as_the_budget_before_any_model_loads(
    pipelines: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from lorastudio.training.planning import card_plan

    monkeypatch.setattr(card_plan, "device_host", lambda device: RTX_3060)  # the run's own device's facts
    flux = _default("flux", pipelines["flux"])
    planned, note = card_plan.card_planned(flux, pipelines["flux"], 0, torch.device("cuda"))
    assert planned.memory_budget_gb == pytest.approx(10.6) and note is not None and "10.6" in note
    assert planned.model_copy(update={"memory_budget_gb": None}) == flux  # nothing else changes
    budgeted = _default("flux", pipelines["flux"], memory_budget_gb=8)  # the user's budget is kept
    assert card_plan.card_planned(budgeted, pipelines["flux"], 0, torch.device("cuda"))[0] == budgeted
    assert card_plan.card_planned(flux, pipelines["flux"], 0, torch.device("cpu")) == (flux, None)


def test_a_run_no_plan_fits_is_refused_naming_the_card_and_what_would_fit(pipelines: dict[str, Path]) -> None:
    # a 4 GB card without bf16 (no int8 / nf4): Qwen-Image's lightest plan, fp32 with every block swapped
    fit = card_fit(_default("qwen-image", pipelines["qwen-image"]), pipelines["qwen-image"], GTX_1650, 0)
    assert fit is not None and fit.verdict == "refused" and fit.problem is not None
    assert "3.8 GiB of NVIDIA GeForce GTX 1650" in fit.problem.message
    assert "no int8 / nf4" in fit.problem.message and "lower resolution (now 1024)" in fit.problem.message
    # every plan setting fixed at FLUX.1's heaviest on a 24 GB card: nothing left for a budget to lighten
    fixed = _default(
        "flux",
        pipelines["flux"],
        base_precision="bf16",
        gradient_checkpointing="off",
        offload_blocks=0,
        micro_batch_size=1,
    )
    fit = card_fit(fixed, pipelines["flux"], RTX_4090, 0, compiled=True)
    assert fit is not None and fit.verdict == "refused" and fit.problem is not None
    assert fit.problem.field == "base_precision" and "leave base_precision=bf16" in fit.problem.message


def _real_size_flux_run(
    pipelines: dict[str, Path], settings: Settings, tiny_model: Callable[[str], Path]
) -> Any:
    """A default FLUX.1 run at 1024 px on the tiny dataset's scan, its base the real-size FLUX.1
    headers (what a consumer card's user sees in the preflight)."""
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 1024}
    tiny = validate_run({**raw, "steps": 2}, settings, live_output_names=set())
    real = tiny.config.model_copy(update={"base_model": str(pipelines["flux"])})
    return dataclasses.replace(tiny, config=real, model_dir=pipelines["flux"])


def test_the_preflight_of_a_default_flux1_run_on_a_12gb_card_shows_the_budget_the_run_takes(
    pipelines: dict[str, Path],
    settings: Settings,
    shapes: Path,
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _real_size_flux_run(pipelines, settings, tiny_model)
    report = preflight_report(run, RTX_3060, home=settings.home)
    plan, memory = report["plan"], report["memory"]
    assert plan["budget_from_gpu"] is True and plan["memory_budget_gb"] == pytest.approx(10.6)
    assert plan["decided_by"] == "measured" and {f["source"] for f in plan["fields"]} == {"budget"}
    assert memory["gpu_gb"] == 11.6 and memory["gpu_fit"] == "planned"
    assert "memory_budget_gb 10.6" in memory["gpu_note"] and memory["lightest_gb"] < memory["estimated_gb"]
    PreflightOut.model_validate(report)  # what the API answers (api/schemas_preflight.py)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_report(report)  # `lorastudio train --check`
    assert "GPU memory: 11.6 GiB, the card's memory is the budget" in printed.getvalue()
    assert "memory_budget_gb 10.6" in printed.getvalue()


def test_a_hub_id_in_the_hub_cache_is_sized_from_its_snapshot(
    pipelines: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `base_model = "black-forest-labs/FLUX.1-dev"` downloaded by diffusers: the loaders read the
    # hub cache's snapshot (links to its blobs), and so does the verdict
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    commit = "a" * 40
    repo = tmp_path / "hub" / "models--black-forest-labs--FLUX.1-dev"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for part in pipelines["flux"].iterdir():
        (snapshot / part.name).symlink_to(part)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    cfg = _default("flux", pipelines["flux"]).model_copy(
        update={"base_model": "black-forest-labs/FLUX.1-dev"}
    )
    fit = card_fit(cfg, None, RTX_3060, 0, compiled=True)
    assert fit is not None and fit.verdict == "planned" and fit.budget_gib == pytest.approx(10.6)
    # a hub id not in the cache (the loader downloads it): nothing local to size, nothing judged
    assert card_fit(cfg.model_copy(update={"base_model": "acme/elsewhere"}), None, RTX_3060, 0) is None


def test_a_data_parallel_run_is_judged_by_what_one_gpu_holds(pipelines: dict[str, Path]) -> None:
    # num_gpus = 2, batch_size = 2 on two 4090s: each rank holds one sample of every pass
    # (training/planning/micro_batches.py), as a one-GPU run of batch 1 does, not the whole batch
    two = HostInfo("cuda", RTX_4090.name, 23.5, RTX_4090.precisions, gpu_count=2, gpu_memory_gb=(23.5, 23.5))
    sdxl = pipelines["sdxl"]
    parallel = card_fit(_default("sdxl", sdxl, num_gpus=2, batch_size=2), sdxl, two, 0, compiled=True)
    alone = card_fit(_default("sdxl", sdxl, batch_size=1), sdxl, RTX_4090, 0, compiled=True)
    doubled = card_fit(_default("sdxl", sdxl, batch_size=2), sdxl, RTX_4090, 0, compiled=True)
    assert parallel is not None and alone is not None and doubled is not None
    assert parallel.default_gib == pytest.approx(alone.default_gib)
    assert alone.default_gib < doubled.default_gib


def test_a_planned_run_forecasts_its_time_and_host_ram_from_the_plan_the_budget_picks_not_the_default(
    pipelines: dict[str, Path],
    settings: Settings,
    shapes: Path,
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lorastudio.jobs import preflight

    run = _real_size_flux_run(pipelines, settings, tiny_model)
    report = preflight_report(run, RTX_3060, home=settings.home)
    memory = report["memory"]
    assert memory["gpu_fit"] == "planned"
    assert "the plan it is forecast to pick (bf16, full checkpointing, 43 blocks swapped" in memory["note"]
    steps = {p["name"]: p for p in report["time"]["phases"]}["steps"]
    assert "full checkpointing" in steps["basis"] and "43 swapped blocks" in steps["basis"]
    # the forecasts of the default plan (bf16, no checkpointing, no swap): what they were before
    monkeypatch.setattr(preflight, "budget_plan", lambda *args: None)
    plain = preflight_report(run, RTX_3060, home=settings.home)
    # FLUX.1's swapped bf16 blocks wait in host RAM; full checkpointing recomputes in every step
    assert memory["host_gb"] > plain["memory"]["host_gb"] + 10  # 18.1 against 4.0 GB
    assert steps["seconds"] > 1.3 * {p["name"]: p for p in plain["time"]["phases"]}["steps"]["seconds"]
