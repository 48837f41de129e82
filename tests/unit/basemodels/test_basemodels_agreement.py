"""A pipeline folder whose component comes from another model (an SDXL VAE in a FLUX.1 folder,
a CLIP of another width, a T5 of another size, another family's transformer) is refused from
the components' config.json files, naming the component and the fact; the real tiny pipelines
and every released config pass (basemodels/agreement.py, FamilySpec.config_rules)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_hub import FakeHub

from lorastudio import families
from lorastudio.basemodels import fetch_model, inspect_folder, list_models, vet_pipeline_folder
from lorastudio.basemodels.hubcache import hub_cache_dir
from lorastudio.basemodels.resolve import resolve_base, resolve_base_model
from lorastudio.errors import ModelSourceError
from lorastudio.settings import Settings

# (family, its component, the family whose tiny component replaces it, that component, what the
# refusal says; None: the two are the same model's part and the folder stays trainable). Every
# family pair whose tiny pipelines share a component class is here.
SWAPS = [
    # AutoencoderKL: SDXL's 4-channel VAE against FLUX.1's 16-channel one (Chroma, Z-Image, Kontext)
    (
        "flux",
        "vae",
        "sdxl",
        "vae",
        "vae/config.json: latent_channels 4, FLUX.1's transformer takes 16 "
        "(in_channels 64 = 16 x 2 x 2): this VAE is another model's",
    ),
    (
        "flux-kontext",
        "vae",
        "sdxl",
        "vae",
        "vae/config.json: latent_channels 4, FLUX.1 Kontext's transformer "
        "takes 16 (in_channels 64 = 16 x 2 x 2)",
    ),
    ("chroma", "vae", "sdxl", "vae", "vae/config.json: latent_channels 4, Chroma's transformer takes 16"),
    (
        "z-image",
        "vae",
        "sdxl",
        "vae",
        "vae/config.json: latent_channels 4, Z-Image's transformer takes 16 (in_channels)",
    ),
    (
        "sdxl",
        "vae",
        "flux",
        "vae",
        "vae/config.json: latent_channels 16, Stable Diffusion XL's unet takes 4 "
        "(out_channels): this VAE is another model's",
    ),
    ("flux", "vae", "z-image", "vae", None),  # FLUX.1's VAE is Z-Image's and Chroma's
    ("chroma", "vae", "flux", "vae", None),
    # CLIPTextModel: SDXL's CLIP-L is FLUX.1's; its bigG (another width) is not
    ("flux", "text_encoder", "sdxl", "text_encoder", None),
    (
        "flux",
        "text_encoder",
        "sdxl",
        "text_encoder_2",
        "text_encoder/config.json: hidden_size 64, FLUX.1's "
        "transformer takes 32 (pooled_projection_dim): this text encoder is another model's",
    ),
    (
        "sdxl",
        "text_encoder",
        "sdxl",
        "text_encoder_2",
        "text_encoder/config.json hidden_size 64 + "
        "text_encoder_2/config.json hidden_size 64 = 128, Stable Diffusion XL's unet takes 96",
    ),
    # T5EncoderModel: FLUX.1's T5 is Chroma's
    ("chroma", "text_encoder", "flux", "text_encoder_2", None),
    ("flux", "text_encoder_2", "chroma", "text_encoder", None),
    # Qwen3: Z-Image's (32 wide) against FLUX.2 [klein]'s (16 wide, 3 layers stacked)
    (
        "z-image",
        "text_encoder",
        "flux2-klein",
        "text_encoder",
        "text_encoder/config.json: hidden_size 16, "
        "Z-Image's transformer takes 32 (cap_feat_dim): this text encoder is another model's",
    ),
    (
        "flux2-klein",
        "text_encoder",
        "z-image",
        "text_encoder",
        "text_encoder/config.json: hidden_size 32, "
        "FLUX.2 klein's transformer takes 16 (joint_attention_dim 48 = 16 x 3 stacked layers)",
    ),
    # transformers of one class: FLUX.1 / Kontext, Qwen-Image / Edit, FLUX.2 / klein share configs
    ("flux", "transformer", "flux-kontext", "transformer", None),
    ("qwen-image", "transformer", "qwen-image-edit", "transformer", None),
    ("flux2-klein", "transformer", "flux2", "transformer", None),
    ("flux2", "vae", "flux2-klein", "vae", None),
    # AutoencoderKLQwenImage: Qwen-Image's VAE is Qwen-Image-Edit's and Krea 2's
    ("krea2", "vae", "qwen-image", "vae", None),
    ("qwen-image-edit", "vae", "qwen-image", "vae", None),
    # another family's transformer (another class): its config says so
    (
        "flux",
        "transformer",
        "chroma",
        "transformer",
        "transformer/config.json is a ChromaTransformer2DModel's "
        "config, but model_index.json loads transformer as FluxTransformer2DModel",
    ),
    (
        "flux",
        "transformer",
        "z-image",
        "transformer",
        "transformer/config.json is a ZImageTransformer2DModel's",
    ),
    (
        "qwen-image",
        "vae",
        "flux",
        "vae",
        "vae/config.json is a AutoencoderKL's config, but model_index.json "
        "loads vae as AutoencoderKLQwenImage",
    ),
]


def _swap(copy_tiny: Callable[..., Path], into: str, component: str, source: Path, tmp_path: Path) -> Path:
    folder = copy_tiny(into, tmp_path / f"mixed-{into}")
    shutil.rmtree(folder / component)
    shutil.copytree(source, folder / component)
    return folder


@pytest.mark.parametrize(("into", "component", "donor", "part", "said"), SWAPS)
def test_a_component_of_another_model_is_refused_naming_it(
    into: str,
    component: str,
    donor: str,
    part: str,
    said: str | None,
    copy_tiny: Callable[..., Path],
    tiny_model: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    folder = _swap(copy_tiny, into, component, tiny_model(donor) / part, tmp_path)
    rec = inspect_folder(folder)
    if said is None:
        assert (rec.trainable, rec.foreign) == (True, ())
        assert vet_pipeline_folder(folder, into) == rec
        return
    assert (rec.family, rec.trainable, rec.complete) == (into, False, True)
    assert len(rec.foreign) == 1 and rec.foreign[0].startswith(said), rec.foreign
    assert rec.reason == f"{folder} mixes components of different models: {rec.foreign[0]}"
    with pytest.raises(ModelSourceError) as err:
        vet_pipeline_folder(folder, into)
    assert said in str(err.value)


def _edit_config(path: Path, **changes: object) -> None:
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(changes)
    path.write_text(json.dumps(config), encoding="utf-8")


def test_the_catalogue_lists_a_mixed_folder_as_untrainable_with_the_reason(
    settings: Settings, copy_tiny: Callable[..., Path], tiny_model: Callable[[str], Path]
) -> None:
    folder = copy_tiny("z-image", settings.models_dir / "mixed")
    shutil.rmtree(folder / "vae")
    shutil.copytree(tiny_model("sdxl") / "vae", folder / "vae")
    (entry,) = [
        e for e in list_models(settings, hub_cache=False, known_captioners=False) if e.path == str(folder)
    ]
    assert (entry.family, entry.trainable) == ("z-image", False)
    assert "vae/config.json: latent_channels 4, Z-Image's transformer takes 16" in str(entry.reason)


def test_a_t5_of_another_size_and_a_vae_without_its_shift_are_named(
    copy_tiny: Callable[..., Path], tmp_path: Path
) -> None:
    folder = copy_tiny("chroma")
    _edit_config(folder / "text_encoder" / "config.json", d_model=64)  # a T5 of another size
    _edit_config(folder / "vae" / "config.json", shift_factor=None)
    assert inspect_folder(folder).foreign == (
        "vae/config.json sets no shift_factor, which Chroma needs (ChromaPipeline shifts the latents by it): "
        "this VAE is another model's",
        "text_encoder/config.json: d_model 64, Chroma's transformer takes 32 (joint_attention_dim): "
        "this text encoder is another model's",
    )


def test_a_foreign_transformer_is_named_and_not_used_to_blame_the_rest(
    copy_tiny: Callable[..., Path], tmp_path: Path
) -> None:
    folder = copy_tiny("qwen-image")
    _edit_config(folder / "transformer" / "config.json", in_channels=16, joint_attention_dim=64)
    assert inspect_folder(folder).foreign == (
        "transformer/config.json: in_channels 16, Qwen-Image's transformer takes 64 "
        "(16 latent channels x 2 x 2): this transformer is another model's",
    )


def test_a_partial_hub_snapshot_with_a_foreign_component_is_refused_online(
    settings: Settings, hub: FakeHub, tiny_model: Callable[[str], Path]
) -> None:
    """Online, a partial snapshot is left for the loader to complete; its configs are checked all
    the same, so a mixed repo fails before the download of its weights."""
    commit = "c" * 40
    repo = hub_cache_dir() / "models--acme--mixed"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(tiny_model("flux"), snapshot, ignore=shutil.ignore_patterns("*.safetensors"))
    shutil.copy(tiny_model("sdxl") / "vae" / "config.json", snapshot / "vae" / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    with pytest.raises(ModelSourceError, match="vae/config.json: latent_channels 4, FLUX.1's transformer"):
        resolve_base_model("acme/mixed", "flux", settings)


def test_a_single_files_base_config_mixing_models_is_refused(
    settings: Settings, copy_tiny: Callable[..., Path], tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """A FLUX.1 single file takes its VAE and text encoders from its base config: one of another
    model there is named before the load, as for a folder."""
    from single_files import write_transformer_file

    file = write_transformer_file(tiny_model("flux"), tmp_path / "flux.safetensors")
    mixed = _swap(copy_tiny, "flux", "text_encoder_2", tiny_model("z-image") / "text_encoder", tmp_path)
    assert resolve_base(str(file), "flux", settings, base_config=str(tiny_model("flux"))).file is not None
    with pytest.raises(ModelSourceError) as err:
        resolve_base(str(file), "flux", settings, base_config=str(mixed))
    assert f"base_config {str(mixed)!r}" in str(err.value)
    assert (
        "text_encoder_2/config.json sets no d_model, which FLUX.1 reads: this text encoder is another model's"
        in str(err.value)
    )  # a Qwen3's config in T5's place


def test_a_hub_repo_mixing_models_is_refused_before_its_weights_are_fetched(
    settings: Settings, hub: FakeHub, tiny_model: Callable[[str], Path]
) -> None:
    from fake_hub import FakeRepo, folder_files

    files = {p: b for p, b in folder_files(tiny_model("flux")).items() if p != "lorastudio_tiny.json"}
    files["vae/config.json"] = (tiny_model("sdxl") / "vae" / "config.json").read_bytes()
    hub.repos["acme/mixed"] = FakeRepo(files)
    with pytest.raises(ModelSourceError) as err:
        fetch_model(settings, "acme/mixed")
    assert str(err.value).startswith(
        "acme/mixed mixes components of different models: vae/config.json: latent_channels 4, FLUX.1's "
        "transformer takes 16"
    )
    gets = [r.path for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
    assert gets and not [p for p in gets if p.endswith(".safetensors")]  # configs only
    assert list(settings.models_dir.iterdir()) == []


def test_every_family_declares_config_rules() -> None:
    for family in families.all_families():
        assert family.spec.config_rules, family.spec.name


@pytest.mark.slow
def test_every_released_config_passes(tmp_path: Path) -> None:
    """The released checkpoints' configs (bench's real shapes) agree with their family's rules."""
    from tests.unit.basemodels.real_configs import write_real_config_folders

    for name, folder in write_real_config_folders(tmp_path).items():
        family = name.removesuffix("-9b").removesuffix("-refiner")
        rec = vet_pipeline_folder(folder, family)
        assert (rec.trainable, rec.foreign) == (True, ()), name
