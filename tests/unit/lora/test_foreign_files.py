"""Other trainers' LoRA files through convert, merge, resize and generation, with diffusers' own
`load_lora_weights` of the original file as the reference for what each layer's change must be.

- ai-toolkit's Qwen-Image layout (`diffusion_model.<diffusers name>.lora_A / lora_B`, no alpha:
  alpha = rank; extensions_built_in/diffusion_models/qwen_image/qwen_image.py
  convert_lora_weights_before_save) is ComfyUI's generic spelling: `lora convert` to either
  layout and `lora merge` of it give the change diffusers loads from the original file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tests.unit.lora.test_ops import _cli, _lora

from lorastudio import families
from lorastudio.generate import apply_loras, load_pipeline
from lorastudio.lora.files import convert_file
from lorastudio.lora.ops import merge_files, resize_file


def _loaded_change(model: Path, family: str, lora: Path) -> dict[str, torch.Tensor]:
    """{module: merged weight - base} of every layer plain diffusers puts the file on."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    pipe = load_pipeline(str(model), family, device="cpu")
    pipe.load_lora_weights(str(lora))
    denoiser = getattr(pipe, families.get(family).spec.denoiser)
    change = {}
    with torch.no_grad():
        for name, module in denoiser.named_modules():
            if isinstance(module, BaseTunerLayer):
                before = module.get_base_layer().weight.detach().clone()
                module.merge()
                change[name] = module.get_base_layer().weight.detach() - before
    return change


def _assert_same_change(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], factor: float = 1.0
) -> None:
    assert got.keys() == want.keys() and want
    for name, delta in want.items():
        torch.testing.assert_close(got[name], factor * delta, rtol=1e-4, atol=1e-6, msg=name)


def test_ai_toolkits_qwen_image_file_converts_and_merges_at_its_strength(layer_shapes, tiny_model, tmp_path):
    family, model = "qwen-image", tiny_model("qwen-image")
    lora = _lora(layer_shapes(family), family, 4, 4.0, seed=3, every=3)  # alpha = rank, as ai-toolkit's
    theirs = tmp_path / "ai-toolkit.safetensors"
    save_file(
        {f"diffusion_model.{k}": v.contiguous() for k, v in lora.tensors.items()}, theirs, {"format": "pt"}
    )
    want = _loaded_change(model, family, theirs)  # diffusers reads ai-toolkit's names itself
    assert max(d.abs().max().item() for d in want.values()) > 1e-3
    for to in ("diffusers", "kohya"):
        out = tmp_path / f"to-{to}.safetensors"
        convert_file(theirs, out, to, family)  # type: ignore[arg-type]
        _assert_same_change(_loaded_change(model, family, out), want)
    merged = merge_files([(theirs, 0.25), (theirs, 0.25)], tmp_path / "merged.safetensors", family)
    _assert_same_change(_loaded_change(model, family, merged), want, 0.5)
    resize_file(tmp_path / "to-kohya.safetensors", tmp_path / "r2.safetensors", 2)  # it reads back as ours
    pipe = load_pipeline(str(model), family, device="cpu")
    apply_loras(pipe, [(theirs, 1.0)])  # generation takes it, every layer loaded


def test_a_diffusers_written_bf16_flux_file_with_alpha_converts_at_its_strength(
    layer_shapes, tiny_model, tmp_path
):
    """SimpleTuner / diffusers' training scripts: FluxPipeline.save_lora_weights with the peft
    config as adapter metadata (lora_alpha 16 over rank 4: scale 4), bf16 tensors: convert to the
    kohya layout (where ComfyUI reads alpha from `.alpha`) and merge keep diffusers' own reading."""
    from diffusers import FluxPipeline
    from peft import LoraConfig

    family, model = "flux", tiny_model("flux")
    lora = _lora(layer_shapes(family), family, 4, 16.0, seed=5, every=3)
    config = LoraConfig(r=4, lora_alpha=16.0, target_modules=["to_q"]).to_dict()
    config["target_modules"] = sorted(config["target_modules"])
    FluxPipeline.save_lora_weights(
        tmp_path,
        transformer_lora_layers={k: v.to(torch.bfloat16) for k, v in lora.tensors.items()},
        transformer_lora_adapter_metadata=config,
        weight_name="simpletuner.safetensors",
    )
    theirs = tmp_path / "simpletuner.safetensors"
    want = _loaded_change(model, family, theirs)
    out = tmp_path / "kohya.safetensors"
    convert_file(theirs, out, "kohya", family)
    # FLUX.1's kohya layout fuses q, k, v: diffusers' kohya reader splits them at FLUX.1-dev's
    # widths only, so the converted file is read back through the diffusers layout
    back = tmp_path / "back.safetensors"
    convert_file(out, back, "diffusers", family)
    scale = max(d.abs().max().item() for d in want.values())
    for name, delta in _loaded_change(model, family, back).items():
        assert (delta - want[name]).abs().max().item() <= 1e-2 * scale, name  # bf16 rounding of the fold
    assert _loaded_change(model, family, back).keys() == want.keys()
    merged = merge_files([(theirs, 1.0), (theirs, 1.0)], tmp_path / "m.safetensors", family)
    for name, delta in _loaded_change(model, family, merged).items():
        assert (delta - 2 * want[name]).abs().max().item() <= 2e-2 * scale, name


def _onetrainer_file(lora, alpha: float, path: Path) -> Path:
    """OneTrainer's LoRA layout (modules/module/LoRAModule.py LoRAModuleWrapper: the prefix
    `lora_transformer` + the diffusers module name with "_" for "."; lora_down / lora_up and a
    per-layer `.alpha`; modules/util/convert/lora/convert_flux_lora.py's "legacy diffusers" names)."""
    out = {}
    for key, value in lora.tensors.items():
        module, part = key.rsplit(".lora_", 1)
        flat = "lora_transformer_" + module.replace(".", "_")
        out[f"{flat}.lora_{'down' if part.startswith('A') else 'up'}.weight"] = value.contiguous()
        out[f"{flat}.alpha"] = torch.tensor(alpha)
    save_file(out, path, {"format": "pt"})
    return path


def test_onetrainers_flux_file_converts_merges_and_resizes_at_its_strength(
    layer_shapes, tiny_model, tmp_path
):
    """OneTrainer's FLUX.1 LoRAs (`lora_transformer_transformer_blocks_0_attn_to_q.lora_down.weight`
    ..., separate q, k, v) were refused by convert / merge / resize naming a key; diffusers'
    FluxPipeline reads them (lora_conversion_utils: the `lora_transformer_` branch), and that
    reading of the original file is the reference: alpha 8 over rank 4 (scale 2), each layer's
    change of rank 2 so that resize to rank 2 keeps it exactly."""
    family, model = "flux", tiny_model("flux")
    lora = _lora(layer_shapes(family), family, 4, 8.0, seed=7, every=3)
    for key, value in lora.tensors.items():  # each layer's change of rank 2 (resize to 2 is exact)
        if key.endswith("lora_A.weight"):
            value[2:] = 0
    theirs = _onetrainer_file(lora, 8.0, tmp_path / "onetrainer.safetensors")
    want = _loaded_change(model, family, theirs)
    assert max(d.abs().max().item() for d in want.values()) > 1e-3
    out = tmp_path / "to-diffusers.safetensors"
    convert_file(theirs, out, "diffusers", family)
    _assert_same_change(_loaded_change(model, family, out), want)

    # FLUX.1's kohya layout (what merge and resize of a kohya-read file write) fuses q, k, v:
    # diffusers' kohya reader splits them at FLUX.1-dev's widths only, so each such file is read
    # back through the diffusers layout
    def change_of(kohya: Path) -> dict[str, torch.Tensor]:
        back = kohya.with_name(f"{kohya.stem}-back.safetensors")
        convert_file(kohya, back, "diffusers", family)
        return _loaded_change(model, family, back)

    kohya = tmp_path / "to-kohya.safetensors"
    convert_file(theirs, kohya, "kohya", family)
    _assert_same_change(change_of(kohya), want)
    merged = merge_files([(theirs, 0.25), (theirs, 0.25)], tmp_path / "merged.safetensors", family)
    _assert_same_change(change_of(merged), want, 0.5)
    # another trainer's header names no family of ours: resize takes it as convert and merge do
    resize_file(theirs, tmp_path / "r2.safetensors", 2, family)  # each change of rank 2: kept exactly
    _assert_same_change(change_of(tmp_path / "r2.safetensors"), want)
    result = _cli(
        "resize", str(theirs), "--rank", "2", "--out", str(tmp_path / "cli.safetensors"), "--family", family
    )
    assert result.exit_code == 0, result.output
    pipe = load_pipeline(str(model), family, device="cpu")
    apply_loras(pipe, [(theirs, 1.0)])  # generation takes it, every layer loaded


def test_a_onetrainer_key_of_no_flux_module_is_refused_naming_it(layer_shapes, tmp_path):
    """A `lora_transformer_` name that is no FLUX.1 module the layouts map is refused naming it."""

    from lorastudio.errors import ConfigError

    family = "flux"
    lora = _lora(layer_shapes(family), family, 4, 4.0, seed=1, every=6)
    theirs = _onetrainer_file(lora, 4.0, tmp_path / "onetrainer.safetensors")
    from safetensors.torch import load_file

    tensors = load_file(str(theirs))
    tensors["lora_transformer_transformer_blocks_0_attn_norm_q.lora_down.weight"] = torch.zeros(4, 8)
    tensors["lora_transformer_transformer_blocks_0_attn_norm_q.lora_up.weight"] = torch.zeros(8, 4)
    odd = tmp_path / "odd.safetensors"
    save_file(tensors, odd, {"format": "pt"})
    with pytest.raises(ConfigError, match="transformer_blocks_0_attn_norm_q"):
        convert_file(odd, tmp_path / "out.safetensors", "diffusers", family)


def test_a_layer_spelt_both_by_onetrainer_and_kohya_is_refused(layer_shapes, tmp_path):
    """OneTrainer's to_q beside kohya's fused qkv of the same block: one layer twice, refused
    (neither is silently dropped)."""

    from safetensors.torch import load_file

    from lorastudio.errors import ConfigError
    from lorastudio.lora.convert import to_kohya

    family = "flux"
    lora = _lora(layer_shapes(family), family, 4, 4.0, seed=2)
    qkv = {k: v for k, v in lora.tensors.items() if k.startswith("transformer_blocks.0.attn.to_")}
    kohya = to_kohya({k: v for k, v in qkv.items() if ".to_out" not in k}, family, 4.0, 4)
    theirs = load_file(str(_onetrainer_file(lora, 4.0, tmp_path / "ot.safetensors")))
    both = {**kohya, **{k: v for k, v in theirs.items() if "transformer_blocks_0_attn_to_q" in k}}
    both = {k: v for k, v in both.items() if not k.startswith("lora_transformer_single")}
    path = tmp_path / "both.safetensors"
    save_file({k: v.contiguous() for k, v in both.items()}, path, {"format": "pt"})
    with pytest.raises(ConfigError, match=r"transformer_blocks\.0\.attn\.to_q is in the file twice"):
        convert_file(path, tmp_path / "out.safetensors", "diffusers", family)


@pytest.mark.parametrize(
    ("family", "flat", "module"),
    [
        ("qwen-image", "transformer_blocks_59_attn_add_q_proj", "transformer_blocks.59.attn.add_q_proj"),
        ("qwen-image", "transformer_blocks_3_img_mlp_net_0_proj", "transformer_blocks.3.img_mlp.net.0.proj"),
        (
            "qwen-image",
            "time_text_embed_timestep_embedder_linear_1",
            "time_text_embed.timestep_embedder.linear_1",
        ),
        ("z-image", "layers_29_attention_to_out_0", "layers.29.attention.to_out.0"),
        ("z-image", "noise_refiner_1_feed_forward_w1", "noise_refiner.1.feed_forward.w1"),
        ("z-image", "all_x_embedder_2-1", "all_x_embedder.2-1"),
        ("z-image", "layers_2_adaLN_modulation_0", "layers.2.adaLN_modulation.0"),
    ],
)
def test_onetrainer_names_resolve_against_the_real_modules(family, flat, module):
    """OneTrainer's underscored names are matched against the family's real module names (the
    tiny denoiser on the meta device): names with underscores of their own stay whole, and a
    block index past the tiny model's blocks is read (real checkpoints have more)."""
    from lorastudio.lora.onetrainer_names import from_flat

    assert from_flat(flat, family) == module


@pytest.mark.parametrize(
    ("family", "flat"),
    [
        ("qwen-image", "transformer_blocks_0_attn_to_out_1"),  # a Dropout, no layer
        ("qwen-image", "transformer_blocks_0_attn_norm_q"),
        ("z-image", "layers_0_attention_to_qkv"),
        ("z-image", "layers_0_adaLN_modulation_1"),
    ],
)
def test_a_onetrainer_name_of_no_layer_is_refused_naming_it(family, flat):
    from lorastudio.errors import ConfigError
    from lorastudio.lora.onetrainer_names import from_flat

    with pytest.raises(ConfigError, match=flat):
        from_flat(flat, family)


@pytest.mark.parametrize("family", ["qwen-image", "z-image"])
def test_onetrainers_qwen_and_z_image_files_merge_and_resize(family, layer_shapes, tmp_path):
    """merge and resize read OneTrainer's Qwen-Image / Z-Image files (they refused them naming a
    key): the merged / resized file holds the original change (each of rank 2: resize is exact)."""
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.files import peft_from_file

    lora = _lora(layer_shapes(family), family, 4, 8.0, seed=5, every=2)
    for key, value in lora.tensors.items():
        if key.endswith("lora_A.weight"):
            value[2:] = 0
    theirs = _onetrainer_file(lora, 8.0, tmp_path / "onetrainer.safetensors")
    want = {m: 2.0 * (lora.tensors[f"{m}.lora_B.weight"] @ a) for m, a in _down(lora).items()}

    def change(path: Path) -> dict[str, torch.Tensor]:
        got = peft_from_file(*read_lora_file(path), family)
        scale = got.alpha / got.rank
        return {m: scale * (got.tensors[f"{m}.lora_B.weight"] @ a) for m, a in _down(got).items()}

    merged = merge_files([(theirs, 0.5), (theirs, 0.5)], tmp_path / "m.safetensors", family)
    resized = tmp_path / "r.safetensors"
    resize_file(theirs, resized, 2, family)
    for path in (merged, resized):
        _assert_same_change(change(path), want)


def _down(lora) -> dict[str, torch.Tensor]:
    return {
        k.removesuffix(".lora_A.weight"): v for k, v in lora.tensors.items() if k.endswith(".lora_A.weight")
    }
