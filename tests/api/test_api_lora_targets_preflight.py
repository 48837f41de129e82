"""lora_targets / rank_pattern / alpha_pattern are checked against the denoiser's real module
names at the API's preflight and start (jobs/target_check.py: the engine's meta-device check in a
child process, the server torch-free), all problems at once with the field named; the default
targets start no child, and a start after its preflight reuses the cached answer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.target_check_child import IN_PROCESS
from tests.target_check_patience import patient_target_check  # noqa: F401  (autouse)

from lorastudio.jobs import target_check
from lorastudio.settings import Settings


def _shapes(settings: Settings, sample_dataset: Path) -> None:
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")


def test_a_wrong_lora_target_is_refused_at_preflight_and_start_with_the_field_named(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also where the server's PYTHONIOENCODING (which the child inherits) is not UTF-8 and the
    config holds non-ASCII text: the child read its stdin in that encoding and failed, so the
    check was left to the start (RELIABILITY 1029)."""
    _shapes(settings, sample_dataset)
    monkeypatch.setenv("PYTHONIOENCODING", "ascii")
    config = flux_config(
        lora_targets=["to_q", "no_such_layer"],
        rank_pattern={"to_k": 8},
        output_name="bad-targets",
        trigger_word="Hündchen_猫",
    )
    before = target_check.spawned
    answer = client.post("/api/train/preflight", json={"config": {**config, "data_dir": "no-such-dataset"}})
    assert answer.status_code == 400, answer.text
    problems = answer.json()["problems"]
    assert {
        "field": "lora_targets",
        "message": "no layer of the FluxTransformer2DModel is named no_such_layer",
    } in (problems)
    assert any(p["field"] == "data_dir" for p in problems)  # every problem at once, the dataset's too
    assert target_check.spawned == before + 1
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 400, started.text
    assert [p for p in started.json()["problems"] if p["field"] == "lora_targets"] == [
        {"field": "lora_targets", "message": "no layer of the FluxTransformer2DModel is named no_such_layer"}
    ]
    assert target_check.spawned == before + 1  # the cached answer: no second child
    assert client.get("/api/runs").json()["runs"] == []  # nothing recorded


def test_a_pattern_that_adapts_nothing_is_refused_and_good_names_pass(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _shapes(settings, sample_dataset)
    monkeypatch.setattr(target_check, "subprocess", IN_PROCESS)  # the real child: the test above
    before = target_check.spawned
    wrong = client.post(
        "/api/train/preflight",
        json={"config": flux_config(lora_targets=["to_q", "to_k"], alpha_pattern={"to_out.0": 4.0})},
    )
    assert wrong.status_code == 400, wrong.text
    assert wrong.json()["problems"] == [
        {"field": "alpha_pattern", "message": "'to_out.0' matches no adapted layer (peft would ignore it)"}
    ]
    good = client.post(
        "/api/train/preflight",
        json={"config": flux_config(lora_targets=["to_q", "to_k"], rank_pattern={"to_k": 8})},
    )
    assert good.status_code == 200, good.text
    assert good.json()["notes"] == []  # the child checked it (test_api_lora_targets_not_checked: the notes)
    assert target_check.spawned == before + 2  # a child's answer each, not a cached one


def test_the_default_targets_start_no_child(
    client: TestClient, settings: Settings, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    _shapes(settings, sample_dataset)
    before = target_check.spawned
    assert client.post("/api/train/preflight", json={"config": flux_config()}).status_code == 200
    assert target_check.spawned == before


def test_init_lora_layers_outside_the_targets_are_refused_at_preflight(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The init file's layers against the run's targets (training/adapters/init_lora.init_problems) in the
    same child: the header alone cannot tell them (a kohya file names fused layers otherwise)."""
    import torch
    from safetensors.torch import save_file

    _shapes(settings, sample_dataset)
    monkeypatch.setattr(target_check, "subprocess", IN_PROCESS)  # the real child: the test above
    layers = ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_mlp")  # proj_mlp: no target
    tensors = {f"transformer.{m}.lora_{p}.weight": torch.ones(4, 4) for m in layers for p in "AB"}
    init = tmp_path / "wide.safetensors"
    save_file(tensors, str(init), metadata={"lorastudio.family": "flux"})
    before = target_check.spawned
    answer = client.post("/api/train/preflight", json={"config": flux_config(init_lora=str(init))})
    assert answer.status_code == 400, answer.text
    (problem,) = answer.json()["problems"]
    assert problem["field"] == "init_lora" and "single_transformer_blocks.0.proj_mlp" in problem["message"]
    assert target_check.spawned == before + 1
    narrow = {f"transformer.{layers[0]}.lora_{p}.weight": torch.ones(4, 4) for p in "AB"}
    save_file(narrow, str(init), metadata={"lorastudio.family": "flux"})  # rewritten in place: asked again
    again = client.post("/api/train/preflight", json={"config": flux_config(init_lora=str(init))})
    assert again.status_code == 200, again.text
    assert target_check.spawned == before + 2
