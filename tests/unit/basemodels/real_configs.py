"""Config-only pipeline folders of every family's released checkpoints, for the config-agreement
checks (basemodels/agreement.py): each model component is its real config.json (the diffusers
models built on the meta device from bench's real shapes, bench/header_pipelines.py,
bench/e2e_models.py and bench/models_2026.py; the text encoders' released transformers configs)
and an empty weight file, listed in model_index.json. Nothing here loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

# text encoders of the 2026 families, as their released config.json files give their widths
_MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "text_config": {"hidden_size": 5120},
}
_QWEN3_4B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 2560}
_QWEN3_VL_4B = {"architectures": ["Qwen3VLModel"], "text_config": {"hidden_size": 2560}}
# stabilityai/stable-diffusion-xl-refiner-1.0's unet/config.json, the facts the checks read
_SDXL_REFINER_UNET = {
    "_class_name": "UNet2DConditionModel",
    "in_channels": 4,
    "out_channels": 4,
    "cross_attention_dim": 1280,
    "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2560,
    "block_out_channels": [384, 768, 1536, 1536],
}
_T5_XXL = {"architectures": ["T5EncoderModel"], "d_model": 4096}


def _write(folder: Path, pipeline: str, parts: dict[str, Any]) -> Path:
    """`folder`: model_index.json naming `pipeline` and each part; per part its config.json (a
    diffusers model's save_config, or a transformers config dict) and an empty weight file."""
    index: dict[str, Any] = {"_class_name": pipeline}
    for name, part in parts.items():
        out = folder / name
        out.mkdir(parents=True)
        if isinstance(part, dict) and "_class_name" in part:  # a diffusers config.json as released
            (out / "config.json").write_text(json.dumps(part))
            index[name] = ["diffusers", part["_class_name"]]
            (out / "diffusion_pytorch_model.safetensors").touch()
        elif isinstance(part, dict):
            (out / "config.json").write_text(json.dumps(part))
            index[name] = ["transformers", part["architectures"][0]]
            (out / "model.safetensors").touch()
        elif hasattr(part, "save_config"):
            part.save_config(out)
            index[name] = ["diffusers", type(part).__name__]
            (out / "diffusion_pytorch_model.safetensors").touch()
        else:
            part.config.to_json_file(str(out / "config.json"))
            index[name] = ["transformers", type(part).__name__]
            (out / "model.safetensors").touch()
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


def _from_headers(root: Path, build: Any) -> dict[str, Any]:
    """The components bench/header_pipelines' `build` makes (on the meta device), by name."""
    import bench.header_pipelines as headers

    parts: dict[str, Any] = {}

    def keep(model: Any, folder: Path, dtype: str = "BF16") -> int:
        folder.mkdir(parents=True, exist_ok=True)  # the builder writes model_index.json there
        parts[folder.name] = model
        return 0

    original = headers.write_header_only
    headers.write_header_only = keep
    try:
        build(root / "headers")
    finally:
        headers.write_header_only = original
    return parts


def _models(pipe: Any) -> dict[str, Any]:
    return {name: m for name, m in pipe.components.items() if hasattr(m, "state_dict")}


def write_real_config_folders(root: Path) -> dict[str, Path]:
    """name -> a config-only folder of a released checkpoint; the name is its family's, or the
    family's with a suffix ("-9b", "-refiner") for a second checkpoint of one family."""
    import diffusers
    from bench import header_pipelines as headers
    from bench.e2e_models import real_pipeline
    from bench.models_2026 import KLEIN

    flux1 = _from_headers(root, headers.build_flux1)
    qwen = _from_headers(root, headers.build_qwen_image)
    sdxl = _from_headers(root, headers.build_sdxl)
    out = {
        "flux": _write(root / "flux", "FluxPipeline", flux1),
        "qwen-image": _write(root / "qwen-image", "QwenImagePipeline", qwen),
        "z-image": _write(root / "z-image", "ZImagePipeline", _from_headers(root, headers.build_z_image)),
        "sdxl": _write(root / "sdxl", "StableDiffusionXLPipeline", sdxl),
        # the SDXL refiner: no CLIP-L (model_index.json lists text_encoder as [null, null]), its
        # U-Net reads bigG's 1280 alone
        "sdxl-refiner": _write(
            root / "sdxl-refiner",
            "StableDiffusionXLImg2ImgPipeline",
            {"text_encoder_2": sdxl["text_encoder_2"], "unet": _SDXL_REFINER_UNET, "vae": sdxl["vae"]},
        ),
        "flux2-klein-9b": _write(
            root / "klein9b", "Flux2KleinPipeline", _models(real_pipeline("flux2-klein", device="meta"))
        ),
    }
    with torch.device("meta"):
        flux2_vae = diffusers.AutoencoderKLFlux2()
        out["flux2"] = _write(
            root / "flux2",
            "Flux2Pipeline",
            {
                "text_encoder": _MISTRAL_SMALL_31,
                "transformer": diffusers.Flux2Transformer2DModel(),
                "vae": flux2_vae,
            },
        )
        klein4b = diffusers.Flux2Transformer2DModel(guidance_embeds=False, **KLEIN["klein4b"])
        out["flux2-klein"] = _write(
            root / "klein4b",
            "Flux2KleinPipeline",
            {"text_encoder": _QWEN3_4B, "transformer": klein4b, "vae": flux2_vae},
        )
        out["chroma"] = _write(
            root / "chroma",
            "ChromaPipeline",
            {
                "text_encoder": _T5_XXL,
                "transformer": diffusers.ChromaTransformer2DModel(),
                "vae": flux1["vae"],
            },
        )
        out["krea2"] = _write(
            root / "krea2",
            "Krea2Pipeline",
            {
                "text_encoder": _QWEN3_VL_4B,
                "transformer": diffusers.Krea2Transformer2DModel(),
                "vae": qwen["vae"],
            },
        )
        plus = diffusers.QwenImageTransformer2DModel(zero_cond_t=True)  # Qwen-Image-Edit-2511
        out["qwen-image-edit"] = _write(
            root / "qwen-edit", "QwenImageEditPlusPipeline", {**qwen, "transformer": plus}
        )
    out["flux-kontext"] = _write(root / "kontext", "FluxKontextPipeline", flux1)
    return out
