"""The job service's and `lorastudio train --check`'s checks judge the GPU a run trains on
(jobs/run_host.py), not GPU 0: the GPU probe's answer is faked as on a box of an RTX 3090
(cuda:0, sm_86) and an RTX 2080 Ti (cuda:1, sm_75, no bf16, no flash / cuDNN attention)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs import hardware, host_rules, preflight, validation
from lorastudio.jobs.hardware import host_for_device, host_from_facts
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings

GIB = 2**30
BOX = host_from_facts(
    {
        "cuda": True,
        "devices": [
            {"name": "NVIDIA GeForce RTX 3090", "total_memory": 24 * GIB, "capability": [8, 6]},
            {"name": "NVIDIA GeForce RTX 2080 Ti", "total_memory": 11 * GIB, "capability": [7, 5]},
        ],
    }
)


@pytest.fixture
def two_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (hardware, validation, preflight, host_rules):
        monkeypatch.setattr(module, "host_info", lambda: BOX)


def _problems(raw: dict[str, object], settings: Settings, device: str | None = None) -> list[str]:
    try:
        validate_run(raw, settings, live_output_names=set(), device=device)
    except ConfigError as err:
        return [f"{p.field}: {p.message}" for p in err.problems]
    return []


@pytest.mark.usefixtures("two_cards")
def test_the_checks_judge_the_gpu_the_run_trains_on_not_gpu_0(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    # `train --check --device cuda:1`: the 2080 Ti's precisions and attention kernels
    bf16, flash = {**raw, "base_precision": "bf16"}, {**raw, "attention_backend": "flash"}
    (problem,) = _problems(bf16, settings, "cuda:1")
    assert problem.startswith(
        "base_precision: bf16 is not available on this host (NVIDIA GeForce RTX 2080 Ti)"
    )
    (problem,) = _problems(flash, settings, "cuda:1")
    assert problem.startswith("attention_backend:") and "RTX 2080 Ti" in problem
    assert _problems(bf16, settings, "cuda:0") == [] and _problems(flash, settings) == []
    host = host_for_device("cuda:1")
    assert (host.name, host.memory_gb, host.gpu_memory_gb) == (
        "NVIDIA GeForce RTX 2080 Ti",
        11.0,
        (11.0, 24.0),
    )
    run = validate_run(raw, settings, live_output_names=set(), device="cuda:1")
    report = preflight_report(run, host, home=settings.home)
    assert report["precision"]["base_dtype"] == "fp32" and report["memory"]["gpu_gb"] == 11.0
    # the job service's data-parallel run over both cards: what every rank must run
    pair = {**bf16, "num_gpus": 2, "batch_size": 2}
    (problem,) = _problems(pair, settings)
    assert "NVIDIA GeForce RTX 2080 Ti (the weakest of the run's 2 GPUs)" in problem
    assert _problems({**pair, "num_gpus": 1}, settings) == []


def test_a_device_index_of_other_digits_is_no_gpu_index_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RELIABILITY 1162: `lorastudio train --check --device cuda:²` ended in a traceback of
    ValueError (str.isdigit takes "²", int() does not) before the device's own check named it;
    "cuda:١" was read as GPU 1, which torch refuses."""
    monkeypatch.setattr(hardware, "host_info", lambda: BOX)
    for device in ("cuda:\u00b2", "cuda:\u0661"):
        assert host_for_device(device).name == "NVIDIA GeForce RTX 3090", device  # as "cuda": GPU 0's facts
