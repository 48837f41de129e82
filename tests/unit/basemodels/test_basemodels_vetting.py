"""Recognition and vetting of base-model folders: every family from its real tiny pipeline, and
hand-made model_index.json variants (untrainable families, partial, sharded, GGUF, one
component, single-file checkpoints)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio import families
from lorastudio.basemodels import accepted_text, inspect_folder, vet_pipeline_folder
from lorastudio.basemodels.layout import select_training_files
from lorastudio.errors import ModelSourceError


@pytest.mark.parametrize("family", families.names())
def test_each_family_is_recognised_from_its_tiny_pipeline(
    family: str, tiny_model: Callable[[str], Path]
) -> None:
    folder = tiny_model(family)
    rec = inspect_folder(folder)
    spec = families.get(family).spec
    assert (rec.family, rec.trainable, rec.complete, rec.missing, rec.reason) == (
        family,
        True,
        True,
        (),
        None,
    )
    assert rec.pipeline_class in spec.accepted_pipelines
    assert vet_pipeline_folder(folder, family) == rec
    other = next(n for n in families.names() if n != family)
    with pytest.raises(ModelSourceError) as err:
        vet_pipeline_folder(folder, other)
    assert rec.pipeline_class in str(err.value) and f"Use family {family!r}" in str(err.value)


def _index(folder: Path, **changes: object) -> Path:
    """Rewrite folder/model_index.json with `changes` (None removes a key)."""
    path = folder / "model_index.json"
    meta = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    path.write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize(
    ("class_name", "words"),
    [
        ("StableDiffusionPipeline", "Stable Diffusion 1.x/2.x"),
        ("StableDiffusion3Pipeline", "Stable Diffusion 3"),
        ("MadeUpPipeline", "MadeUpPipeline is not a family"),
    ],
)
def test_pipelines_no_family_trains_are_refused_listing_what_is_accepted(
    class_name: str, words: str, copy_tiny: Callable[..., Path]
) -> None:
    folder = _index(copy_tiny("sdxl"), _class_name=class_name)
    rec = inspect_folder(folder)
    assert (rec.family, rec.trainable, rec.pipeline_class, rec.complete) == (None, False, class_name, True)
    assert words in str(rec.reason) and accepted_text() in str(rec.reason)
    for fam in families.all_families():  # the message names every family and pipeline class
        assert fam.spec.name in accepted_text()
        assert all(cls in accepted_text() for cls in fam.spec.accepted_pipelines)
    with pytest.raises(ModelSourceError, match="StableDiffusionXLPipeline"):
        vet_pipeline_folder(folder, "sdxl")


def test_unreadable_or_odd_model_index(copy_tiny: Callable[..., Path]) -> None:
    folder = copy_tiny("flux")
    (folder / "model_index.json").write_text("{not json")
    assert "cannot be read" in str(inspect_folder(folder).reason)
    (folder / "model_index.json").write_text("[1, 2]")
    assert "not a JSON object" in str(inspect_folder(folder).reason)
    _index_path = folder / "model_index.json"
    _index_path.write_text(json.dumps({"transformer": ["diffusers", "FluxTransformer2DModel"]}))
    rec = inspect_folder(folder)
    assert rec.pipeline_class is None and "names no pipeline class" in str(rec.reason)
    with pytest.raises(ModelSourceError, match="names no pipeline class"):
        vet_pipeline_folder(folder, "flux")


def test_partial_pipelines_list_what_is_missing(copy_tiny: Callable[..., Path]) -> None:
    folder = copy_tiny("flux")
    shutil.rmtree(folder / "vae")
    (folder / "transformer" / "diffusion_pytorch_model.safetensors").unlink()  # config left alone
    (folder / "scheduler" / "scheduler_config.json").unlink()
    (folder / "text_encoder" / "config.json").unlink()
    rec = inspect_folder(folder)
    assert (rec.family, rec.trainable, rec.complete) == ("flux", False, False)
    assert set(rec.missing) == {
        "vae/",
        "transformer/*.safetensors (weights)",
        "scheduler/scheduler_config.json",
        "text_encoder/config.json",
    }
    with pytest.raises(ModelSourceError) as err:
        vet_pipeline_folder(folder, "flux")
    assert "missing component folder(s) vae" in str(err.value)
    assert "transformer/*.safetensors" in str(err.value)


def test_weights_formats_variants_bin_and_shards(copy_tiny: Callable[..., Path]) -> None:
    folder = copy_tiny("z-image")
    transformer = folder / "transformer"
    weights = transformer / "diffusion_pytorch_model.safetensors"
    data = weights.read_bytes()

    weights.rename(transformer / "diffusion_pytorch_model.fp16.safetensors")  # a variant only
    assert inspect_folder(folder).missing == ("transformer/*.safetensors (weights)",)

    (transformer / "diffusion_pytorch_model.bin").write_bytes(b"pickle")  # .bin is loadable
    assert inspect_folder(folder).trainable

    for p in transformer.glob("diffusion_pytorch_model*"):
        p.unlink()
    (transformer / "diffusion_pytorch_model-Q8_0.gguf").write_bytes(b"GGUF")
    (missing,) = inspect_folder(folder).missing
    assert "only GGUF found" in missing and "inference-only" in missing

    shards = [f"diffusion_pytorch_model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    (transformer / f"{shards[0].split('-')[0]}.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}})
    )
    (transformer / shards[0]).write_bytes(data)
    assert inspect_folder(folder).missing == (f"transformer/{shards[1]}",)
    (transformer / shards[1]).write_bytes(data)
    assert inspect_folder(folder).trainable


def test_gguf_component_only_and_single_file_folders_are_not_pipelines(
    copy_tiny: Callable[..., Path], tmp_path: Path
) -> None:
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "flux1-dev-Q4_K_S.gguf").write_bytes(b"GGUF")
    component = Path(shutil.copytree(copy_tiny("flux") / "transformer", tmp_path / "transformer-only"))
    single = tmp_path / "single"
    single.mkdir()
    (single / "sd_xl_base_1.0.safetensors").write_bytes(b"x")
    empty = tmp_path / "empty"
    empty.mkdir()
    expected = {
        gguf: "GGUF files (flux1-dev-Q4_K_S.gguf), an inference-only format",
        component: "a single component (FluxTransformer2DModel), not a whole pipeline",
        single: "single-file checkpoint(s) (sd_xl_base_1.0.safetensors)",
        empty: "no model_index.json",
        tmp_path / "absent": "is not a folder",
    }
    for folder, words in expected.items():
        rec = inspect_folder(folder)
        assert (rec.family, rec.pipeline_class, rec.trainable, rec.complete) == (None, None, False, False)
        assert words in str(rec.reason), rec.reason
        with pytest.raises(ModelSourceError) as err:
            vet_pipeline_folder(folder, "flux")
        assert words in str(err.value)
        if folder != tmp_path / "absent":
            assert "FluxPipeline" in str(err.value)  # what IS accepted


def test_training_file_selection_of_a_hub_repo(tiny_model: Callable[[str], Path]) -> None:
    folder = tiny_model("sdxl")
    index = json.loads((folder / "model_index.json").read_text())
    pipeline = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    pipeline.remove("lorastudio_tiny.json")
    extras = [
        "README.md",
        "sd_xl_base_1.0.safetensors",
        "sd_xl_base_1.0_0.9vae.safetensors",
        "unet/diffusion_pytorch_model.bin",
        "unet/diffusion_pytorch_model.fp16.safetensors",
        "text_encoder/model.fp16.safetensors",
        "text_encoder/flax_model.msgpack",
        "vae/diffusion_flax_model.msgpack",
        "vae_decoder/model.onnx",
        "unet/openvino/model.xml",
        "sdxl-Q4.gguf",
    ]
    sel = select_training_files(index, pipeline + extras)
    assert sel.files[0] == "model_index.json"
    assert sorted(sel.files) == pipeline and sel.problems == []
    assert sorted(sel.skipped) == sorted(extras)

    gguf_only = [p for p in pipeline if not p.startswith("unet/")] + ["unet/config.json", "unet/unet-Q4.gguf"]
    assert select_training_files(index, gguf_only).problems == [
        "unet/*.safetensors (weights; only GGUF found, an inference-only format)"
    ]
    no_vae = [p for p in pipeline if not p.startswith("vae/")]
    assert select_training_files(index, no_vae).problems == ["vae/ (not in the repo)"]
    bin_only = [p.replace("model.safetensors", "model.bin") for p in pipeline]
    assert sorted(select_training_files(index, bin_only).files) == sorted(bin_only)
