"""Issue 29 part 4 on the tiny FLUX.1, through the real loop: a masks/ folder (or the alpha channel)
weights the loss per latent pixel. The LoRA gradients of the real step are recorded (at the
gradient clip, before the update) while the objective's target is changed in one region only:

- the denoiser sees the whole noisy image, so a change of the *input* anywhere changes every
  prediction; what a mask promises is that the errors of the pixels outside it teach nothing.
  So the input is kept identical and only the target (the error) changes: outside the mask with
  unmasked_weight 0 the gradients are bitwise those of the unchanged run; inside the mask, or
  with unmasked_weight 0.5, they differ;
- an all-white mask trains exactly like no mask; alpha_mask feeds the step the RGBA alpha.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import lorastudio.training.optimize as optimize_module
from lorastudio.training.loop import train
from lorastudio.training.noise import FlowObjective, NoisedBatch

SIDE = 32  # the run's resolution: a 4x4 latent grid (VAE scale 8)


@pytest.fixture
def masked_dataset(tmp_path: Path) -> Path:
    """Two 32x32 noise images, each with a mask whose left half (latent columns 0-1) is white."""
    root = tmp_path / "masked"
    (root / "masks").mkdir(parents=True)
    rng = np.random.default_rng(0)
    mask = np.zeros((SIDE, SIDE), dtype=np.uint8)
    mask[:, : SIDE // 2] = 255
    for name in ("a", "b"):
        Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)).save(root / f"{name}.png")
        (root / f"{name}.txt").write_text(f"shape {name}")
        Image.fromarray(mask).save(root / "masks" / f"{name}.png")
    return root


def _grads(monkeypatch: pytest.MonkeyPatch, make_config, data: Path, name: str, **over) -> list[torch.Tensor]:
    """Train one step; returns the LoRA gradients the step clipped (the real step's gradients)."""
    seen: list[torch.Tensor] = []
    real = torch.nn.utils.clip_grad_norm_

    def recording(params, *args, **kwargs):
        params = list(params)
        seen.extend(p.grad.detach().clone() for p in params)
        return real(params, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    cfg = make_config(data_dir=str(data), output_name=name, steps=1, batch_size=2, resolution=SIDE, **over)
    train(cfg, [].append, device="cpu")
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", real)
    return seen


def _shift_target(monkeypatch: pytest.MonkeyPatch, columns: slice) -> None:
    """Make the flow objective's target larger by 3 in latent `columns` (the input unchanged)."""
    real = FlowObjective.noise

    def shifted(self, latents, generator):
        noised = real(self, latents, generator)
        target = noised.target.clone()
        target[..., columns] += 3.0  # [B, C, h, w]: only those columns
        return NoisedBatch(noised.noisy, noised.noise_level, target, noised.weight)

    monkeypatch.setattr(FlowObjective, "noise", shifted)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_only_the_masked_region_changes_the_gradient(monkeypatch, make_config, masked_dataset):
    base = _grads(monkeypatch, make_config, masked_dataset, "base")
    assert base and any(g.abs().sum() > 0 for g in base)
    with monkeypatch.context() as m:
        _shift_target(m, slice(2, None))  # outside the mask
        outside = _grads(m, make_config, masked_dataset, "outside")
        softened = _grads(m, make_config, masked_dataset, "softened", unmasked_weight=0.5)
    with monkeypatch.context() as m:
        _shift_target(m, slice(0, 2))  # inside the mask
        inside = _grads(m, make_config, masked_dataset, "inside")
    assert _same(outside, base)  # weight 0: the unmasked errors teach nothing
    assert not _same(inside, base)
    assert not _same(softened, base)  # unmasked_weight 0.5: they count, at half weight


def test_a_white_mask_trains_like_no_mask_and_a_half_mask_does_not(make_config, masked_dataset, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for path in masked_dataset.glob("*.*"):
        (plain / path.name).write_bytes(path.read_bytes())
    white = tmp_path / "white"
    (white / "masks").mkdir(parents=True)
    for path in plain.iterdir():
        (white / path.name).write_bytes(path.read_bytes())
        if path.suffix == ".png":
            Image.new("L", (SIDE, SIDE), 255).save(white / "masks" / path.name)
    runs = {
        key: train(
            make_config(data_dir=str(folder), output_name=key, steps=2, batch_size=1, resolution=SIDE),
            [].append,
            device="cpu",
        ).losses
        for key, folder in (("plain", plain), ("white", white), ("half", masked_dataset))
    }
    assert runs["white"] == runs["plain"]
    assert runs["half"] != runs["plain"]


@pytest.mark.parametrize("cache", ["memory", "off", "disk"])  # the latent cache, encoding every step, disk
def test_alpha_mask_feeds_the_step_the_alpha_channel(monkeypatch, make_config, tmp_path, cache):
    root = tmp_path / "alpha"
    root.mkdir()
    rgba = np.random.default_rng(1).integers(0, 256, (SIDE, SIDE, 4), dtype=np.uint8)
    rgba[..., 3] = 0
    rgba[: SIDE // 2, :, 3] = 255  # the top half opaque: latent rows 0-1
    Image.fromarray(rgba, mode="RGBA").save(root / "cut.png")
    (root / "cut.txt").write_text("a cut-out")
    masks: list[torch.Tensor | None] = []
    real = optimize_module.batch_forward_backward

    def recording(family, denoiser, objective, batch, *rest, **kwargs):
        masks.append(batch.mask)
        return real(family, denoiser, objective, batch, *rest, **kwargs)

    monkeypatch.setattr(optimize_module, "batch_forward_backward", recording)
    cfg = make_config(
        data_dir=str(root), output_name="alpha", steps=1, batch_size=1, resolution=SIDE, alpha_mask=True,
        latent_cache=cache,
    )  # fmt: skip
    train(cfg, [].append, device="cpu")
    expected = torch.zeros(1, 1, 4, 4)
    expected[..., :2, :] = 1.0
    assert masks and torch.equal(masks[0].cpu(), expected)


def test_a_masked_run_resumes_exactly(make_config, masked_dataset):
    from lorastudio.config import parse_train_config
    from lorastudio.errors import ConfigError
    from lorastudio.settings import get_settings
    from lorastudio.training.events import StopRequest
    from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings

    common = {
        "data_dir": str(masked_dataset),
        "steps": 4,
        "batch_size": 1,
        "resolution": SIDE,
        "save_every": 2,
    }
    whole = train(make_config(output_name="whole", unmasked_weight=0.25, **common), [].append, device="cpu")
    events: list = []
    cfg = make_config(output_name="parted", unmasked_weight=0.25, **common)
    stop = lambda: StopRequest(save=True) if sum(e.type == "progress" for e in events) >= 2 else None  # noqa: E731
    assert train(cfg, events.append, stop, device="cpu").steps_run == 2
    checkpoint = find_checkpoint(get_settings().outputs_dir / "parted")
    again = parse_train_config(resume_settings(read_checkpoint_info(checkpoint), {}))
    resumed = train(again, [].append, device="cpu", resume=checkpoint)
    assert resumed.losses == whole.losses
    sidecar = json.loads(resumed.lora_path.with_suffix(".json").read_text())
    assert sidecar["dataset"]["masked_images"] == 2 and sidecar["config"]["unmasked_weight"] == 0.25
    (masked_dataset / "masks" / "a.png").unlink()  # another mask: the dataset is not the checkpoint's
    with pytest.raises(ConfigError, match="dataset_fingerprint"):
        train(again.model_copy(update={"steps": 5}), [].append, device="cpu", resume=checkpoint)
