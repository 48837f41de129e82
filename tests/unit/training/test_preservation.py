"""Differential output preservation (TrainConfig.preservation) on the tiny FLUX.1 (CPU): the
target is exactly the base model's prediction (the adapter disabled: equal to a freshly loaded
base), the adapter comes back on after it, the LoRA's output on class-word prompts drifts less
from the base's than without it, the texts are the captions with the trigger replaced (or the
prompts), a run resumes bitwise, and the combinations it cannot honour are refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.config_resolve import family_problems
from lorastudio.data.preservation_texts import PreservationTexts, replace_trigger
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.preservation import base_prediction

CPU = torch.device("cpu")
KEEP = {"class_word": "shape", "weight": 1.0}


def _cfg(make_config: Callable[..., TrainConfig], **kw: object) -> TrainConfig:
    base = {"trigger_word": "sks", "learning_rate": 2e-2, "steps": 6, "batch_size": 2, "seed": 1}
    return make_config("flux", **{**base, **kw})


def _inputs(cfg: TrainConfig, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, dict, dict]:
    """Fixed noisy latents [B, C, 4, 4], noise levels [B], the prompts' conditioning, batch info."""
    fam = families.get("flux")
    encoders = fam.load_text_encoders(cfg.base_model, None, torch.float32, CPU)
    cond = fam.collate_conditioning(fam.encode_prompts(encoders, prompts, cfg))
    gen = torch.Generator().manual_seed(5)
    b, side = len(prompts), 32 // fam.spec.vae_scale_factor
    noisy = torch.randn(b, fam.spec.latent_channels, side, side, generator=gen)  # [B, C, h, w]
    level = torch.linspace(0.3, 0.9, b)  # [B]
    info = {"original_size": [(32, 32)] * b, "crop_top_left": [(0, 0)] * b, "target_size": (32, 32)}
    return noisy, level, cond, info


def _drift(cfg: TrainConfig, denoiser: torch.nn.Module, prompts: list[str]) -> float:
    """Mean squared distance between the LoRA's and the base's predictions on `prompts`."""
    fam = families.get("flux")
    noisy, level, cond, info = _inputs(cfg, prompts)
    with torch.no_grad():
        lora = fam.predict(denoiser, noisy, level, cond, info, cfg)
    base = base_prediction(fam, denoiser, noisy, level, cond, info, cfg)
    return float((lora - base).pow(2).mean())


def test_the_target_is_the_base_prediction_exactly(make_config, tiny_model) -> None:
    cfg = _cfg(make_config, preservation=KEEP, output_name="dop")
    trained = train(cfg, [].append, device="cpu", return_denoiser=True).denoiser
    fam = families.get("flux")
    noisy, level, cond, info = _inputs(cfg, ["a shape", "an orange star"])
    with torch.no_grad():
        before = fam.predict(trained, noisy, level, cond, info, cfg)  # [B, C, h, w], the LoRA on
    target = base_prediction(fam, trained, noisy, level, cond, info, cfg)
    fresh = fam.load_denoiser(str(tiny_model("flux")), None, torch.float32, CPU)
    with torch.no_grad():
        assert torch.equal(target, fam.predict(fresh, noisy, level, cond, info, cfg))  # the base, bitwise
        assert not torch.allclose(before, target)  # the LoRA learned something
        assert torch.equal(fam.predict(trained, noisy, level, cond, info, cfg), before)  # back on
    assert all(p.requires_grad for n, p in trained.named_parameters() if "lora_" in n)


def test_with_fused_projections_the_target_is_the_base_prediction(make_config, tiny_model) -> None:
    """fuse_projections: the shared LoRA forward honours the disabled adapter (the same sums as
    the unfused base, rounding aside)."""
    cfg = _cfg(make_config, preservation=KEEP, output_name="fused", fuse_projections="on", steps=3)
    trained = train(cfg, [].append, device="cpu", return_denoiser=True).denoiser
    fam = families.get("flux")
    noisy, level, cond, info = _inputs(cfg, ["a shape", "an orange star"])
    target = base_prediction(fam, trained, noisy, level, cond, info, cfg)
    fresh = fam.load_denoiser(str(tiny_model("flux")), None, torch.float32, CPU)
    with torch.no_grad():
        base = fam.predict(fresh, noisy, level, cond, info, cfg)
        lora = fam.predict(trained, noisy, level, cond, info, cfg)
    assert torch.allclose(target, base, atol=1e-5)
    assert (lora - base).abs().max() > 100 * (target - base).abs().max()


def test_preservation_keeps_the_class_output_closer_to_the_base(make_config) -> None:
    class_prompts = ["a shape", "an orange shape on a red background", "a green shape"]
    plain = _cfg(make_config, output_name="plain", steps=8)
    kept = _cfg(make_config, output_name="kept", steps=8, preservation={"class_word": "shape", "weight": 4.0})
    free = _drift(plain, train(plain, [].append, device="cpu", return_denoiser=True).denoiser, class_prompts)
    held = _drift(kept, train(kept, [].append, device="cpu", return_denoiser=True).denoiser, class_prompts)
    print(f"class-prompt drift from the base: without {free:.3e}, with preservation {held:.3e}")
    assert held < 0.5 * free


def test_texts_replace_the_trigger_word_or_take_the_prompts() -> None:
    assert replace_trigger("sks, an orange star, sksx", "sks", "shape") == "shape, an orange star, sksx"
    assert replace_trigger("a star", None, "shape") == "a star"
    by_caption = PreservationTexts("shape", 1.0, None, ("sks", None))
    assert [by_caption.text("sks star", 0), by_caption.text("sks star", 1)] == ["shape star", "sks star"]
    by_prompt = PreservationTexts("shape", 1.0, ("p0", "p1"), ("sks", "sks", "sks"))
    assert [by_prompt.text("sks star", i) for i in range(3)] == ["p0", "p1", "p0"]
    assert by_prompt.to_encode([["a", "b"], ["c"], [""]]) == ["p0", "p1"]


def test_a_preservation_run_resumes_bitwise(make_config) -> None:
    extra = {
        "steps": 4,
        "batch_size": 1,
        "caption_dropout": 0.3,
        "preservation": {**KEEP, "prompts": ["a shape"]},
    }
    full = train(_cfg(make_config, output_name="full", **extra), [].append, device="cpu")
    plain = train(
        _cfg(make_config, output_name="none", **{**extra, "preservation": None}), [].append, device="cpu"
    )
    assert full.losses[0] == plain.losses[0]  # the LoRA starts at zero: nothing to preserve yet
    assert full.losses[1:] != plain.losses[1:]  # then the step loss includes the preservation term
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    cfg = _cfg(make_config, output_name="part", **extra)
    assert train(cfg, events.append, stop, device="cpu").stopped
    resumed = train(cfg, [].append, device="cpu", resume=get_settings().outputs_dir / "part")
    assert resumed.losses == full.losses
    a, b = load_file(str(full.lora_path)), load_file(str(resumed.lora_path))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_combinations_it_cannot_honour_are_refused(make_config, tiny_model) -> None:
    with pytest.raises(ConfigError, match="preservation: needs a trigger_word"):
        train(make_config("flux", preservation=KEEP), [].append, device="cpu")
    with pytest.raises(ConfigError, match="preservation: not with train_text_encoder"):
        train(
            make_config("sdxl", trigger_word="sks", train_text_encoder=True, preservation=KEEP),
            [].append,
            device="cpu",
        )
    problems = [  # what the job service checks before a launch (train() itself refuses num_gpus 2 first)
        str(p)
        for p in family_problems(_cfg(make_config, num_gpus=2, preservation=KEEP))
        + family_problems(
            _cfg(make_config, preservation=KEEP).model_copy(update={"family": "qwen-image-edit"})
        )
    ]
    assert "preservation: runs on one GPU (num_gpus 1) for now" in problems
    assert any(p.startswith("preservation: not for an edit family") for p in problems)
    with pytest.raises(ValidationError, match="preservation.class_word"):
        _cfg(make_config, preservation={"class_word": " "})


@pytest.mark.slow  # the GPU bench harness on the CPU (bench/, not the product)
def test_the_bench_dop_variant_adds_the_preservation_pass_to_the_loop_step(tiny_model) -> None:
    """bench/probe_speed.py `+dop`: loop_step with `preserve` runs the preservation pass on the
    same draws; its first step (the LoRA at zero) has the plain step's loss, the later ones not."""
    import methods_cases
    from bench.harness import loop_step

    losses: dict[float | None, list[float]] = {}
    for preserve in (None, 1.0):
        cfg = methods_cases.mini_config("flux", tiny_model("flux"), learning_rate=2e-2)
        mb = methods_cases.mini_batch(cfg)
        losses[preserve] = []
        step = loop_step(
            mb.family, mb.denoiser, mb.objective, cfg, mb.params, (mb.latents, mb.cond, mb.info),
            losses[preserve], preserve=preserve,
        )  # fmt: skip
        for _ in range(3):
            step()
    assert losses[None][0] == losses[1.0][0] and losses[None][1:] != losses[1.0][1:]


def test_compiled_blocks_give_the_eager_preservation_loss_and_gradients(tiny_model) -> None:
    """Regional compile (Dynamo graphs; CUDA runs add codegen): the disabled-adapter pass and the
    trained pass through the compiled blocks give the eager loss and gradients, twice over (the
    adapter flag is guarded, not baked in), and nothing falls back to eager."""
    import methods_cases

    from lorastudio.training.preservation import preservation_pass
    from lorastudio.training.speed.compile import compile_denoiser

    cfg = methods_cases.mini_config("flux", tiny_model("flux"))
    mb = methods_cases.mini_batch(cfg)
    with torch.no_grad():  # a LoRA that changes the output: the two passes differ
        for p in mb.params:
            p.normal_(std=0.05)
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def once() -> tuple[float, list[torch.Tensor]]:
        for p in mb.params:
            p.grad = None
        noised = mb.objective.noise(mb.latents, torch.Generator().manual_seed(5))
        share = preservation_pass(mb.family, mb.denoiser, noised, mb.cond, mb.info, cfg, 1.0, 2, scaler)
        return float(share), [p.grad.clone() for p in mb.params]

    eager_loss, eager_grads = once()
    assert eager_loss > 0
    state = compile_denoiser(mb.denoiser, mb.params, backend="eager")
    for _ in range(2):
        loss, grads = once()
        assert loss == pytest.approx(eager_loss, rel=1e-5)
        for e, c in zip(eager_grads, grads, strict=True):
            torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-6)
    assert state.active and state.fallback_reason is None


def test_with_captions_on_disk_a_preservation_run_equals_the_ram_run(make_config) -> None:
    """latent_cache "disk" keeps the captions' embeddings on disk and the class-word captions in
    RAM beside them (conditioning_disk.with_texts): the run equals the RAM-cache run, twice."""
    extra = {"steps": 3, "batch_size": 1, "preservation": KEEP}
    ram = train(_cfg(make_config, output_name="ram", latent_cache="memory", **extra), [].append, device="cpu")
    for name in ("disk-cold", "disk-warm"):  # the second run reads every caption from its shard
        disk = train(
            _cfg(make_config, output_name=name, latent_cache="disk", **extra), [].append, device="cpu"
        )
        assert disk.losses == ram.losses, name
