"""Compile on a GPU below compute capability 7.0 (Pascal: a GTX 1080), where torch.compile's
Triton kernels do not run (config_host.compile_device_problems): refused up front for "on" /
"wide", "auto" does not compile, in the job service's checks, the choices it serves and the
engine's own check. The GPU facts are faked (no GPU here): the probe's answer for the service,
torch.cuda's for the engine."""

from __future__ import annotations

import pytest
import torch

from lorastudio.config import TrainConfig
from lorastudio.jobs import hardware, host_rules, preflight, validation
from lorastudio.jobs.hardware import host_from_facts
from lorastudio.jobs.host_rules import host_problems
from lorastudio.jobs.preflight import preflight_plan
from lorastudio.settings import Settings
from lorastudio.training.speed.compile import compile_problems, wants_compile

GTX_1080 = host_from_facts(
    {
        "cuda": True,
        "devices": [{"name": "NVIDIA GeForce GTX 1080", "total_memory": 8 * 2**30, "capability": [6, 1]}],
    }
)


def test_the_job_service_refuses_compile_on_a_gpu_without_triton_and_auto_does_not_compile(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (hardware, validation, preflight, host_rules):
        monkeypatch.setattr(module, "host_info", lambda: GTX_1080)
    for mode in ("on", "wide"):
        cfg = TrainConfig(family="flux", base_model="/m", data_dir="d", compile=mode)
        (problem,) = host_problems(cfg, settings)
        assert problem.field == "compile"
        assert "compute capability 7.0 or newer" in problem.message
        assert "NVIDIA GeForce GTX 1080 is 6.1: use 'off' or 'auto'" in problem.message
    auto = TrainConfig(family="flux", base_model="/m", data_dir="d", compile="auto")
    assert host_problems(auto, settings) == []
    assert preflight_plan(auto, GTX_1080)["compile"] is False  # auto = off there
    assert GTX_1080.public()["compile_modes"] == ["off", "auto"]  # what the Train form offers


def test_the_engine_refuses_compile_on_a_gpu_without_triton_before_any_model_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 1))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce GTX 1080")
    gpu = torch.device("cuda:0")
    (problem,) = compile_problems("on", gpu)
    assert "NVIDIA GeForce GTX 1080 is 6.1" in problem.message
    assert wants_compile("auto", gpu) is False
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a T4 compiles
    assert compile_problems("on", gpu) == [] and wants_compile("auto", gpu) is True
