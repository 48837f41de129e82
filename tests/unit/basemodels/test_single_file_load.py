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
    sdxl = tiny_model("sdxl")
    file = write_sdxl_file(
        sdxl, tmp_path / "pruned-xl.safetensors", drop=("model.diffusion_model.output_blocks.8.",)
    )
    with pytest.raises(
        ModelSourceError, match=r"pruned-xl\.safetensors lacks \d+ unet weight\(s\) the config"
    ):
        families.get("sdxl").load_denoiser(single_file(str(file), str(sdxl), None), None, F32, CPU)


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


def _thin_transformer(chroma: bool) -> dict[str, torch.Tensor]:
    """A diffusers FLUX.1 / Chroma transformer state dict at FLUX.1's width with one column per
    tensor (the converters split and rename along the output axis only)."""
    gen = torch.Generator().manual_seed(0)
    inner, mlp = 3072, 12288
    rows: dict[str, int] = {}
    for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"):
        rows[f"transformer_blocks.0.attn.{name}"] = inner
    for name, n in {"ff.net.0.proj": mlp, "ff.net.2": inner, "ff_context.net.0.proj": mlp, "ff_context.net.2": inner}.items():  # fmt: skip
        rows[f"transformer_blocks.0.{name}"] = n
    for name, n in {"attn.to_q": inner, "attn.to_k": inner, "attn.to_v": inner, "proj_mlp": mlp, "proj_out": inner}.items():  # fmt: skip
        rows[f"single_transformer_blocks.0.{name}"] = n
    rows |= {"context_embedder": inner, "x_embedder": inner, "proj_out": 64}
    if chroma:
        rows |= {"distilled_guidance_layer.in_proj": 5120, "distilled_guidance_layer.out_proj": inner,
                 "distilled_guidance_layer.layers.0.linear_1": 5120, "distilled_guidance_layer.layers.0.linear_2": 5120}  # fmt: skip
    else:
        rows |= {"transformer_blocks.0.norm1.linear": 6 * inner, "transformer_blocks.0.norm1_context.linear": 6 * inner,
                 "single_transformer_blocks.0.norm.linear": 3 * inner, "norm_out.linear": 2 * inner}  # fmt: skip
        for emb in ("timestep_embedder", "text_embedder", "guidance_embedder"):
            rows |= {f"time_text_embed.{emb}.linear_1": inner, f"time_text_embed.{emb}.linear_2": inner}
    sd = {
        f"{k}.{part}": torch.randn(n, generator=gen) for k, n in rows.items() for part in ("weight", "bias")
    }
    norms = [f"transformer_blocks.0.attn.{n}" for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k")]
    norms += ["single_transformer_blocks.0.attn.norm_q", "single_transformer_blocks.0.attn.norm_k"]
    norms += ["distilled_guidance_layer.norms.0"] if chroma else []
    sd |= {f"{k}.weight": torch.randn(128, generator=gen) for k in norms}
    return sd


@pytest.mark.parametrize("family", ["flux", "chroma"])
def test_bfl_keys_equal_diffusers_converter_at_flux1_width(family):
    """At FLUX.1's width (3072 / 12288, which diffusers' converters hard-code) our converter gives
    diffusers' exact result, and the test helper's reverse is its inverse."""
    from diffusers.loaders import single_file_utils as sfu

    from lorastudio.families.bfl_keys import bfl_to_diffusers

    sd = _thin_transformer(chroma=family == "chroma")
    bfl = flux_to_bfl(sd, chroma=family == "chroma")
    convert = (
        sfu.convert_chroma_transformer_checkpoint_to_diffusers
        if family == "chroma"
        else sfu.convert_flux_transformer_checkpoint_to_diffusers
    )
    ours = bfl_to_diffusers(bfl, {"num_attention_heads": 24, "attention_head_dim": 128})
    theirs = convert(dict(bfl))
    assert set(ours) == set(theirs) == set(sd)
    for k in ours:
        assert torch.equal(ours[k], theirs[k]) and torch.equal(ours[k], sd[k]), k


def test_the_server_side_stays_torch_free():
    """Vetting a single file reads its header only; the API app and the job validation (which
    reads a run's model_source) import no torch."""
    import subprocess
    import sys

    code = (
        "import sys, lorastudio.api.app, lorastudio.jobs.validation, lorastudio.basemodels.single_file; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_edit_families_refuse_single_files_and_a_files_flavour_is_its_base_configs(tiny_model, tmp_path):
    """Edit families (their flavour, pipeline class and control count come from the checkpoint's
    folder) take no single files, naming why; a SingleFile's flavour hooks read its base config."""
    import json

    from lorastudio.basemodels.single_file import vet_single_file
    from lorastudio.families.single_file import SingleFile

    file = write_transformer_file(tiny_model("flux"), tmp_path / "flux.safetensors")
    for family in ("flux-kontext", "qwen-image-edit"):
        with pytest.raises(ModelSourceError, match=f"the {family} family takes no single-file checkpoints"):
            vet_single_file(file, family)
    fam = families.get("qwen-image-edit")
    for name, index, zero_cond_t, want in (
        ("plus", "QwenImageEditPlusPipeline", True, ("QwenImageEditPlusPipeline", (0, 3))),  # Plus: 0-3
        ("edit", "QwenImageEditPipeline", False, ("QwenImageEditPipeline", (1, 1))),
    ):
        config = tmp_path / name
        (config / "transformer").mkdir(parents=True)
        (config / "model_index.json").write_text(json.dumps({"_class_name": index}))
        (config / "transformer" / "config.json").write_text(json.dumps({"zero_cond_t": zero_cond_t}))
        sf = SingleFile(str(file), str(config), ("transformer",))
        assert (fam.source_pipeline_class(sf, None), fam.source_control_images(sf)) == want
