"""Header-only pipeline folders of the released FLUX.1-dev, Qwen-Image, Z-Image and SDXL configs, for the VRAM
estimate's check against the measured H200 runs (tests/unit/jobs/test_real_size_forecasts.py).

Each component is built on torch's meta device (no memory, no weights), and written as a
diffusers / transformers folder: its config.json and one `model.safetensors` whose header lists
every tensor of the state dict with its real shape and dtype (bf16), then `truncate`d to the full
length: a sparse file of the real size that holds no data (the estimate reads headers only).
Nothing here can be loaded as a model. safetensors' own writer needs the tensors' bytes, so the
header is written by hand (the format: an 8-byte little-endian header length, the JSON header,
then the data; https://github.com/huggingface/safetensors#format).

usage: python -m bench.header_pipelines DIR   (writes DIR/flux1, DIR/qwen-image, DIR/z-image, DIR/sdxl)
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

_DTYPES = {"torch.bfloat16": ("BF16", 2), "torch.float32": ("F32", 4), "torch.float16": ("F16", 2)}


def write_header_only(model: Any, folder: Path, dtype: str = "BF16") -> int:
    """Write `folder`/config.json and a sparse `folder`/model.safetensors of `model`'s state dict
    (every tensor as `dtype`). Returns the file's length in bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "save_config"):  # diffusers
        model.save_config(folder)
    else:  # transformers
        model.config.to_json_file(str(folder / "config.json"))
    width = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, tensor in model.state_dict().items():
        size = tensor.numel() * width
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = folder / "model.safetensors"
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)
    return 8 + len(raw) + offset


def _from_e2e(root: Path, name: str, family: str, pipeline: str) -> Path:
    """root/name: the header-only folder of bench/e2e_models' real-size `family` pipeline (the same
    configs the end-to-end runs build), built on the meta device."""
    from bench.e2e_models import real_pipeline

    out = root / name
    pipe = real_pipeline(family, device="meta")
    for component, model in pipe.components.items():
        if hasattr(model, "state_dict"):  # the models (not the tokenizers or the scheduler)
            write_header_only(model, out / component)
    _model_index(out, pipeline)
    return out


def build_flux1(root: Path) -> Path:
    """root/flux1: FLUX.1-dev (12B MM-DiT with guidance embeddings, CLIP-L, T5-XXL, the 16-channel VAE)."""
    return _from_e2e(root, "flux1", "flux", "FluxPipeline")


def build_qwen_image(root: Path) -> Path:
    """root/qwen-image: Qwen-Image (20B MMDiT, the Qwen2.5-VL-7B text encoder, its 3D-causal VAE)."""
    return _from_e2e(root, "qwen-image", "qwen-image", "QwenImagePipeline")


def build_z_image(root: Path) -> Path:
    """root/z-image: Z-Image (6B single-stream DiT, the Qwen3-4B text encoder, FLUX.1's VAE)."""
    import torch
    from diffusers import AutoencoderKL, ZImageTransformer2DModel
    from transformers import Qwen3Model

    from bench.e2e_models import qwen3_config

    out = root / "z-image"
    with torch.device("meta"):
        parts = {
            "text_encoder": Qwen3Model(qwen3_config("4b")),
            "transformer": ZImageTransformer2DModel(),  # the released config's defaults
            "vae": AutoencoderKL(
                down_block_types=["DownEncoderBlock2D"] * 4,
                up_block_types=["UpDecoderBlock2D"] * 4,
                block_out_channels=[128, 256, 512, 512],
                layers_per_block=2,
                latent_channels=16,
                scaling_factor=0.3611,  # FLUX.1's VAE (Z-Image ships it)
                shift_factor=0.1159,
                use_quant_conv=False,
                use_post_quant_conv=False,
            ),
        }
    for name, model in parts.items():
        write_header_only(model, out / name)
    _model_index(out, "ZImagePipeline")
    return out


def build_sdxl(root: Path) -> Path:
    """root/sdxl: SDXL base (the 2.6B U-Net, CLIP-L and OpenCLIP bigG text encoders, its VAE)."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    from bench.models import SDXL_UNET

    out = root / "sdxl"
    with torch.device("meta"):
        parts = {
            "text_encoder": CLIPTextModel(
                CLIPTextConfig(
                    hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12
                )
            ),
            "text_encoder_2": CLIPTextModelWithProjection(
                CLIPTextConfig(
                    hidden_size=1280,
                    intermediate_size=5120,
                    num_attention_heads=20,
                    num_hidden_layers=32,
                    projection_dim=1280,
                    hidden_act="gelu",
                )
            ),
            "unet": UNet2DConditionModel(**SDXL_UNET),
            "vae": AutoencoderKL(
                down_block_types=["DownEncoderBlock2D"] * 4,
                up_block_types=["UpDecoderBlock2D"] * 4,
                block_out_channels=[128, 256, 512, 512],
                layers_per_block=2,
                latent_channels=4,
                sample_size=1024,
                scaling_factor=0.13025,
            ),
        }
    for name, model in parts.items():
        write_header_only(model, out / name)
    _model_index(out, "StableDiffusionXLPipeline")
    return out


def _model_index(folder: Path, pipeline: str) -> None:
    (folder / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))


def main() -> None:
    root = Path(sys.argv[1])
    for build in (build_flux1, build_qwen_image, build_z_image, build_sdxl):
        folder = build(root)
        size = sum(f.stat().st_size for f in folder.rglob("*.safetensors"))
        print(f"{folder}: {size / 1e9:.1f} GB (sparse)")


if __name__ == "__main__":
    main()
