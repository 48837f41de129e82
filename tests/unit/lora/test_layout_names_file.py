"""A file that is no diffusers or kohya LoRA is refused naming the file (session 38 journey:
`lorastudio lora merge a.safetensors:0.5 lokr.safetensors:0.5` said "not a diffusers or kohya LoRA
of a denoiser (e.g. 'lycoris_...')" without saying which of the two)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.errors import ModelSourceError
from lorastudio.lora.files import file_layout


def test_the_layout_refusal_names_the_file() -> None:
    lokr = Path("/runs/lokr-run/lokr-run.safetensors")
    with pytest.raises(ModelSourceError) as err:
        file_layout({"lycoris_single_transformer_blocks_0_attn_to_k.alpha": object()}, lokr)
    said = str(err.value)
    assert said.startswith(f"{lokr}: not a diffusers or kohya LoRA of a denoiser")
    assert "a LyCORIS file (LoKr, LoHa or DoRA" in said
    assert (
        file_layout({"transformer.x.lora_A.weight": 0, "transformer.x.lora_B.weight": 0}, lokr) == "diffusers"
    )
