"""TrainConfig.save_dtype: the LoRA files' tensors (the run's LoRA, its EMA / raw pair, the
snapshots) are in the chosen dtype, hold the fp32 run's weights rounded to it, pass the save-time
portability check and load in diffusers, where they change the image like the in-memory LoRA;
the default is fp32 (what every run wrote before); checkpoints stay fp32 so a resume is exact,
and a resume may change the file dtype; a value beyond fp16's range is refused, not written as inf."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lorastudio import families
from lorastudio.errors import ConfigError
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import cast_for_file
from lorastudio.settings import get_settings
from lorastudio.training.loop import train

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*.safetensors") if "checkpoints" not in p.parts)


def test_every_lora_file_is_in_the_save_dtype_and_holds_the_fp32_weights_rounded(make_config):
    settings = {"steps": 2, "ema_decay": 0.5, "save_lora_every": 1}
    exact = train(make_config(output_name="exact", **settings), [].append, device="cpu")
    half = train(make_config(output_name="half", save_dtype="bf16", **settings), [].append, device="cpu")
    assert half.losses == exact.losses  # the file dtype never changes the training maths
    exact_files, half_files = _files(exact.lora_path.parent), _files(half.lora_path.parent)
    names = [p.name.replace("exact", "N") for p in exact_files]
    assert names == [p.name.replace("half", "N") for p in half_files]
    assert names == ["N.raw.safetensors", "N.safetensors", "N-step-000001.safetensors"]  # + snapshot
    for want, got in zip(exact_files, half_files, strict=True):
        a, header_a = read_lora_file(want)
        b, header_b = read_lora_file(got)
        assert {t.dtype for t in a.values()} == {torch.float32}  # the default: fp32, as before
        assert {t.dtype for t in b.values()} == {torch.bfloat16}, got.name
        assert a.keys() == b.keys() and all(torch.equal(a[k].to(torch.bfloat16), b[k]) for k in a)
        assert (header_a["lorastudio.save_dtype"], header_b["lorastudio.save_dtype"]) == ("fp32", "bf16")
        loaders = json.loads(got.with_suffix(".json").read_text())["loaders"]
        assert loaders["comfyui"]["ok"] and loaders["diffusers"]["ok"], loaders


def _image(pipe, family: str) -> np.ndarray:
    size = max(32, 2 * families.get(family).spec.resolution_multiple)
    extra = (
        {"max_sequence_length": 16} if "max_sequence_length" in families.get(family).spec.supports else None
    )
    img = generate_image(
        pipe, family, prompt="a red circle", seed=0, steps=2, width=size, height=size, extra=extra
    )
    return np.asarray(img, dtype=np.float32)


@pytest.mark.parametrize(("family", "save_dtype"), [("sdxl", "fp16"), ("flux", "bf16")])
def test_a_half_precision_file_loads_in_diffusers_and_changes_the_image(
    family, save_dtype, make_config, tiny_model
):
    cfg = make_config(family, save_dtype=save_dtype, steps=3, learning_rate=5e-2, output_name="half")
    result = train(cfg, [].append, device="cpu", return_denoiser=True)
    tensors, _ = read_lora_file(result.lora_path)
    assert {t.dtype for t in tensors.values()} == {DTYPES[save_dtype]}
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    base = _image(pipe, family)
    pipe.load_lora_weights(str(result.lora_path))  # plain diffusers, half-precision tensors
    from_file = _image(pipe, family)
    fresh = load_pipeline(str(tiny_model(family)), family, device="cpu")
    setattr(fresh, families.get(family).spec.denoiser, result.denoiser)
    in_memory = _image(fresh, family)
    assert np.abs(in_memory - base).mean() > 0.5  # the LoRA visibly changes the image
    assert np.abs(from_file - in_memory).max() <= 2.0  # the rounded file gives the same image


def test_a_resume_may_change_the_file_dtype(make_config):
    from lorastudio.training.events import StopRequest

    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 1 else None

    full = train(make_config(output_name="full", steps=3), [].append, device="cpu")
    first = train(make_config(output_name="part", steps=3), events.append, stop, device="cpu")
    assert first.stopped
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(
        make_config(output_name="part", steps=3, save_dtype="fp16"), [].append, device="cpu", resume=run_dir
    )
    assert resumed.losses == full.losses  # exact: the checkpoint kept fp32
    a, _ = read_lora_file(full.lora_path)
    b, _ = read_lora_file(resumed.lora_path)
    assert all(b[k].dtype == torch.float16 and torch.equal(a[k].half(), b[k]) for k in a)


def test_values_beyond_fp16_are_refused_not_written_as_inf():
    tensors = {"x.lora_A.weight": torch.tensor([1.0, 7e4]), "x.alpha": torch.tensor(4.0)}
    assert cast_for_file(tensors, "bf16")["x.lora_A.weight"].dtype == torch.bfloat16
    with pytest.raises(ConfigError) as err:
        cast_for_file(tensors, "fp16")
    (problem,) = err.value.problems
    assert problem.field == "save_dtype" and "x.lora_A.weight" in problem.message
    steps = {"s": torch.tensor([3])}  # integer tensors are left as they are
    assert cast_for_file(steps, "fp16")["s"].dtype == torch.int64


@pytest.mark.parametrize("save_dtype", ["bf16", "fp16"])
def test_doras_row_scales_stay_fp32_in_a_half_precision_file(save_dtype):
    """A DoRA scale multiplies a whole row, base included: rounded, it moves untrained weights."""
    scale = torch.tensor([[1.0 + 2**-12], [0.7]])  # [out, 1]; neither value is exact in bf16 / fp16
    tensors = {
        "lycoris_x.dora_scale": scale,
        "transformer.x.lora_magnitude_vector": scale[:, 0],
        "lycoris_x.lora_up.weight": scale,
    }
    cast = cast_for_file(tensors, save_dtype)
    assert torch.equal(cast["lycoris_x.dora_scale"], scale)
    assert torch.equal(cast["transformer.x.lora_magnitude_vector"], scale[:, 0])
    assert cast["lycoris_x.lora_up.weight"].dtype == DTYPES[save_dtype]
