"""A diffusers-layout DoRA file (`lora_magnitude_vector`, what a `adapter = "dora"` run writes by
default) at generation's strength: ComfyUI's rule, W + s * (W_dora - W), so 0.5 is half the
change, where peft's adapter weight scaled the LoRA part before the normalisation (25 % off half
in a tiny FLUX.1 run). At 1 the weights are peft's own merge of the DoRA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lorastudio.config import parse_train_config
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.settings import Settings
from lorastudio.training.loop import train

KW = {"prompt": "a red circle", "seed": 0, "steps": 2, "width": 32, "height": 32}


@pytest.fixture(scope="module")
def dora_file(tiny_model, sample_dataset, tmp_path_factory):
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(sample_dataset),
        "output_name": "dora-strength",
        "resolution": 32,
        "steps": 4,
        "batch_size": 2,
        "learning_rate": 3e-2,
        "lora_rank": 4,
        "lora_alpha": 8,
        "adapter": "dora",
        "max_sequence_length": 16,
    }
    home = tmp_path_factory.mktemp("dora-home")
    result = train(parse_train_config(raw), [].append, settings=Settings(home=home), device="cpu")
    assert result.lora_path is not None
    return result.lora_path


def _weights(pipe) -> dict[str, torch.Tensor]:
    """{layer: the weight it applies} of the transformer's Linear layers, read from each layer's
    output for the identity input (a peft-wrapped layer with its active adapters, as the
    pipeline runs it; a merged one by its weight alike)."""
    out = {}
    with torch.no_grad():
        for name, module in pipe.transformer.named_modules():
            if not isinstance(module, torch.nn.Linear) or ".lora_" in name:
                continue
            name = name.replace(".base_layer", "")
            layer = pipe.transformer.get_submodule(name)  # the peft wrapper of a wrapped one
            eye = torch.eye(module.in_features, dtype=module.weight.dtype)  # [in, in]
            bias = module.bias if module.bias is not None else 0
            out[name] = (layer(eye) - bias).T  # [out, in]
    return out


def _image(pipe) -> np.ndarray:
    return np.asarray(generate_image(pipe, "flux", **KW, extra={"max_sequence_length": 16}), dtype=np.float32)


def test_a_diffusers_dora_at_half_strength_is_half_the_way_to_the_dora_weight(
    tiny_model, dora_file, flux_lora
):
    from peft.tuners.tuners_utils import BaseTunerLayer

    reference = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    reference.load_lora_weights(str(dora_file), adapter_name="peft")  # peft's own DoRA, merged
    with torch.no_grad():
        for module in reference.transformer.modules():
            if isinstance(module, BaseTunerLayer):
                module.merge(adapter_names=["peft"])
    full = _weights(reference)
    want_image = _image(reference)

    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    base = _weights(pipe)
    changed = [n for n in base if (full[n] - base[n]).abs().max() > 1e-4]
    assert changed
    apply_loras(pipe, [(dora_file, 1.0)])
    got = _weights(pipe)
    for name in base:
        torch.testing.assert_close(got[name], full[name], rtol=1e-5, atol=1e-6, msg=name)
    assert np.abs(_image(pipe) - want_image).max() <= 1
    apply_loras(pipe, [(dora_file, 0.5)])  # from the original weights, not on top of 1.0's
    got = _weights(pipe)
    for name in base:
        half = base[name] + 0.5 * (full[name] - base[name])
        torch.testing.assert_close(got[name], half, rtol=1e-5, atol=1e-6, msg=name)
    assert not any(pipe.get_list_adapters().values())  # merged, no adapter left
    apply_loras(pipe, [(dora_file, 0.5), (flux_lora, 1.0)])  # beside a plain LoRA's adapter
    assert any(pipe.get_list_adapters().values())
    for module_name, module in pipe.transformer.named_modules():
        if isinstance(module, BaseTunerLayer):
            name = module_name
            half = base[name] + 0.5 * (full[name] - base[name])
            torch.testing.assert_close(module.get_base_layer().weight.detach(), half, rtol=1e-5, atol=1e-6)
    apply_loras(pipe, [])
    assert all(torch.equal(w, base[n]) for n, w in _weights(pipe).items())
