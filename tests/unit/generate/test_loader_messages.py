"""What generation says of a LoRA file diffusers' loader fails on or loads nothing of: the file,
why, and a bounded message (generate/lora_messages.py). Before (RELIABILITY 891): diffusers' /
peft's own text passed through whole ("Incompatible keys detected: <every key of the file>", tens
of KB for a real LoRA, shown whole by the web UI, the API and the CLI), a KeyError's text was the
key alone ("cannot apply LoRA x: 'base_model.model.double_blocks.0.img_mod.lin.lora_A.weight'"),
and a file of which nothing loaded was "has no layer matching this FluxPipeline", without a key
or what the loader reads."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras
from lorastudio.generate.lora_messages import MAX_REASON, loader_failure
from lorastudio.tiny import build_tiny_pipeline


@pytest.fixture(scope="module")
def pipe():
    return build_tiny_pipeline("flux")


def _pairs(pipe, key_of) -> dict[str, torch.Tensor]:
    """A rank-2 LoRA file's tensors on every linear of the tiny FLUX.1 transformer, named by key_of(module)."""
    out = {}
    for name, module in pipe.transformer.named_modules():
        if isinstance(module, torch.nn.Linear):
            out[f"{key_of(name)}.lora_down.weight"] = torch.zeros(2, module.in_features)
            out[f"{key_of(name)}.lora_up.weight"] = torch.zeros(module.out_features, 2)
    return out


def _refusal(pipe, tensors: dict[str, torch.Tensor], path) -> str:
    save_file(tensors, str(path))
    with pytest.raises(ModelSourceError) as err:
        apply_loras(pipe, [(path, 1.0)])
    message = str(err.value)
    assert str(path) in message
    assert not pipe.get_list_adapters()  # nothing left loaded
    return message


def test_a_kohya_file_of_no_layer_of_the_model_names_one_briefly(pipe, tmp_path):
    """kohya's prefix on diffusers' module names: diffusers listed every key it could not convert
    (a message cut at MAX_REASON); since fix 2246 lorastudio's reader takes a kohya FLUX.1 file with
    a layer diffusers' converter does not map, and names the first such layer, not as a config's
    field."""
    tensors = _pairs(pipe, lambda name: "lora_unet_" + name.replace(".", "_"))
    message = _refusal(pipe, tensors, tmp_path / "lora.safetensors")
    assert "a layer of it is none of this model's" in message and "no kohya name is known" in message
    assert "invalid configuration" not in message and "lora_format" not in message
    assert len(message) < MAX_REASON + 200


def test_a_loader_message_of_every_key_is_cut():
    """diffusers' "Incompatible keys detected" lists every key it cannot convert: ours keeps
    MAX_REASON characters of it and says how long it was."""
    keys = ", ".join(f"lora_unet_layer_{i}.lora_down.weight" for i in range(400))
    message = str(loader_failure("x.safetensors", ValueError(f"Incompatible keys detected: {keys}")))
    assert message.startswith("cannot apply LoRA x.safetensors: Incompatible keys detected")
    assert len(message) < MAX_REASON + 200 and f"(cut: {len(keys) + 28} characters)" in message


def test_a_loader_key_error_says_what_failed(pipe, tmp_path):
    """peft's own save_pretrained names (`base_model.model.<module>.lora_A.weight`): diffusers'
    FLUX.1 reader takes them for fal's Kontext layout and fails on a KeyError."""
    tensors = {
        k.replace("lora_down", "lora_A").replace("lora_up", "lora_B"): v
        for k, v in _pairs(pipe, lambda name: "base_model.model." + name).items()
    }
    message = _refusal(pipe, tensors, tmp_path / "adapter_model.safetensors")
    assert "KeyError" in message and "did not find" in message


def test_a_file_of_which_nothing_loads_names_a_key_and_what_the_loader_reads(pipe, tmp_path):
    """peft names without the component prefix: no layer loads."""
    tensors = {
        k.replace("lora_down", "lora_A").replace("lora_up", "lora_B"): v
        for k, v in _pairs(pipe, lambda name: name).items()
    }
    message = _refusal(pipe, tensors, tmp_path / "bare.safetensors")
    assert "has no layer matching this FluxPipeline" in message
    assert "lora_A.weight'" in message and "transformer." in message
