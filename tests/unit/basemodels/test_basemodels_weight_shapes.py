"""A component whose config.json agrees with the family but whose weights are another model's (a
config over another model's weights, a text encoder of another vocabulary, a VAE with other
latent channels) is refused from the safetensors headers before any load, naming the file, the
tensor, its shape and the expected one; the genuine tiny pipelines of every family pass, each
declared tensor found; a sharded component is read through its weight index
(basemodels/weight_shapes.py, the families' `Shape` rules)."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio import families
from lorastudio.basemodels import inspect_folder, list_models, vet_pipeline_folder
from lorastudio.basemodels import weight_shapes as ws
from lorastudio.basemodels.layout import listed_components
from lorastudio.errors import ModelSourceError
from lorastudio.families.config_rules import Shape
from lorastudio.settings import Settings
from lorastudio.tiny import TINY_FAMILIES


def _weights_of(model: Path, comp: str, source: Path) -> None:
    """Replace `model`/`comp`'s weights by `source`'s (its config.json kept)."""
    for file in (model / comp).glob("*.safetensors"):
        file.unlink()
    for file in source.glob("*.safetensors"):
        shutil.copy(file, model / comp / file.name)


def _set(config: Path, **values: object) -> None:
    meta = json.loads(config.read_text(encoding="utf-8"))
    meta.update(values)
    config.write_text(json.dumps(meta), encoding="utf-8")


# (family, component, the family whose tiny component's weights replace its weights (None: the
# config is edited instead), config edits, what the refusal says). Each folder's configs agree
# with each other (the old vetting listed every one as trainable).
CASES = [
    (  # a VAE with other latent channels in its weights (SDXL's 4 under FLUX.1's 16-channel config)
        "flux",
        "vae",
        ("sdxl", "vae"),
        {},
        "vae/diffusion_pytorch_model.safetensors: encoder.conv_out.weight is [8, 32, 3, 3], "
        "vae/config.json makes it [32, ...] (2 x latent_channels 16): these VAE weights are another model's",
    ),
    (  # a text encoder of the right width but another vocabulary
        "flux",
        "text_encoder",
        None,
        {"vocab_size": 49408},
        "text_encoder/model.safetensors: embeddings.token_embedding.weight is [883, 32], "
        "text_encoder/config.json makes it [49408, 32, ...] (vocab_size 49408, hidden_size 32)",
    ),
    (  # a CLIP of another width under the right config
        "flux",
        "text_encoder",
        ("sdxl", "text_encoder_2"),
        {},
        "text_model.embeddings.token_embedding.weight is [883, 64], text_encoder/config.json makes it "
        "[883, 32, ...]",
    ),
    (  # a config.json over another model's transformer
        "flux",
        "transformer",
        ("flux2", "transformer"),
        {},
        "transformer/diffusion_pytorch_model.safetensors: x_embedder.weight is [128, 128], "
        "transformer/config.json makes it [32, 64, ...] (num_attention_heads 2 x attention_head_dim 16, "
        "in_channels 64)",
    ),
    (  # another class's weights altogether: the tensor the config's class has is not there
        "sdxl",
        "unet",
        ("flux", "transformer"),
        {},
        "unet/diffusion_pytorch_model.safetensors: no conv_in.weight tensor, which unet/config.json's "
        "U-Net has: these weights are another model's",
    ),
    (  # Qwen2.5-VL weights under a Qwen3 config: same embedding shape, no per-head query norm
        "z-image",
        "text_encoder",
        ("qwen-image", "text_encoder"),
        {},
        "text_encoder/model.safetensors: no layers.0.self_attn.q_norm.weight tensor",
    ),
    (  # a text-only Qwen3 under Qwen2.5-VL's config: no vision tower
        "qwen-image",
        "text_encoder",
        ("z-image", "text_encoder"),
        {},
        "text_encoder/model.safetensors: no visual.patch_embed.proj.weight tensor",
    ),
    (  # a Qwen-Image VAE of another base width (same 16 latent channels)
        "krea2",
        "vae",
        ("qwen-image-edit", "vae"),
        {},
        "encoder.conv_in.weight is [2, 3, 3, 3, 3], vae/config.json makes it [16, ...] (base_dim 16)",
    ),
]


@pytest.mark.parametrize(("family", "comp", "source", "edits", "said"), CASES)
def test_weights_of_another_model_are_refused_before_any_load_naming_the_tensor(
    family: str,
    comp: str,
    source: tuple[str, str] | None,
    edits: dict[str, object],
    said: str,
    copy_tiny: Callable[..., Path],
    tiny_model: Callable[[str], Path],
) -> None:
    model = copy_tiny(family)
    if source is not None:
        _weights_of(model, comp, tiny_model(source[0]) / source[1])
    if edits:
        _set(model / comp / "config.json", **edits)
    rec = inspect_folder(model)
    assert not rec.trainable
    assert said in rec.reason
    assert rec.reason.startswith(f"{model} mixes components of different models")
    with pytest.raises(ModelSourceError, match="another model's") as err:
        vet_pipeline_folder(model, family)
    assert said in str(err.value)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_genuine_tiny_pipeline_passes_with_every_declared_tensor_found(
    family: str, tiny_model: Callable[[str], Path]
) -> None:
    folder = tiny_model(family)
    assert inspect_folder(folder).trainable
    fam = families.get(family)
    listed = listed_components(json.loads((folder / "model_index.json").read_text()))
    shapes = [r for r in fam.spec.config_rules if isinstance(r, Shape)]
    assert {r.component for r in shapes} >= {"vae", fam.spec.denoiser, "text_encoder"}
    for rule in shapes:
        assert rule.component in listed
        files = ws.weight_files(folder / rule.component)
        found = [ws.header_shapes(folder / rule.component / f, rule.tensors) for f in files]
        assert any(found), (rule.component, rule.tensors)  # the check judged something


def _shard(component: Path, shards: int = 2) -> list[str]:
    """Split `component`'s one safetensors file into `shards` files with a weight index, as
    save_pretrained does for a large model."""
    from safetensors.torch import load_file, save_file

    (single,) = component.glob("*.safetensors")
    tensors = load_file(single)
    stem = single.name.removesuffix(".safetensors")
    names = sorted(tensors)
    files = [f"{stem}-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {}
    for i, file in enumerate(files):
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, str(component / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    (component / f"{single.name}.index.json").write_text(json.dumps({"weight_map": weight_map}))
    single.unlink()
    return files


def test_a_sharded_component_is_read_through_its_weight_index(
    copy_tiny: Callable[..., Path], tiny_model: Callable[[str], Path]
) -> None:
    genuine = copy_tiny("flux")
    _shard(genuine / "transformer")
    assert inspect_folder(genuine).trainable

    mixed = copy_tiny("flux", Path(genuine).parent / "mixed")
    _weights_of(mixed, "transformer", tiny_model("flux2") / "transformer")
    files = _shard(mixed / "transformer")
    rec = inspect_folder(mixed)
    assert not rec.trainable
    holder = next(
        f
        for f in files
        if "x_embedder.weight" in (ws.header_shapes(mixed / "transformer" / f, ("x_embedder.weight",)) or {})
    )
    assert f"transformer/{holder}: x_embedder.weight is [128, 128]" in rec.reason

    # a shard not there yet (a partial hub snapshot, completed by the loader): a tensor could be
    # in it, so no "holds no such tensor"; the missing shard is what the folder is refused for
    (mixed / "transformer" / holder).unlink()
    rec = inspect_folder(mixed)
    assert "x_embedder" not in (rec.reason or "")
    assert rec.missing == (f"transformer/{holder}",)


def test_headers_are_read_once_per_file_version_and_never_past_their_bound(
    copy_tiny: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = copy_tiny("flux")
    reads: list[int] = []
    real = ws._read_header
    monkeypatch.setattr(ws, "_read_header", lambda fd, size: reads.append(fd) or real(fd, size))
    assert inspect_folder(model).trainable
    first = len(reads)
    assert first == 4  # one header each: vae, transformer, both text encoders
    assert inspect_folder(model).trainable
    assert len(reads) == first  # cached: the same versions are not read again

    weights = model / "transformer" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes())  # a new version of the same bytes
    inspect_folder(model)
    assert len(reads) == first + 1  # only the rewritten file read again

    # a header that claims more than the file holds (or than MAX_HEADER_BYTES): not judged, no read
    weights.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert ws.header_shapes(weights, ("x_embedder.weight",)) is None


def test_the_catalogue_lists_such_a_folder_as_not_trainable(
    settings: Settings, copy_tiny: Callable[..., Path], tiny_model: Callable[[str], Path]
) -> None:
    model = copy_tiny("flux", settings.models_dir / "mixed")
    _weights_of(model, "vae", tiny_model("sdxl") / "vae")
    (entry,) = [
        e for e in list_models(settings, hub_cache=False, known_captioners=False) if e.name == "mixed"
    ]
    assert not entry.trainable
    assert "encoder.conv_out.weight is [8, 32, 3, 3]" in (entry.reason or "")


@pytest.mark.slow
def test_the_released_shapes_pass_with_every_declared_tensor_found(tmp_path: Path) -> None:
    """The header-only pipelines of the released FLUX.1-dev, Qwen-Image, Z-Image and SDXL configs
    (bench/header_pipelines.py: every tensor's real name and shape), their components listed."""
    from bench.header_pipelines import build_flux1, build_qwen_image, build_sdxl, build_z_image

    for build, family in (
        (build_flux1, "flux"),
        (build_qwen_image, "qwen-image"),
        (build_z_image, "z-image"),
        (build_sdxl, "sdxl"),
    ):
        folder = build(tmp_path)
        index = json.loads((folder / "model_index.json").read_text())
        for comp in (p for p in folder.iterdir() if (p / "config.json").is_file()):
            meta = json.loads((comp / "config.json").read_text())
            index[comp.name] = (
                ["diffusers", meta["_class_name"]] if "_class_name" in meta else ["transformers", "AutoModel"]
            )
        (folder / "model_index.json").write_text(json.dumps(index))
        assert inspect_folder(folder).trainable, family
        shapes = [r for r in families.get(family).spec.config_rules if isinstance(r, Shape)]
        assert shapes  # the check judged something
        for rule in shapes:
            files = ws.weight_files(folder / rule.component)
            found = [ws.header_shapes(folder / rule.component / f, rule.tensors) for f in files]
            assert any(found), (family, rule)


def test_packed_pre_quantised_tensors_are_there_but_not_judged(copy_tiny: Callable[..., Path]) -> None:
    """A 4-bit packed tensor (U8, [n / 2, 1]) stores another shape than the model's: present, not
    compared (the same folder with it as bf16 of that shape is refused)."""
    import torch
    from safetensors.torch import load_file, save_file

    model = copy_tiny("flux")
    weights = model / "transformer" / "diffusion_pytorch_model.safetensors"
    tensors = load_file(weights)
    tensors["x_embedder.weight"] = torch.zeros(1024, 1, dtype=torch.uint8)  # 32 x 64 / 2 packed
    save_file(tensors, str(weights), metadata={"format": "pt"})
    assert inspect_folder(model).trainable
    tensors["x_embedder.weight"] = torch.zeros(1024, 1, dtype=torch.bfloat16)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    assert "x_embedder.weight is [1024, 1]" in (inspect_folder(model).reason or "")
