"""Single-file base checkpoints: the tiny models written in the original key layout (SGM for
SDXL, BFL for FLUX.1 / Chroma; tests/single_files.py) load through the family hooks with the
tiny folder as base config, to the folder's exact weights; incomplete files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.families.single_file import single_file
from single_files import flux_to_bfl, write_sdxl_file, write_transformer_file

CPU, F32 = torch.device("cpu"), torch.float32


def _same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.fixture(scope="module")
def sdxl_file(tiny_model, tmp_path_factory) -> tuple[Path, Path]:
    folder = tiny_model("sdxl")
    return write_sdxl_file(folder, tmp_path_factory.mktemp("sf") / "tiny-sdxl.safetensors"), folder


def test_sdxl_file_loads_the_folders_weights(sdxl_file):
    file, folder = sdxl_file
    fam = families.get("sdxl")
    sf = single_file(str(file), str(folder), None)
    assert sf.components == ("unet", "vae", "text_encoder", "text_encoder_2")
    _same(fam.load_denoiser(sf, None, F32, CPU), fam.load_denoiser(str(folder), None, F32, CPU))
    _same(fam.load_vae(sf, None, F32, CPU), fam.load_vae(str(folder), None, F32, CPU))
    got, want = (
        fam.load_text_encoders(sf, None, F32, CPU),
        fam.load_text_encoders(str(folder), None, F32, CPU),
    )
    _same(got.text_encoder, want.text_encoder)
    _same(got.text_encoder_2, want.text_encoder_2)
    assert fam.scheduler_config(sf, None)["prediction_type"] == "epsilon"


@pytest.mark.parametrize("family", ["flux", "chroma"])
def test_transformer_file_loads_the_folders_transformer(family, tiny_model, tmp_path):
    folder = tiny_model(family)
    file = write_transformer_file(folder, tmp_path / f"{family}.safetensors", chroma=family == "chroma",
                                  prefix="model.diffusion_model.")  # fmt: skip
    fam = families.get(family)
    sf = single_file(str(file), str(folder), None)
    assert sf.components == ("transformer",)
    _same(fam.load_denoiser(sf, None, F32, CPU), fam.load_denoiser(str(folder), None, F32, CPU))


def test_v_prediction_from_the_marker_or_the_setting(sdxl_file, tmp_path):
    file, folder = sdxl_file
    fam = families.get("sdxl")
    assert (
        fam.scheduler_config(single_file(str(file), str(folder), True), None)["prediction_type"]
        == "v_prediction"
    )
    marked = write_sdxl_file(folder, tmp_path / "vpred.safetensors",
                             extra={"v_pred": torch.tensor([]), "ztsnr": torch.tensor([])})  # fmt: skip
    sched = fam.scheduler_config(single_file(str(marked), str(folder), None), None)
    assert sched["prediction_type"] == "v_prediction" and sched["rescale_betas_zero_snr"] is True


def test_a_file_missing_a_part_is_refused_naming_it(sdxl_file, tmp_path):
    from lorastudio.basemodels.single_file import vet_single_file

    file, folder = sdxl_file
    no_vae = write_sdxl_file(folder, tmp_path / "novae.safetensors", drop=("first_stage_model.",))
    with pytest.raises(ModelSourceError, match=r"novae\.safetensors.*missing keys of: VAE"):
        vet_single_file(no_vae, "sdxl")
    with pytest.raises(ModelSourceError, match="family 'sdxl'.*flux family takes single files of FLUX"):
        vet_single_file(file, "flux")
    gguf = tmp_path / "flux1-dev-Q4_K_S.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(ModelSourceError, match=r"Q4_K_S\.gguf is a GGUF file, an inference-only"):
        vet_single_file(gguf, "flux")


def test_a_file_missing_weights_inside_a_part_is_refused_at_load(tiny_model, tmp_path):
    folder = tiny_model("flux")
    file = write_transformer_file(folder, tmp_path / "pruned.safetensors", drop=("single_blocks.1.",))
    with pytest.raises(ModelSourceError, match=r"pruned\.safetensors lacks \d+ transformer weight"):
        families.get("flux").load_denoiser(single_file(str(file), str(folder), None), None, F32, CPU)


def test_a_file_of_another_config_is_refused(tiny_model, tmp_path):
    """A FLUX.1 [dev]-class file (guidance embedding) with a config without one: refused, not
    loaded without its guidance weights."""
    import json
    import shutil

    config = tmp_path / "schnell"
    shutil.copytree(tiny_model("flux"), config)
    cfg_file = config / "transformer" / "config.json"
    cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), "guidance_embeds": False}))
    file = write_transformer_file(tiny_model("flux"), tmp_path / "dev.safetensors")
    with pytest.raises(ModelSourceError, match=r"dev\.safetensors has 4 transformer weight\(s\) the config"):
        families.get("flux").load_denoiser(single_file(str(file), str(config), None), None, F32, CPU)


def test_bfl_keys_equal_diffusers_converter_at_flux1_width():
    """At FLUX.1's width (3072 / 12288, which diffusers' converter hard-codes) our converter gives
    diffusers' exact result: thin tensors (one column) keep the test small."""
    from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers

    from lorastudio.families.bfl_keys import bfl_to_diffusers

    gen = torch.Generator().manual_seed(0)
    inner, mlp = 3072, 12288
    shapes = {"to_q": inner, "to_k": inner, "to_v": inner, "add_q_proj": inner, "add_k_proj": inner,
              "add_v_proj": inner, "to_out.0": inner, "to_add_out": inner}  # fmt: skip
    sd = {}
    for name, rows in shapes.items():
        for part in ("weight", "bias"):
            sd[f"transformer_blocks.0.attn.{name}.{part}"] = torch.randn(rows, generator=gen)
    for name in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
        sd[f"transformer_blocks.0.attn.{name}.weight"] = torch.randn(128, generator=gen)
    for name in ("norm_q", "norm_k"):
        sd[f"single_transformer_blocks.0.attn.{name}.weight"] = torch.randn(128, generator=gen)
    for name, rows in {"ff.net.0.proj": mlp, "ff.net.2": inner, "ff_context.net.0.proj": mlp, "ff_context.net.2": inner,
                       "norm1.linear": 6 * inner, "norm1_context.linear": 6 * inner}.items():  # fmt: skip
        for part in ("weight", "bias"):
            sd[f"transformer_blocks.0.{name}.{part}"] = torch.randn(rows, generator=gen)
    for name, rows in {"attn.to_q": inner, "attn.to_k": inner, "attn.to_v": inner, "proj_mlp": mlp,
                       "proj_out": inner, "norm.linear": 3 * inner}.items():  # fmt: skip
        for part in ("weight", "bias"):
            sd[f"single_transformer_blocks.0.{name}.{part}"] = torch.randn(rows, generator=gen)
    for name, rows in {"context_embedder": inner, "x_embedder": inner, "proj_out": 64, "norm_out.linear": 2 * inner,
                       "time_text_embed.timestep_embedder.linear_1": inner, "time_text_embed.timestep_embedder.linear_2": inner,
                       "time_text_embed.text_embedder.linear_1": inner, "time_text_embed.text_embedder.linear_2": inner,
                       "time_text_embed.guidance_embedder.linear_1": inner,
                       "time_text_embed.guidance_embedder.linear_2": inner}.items():  # fmt: skip
        for part in ("weight", "bias"):
            sd[f"{name}.{part}"] = torch.randn(rows, generator=gen)
    bfl = flux_to_bfl(sd)
    ours = bfl_to_diffusers(bfl, {"num_attention_heads": 24, "attention_head_dim": 128})
    theirs = convert_flux_transformer_checkpoint_to_diffusers(dict(bfl))
    assert set(ours) == set(theirs) == set(sd)
    for k in ours:
        assert torch.equal(ours[k], theirs[k]) and torch.equal(ours[k], sd[k]), k
