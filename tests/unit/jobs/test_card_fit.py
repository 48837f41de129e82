"""A consumer or older GPU's verdict on a run before any worker starts (jobs/card_fit.py), in the
job service's checks and preflight, on the tiny models: the GPU facts are faked at the seam the
checks read them from (jobs/hardware.host_info). The real-size verdicts (12-40 GB cards, FLUX.1,
Qwen-Image, SDXL, Z-Image) are tests/unit/jobs/test_real_size_forecasts.py's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.jobs import hardware, preflight, validation
from lorastudio.jobs.card_fit import card_fit
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import plan_for_estimate, preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings

T4 = HostInfo("cuda", "Tesla T4", 14.6, precisions_for("cuda", (7, 5)), gpu_count=1, gpu_memory_gb=(14.6,))


def _card(monkeypatch: pytest.MonkeyPatch, name: str, gib: float, capability: tuple[int, int]) -> HostInfo:
    host = HostInfo("cuda", name, gib, precisions_for("cuda", capability), gpu_count=1, gpu_memory_gb=(gib,))
    for module in (hardware, validation, preflight):
        monkeypatch.setattr(module, "host_info", lambda: host)
    monkeypatch.setattr("lorastudio.jobs.host_rules.host_info", lambda: host)
    return host


def test_the_lightest_plan_on_a_gpu_without_bf16_is_the_engines_fp32_not_fp16() -> None:
    # the engine's budget ladder (training/planning/plan.py) is the plain default, then int8 / nf4 where they
    # run: on sm_75 (T4, RTX 20xx) that is fp32 alone; the forecast assumed fp16, half its weights
    cfg = TrainConfig(family="flux", base_model="/m", data_dir="d", memory_budget_gb=12)
    assert plan_for_estimate(cfg, T4, lightest=True).base_precision == "fp32"
    assert plan_for_estimate(cfg, T4).base_precision == "fp32"  # auto: no bf16 here


def test_a_run_no_plan_fits_on_the_gpu_is_refused_before_a_worker_starts_and_one_that_fits_is_told_so(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    raw["steps"] = 2
    _card(monkeypatch, "NVIDIA GeForce RTX 4090", 23.5, (8, 9))
    report = preflight_report(validate_run(raw, settings, live_output_names=set()))
    memory = report["memory"]
    assert memory["gpu_gb"] == 23.5 and memory["gpu_fit"] == "fits" and memory["gpu_note"] is None
    assert report["plan"]["budget_from_gpu"] is False and report["plan"]["memory_budget_gb"] is None

    _card(monkeypatch, "a MIG 1g.5gb slice", 0.5, (8, 0))  # the tiny model's ~1 GB overhead exceeds it
    with pytest.raises(ConfigError) as refused:
        validate_run(raw, settings, live_output_names=set())
    (problem,) = refused.value.problems
    assert problem.field == "base_precision" and "0.5 GiB of a MIG 1g.5gb slice" in problem.message


def _probed(name: str, gib: float, capability: tuple[int, int]) -> HostInfo:
    """The HostInfo of a probe's answer on a host of that one GPU (jobs/gpu_probe.facts' form)."""
    gpu = {"name": name, "total_memory": int(gib * 2**30), "capability": list(capability)}
    return hardware.host_from_facts({"cuda": True, "devices": [gpu]})


def test_attention_kernels_a_card_lacks_are_refused_before_a_worker_starts_and_not_offered(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lorastudio.jobs.host_rules import host_problems

    rtx_4090, t4, h100 = (
        _probed("NVIDIA GeForce RTX 4090", 23.5, (8, 9)),
        _probed("Tesla T4", 14.6, (7, 5)),
        _probed("NVIDIA H100 80GB HBM3", 79.2, (9, 0)),
    )
    # /api/info's choices (HostInfo.public): what the web UI offers for attention_backend
    assert rtx_4090.public()["attention_backends"] == ["auto", "cudnn", "flash", "efficient", "math"]
    assert t4.public()["attention_backends"] == ["auto", "efficient", "math"]
    assert "fa4" in h100.public()["attention_backends"]
    # the job service's host check: the worker's own check (training/speed/attention.py) is no longer the first
    cfg = TrainConfig(family="flux", base_model="/m", data_dir="d", attention_backend="fa4")
    monkeypatch.setattr("lorastudio.jobs.host_rules.host_info", lambda: rtx_4090)
    (problem,) = host_problems(cfg, settings)
    assert problem.field == "attention_backend" and "NVIDIA GeForce RTX 4090 is sm89" in problem.message
    monkeypatch.setattr("lorastudio.jobs.host_rules.host_info", lambda: t4)
    for backend in ("cudnn", "flash"):
        (problem,) = host_problems(cfg.model_copy(update={"attention_backend": backend}), settings)
        assert "needs compute capability 8.0 or newer; Tesla T4 is 7.5" in problem.message
    assert host_problems(cfg.model_copy(update={"attention_backend": "efficient"}), settings) == []


def test_the_lightest_plan_swaps_no_block_under_compile_wide_as_the_engines_search_does() -> None:
    # training/planning/plan.block_swap_searchable: compile "wide" holds the blocks in its compiled regions,
    # so a budget never swaps there; the lightest forecast swapped all of them (and said it fit)
    rtx_3060 = HostInfo("cuda", "RTX 3060", 11.6, precisions_for("cuda", (8, 6)), 1, (11.6,))
    cfg = TrainConfig(family="sdxl", base_model="/m", data_dir="d", compile="wide", memory_budget_gb=10)
    assert plan_for_estimate(cfg, rtx_3060, lightest=True).offload_blocks == 0
    assert (
        plan_for_estimate(cfg.model_copy(update={"compile": "auto"}), rtx_3060, lightest=True).offload_blocks
        == 1000
    )


def test_a_card_size_that_is_not_a_number_gives_no_verdict_and_a_probe_past_a_float_is_not_understood(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RELIABILITY 1161: a NaN or infinite card size (a faked or broken probe) raised ValueError /
    OverflowError rounding the budget (math.floor), and a probe's total_memory past a float's range
    OverflowError out of host_from_facts, whose contract is a ValueError in words. The forecast is
    faked (a 2 GB denoiser phase): the verdict's arithmetic is under test, not the sizing."""
    phases = {"conditioning": 1.0, "latents": 1.0, "denoiser": 2.0}
    monkeypatch.setattr("lorastudio.jobs.card_fit.estimate_memory_gb", lambda *a, **k: {"phases": phases})
    cfg = TrainConfig(family="flux", base_model="/m", data_dir="d", resolution=32)
    for gib in (float("nan"), float("inf"), -1.0):
        host = HostInfo("cuda", "X", gib, precisions_for("cuda", (8, 0)), gpu_count=1, gpu_memory_gb=(gib,))
        assert card_fit(cfg, Path("/m"), host) is None, gib
    fine = HostInfo("cuda", "X", 8.0, precisions_for("cuda", (8, 0)), gpu_count=1, gpu_memory_gb=(8.0,))
    assert card_fit(cfg, Path("/m"), fine).verdict == "fits"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="not understood"):
        hardware.host_from_facts(
            {"cuda": True, "devices": [{"name": "n", "total_memory": 10**400, "capability": [8, 0]}]}
        )


def test_a_budget_below_the_lightest_plans_forecast_is_refused_before_any_model_loads(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1180: a memory_budget_gb of 0.01 on an 8 GiB card got the verdict "fits" (the
    card was judged, not the budget) and the engine's search refused it only after the models
    loaded and its trials ran. Now the job service's check (and the engine's card_plan, the same
    verdict) refuses it naming the lightest plan's forecast; a budget over that forecast runs."""
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    raw["steps"] = 2
    _card(monkeypatch, "NVIDIA GeForce RTX 4060", 8.0, (8, 9))
    with pytest.raises(ConfigError) as refused:
        validate_run({**raw, "memory_budget_gb": 0.01}, settings, live_output_names=set())
    (problem,) = refused.value.problems
    assert problem.field == "memory_budget_gb" and "below the lightest plan's forecast" in problem.message
    assert "memory_budget_gb 0.01 " in problem.message and "GiB of GPU memory" in problem.message
    run = validate_run({**raw, "memory_budget_gb": 4}, settings, live_output_names=set())
    assert preflight_report(run)["memory"]["gpu_fit"] == "fits"


def test_a_data_parallel_runs_memory_estimate_is_one_gpus_share_of_a_micro_batch(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1185: the preflight's `memory.estimated_gb` (and `lightest_gb`) of a `num_gpus`
    run counted the whole micro-batch's activations on one GPU, where each rank holds its slice
    (training/planning/micro_batches.py): up to num_gpus times the activations, while the card verdict
    counted one GPU's share. Now both size a rank's: batch 4 over 2 GPUs as 2 a GPU (the plans
    the estimate is asked for are spied on: the tiny model's activations round to nothing)."""
    import dataclasses

    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    run = validate_run({**raw, "steps": 2, "batch_size": 4}, settings, live_output_names=set())
    boxes = HostInfo(
        "cuda", "H100", 79.2, precisions_for("cuda", (9, 0)), gpu_count=2, gpu_memory_gb=(79.2, 79.2)
    )
    sized: list[int] = []
    real = preflight.estimate_memory_gb
    monkeypatch.setattr(
        preflight,
        "estimate_memory_gb",
        lambda cfg, d, plan, *a, **k: sized.append(plan.micro_batch_size) or real(cfg, d, plan, *a, **k),
    )
    cfg = run.config.model_copy(update={"num_gpus": 2, "memory_budget_gb": 40})
    memory = preflight_report(dataclasses.replace(run, config=cfg), boxes)["memory"]
    assert sized == [2, 1], sized  # the fastest plan's 4 over 2 ranks; the lightest plan's 1
    assert "per GPU: each of the 2 ranks holds its slice" in memory["note"]


def test_a_hub_id_in_the_hub_cache_gets_a_memory_estimate_as_it_gets_a_verdict(
    settings: Settings,
    shapes: Path,
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """RELIABILITY 1186: the card verdict sized a hub id from its snapshot in the hub cache
    (card_fit.sizing_folder), but the preflight's `memory.estimated_gb` read the run's local
    folder only: null ("no local weights to size") for the same base."""
    import dataclasses
    import shutil

    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    run = validate_run({**raw, "steps": 2}, settings, live_output_names=set())
    local = preflight_report(run)["memory"]["estimated_gb"]
    commit = "0123456789abcdef0123456789abcdef01234567"
    storage = tmp_path / "hub" / "models--acme--flux"
    shutil.copytree(tiny_model("flux"), storage / "snapshots" / commit)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub = dataclasses.replace(
        run, config=run.config.model_copy(update={"base_model": "acme/flux"}), model_dir=None
    )
    assert local is not None and preflight_report(hub)["memory"]["estimated_gb"] == local
    gone = dataclasses.replace(hub, config=hub.config.model_copy(update={"base_model": "acme/elsewhere"}))
    assert preflight_report(gone)["memory"]["estimated_gb"] is None  # not in the cache: nothing to size


def test_api_info_offers_a_data_parallel_run_the_choices_of_its_weakest_gpu() -> None:
    """RELIABILITY 1188: /api/info's precisions, compile modes and attention kernels were GPU 0's
    alone, so the Train form offered a `num_gpus` run over mixed cards what the weakest lacks (the
    job service's check, 1134, then refused it). Now `run_choices[k-1]` is what a run over the
    first k GPUs may use: the weakest's, as the service judges it."""
    from lorastudio.api.schemas import HostOut

    gpus = [
        {"name": "NVIDIA GeForce RTX 4090", "total_memory": 23 * 2**30, "capability": [8, 9]},
        {"name": "Tesla T4", "total_memory": 15 * 2**30, "capability": [7, 5]},
    ]
    public = HostOut.model_validate(
        hardware.host_from_facts({"cuda": True, "devices": gpus}).public()
    ).model_dump()
    one, two = public["run_choices"]
    assert one["precisions"] == public["precisions"] and "fp8" in one["precisions"]
    assert "bf16" not in two["precisions"] and "fp8" not in two["precisions"]
    assert "cudnn" in one["attention_backends"] and "cudnn" not in two["attention_backends"]
    assert HostOut.model_validate(T4.public()).run_choices == []  # no per-GPU facts
