"""Generation with a LoRA file of ComfyUI's own trainer node (comfy_extras/nodes_train.py:
TrainLoraNode's adapters, saved whole by SaveLoRA). Its key naming, restated here from that code:
for every layer `n` of the model (`diffusion_model.<checkpoint name>`), a 2-D+ weight gets the
LoRA adapter's parameters `n.lora_up.weight` [out, r], `n.lora_down.weight` [r, in] and `n.alpha`
(a trained 0-d parameter, 1.0 at the start), a 1-D (norm) weight `n.diff`, and every bias
`n.diff_b` (both trained from zero); all in the node's lora_dtype (bf16 by default). ComfyUI adds
`.diff` / `.diff_b` at the strength (W + s * diff); diffusers' loader drops them with a log line,
so such a file rendered with its LoRA pairs only (RELIABILITY fix 250)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras

RANK = 4


def _trainer_layer(name: str, out: int, inp: int, bias: bool, g: torch.Generator) -> dict[str, torch.Tensor]:
    """One layer as TrainLoraNode saves it (bf16): LoRA pair, trained alpha, bias difference."""
    t = {
        f"{name}.lora_up.weight": 0.2 * torch.randn(out, RANK, generator=g),  # [out, r]
        f"{name}.lora_down.weight": 0.2 * torch.randn(RANK, inp, generator=g),  # [r, in]
        f"{name}.alpha": torch.tensor(1.0 + torch.rand(1, generator=g).item()),  # trained away from 1
    }
    if bias:
        t[f"{name}.diff_b"] = 0.2 * torch.randn(out, generator=g)  # [out]
    return {k: v.bfloat16() for k, v in t.items()}


def _change(t: dict[str, torch.Tensor], name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight change [out, in], bias change [out]) of one layer at strength 1, by ComfyUI's
    rule (LoRAAdapter: alpha / rank * up @ down; load_lora's diff_b added as it is)."""
    up, down = t[f"{name}.lora_up.weight"].float(), t[f"{name}.lora_down.weight"].float()
    scale = t[f"{name}.alpha"].float().item() / RANK
    return scale * up @ down, t.get(f"{name}.diff_b", torch.zeros(up.shape[0])).float()  # none: 0


def _swap(x: torch.Tensor) -> torch.Tensor:  # the checkpoint's (shift, scale) <-> diffusers' (scale, shift)
    first, second = x.chunk(2)
    return torch.cat([second, first])


@pytest.mark.parametrize("biases", [True, False])
def test_a_comfyui_trainer_file_merges_its_lora_pairs_and_bias_differences(flux_pipe, tmp_path, biases):
    """FLUX.1 layers under BFL names (a fused qkv, the swapped final adaLN, a time embedder, an
    output projection): every weight and bias moves by ComfyUI's change at strength 1 and by half
    of it at 0.5; unloading restores both. Without `.diff_b` (LoRA pairs alone, as for a model
    without biases) the file was handed to diffusers, whose FLUX.1 converter failed an assert."""
    t = flux_pipe.transformer
    a = t.transformer_blocks[0].attn
    layers = {  # BFL name -> the diffusers modules of its rows, in the checkpoint's row order
        "diffusion_model.double_blocks.0.img_attn.qkv": [a.to_q, a.to_k, a.to_v],
        "diffusion_model.double_blocks.0.img_attn.proj": [a.to_out[0]],
        "diffusion_model.time_in.in_layer": [t.time_text_embed.timestep_embedder.linear_1],
        "diffusion_model.final_layer.adaLN_modulation.1": [t.norm_out.linear],
    }
    apply_loras(flux_pipe, [])
    base = {id(m): (m.weight.detach().float().clone(), m.bias.detach().float().clone()) for ms in layers.values() for m in ms}  # fmt: skip
    g = torch.Generator().manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    for name, modules in layers.items():
        out = sum(m.weight.shape[0] for m in modules)
        tensors |= _trainer_layer(name, out, modules[0].weight.shape[1], biases, g)
    path = tmp_path / "comfy_trained.safetensors"
    save_file(tensors, str(path))
    for strength in (1.0, 0.5):
        apply_loras(flux_pipe, [(path, strength)])
        for name, modules in layers.items():
            dw, db = _change(tensors, name)
            if name.endswith("adaLN_modulation.1"):
                dw, db = _swap(dw), _swap(db)
            sizes = [m.weight.shape[0] for m in modules]
            for m, w_rows, b_rows in zip(modules, dw.split(sizes), db.split(sizes), strict=True):
                w0, b0 = base[id(m)]
                torch.testing.assert_close(m.weight.float(), w0 + strength * w_rows, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(m.bias.float(), b0 + strength * b_rows, atol=1e-5, rtol=1e-4)
    apply_loras(flux_pipe, [])
    for ms in layers.values():
        for m in ms:
            assert torch.equal(m.weight.float(), base[id(m)][0]) and torch.equal(
                m.bias.float(), base[id(m)][1]
            )


def test_a_norm_weight_difference_merges_and_a_bias_the_layer_lacks_is_refused(tiny_model, tmp_path):
    """Qwen-Image's affine RMSNorms (ComfyUI's names are its diffusers names): the trainer's 1-D
    `.diff` of a norm weight is added at the strength beside a LoRA layer's `.diff_b`; a `.diff_b`
    for a layer without a bias is refused naming the layer, nothing patched."""
    from lorastudio.generate import load_pipeline

    pipe = load_pipeline(str(tiny_model("qwen-image")), "qwen-image", device="cpu")
    block = pipe.transformer.transformer_blocks[0]
    norm, proj = block.attn.norm_q, block.attn.to_out[0]  # RMSNorm weight [head_dim]; Linear
    assert norm.weight.dim() == 1 and getattr(norm, "bias", None) is None
    w0, pw0, pb0 = (p.detach().float().clone() for p in (norm.weight, proj.weight, proj.bias))
    g = torch.Generator().manual_seed(1)
    prefix = "diffusion_model.transformer_blocks.0.attn"
    tensors = _trainer_layer(f"{prefix}.to_out.0", proj.weight.shape[0], proj.weight.shape[1], True, g)
    tensors[f"{prefix}.norm_q.diff"] = torch.randn(w0.shape, generator=g).bfloat16()  # [head_dim]
    path = tmp_path / "norm.safetensors"
    save_file(tensors, str(path))
    apply_loras(pipe, [(path, 0.5)])
    torch.testing.assert_close(norm.weight.float(), w0 + 0.5 * tensors[f"{prefix}.norm_q.diff"].float())
    dw, db = _change(tensors, f"{prefix}.to_out.0")
    torch.testing.assert_close(proj.weight.float(), pw0 + 0.5 * dw, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(proj.bias.float(), pb0 + 0.5 * db, atol=1e-5, rtol=1e-4)
    bad = tmp_path / "bad.safetensors"
    save_file({f"{prefix}.norm_q.diff_b": tensors[f"{prefix}.norm_q.diff"]}, str(bad))
    with pytest.raises(ModelSourceError, match=r"norm_q"):
        apply_loras(pipe, [(bad, 1.0)])
    assert torch.equal(norm.weight.float(), w0) and torch.equal(proj.bias.float(), pb0)


@pytest.mark.parametrize(
    ("family", "comfy", "diffusers"),
    [  # ComfyUI's module names of layers no LoRA of ours targets, which its trainer node adapts
        ("sdxl", "input_blocks.3.0.op", ["down_blocks.0.downsamplers.0.conv"]),
        ("sdxl", "output_blocks.5.2.conv", ["up_blocks.1.upsamplers.0.conv"]),
        (
            "sdxl",
            "output_blocks.2.1.conv",
            ["up_blocks.0.upsamplers.0.conv"],
        ),  # an up block without attention
        ("sdxl", "input_blocks.1.0.in_layers.0", ["down_blocks.0.resnets.0.norm1"]),
        ("sdxl", "middle_block.2.out_layers.0", ["mid_block.resnets.1.norm2"]),
        ("sdxl", "out.0", ["conv_norm_out"]),
        ("flux", "double_blocks.0.txt_attn.norm.key_norm", ["transformer_blocks.0.attn.norm_added_k"]),
        ("flux", "single_blocks.1.norm.query_norm", ["single_transformer_blocks.1.attn.norm_q"]),
        ("flux2", "double_blocks.0.img_attn.norm.query_norm", ["transformer_blocks.0.attn.norm_q"]),
        ("flux2", "single_blocks.0.norm.key_norm", ["single_transformer_blocks.0.attn.norm_k"]),
        ("z-image", "layers.1.attention.qkv", [f"layers.1.attention.to_{p}" for p in "qkv"]),
        ("z-image", "noise_refiner.0.attention.k_norm", ["noise_refiner.0.attention.norm_k"]),
        ("z-image", "context_refiner.0.attention.out", ["context_refiner.0.attention.to_out.0"]),
        ("z-image", "final_layer.adaLN_modulation.1", ["all_final_layer.2-1.adaLN_modulation.1"]),
        ("z-image", "x_embedder", ["all_x_embedder.2-1"]),
        ("z-image", "layers.0.ffn_norm2", ["layers.0.ffn_norm2"]),  # the same name in both
    ],
)
def test_comfyuis_names_of_every_layer_its_trainer_adapts_resolve_to_diffusers_modules(
    family, comfy, diffusers
):
    """Generation's name resolution (generate/lycoris_names.py) of ComfyUI's own names: the SDXL
    samplers and GroupNorms, FLUX's q / k norms, Z-Image's Lumina 2 names (ComfyUI's
    z_image_to_diffusers); they were refused as layers of no pipeline."""
    from lorastudio.generate.lycoris_names import to_lycoris_names
    from lorastudio.lora.lycoris import module_key

    pipeline = {"sdxl": "StableDiffusionXLPipeline", "flux": "FluxPipeline", "flux2": "Flux2Pipeline"}
    named = to_lycoris_names({f"diffusion_model.{comfy}": {}}, pipeline.get(family, "ZImagePipeline"))
    assert named[f"diffusion_model.{comfy}"][0].keys == tuple(module_key(m) for m in diffusers)
