"""The training maths against the references' own code (session 39 maths audit), on the CPU:

- the noise levels: diffusers' DreamBooth scripts draw u with training_utils'
  compute_density_for_timestep_sampling and index the scheduler's (descending) timesteps with
  it, so their sigma is about 1 - u: their `--logit_mean m` is lorastudio's `logit_mean -m`
  (lorastudio reads it as the SD3 paper does, above 0 = noisier; said in the field's help);
- each flow family's training shift at a run's latent size: the family pipeline module's own
  calculate_shift (mu at the pipeline's image_seq_len, from the loaded scheduler's config, as
  the pipeline reads it) and FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=u, mu=mu) on
  the tiny model's scheduler config; FLUX.1 / Kontext the scripts' unshifted levels; FLUX.2 /
  klein calculate_shift, which is not Flux2Pipeline's step-count-dependent empirical mu;
- the EMA: diffusers.training_utils.EMAModel with min_decay = decay and update_after_step = -1
  (its warmup and its "first update copies the weights" switched off) is lorastudio's plain EMA,
  also across a state_dict round trip half-way;
- the LR schedule of every scheduler with warmup: a run stopped at step k and restored from the
  state_dicts (through torch.save, as a checkpoint) continues diffusers' get_scheduler's
  uninterrupted sequence; the first step of a warmup is LR 0, as diffusers' own is;
- min-SNR against training_utils.compute_snr, the flow loss weight against
  compute_loss_weighting_for_sd3; the LoKr forecast's factorization against peft's; the
  LyCORIS-layout LoKr / LoHa tensors against LyCORIS' own modules (where LyCORIS is installed)."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.optimization import get_scheduler
from diffusers.training_utils import EMAModel, compute_density_for_timestep_sampling

from lorastudio import families
from lorastudio.training.ema import AdapterEma
from lorastudio.training.noise import FlowObjective
from lorastudio.training.optim import make_lr_scheduler

N = 20_000
QUANTILES = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9])


def _script_sigmas(mean: float, std: float, shift: float) -> torch.Tensor:
    """[N] the sigmas of diffusers' DreamBooth scripts (train_dreambooth_lora_sd3 / z_image):
    u from compute_density_for_timestep_sampling, timesteps = scheduler.timesteps[(u * T).long()],
    each sigma found as the scripts' get_sigmas finds it."""
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    with torch.random.fork_rng():  # the draws use the global generator: the suite's is left as it was
        torch.manual_seed(3)  # compute_density_for_timestep_sampling draws from the global generator
        u = compute_density_for_timestep_sampling("logit_normal", N, logit_mean=mean, logit_std=std)
    indices = (u * scheduler.config.num_train_timesteps).long()
    timesteps = scheduler.timesteps[indices]  # [N]
    schedule = scheduler.timesteps
    found = [(schedule == t).nonzero().item() for t in timesteps[:50]]  # get_sigmas' lookup
    assert found == indices[:50].tolist()  # so the lookup of every draw is its index
    return scheduler.sigmas[indices]  # [N]


def _our_sigmas(mean: float, std: float, shift: float) -> torch.Tensor:
    cfg = SimpleNamespace(timestep_sampling="logit_normal", logit_mean=mean, logit_std=std, flow_shift=None)
    objective = FlowObjective(families.get("z-image"), cfg, {"shift": shift})
    return objective.sigmas(N, (64, 64), torch.Generator().manual_seed(5))


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_the_scripts_logit_mean_is_ours_negated(shift: float) -> None:
    for mean in (0.0, 0.8):
        script = _script_sigmas(mean, 1.0, shift).quantile(QUANTILES)
        ours_negated = _our_sigmas(-mean, 1.0, shift).quantile(QUANTILES)
        # the scripts' levels are discretised to 1/1000 of the schedule: 0.01 holds at 20,000 draws
        torch.testing.assert_close(ours_negated, script, atol=0.01, rtol=0)
    ours = _our_sigmas(0.8, 1.0, shift).quantile(QUANTILES)
    assert ours[2] > _our_sigmas(0.0, 1.0, shift).quantile(QUANTILES)[2] + 0.1  # above 0: noisier
    assert (ours - _script_sigmas(0.8, 1.0, shift).quantile(QUANTILES)).abs().max() > 0.1


def _pipeline_mu(family: str, image_seq_len: int, scheduler: FlowMatchEulerDiscreteScheduler) -> float | None:
    """mu as the family's pipeline computes it at `image_seq_len` (None: the family trains on
    its scheduler's static shift, or, FLUX.1 / Kontext, unshifted)."""
    from diffusers.pipelines.chroma import pipeline_chroma
    from diffusers.pipelines.flux import pipeline_flux
    from diffusers.pipelines.krea2 import pipeline_krea2
    from diffusers.pipelines.qwenimage import pipeline_qwenimage, pipeline_qwenimage_edit_plus

    shift_of = {
        "chroma": (pipeline_chroma.calculate_shift, 4096),
        "qwen-image": (pipeline_qwenimage.calculate_shift, 4096),
        "qwen-image-edit": (pipeline_qwenimage_edit_plus.calculate_shift, 4096),
        "krea2": (pipeline_krea2.calculate_shift, 6400),
        # FLUX.2: calculate_shift, not Flux2Pipeline's empirical mu (deliberate, families/flux2.py)
        "flux2": (pipeline_flux.calculate_shift, 4096),
        "flux2-klein": (pipeline_flux.calculate_shift, 4096),
    }
    if family not in shift_of:
        return None
    calculate, max_default = shift_of[family]
    c = scheduler.config
    return calculate(
        image_seq_len,
        c.get("base_image_seq_len", 256),
        c.get("max_image_seq_len", max_default),
        c.get("base_shift", 0.5),
        c.get("max_shift", 1.15),
    )


FLOW = [
    "flux",
    "flux-kontext",
    "chroma",
    "qwen-image",
    "qwen-image-edit",
    "krea2",
    "z-image",
    "flux2",
    "flux2-klein",
]


@pytest.mark.parametrize("family", FLOW)
def test_each_flow_familys_shift_is_its_pipelines_at_the_runs_size(tiny_model, family: str) -> None:
    fam = families.get(family)
    raw = fam.scheduler_config(str(tiny_model(family)), None)  # as a run reads it
    # shift_terminal (Qwen-Image's 0.02) stretches an inference schedule to end there; a sampled level has no end
    scheduler = FlowMatchEulerDiscreteScheduler.from_config({**raw, "shift_terminal": None})
    u = torch.linspace(0.02, 0.98, 49)  # [49]
    cfg = SimpleNamespace(flow_shift=None)
    for height, width in ((1024, 1024), (768, 1344)):  # the run's image size in pixels
        h, w = height // fam.spec.vae_scale_factor, width // fam.spec.vae_scale_factor  # latent cells
        ours = fam.shift_sigmas(u, (h, w), cfg, raw)  # [49]
        tokens = (h // fam.spec.patch_size) * (w // fam.spec.patch_size)  # the pipeline's latents.shape[1]
        mu = _pipeline_mu(family, tokens, scheduler)
        if family in ("flux", "flux-kontext"):  # the DreamBooth script's unshifted levels
            torch.testing.assert_close(ours, u, atol=0, rtol=0)
            continue
        scheduler.set_timesteps(sigmas=u.tolist(), mu=mu)
        reference = scheduler.sigmas[:-1]  # [49] the scheduler's own shift (its appended 0 left out)
        torch.testing.assert_close(torch.as_tensor(ours, dtype=torch.float32), reference, atol=2e-6, rtol=0)
        if family == "z-image":  # a static shift: the size does not move it
            assert mu is None and not raw["use_dynamic_shifting"]


def test_flux2s_training_mu_is_not_the_pipelines_empirical_one() -> None:
    """The deliberate difference (families/flux2.py): Flux2Pipeline's mu also depends on the
    inference step count; training uses the scheduler config's size rule."""
    from diffusers.pipelines.flux import pipeline_flux
    from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

    tokens = 64 * 64  # 1024 px
    ours = pipeline_flux.calculate_shift(tokens, 256, 4096, 0.5, 1.15)
    assert ours == pytest.approx(1.15)
    assert abs(compute_empirical_mu(tokens, 50) - ours) > 0.3
    assert compute_empirical_mu(tokens, 50) != pytest.approx(compute_empirical_mu(tokens, 28))


def _walk(params: list[torch.nn.Parameter], seed: int) -> None:
    """Move `params` as an optimizer step would, once (the same moves for the same seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=g) * 0.1)


@pytest.mark.parametrize("decay", [0.5, 0.9, 0.999])
def test_our_ema_is_diffusers_ema_model_without_its_warmup(decay: float) -> None:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.zeros(2, 4))]  # a LoRA's B: 0
    ours = AdapterEma({"a": params[0], "b": params[1]}, decay)
    reference = EMAModel(params, decay=decay, min_decay=decay, update_after_step=-1)
    warmed = EMAModel(params, decay=decay)  # diffusers' default: (1 + t) / (10 + t), first update = weights
    for step in range(1, 9):
        _walk(params, seed=step)
        ours.update(step)
        reference.step(params)
        warmed.step(params)
        if step == 4:  # a checkpoint half-way: both states through torch.save, into fresh objects
            buffer = io.BytesIO()
            torch.save({"ours": ours.state_dict(), "reference": reference.state_dict()}, buffer)
            buffer.seek(0)
            saved = torch.load(buffer, weights_only=True)
            ours = AdapterEma({"a": params[0], "b": params[1]}, decay)
            ours.load_state_dict(saved["ours"])
            reference = EMAModel(params, decay=decay, min_decay=decay, update_after_step=-1)
            reference.load_state_dict(saved["reference"])
        for name, shadow in zip(("a", "b"), reference.shadow_params, strict=True):
            torch.testing.assert_close(ours.shadow[name], shadow, atol=1e-6, rtol=1e-6)
    assert ours.updates == reference.optimization_step == 8
    if decay > 0.5:  # the default EMAModel is another average: its warmup is what lorastudio leaves out
        assert (ours.shadow["b"] - warmed.shadow_params[1]).abs().max() > 1e-3


@pytest.mark.parametrize(
    "name, extra",
    [
        ("linear", {}),
        ("cosine", {}),
        ("cosine_with_restarts", {"lr_cycles": 2}),
        ("polynomial", {"lr_power": 2.0}),
        ("constant_with_warmup", {}),
    ],
)
def test_a_resumed_schedule_continues_diffusers_uninterrupted_one(name: str, extra: dict) -> None:
    total, warmup, stop_at = 12, 3, 5
    cfg = SimpleNamespace(
        lr_scheduler=name,
        lr_warmup_steps=warmup,
        lr_cycles=extra.get("lr_cycles"),
        lr_power=extra.get("lr_power"),
        optimizer="adamw",
        adafactor_relative_step=None,
        learning_rate=1e-3,
    )

    def optimizer() -> torch.optim.Optimizer:
        return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)

    options = {"num_cycles": extra.get("lr_cycles", 1), "power": extra.get("lr_power", 1.0)}
    reference_opt = optimizer()
    reference = get_scheduler(
        name, reference_opt, num_warmup_steps=warmup, num_training_steps=total, **options
    )
    expected = []
    for _ in range(total):
        expected.append(reference.get_last_lr()[0])  # the LR the next step applies
        reference_opt.step()
        reference.step()
    assert expected[0] == 0.0  # diffusers' warmup starts at 0

    got = []
    opt = optimizer()
    schedule = make_lr_scheduler(opt, cfg, total)  # type: ignore[arg-type]
    for step in range(total):
        if step == stop_at:  # stopped and resumed: fresh objects, the saved states through torch.save
            buffer = io.BytesIO()
            torch.save({"optimizer": opt.state_dict(), "scheduler": schedule.state_dict()}, buffer)
            buffer.seek(0)
            saved = torch.load(buffer, weights_only=True)
            opt = optimizer()
            schedule = make_lr_scheduler(opt, cfg, total)  # type: ignore[arg-type]
            opt.load_state_dict(saved["optimizer"])
            schedule.load_state_dict(saved["scheduler"])
        got.append(schedule.get_last_lr()[0])
        assert opt.param_groups[0]["lr"] == got[-1]  # what the optimizer applies
        opt.step()
        schedule.step()
    assert got == expected
    assert all(math.isfinite(v) for v in got)


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_min_snr_weights_are_the_scripts_from_training_utils_compute_snr(prediction_type: str) -> None:
    """train_dreambooth_lora_sdxl.py: min(compute_snr(t), gamma), then / snr (epsilon) or
    / (snr + 1) (v), per sample; the flow families' weight is compute_loss_weighting_for_sd3's
    default ("none", the FLUX.1 / SD3 scripts' --weighting_scheme default)."""
    from diffusers import DDPMScheduler
    from diffusers.training_utils import compute_loss_weighting_for_sd3, compute_snr

    from lorastudio.training.noise import DdpmObjective

    config = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}
    config = {**config, "num_train_timesteps": 1000, "prediction_type": prediction_type}
    objective = DdpmObjective(config, snr_gamma=5.0)
    batch = objective.noise(torch.randn(64, 4, 2, 2), torch.Generator().manual_seed(2))
    snr = compute_snr(DDPMScheduler.from_config(config), batch.noise_level)  # [64]
    clipped = torch.stack([snr, 5.0 * torch.ones_like(snr)], dim=1).min(dim=1)[0]
    expected = clipped / snr if prediction_type == "epsilon" else clipped / (snr + 1)
    torch.testing.assert_close(batch.weight, expected, atol=0, rtol=2e-6)

    cfg = SimpleNamespace(timestep_sampling="logit_normal", logit_mean=0.0, logit_std=1.0, flow_shift=None)
    flow = FlowObjective(families.get("flux"), cfg, {}).noise(torch.randn(8, 4, 2, 2), torch.Generator())
    assert torch.equal(flow.weight, compute_loss_weighting_for_sd3("none", flow.noise_level))


def test_the_lokr_forecast_factors_each_layer_as_peft_builds_it() -> None:
    """jobs/adapter_params restates peft's factorization (the server imports no peft): the same
    split for every dimension up to 4096 and factor up to 128, including peft's order where the
    factor exceeds the other part (64 of 320 -> (64, 5); LyCORIS's own rule gives (5, 64): Known
    problems)."""
    from peft.tuners.lokr.layer import factorization as peft_factorization

    from lorastudio.jobs.adapter_params import factorization

    for dimension in range(1, 4097, 7):
        for factor in (-1, 1, 2, 4, 5, 8, 16, 32, 64, 128):
            assert factorization(dimension, factor) == peft_factorization(dimension, factor), (
                dimension,
                factor,
            )
    assert factorization(320, 64) == (64, 5)


@pytest.mark.parametrize(
    "adapter, settings",
    [
        ("lokr", {"r": 4, "alpha": 8}),  # full w1 and w2 (alpha / r folded into w1)
        ("lokr", {"r": 2, "alpha": 8}),  # low-rank w2
        ("lokr", {"r": 4, "alpha": 8, "decompose_both": True, "decompose_factor": 4}),
        ("loha", {"r": 4, "alpha": 8}),
    ],
)
def test_our_lycoris_file_is_lycoris_own_weight(adapter: str, settings: dict) -> None:
    """Where LyCORIS is installed (not in the project's venv: a throwaway copy on PYTHONPATH):
    the LyCORIS-layout tensors lorastudio writes for a peft LoKr / LoHa layer, loaded by LyCORIS'
    own make_module_from_state_dict, give LyCORIS' forward weight (get_weight) = peft's delta."""
    pytest.importorskip("lycoris")
    from lycoris.modules.loha import LohaModule
    from lycoris.modules.lokr import LokrModule
    from peft import LoHaConfig, LoKrConfig, inject_adapter_in_model

    from lorastudio.lora.lycoris import peft_to_lycoris
    from lorastudio.training.adapters.lora import module_scales

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("proj", torch.nn.Linear(64, 48))
    config = (LoKrConfig if adapter == "lokr" else LoHaConfig)(target_modules=["proj"], **settings)
    model = inject_adapter_in_model(config, model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lokr_" in name or "hada_" in name:
                p.add_(torch.randn_like(p) * 0.3)  # no longer a no-op
    delta = model.proj.get_delta_weight("default").detach()  # [48, 64]
    tensors = {n.replace(".default", ""): p.detach() for n, p in model.named_parameters() if "_w" in n}
    parts = {
        k.split(".", 1)[1]: v for k, v in peft_to_lycoris(tensors, adapter, module_scales(model)).items()
    }
    with torch.no_grad():
        if adapter == "lokr":
            names = ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b")
            module = LokrModule.make_module_from_state_dict(
                "x", torch.nn.Linear(64, 48), *(parts.get(n) for n in names), None, None, parts["alpha"], None
            )
        else:
            names = ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")
            module = LohaModule.make_module_from_state_dict(
                "x", torch.nn.Linear(64, 48), *(parts[n] for n in names), None, None, parts["alpha"], None
            )
        torch.testing.assert_close(module.get_weight(module.shape), delta, atol=1e-6, rtol=1e-6)
