"""A peer file that leaves a loss-shaping setting unset trains at the PEER's default once imported,
not lorastudio's (config_import/peer_defaults.py, RELIABILITY 2300-2303): kohya sd-scripts' and
SimpleTuner's min-SNR is off unless named (SDXL's default here is 5), OneTrainer's loss_weight_fn
is CONSTANT by default, and sd-scripts' FLUX.1 draws its noise levels by "sigma" sampling with
discrete_flow_shift 3.0 (lorastudio's FLUX.1 default: logit-normal, unshifted). Each filled
default has a report line naming the peer's rule. Each peer's minimal file -> the imported
config's values, and the weights / noise levels the run then trains at."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lorastudio import families
from lorastudio.config import parse_train_config, resolve_train_config
from lorastudio.config_import import import_config, peer_defaults
from peer_config_checks import every_leaf_reported, strict

SDXL_BASE = "stabilityai/stable-diffusion-xl-base-1.0"
DDPM = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}  # SDXL's schedule


def _imported(path: Path, doc: dict, tmp_path: Path, source: str | None = None) -> tuple[dict, dict]:
    """(the written .json config as the strict config reads it, the report lines by peer key) of
    the peer file `doc` (of the format `source`, None: detected) written at `path`; every leaf of
    it reported."""
    path.write_text(json.dumps(doc), encoding="utf-8")
    result = import_config(path, source, toml=False)
    every_leaf_reported(doc, result.lines)
    return strict(result.text, tmp_path, ".json"), {line.peer: line for line in result.lines}


def _sdxl_weights(data: dict) -> torch.Tensor:
    """[8] the per-sample loss weights the imported SDXL run trains with (min-SNR or none)."""
    from lorastudio.training.noise import DdpmObjective

    cfg = resolve_train_config(parse_train_config(data))
    generator = torch.Generator().manual_seed(5)
    return DdpmObjective(DDPM, cfg.snr_gamma).noise(torch.randn(8, 4, 2, 2), generator).weight


def test_kohya_sdxl_without_min_snr_gamma_trains_without_min_snr(tmp_path: Path) -> None:
    # the old import left snr_gamma out: the run weighted by min-SNR 5, sd-scripts by nothing
    doc = {
        "pretrained_model_name_or_path": SDXL_BASE,
        "network_module": "networks.lora",
        "train_data_dir": "img",
    }
    data, lines = _imported(tmp_path / "kohya.json", doc, tmp_path)
    assert data["snr_gamma"] is None
    assert torch.equal(_sdxl_weights(data), torch.ones(8))
    line = lines["min_snr_gamma"]
    assert (line.outcome, line.ours, line.value) == ("changed", "snr_gamma", None)
    assert line.note.startswith("unset in the file: sd-scripts' default") and "--min_snr_gamma" in line.note
    data, lines = _imported(tmp_path / "kohya.json", {**doc, "min_snr_gamma": ""}, tmp_path)
    assert data["snr_gamma"] is None  # empty is unset too
    data, _ = _imported(tmp_path / "kohya.json", {**doc, "min_snr_gamma": 5}, tmp_path)
    assert data["snr_gamma"] == 5


def _simpletuner(tmp_path: Path, **more: object) -> dict:
    """SimpleTuner's minimal SDXL config.json (with its one local backend) plus `more`."""
    backend = [{"id": "subject", "type": "local", "instance_data_dir": "/data/subject"}]
    (tmp_path / "backends.json").write_text(json.dumps(backend), encoding="utf-8")
    return {"model_family": "sdxl", "model_type": "lora", "data_backend_config": "backends.json", **more}


def test_simpletuner_sdxl_without_snr_gamma_trains_without_min_snr(tmp_path: Path) -> None:
    data, lines = _imported(tmp_path / "config.json", _simpletuner(tmp_path), tmp_path)
    assert data["snr_gamma"] is None and data["base_model"] == SDXL_BASE
    assert torch.equal(_sdxl_weights(data), torch.ones(8))
    assert lines["snr_gamma"].note.startswith("unset in the file: SimpleTuner's default")
    # SimpleTuner's 0 is disabled: was carried as 0 and refused, so the run took 5
    data, lines = _imported(tmp_path / "config.json", _simpletuner(tmp_path, snr_gamma=0), tmp_path)
    assert data["snr_gamma"] is None and lines["snr_gamma"].outcome == "changed"
    data, _ = _imported(tmp_path / "config.json", _simpletuner(tmp_path, snr_gamma=3), tmp_path)
    assert data["snr_gamma"] == 3
    flux = {**_simpletuner(tmp_path, snr_gamma=0), "model_family": "flux"}
    data, lines = _imported(tmp_path / "config.json", flux, tmp_path)
    assert "snr_gamma" not in data and lines["snr_gamma"].note.startswith("not needed here")


@pytest.mark.parametrize(
    ("more", "gamma"),
    [
        ({}, None),  # OneTrainer's default loss_weight_fn: CONSTANT
        ({"loss_weight_fn": "CONSTANT", "loss_weight_strength": 5.0}, None),
        ({"loss_weight_fn": "MIN_SNR_GAMMA", "loss_weight_strength": 3.0}, 3.0),
        ({"loss_weight_fn": "MIN_SNR_GAMMA"}, 5.0),  # its default strength
        ({"min_snr_gamma": 4.0}, 4.0),  # a file before OneTrainer's config version 2
        ({"min_snr_gamma": 0.0}, None),
    ],
)
def test_onetrainer_sdxl_loss_weight_fn_is_read_with_its_default(
    tmp_path: Path, more: dict, gamma: float | None
) -> None:
    doc = {"model_type": "STABLE_DIFFUSION_XL_10_BASE", "base_model_name": SDXL_BASE,
           "concepts": [{"path": "/data/subject"}], **more}  # fmt: skip
    data, lines = _imported(tmp_path / "onetrainer.json", doc, tmp_path, "onetrainer")
    assert data["snr_gamma"] == gamma
    if gamma is None:
        assert torch.equal(_sdxl_weights(data), torch.ones(8))
    if not more:
        assert lines["loss_weight_fn"].note.startswith("unset in the file: OneTrainer's default")


def test_onetrainer_loss_weights_not_offered_are_said(tmp_path: Path) -> None:
    doc = {"model_type": "STABLE_DIFFUSION_XL_10_BASE", "base_model_name": SDXL_BASE,
           "concepts": [{"path": "/data/subject"}], "loss_weight_fn": "P2", "loss_weight_strength": 1.0}  # fmt: skip
    data, lines = _imported(tmp_path / "onetrainer.json", doc, tmp_path)
    assert lines["loss_weight_fn"].outcome == lines["loss_weight_strength"].outcome == "not carried"
    assert lines["loss_weight_fn"].note == "not supported here: min-SNR (snr_gamma) is the one loss weighting"
    assert "snr_gamma" not in data


FLUX = {"pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev", "network_module": "networks.lora_flux",
        "train_data_dir": "img"}  # fmt: skip


def _kohya_sigma_levels(n: int, shift: float) -> torch.Tensor:
    """[n] sd-scripts' default FLUX.1 levels (flux_train_utils.get_noisy_model_input_and_timesteps,
    "sigma" with weighting_scheme uniform): u uniform, the sigma of FlowMatchEulerDiscreteScheduler
    (shift) at timesteps[u x 1000]."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    u = torch.rand(n, generator=torch.Generator().manual_seed(11))
    return scheduler.sigmas[(u * 1000).long()]


def test_kohya_flux_without_sampling_settings_trains_at_sd_scripts_defaults(tmp_path: Path) -> None:
    # the old import left both out: lorastudio's FLUX.1 logit-normal levels, unshifted
    from lorastudio.training.noise import FlowObjective

    data, lines = _imported(tmp_path / "kohya.json", FLUX, tmp_path)
    assert (data["timestep_sampling"], data["flow_shift"]) == ("uniform", 3.0)
    assert lines["timestep_sampling"].note.startswith("unset in the file: sd-scripts' default sigma sampling")
    assert "--discrete_flow_shift default 3.0" in lines["discrete_flow_shift"].note
    assert "sigma_scaled" in lines["model_prediction_type"].note  # the default not offered, said
    cfg = SimpleNamespace(timestep_sampling="uniform", logit_mean=0.0, logit_std=1.0, flow_shift=3.0)
    ours = FlowObjective(families.get("flux"), cfg, {}).sigmas(
        20_000, (128, 128), torch.Generator().manual_seed(3)
    )
    quantiles = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9])
    kohya = _kohya_sigma_levels(20_000, 3.0)
    torch.testing.assert_close(ours.quantile(quantiles), kohya.quantile(quantiles), atol=0.01, rtol=0)


@pytest.mark.parametrize(
    ("more", "want"),
    [
        ({"weighting_scheme": "logit_normal", "logit_mean": 0.5}, ("logit_normal", 3.0, -0.5)),
        ({"timestep_sampling": "sigma"}, ("uniform", 3.0, None)),
        ({"timestep_sampling": "shift"}, ("sigmoid", 3.0, None)),
        ({"discrete_flow_shift": 2.0}, ("uniform", 2.0, None)),  # the old import: "not needed" and dropped
        ({"timestep_sampling": "uniform"}, ("uniform", None, None)),  # sd-scripts shifts no uniform levels
        ({"model_type": "chroma"}, ("uniform", 3.0, None)),  # Chroma: the same flux_train_network
    ],
)
def test_kohya_flux_partial_sampling_settings_take_sd_scripts_defaults(
    tmp_path: Path, more: dict, want: tuple
) -> None:
    data, _ = _imported(tmp_path / "kohya.json", {**FLUX, **more}, tmp_path)
    assert (data["timestep_sampling"], data.get("flow_shift"), data.get("logit_mean")) == want


@pytest.mark.parametrize(
    ("more", "gamma"),
    [({}, None), ({"min_snr_gamma": 0}, None), ({"min_snr_gamma": 5}, 5)],  # the old import: 0 refused, so 5
)
def test_ai_toolkit_sdxl_min_snr_gamma_takes_its_default(
    tmp_path: Path, more: dict, gamma: float | None
) -> None:
    process = {"type": "sd_trainer", "model": {"name_or_path": SDXL_BASE, "arch": "sdxl"},
               "datasets": [{"folder_path": "/data/subject"}], "train": {"steps": 100, **more}}  # fmt: skip
    doc = {"job": "extension", "config": {"name": "run", "process": [process]}}
    data, lines = _imported(tmp_path / "job.json", doc, tmp_path, "ai-toolkit")
    assert data["snr_gamma"] == gamma
    if not more:
        assert lines["config.process[0].train.min_snr_gamma"].note.startswith(
            "unset in the file: ai-toolkit's"
        )


def test_a_peer_default_left_out_of_a_toml_still_names_its_rule(tmp_path: Path) -> None:
    # TOML has no null: the .toml leaves snr_gamma out and says so at its top; the line keeps whose
    # default chose it
    import tomllib

    doc = {
        "pretrained_model_name_or_path": SDXL_BASE,
        "network_module": "networks.lora",
        "train_data_dir": "img",
    }
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    result = import_config(path)
    assert "snr_gamma" not in tomllib.loads(result.text)
    assert "# off in the imported config (null), which TOML cannot write: snr_gamma\n" in result.text
    note = {line.peer: line for line in result.lines}["min_snr_gamma"].note
    assert note.startswith("left out of the .toml, not refused") and "--set snr_gamma=null" in note
    assert note.endswith("; unset in the file: " + peer_defaults.KOHYA_SNR)


def test_simpletuner_flow_family_without_a_shift_takes_its_default_3(tmp_path: Path) -> None:
    # the old import left flow_shift out: FLUX.1 here trains unshifted, SimpleTuner at shift 3
    flux = {**_simpletuner(tmp_path), "model_family": "flux"}
    data, lines = _imported(tmp_path / "config.json", flux, tmp_path)
    assert data["flow_shift"] == 3.0 and "snr_gamma" not in data
    assert lines["flow_schedule_shift"].note.startswith("unset in the file: SimpleTuner's default")
    data, _ = _imported(tmp_path / "config.json", {**flux, "flow_schedule_shift": 1.5}, tmp_path)
    assert data["flow_shift"] == 1.5
    data, _ = _imported(
        tmp_path / "config.json",
        {**flux, "model_family": "chroma", "pretrained_model_name_or_path": "lodestones/Chroma"},
        tmp_path,
    )
    assert "flow_shift" not in data  # its own schedule: not filled
