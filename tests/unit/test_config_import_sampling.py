"""kohya's timestep sampling imported as the noise levels kohya trains at (session 39 maths
audit): its default "sigma" sampling draws u from weighting_scheme's density and reads the sigma
of its FlowMatchEulerDiscreteScheduler(shift = discrete_flow_shift) at timesteps[u x 1000],
whose timesteps run from the noisy end, so sigma = shift(1 - u). The import carries
discrete_flow_shift as flow_shift and negates logit_mean; the imported run's sigmas then follow
kohya's procedure, computed here with diffusers' scheduler class (kohya's sd3_train_utils copy
of it) and training_utils' compute_density_for_timestep_sampling. Also kohya's loss weights: an
SDXL Huber loss without a schedule (sd-scripts' default snr) and min_snr_gamma 0 (off)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling

from lorastudio import families
from lorastudio.config_import import import_config
from lorastudio.training.noise import FlowObjective
from peer_config_checks import strict

N = 20_000
QUANTILES = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9])
ARGS = {
    "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
    "network_module": "networks.lora_flux",
    "train_data_dir": "img",
    "timestep_sampling": "sigma",
    "weighting_scheme": "logit_normal",
    "logit_mean": 0.8,
    "logit_std": 1.2,
    "discrete_flow_shift": 3.0,
}


def _kohya_sigmas(mean: float, std: float, shift: float) -> torch.Tensor:
    """[N] kohya's sigma sampling (flux_train_utils.get_noisy_model_input_and_timesteps)."""
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    with torch.random.fork_rng():  # the draws use the global generator: the suite's is left as it was
        torch.manual_seed(11)
        u = compute_density_for_timestep_sampling("logit_normal", N, logit_mean=mean, logit_std=std)
    indices = (u * scheduler.config.num_train_timesteps).long()
    return scheduler.sigmas[indices]  # get_sigmas at timesteps[indices]


def test_kohyas_sigma_sampling_is_imported_as_the_levels_kohya_trains_at(tmp_path: Path) -> None:
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps(ARGS))
    result = import_config(path, toml=False)
    data = strict(result.text, tmp_path, ".json")
    assert (data["timestep_sampling"], data["flow_shift"]) == ("logit_normal", 3.0)
    assert (data["logit_mean"], data["logit_std"]) == (-0.8, 1.2)  # the old import: 0.8 and no shift
    by_peer = {line.peer: line for line in result.lines}
    assert by_peer["logit_mean"].outcome == "changed" and "-m here" in by_peer["logit_mean"].note
    assert by_peer["discrete_flow_shift"].outcome == "changed"

    cfg = SimpleNamespace(
        timestep_sampling=data["timestep_sampling"],
        logit_mean=data["logit_mean"],
        logit_std=data["logit_std"],
        flow_shift=data["flow_shift"],
    )
    ours = FlowObjective(families.get("flux"), cfg, {}).sigmas(
        N, (128, 128), torch.Generator().manual_seed(3)
    )
    kohya = _kohya_sigmas(0.8, 1.2, 3.0)
    # kohya's levels are discretised to 1/1000 of its schedule: 0.01 holds at 20,000 draws
    torch.testing.assert_close(ours.quantile(QUANTILES), kohya.quantile(QUANTILES), atol=0.01, rtol=0)


def test_a_shift_without_kohyas_sampling_is_not_carried_alone(tmp_path: Path) -> None:
    """A "sigma" sampling whose weighting_scheme is not offered (mode) is not carried, nor is
    the shift of its levels; with "uniform" sampling, discrete_flow_shift shapes nothing."""
    path = tmp_path / "kohya.json"
    args = {k: v for k, v in ARGS.items() if k not in ("logit_mean", "logit_std")}
    path.write_text(json.dumps({**args, "weighting_scheme": "mode"}))
    data = strict(import_config(path, toml=False).text, tmp_path, ".json")
    assert "flow_shift" not in data and "timestep_sampling" not in data
    path.write_text(json.dumps({**args, "timestep_sampling": "uniform", "weighting_scheme": "none"}))
    result = import_config(path, toml=False)
    data = strict(result.text, tmp_path, ".json")
    assert data["timestep_sampling"] == "uniform" and "flow_shift" not in data
    by_peer = {line.peer: line for line in result.lines}
    assert by_peer["discrete_flow_shift"].outcome == "not carried"


def test_a_sigma_sampling_without_weighting_scheme_says_kohyas_default(tmp_path: Path) -> None:
    # "by weighting_scheme uniform" named a key the file did not have (session 39 journey4)
    path = tmp_path / "kohya.json"
    args = {k: v for k, v in ARGS.items() if k not in ("logit_mean", "logit_std", "weighting_scheme")}
    path.write_text(json.dumps(args))
    note = {line.peer: line for line in import_config(path, toml=False).lines}["timestep_sampling"].note
    assert note == "kohya's sigma sampling, by weighting_scheme uniform (unset in the file: kohya's default)"


def test_kohyas_huber_loss_without_a_schedule_takes_kohyas_default(tmp_path: Path) -> None:
    """sd-scripts' huber_schedule defaults to snr, (1 - c) / (1 + sqrt((1 - abar) / abar))^2 + c
    per sample (train_util.get_huber_threshold_if_needed), which it computes for DDPM models only:
    an SDXL file without one imports snr (the old import: constant, lorastudio's default), whose
    thresholds are that formula on the scheduler's alphas_cumprod; a FLUX.1 file keeps ours."""
    from diffusers import DDPMScheduler

    from lorastudio.config import parse_train_config, resolve_train_config
    from lorastudio.training.losses import loss_settings
    from lorastudio.training.noise import DdpmObjective

    sdxl = {
        "pretrained_model_name_or_path": "stabilityai/stable-diffusion-xl-base-1.0",
        "train_data_dir": "img",
    }
    path = tmp_path / "kohya.json"
    path.write_text(
        json.dumps({**sdxl, "network_module": "networks.lora", "loss_type": "huber", "huber_c": 0.2})
    )
    result = import_config(path, toml=False)
    data = strict(result.text, tmp_path, ".json")
    assert (data["family"], data["loss"], data["huber_schedule"], data["huber_c"]) == (
        "sdxl",
        "huber",
        "snr",
        0.2,
    )
    assert any(line.ours == "huber_schedule" and "default" in line.note for line in result.lines)

    scheduler = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}
    cfg = resolve_train_config(parse_train_config(data))  # as strict() read it
    batch = DdpmObjective(scheduler, None, loss=loss_settings(cfg)).noise(
        torch.randn(16, 4, 2, 2), torch.Generator()
    )
    abar = DDPMScheduler.from_config(scheduler).alphas_cumprod[batch.noise_level]  # [16]
    kohya = (1 - 0.2) / (1 + ((1.0 - abar) / abar) ** 0.5) ** 2 + 0.2
    torch.testing.assert_close(batch.loss_c, kohya.float(), atol=1e-6, rtol=1e-6)

    path.write_text(json.dumps({**ARGS, "loss_type": "huber"}))
    assert "huber_schedule" not in strict(import_config(path, toml=False).text, tmp_path, ".json")


def test_kohyas_min_snr_gamma_of_zero_is_no_weighting_not_lorastudios_default(tmp_path: Path) -> None:
    """kohya (and its GUI, which writes 0 for off) trains without min-SNR at min_snr_gamma 0; the
    old import reported it "0 is unset" and the SDXL run took lorastudio's default 5. Now it is
    snr_gamma null: every per-sample weight 1 (a .toml, which has no null, says how to ask)."""
    from lorastudio.config import parse_train_config, resolve_train_config
    from lorastudio.training.noise import DdpmObjective

    sdxl = {
        "pretrained_model_name_or_path": "stabilityai/stable-diffusion-xl-base-1.0",
        "train_data_dir": "img",
    }
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps({**sdxl, "network_module": "networks.lora", "min_snr_gamma": 0}))
    data = strict(import_config(path, toml=False).text, tmp_path, ".json")
    cfg = resolve_train_config(parse_train_config(data))
    assert cfg.snr_gamma is None
    scheduler = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}
    batch = DdpmObjective(scheduler, cfg.snr_gamma).noise(torch.randn(8, 4, 2, 2), torch.Generator())
    assert torch.equal(batch.weight, torch.ones(8))
    lines = {line.peer: line for line in import_config(path, toml=True).lines}
    assert "--set snr_gamma=null" in lines["min_snr_gamma"].note
