"""The wall-time forecast's "same run" records compare the adapter (RELIABILITY 1861): a LoKr,
DoRA or LoHa run is not forecast as measured by a LoRA run of its rank, nor a LoKr of one block
shape by another's; a record written before the signature kept its adapter reads as a LoRA's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.time_forecast import time_forecast
from lorastudio.timings import PHASES, adapter_signature, run_signature, write_record

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
PLAN = {"base_precision": "fp32", "gradient_checkpointing": "off", "offload_blocks": 0, "micro_batch_size": 1}
WORK = {"steps": 11, "texts": 1, "images": 1, "buckets": {"256x256": 1}}


def _record(home: Path, base: Path, name: str, adapter: dict[str, Any] | None) -> None:
    """A record of a 256 px run of 11 steps of 2 s at rank 8 with `adapter` (None: no key, as
    written before it was kept)."""
    signature = run_signature(
        family="flux", base_model=str(base), denoiser="transformer", device_name="cpu", plan=PLAN,
        compiled=False, attention_backend="auto", buckets={"256x256": 1}, batch_size=1, grad_accum=1,
        lora_rank=8, adapter=adapter,
    )  # fmt: skip
    if adapter is None:
        del signature["adapter"]
    phases = dict.fromkeys(PHASES, 1.0) | {"steps": 20.0, "first_step": 2.0}
    record = {"signature": signature, "phases": phases, "s_per_step": 2.0, "steps": 11}
    write_record(home, name, record | {"texts": 1, "latents_encoded": 1})


def _steps_basis(home: Path, base: Path, **adapter: Any) -> str:
    """The basis of the steps phase of the forecast of a run of `adapter` settings."""
    cfg = TrainConfig(
        family="flux", base_model=str(base), data_dir="d", steps=11, resolution=256, lora_rank=8, **adapter
    )
    forecast = time_forecast(cfg, base, CPU, PLAN, False, WORK, home)
    steps = next(p for p in forecast["phases"] if p["name"] == "steps")
    return str(steps["basis"])


def _measured(home: Path, base: Path, **adapter: Any) -> bool:
    """Whether the run of `adapter` settings is forecast from a record of its own signature."""
    return "this base and plan" in _steps_basis(home, base, **adapter)


def test_a_forecast_takes_records_of_its_own_adapter_only(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    (base / "transformer" / "model.safetensors").write_bytes(b"\0" * 1000)
    lora, lokr = tmp_path / "lora", tmp_path / "lokr"
    _record(lora, base, "lora", adapter_signature("lora", None, None))
    assert _measured(lora, base, adapter="lora")
    for other in ({"adapter": "lokr"}, {"adapter": "dora"}, {"adapter": "loha"}):
        assert not _measured(lora, base, **other), other  # before: each "measured" by the LoRA run
    assert "; runs of lora, not this run's lokr (factor -1)" in _steps_basis(lora, base, adapter="lokr")
    _record(lokr, base, "lokr", adapter_signature("lokr", None, None))
    assert _measured(lokr, base, adapter="lokr", lokr_factor=-1)  # null is -1: the same shape
    assert not _measured(lokr, base, adapter="lokr", lokr_factor=4)
    assert not _measured(lokr, base, adapter="lokr", lokr_decompose_both=True)
    assert not _measured(lokr, base, adapter="lora")
    old = tmp_path / "old"  # a record without the key: a LoRA's, as before
    _record(old, base, "old", None)
    assert _measured(old, base, adapter="lora") and not _measured(old, base, adapter="lokr")


def test_a_forecast_from_another_adapters_run_says_so_not_other_bases(tmp_path: Path) -> None:
    # a LoKr run after a LoRA run of the same base was forecast "from 1 earlier run of other bases
    # with this plan" (session 39 journey4, RELIABILITY 1995)
    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    (base / "transformer" / "model.safetensors").write_bytes(b"\0" * 1000)
    _record(tmp_path / "home", base, "lora", adapter_signature("lora", None, None))
    basis = _steps_basis(tmp_path / "home", base, adapter="lokr")
    assert "from 1 earlier run of other adapters with this plan" in basis
    assert "other bases" not in basis


def test_an_older_record_takes_its_adapter_from_its_run_s_lora(tmp_path: Path) -> None:
    """A record written before the signature kept its adapter, of a run whose LoRA sidecar says
    LoKr (RELIABILITY 1970): a LoKr run's measure, not a LoRA run's; a sidecar of another base
    or rank (the folder overwritten since) is not taken."""
    import json

    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    (base / "transformer" / "model.safetensors").write_bytes(b"\0" * 1000)
    home = tmp_path / "home"
    _record(home, base, "lokr-old", None)
    run = home / "outputs" / "lokr-old"
    run.mkdir(parents=True)
    config = {"base_model": str(base), "lora_rank": 8, "adapter": "lokr", "lokr_factor": None}
    (run / "lokr-old.json").write_text(json.dumps({"format": "lorastudio.lora/1", "config": config}))
    assert _measured(home, base, adapter="lokr") and not _measured(home, base, adapter="lora")
    (run / "lokr-old.json").write_text(json.dumps({"config": {**config, "lora_rank": 16}}))
    assert _measured(home, base, adapter="lora") and not _measured(home, base, adapter="lokr")
