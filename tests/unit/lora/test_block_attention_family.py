"""A LoRA of block attention layers only carries no key name only one family has (FLUX.1's and
FLUX.2's double blocks and Qwen-Image's blocks share diffusers' `transformer_blocks.N.attn.*`):
the header check tells them apart by what the released checkpoints are (lora/joint_blocks.py:
block depth, attention width, a text stream), RELIABILITY 592."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from hostile_loras import qwen_image_attention_shapes, tensors_bytes
from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.lora.convert import to_kohya
from lorastudio.lora.header import LoraHeader, TensorInfo, check_lora_file, check_lora_header
from lorastudio.training.adapters.lora import _matches

ALL_ATTENTION = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
OTHERS = ("flux", "flux-kontext", "chroma", "flux2", "flux2-klein", "sdxl", "z-image", "krea2")


def _kohya(shapes: dict[str, list[int]]) -> dict[str, list[int]]:
    """kohya's spelling of a diffusers-named file's shapes (lora_unet_<flat>.lora_down / lora_up)."""
    out = {}
    for name, shape in shapes.items():
        layer, part = name.removeprefix("transformer.").rsplit(".lora_", 1)
        side = "lora_down" if part.startswith("A") else "lora_up"
        out[f"lora_unet_{layer.replace('.', '_')}.{side}.weight"] = shape
    return out


def _file(tmp_path: Path, name: str, shapes: dict[str, list[int]]) -> Path:
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(tensors_bytes(shapes))
    return path


@pytest.mark.parametrize("spelling", ["diffusers", "comfyui", "kohya"])
@pytest.mark.parametrize(
    "projections", [ALL_ATTENTION, ("to_q", "to_k", "to_v", "to_out.0")], ids=["joint", "qkvo"]
)
def test_a_qwen_image_lora_of_attention_layers_is_named_as_qwen_image(
    spelling: str, projections: tuple[str, ...], tmp_path: Path
) -> None:
    """Blocks 0-59 at width 3072: past FLUX.1's 19 double blocks and FLUX.2's 8, not Krea 2's
    width. Passed as a FLUX.1 / FLUX.2 / SDXL LoRA before (its refusal left to the load, naming
    layers); now refused before any load as any other family's, naming Qwen-Image."""
    prefix = "diffusion_model." if spelling == "comfyui" else "transformer."
    shapes = qwen_image_attention_shapes(tuple(range(0, 60, 3)) + (59,), prefix, projections)
    path = _file(tmp_path, spelling, _kohya(shapes) if spelling == "kohya" else shapes)
    for family in OTHERS:
        with pytest.raises(ModelSourceError) as err:
            check_lora_file(path, family)
        assert f"is not a {family} LoRA: it is a qwen-image one" in str(err.value), err.value
        assert "blocks up to 59" in str(err.value) and "3072 wide" in str(err.value)
    for family in ("qwen-image", "qwen-image-edit"):
        check_lora_file(path, family)


def test_what_the_released_shapes_cannot_tell_is_named_as_the_likely_families(tmp_path: Path) -> None:
    """A file of FLUX.1's 19 double blocks' attention (or Qwen-Image's first 19) is either: it
    passes as both, and is refused as another family naming the two; FLUX.2 dev's (8 blocks,
    6144 wide) is named as FLUX.2."""
    flux1 = _file(tmp_path, "flux1", qwen_image_attention_shapes(tuple(range(19))))
    for family in ("flux", "chroma", "flux-kontext", "qwen-image"):
        check_lora_file(flux1, family)
    for family in ("sdxl", "flux2", "krea2"):
        with pytest.raises(ModelSourceError, match=f"is not a {family} LoRA: it is a flux or qwen-image one"):
            check_lora_file(flux1, family)
    dev = {
        f"transformer.transformer_blocks.{b}.attn.{p}.lora_{s}.weight": [1, 6144] if s == "A" else [6144, 1]
        for b in range(8)
        for p in ("to_q", "add_q_proj")
        for s in ("A", "B")
    }
    flux2 = _file(tmp_path, "flux2", dev)
    check_lora_file(flux2, "flux2")
    for family in ("flux", "qwen-image"):
        with pytest.raises(ModelSourceError, match=f"is not a {family} LoRA: it is a flux2 one"):
            check_lora_file(flux2, family)


@pytest.mark.parametrize("family", families.names())
def test_every_familys_own_lora_still_passes(family: str, tiny_model: Callable[[str], Path]) -> None:
    """A LoRA of the tiny model's targets (all of them, and its attention layers alone), in
    diffusers' and kohya's layouts without a family in the header, passes as its own family."""
    fam = families.get(family)
    den = fam.load_denoiser(str(tiny_model(family)), None, torch.float32, torch.device("cpu"))
    linears = {
        name: module.weight.shape
        for name, module in den.named_modules()
        if isinstance(module, torch.nn.Linear) and any(_matches(name, t) for t in fam.spec.lora_targets)
    }
    assert linears, family
    attention = {n: s for n, s in linears.items() if ".attn" in n or ".attention" in n}
    for chosen in (linears, attention):
        if not chosen:
            continue
        peft = {}
        for name, (out_f, in_f) in chosen.items():
            peft[f"{name}.lora_A.weight"] = torch.zeros(1, in_f)
            peft[f"{name}.lora_B.weight"] = torch.zeros(out_f, 1)
        for tensors in (
            {f"transformer.{k}": v for k, v in peft.items()},
            to_kohya(peft, family, 1.0),
        ):
            infos = {k: TensorInfo("F32", tuple(v.shape), 0, 0) for k, v in tensors.items()}
            check_lora_header(LoraHeader(Path(f"{family}.safetensors"), {}, infos), family)
