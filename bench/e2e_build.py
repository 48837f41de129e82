"""Random-weight pipeline folders of the released configs for bench/e2e_run.py, saved fast.

Layout of an e2e folder DIR (one family per folder; the Qwen-Image one is ~57.7 GB):
    DIR/<family>/              the pipeline (diffusers folder, bf16 safetensors)
    DIR/home/                  the studio home of the runs (LORASTUDIO_HOME): caches, outputs
    DIR/home/datasets/e2e/     the dataset (under the home: the API accepts only datasets there)
Each of DIR/<family> and DIR/home may be a symlink into /dev/shm: before building, the free space
of DIR's disk, of /dev/shm and of host RAM decides where each goes, and a build that fits nowhere
is refused (NoSpaceLeft: needed vs free) before anything is written (bench/e2e_place.py).

Real size (`build_real`, on the GPU in bf16): FLUX.1-dev (12B MM-DiT with guidance embeddings,
T5-XXL encoder, CLIP-L text model, the 16-channel VAE), Qwen-Image (QwenImageTransformer2DModel's
defaults = the released 20B, Qwen2.5-VL-7B-Instruct as Qwen2_5_VLForConditionalGeneration, the
Qwen-Image VAE = AutoencoderKLQwenImage's defaults) or FLUX.2 [klein] 9B base (the 9B transformer
of bench/models_2026.KLEIN, Qwen3-8B as Qwen3ForCausalLM, AutoencoderKLFlux2's defaults = the
released FLUX.2 VAE; ~34.5 GB). The tokenizers are lorastudio's tiny ones: their ids stay inside
the real vocabularies. `device="meta"` builds the same modules without memory (the CPU test
checks the configs and parameter counts that way, and the build sizes its folder from it).
Tiny (`build_tiny`): lorastudio.tiny's pipeline of the family and its sample dataset (CPU, seconds).

Saving: diffusers' DiffusionPipeline.save_pretrained writes one component after another; here
each component is written by its own thread (safetensors copies and writes outside the GIL), the
files being those save_pretrained writes (model_index.json from the pipeline's config, each
component's own save_pretrained), so the folder loads with from_pretrained as usual. Host RAM:
both libraries' save_pretrained write shard by shard through safetensors.torch.save_file, which
copies the shard's GPU tensors to the CPU (a CPU tensor is written in place, without a copy), so
a save holds at most SAVE_WORKERS x SHARD of host RAM (the largest single tensor, Qwen3-8B's
embedding, is 1.24 GB), never a second copy of a component. The folder is written under a hidden
staging name and renamed when complete: a build that dies leaves no folder that looks built.
"""

from __future__ import annotations

import resource
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import e2e_place

FAMILIES = ("flux", "qwen-image", "flux2-klein")
SHARD = "2GB"  # safetensors shard size of the saved components (bounds the save's host RAM)
SAVE_WORKERS = 4  # components written at once
TINY_HOME_GB = 0.5  # the studio home of a tiny suite
IMAGES = 16  # images of the real-size dataset (1024 px)
DATASET = "e2e"  # the dataset's folder name under the home's datasets/


def home_dir(root: Path) -> Path:
    return root / "home"


def dataset_dir(root: Path) -> Path:
    return home_dir(root) / "datasets" / DATASET


def pipeline_dir(root: Path, family: str) -> Path:
    return root / family


def save_pipeline(pipe: Any, out: Path, shard: str = SHARD, workers: int = SAVE_WORKERS) -> None:
    """Write `pipe` as a diffusers folder at `out` (see the module docstring): model_index.json,
    then every component, `workers` at a time, each in its own subfolder in shards of `shard`;
    all under a hidden staging folder renamed to `out` at the end (an old `out` is replaced)."""
    stage = out.parent / f".{out.name}.partial"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    pipe.save_config(stage)  # model_index.json, as DiffusionPipeline.save_pretrained writes it

    def save(item: tuple[str, Any]) -> None:
        name, component = item
        if component is None:
            return
        if hasattr(component, "parameters"):  # a model (diffusers or transformers)
            component.save_pretrained(stage / name, safe_serialization=True, max_shard_size=shard)
        else:  # tokenizer, scheduler
            component.save_pretrained(stage / name)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(save, pipe.components.items()))
    if out.is_symlink():
        out.unlink()
    shutil.rmtree(out, ignore_errors=True)
    stage.rename(out)


def _flux_pipeline() -> Any:
    """FLUX.1-dev of the released configs, in the current default device and dtype."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from lorastudio.tiny import tokenizers as toks

    tokenizer, tokenizer_2 = toks.clip_tokenizer(), toks.t5_tokenizer()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(  # openai/clip-vit-large-patch14's text model
            vocab_size=49408,
            hidden_size=768,
            intermediate_size=3072,
            num_attention_heads=12,
            num_hidden_layers=12,
            max_position_embeddings=77,
            hidden_act="quick_gelu",
            projection_dim=768,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    text_encoder_2 = T5EncoderModel(
        T5Config(  # google/t5-v1_1-xxl's encoder
            vocab_size=32128,
            d_model=4096,
            d_kv=64,
            d_ff=10240,
            num_layers=24,
            num_heads=64,
            feed_forward_proj="gated-gelu",
            is_encoder_decoder=False,
            use_cache=False,
            tie_word_embeddings=False,
            pad_token_id=tokenizer_2.pad_token_id,
            eos_token_id=tokenizer_2.eos_token_id,
            decoder_start_token_id=tokenizer_2.pad_token_id,
        )
    )
    transformer = FluxTransformer2DModel(guidance_embeds=True)  # FLUX.1-dev: 19 + 38 blocks
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[128, 256, 512, 512],
        layers_per_block=2,
        latent_channels=16,
        sample_size=1024,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return FluxPipeline(scheduler, vae, text_encoder, tokenizer, text_encoder_2, tokenizer_2, transformer)


def _qwen_vl_7b_config() -> Any:
    """Qwen/Qwen2.5-VL-7B-Instruct's config (Qwen-Image's text_encoder/config.json), with the
    special token ids of lorastudio's tiny Qwen tokenizer (all inside the 152064-token vocab)."""
    from transformers import Qwen2_5_VLConfig

    from lorastudio.tiny import tokenizers as toks

    tokenizer = toks.qwen_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in toks.QWEN_SPECIALS}
    special = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": tokenizer.pad_token_id,
    }
    return Qwen2_5_VLConfig(
        text_config={
            "vocab_size": 152064,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 128000,
            "rms_norm_eps": 1e-6,
            "sliding_window": 32768,
            "max_window_layers": 28,
            "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1e6},
            **special,
        },
        vision_config={
            "depth": 32,
            "hidden_size": 1280,
            "intermediate_size": 3420,
            "num_heads": 16,
            "out_hidden_size": 3584,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
            "tokens_per_second": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
        **special,
    )


def _qwen_image_pipeline() -> Any:
    """Qwen-Image of the released configs, in the current default device and dtype."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLForConditionalGeneration

    from lorastudio.tiny import tokenizers as toks

    scheduler = FlowMatchEulerDiscreteScheduler(  # Qwen/Qwen-Image scheduler_config.json
        num_train_timesteps=1000,
        shift=1.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=0.9,
        base_image_seq_len=256,
        max_image_seq_len=8192,
        shift_terminal=0.02,
        time_shift_type="exponential",
    )
    return QwenImagePipeline(
        scheduler=scheduler,
        vae=AutoencoderKLQwenImage(),  # the defaults are the released VAE (base_dim 96, z_dim 16)
        text_encoder=Qwen2_5_VLForConditionalGeneration(_qwen_vl_7b_config()),
        tokenizer=toks.qwen_tokenizer(),
        transformer=QwenImageTransformer2DModel(),  # the defaults are the released 20B (60 blocks)
    )


def _klein9b_pipeline() -> Any:
    """FLUX.2 [klein] 9B base (not distilled) of the released configs, in the current default
    device and dtype."""
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from bench.models_2026 import KLEIN, SCHEDULERS
    from lorastudio.tiny import tokenizers as toks

    tokenizer = toks.qwen_tokenizer()
    text_encoder = Qwen3ForCausalLM(
        Qwen3Config(  # Qwen/Qwen3-8B's config (FLUX.2-klein-9B's text_encoder/config.json)
            vocab_size=151936,
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=40960,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            tie_word_embeddings=False,
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    return Flux2KleinPipeline(
        # FLUX.2's scheduler config (as lorastudio.tiny's klein): the pipeline computes mu per call
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULERS["klein9b"], time_shift_type="exponential"),
        vae=AutoencoderKLFlux2(),  # the defaults are the released FLUX.2 VAE (32 latent channels)
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=Flux2Transformer2DModel(guidance_embeds=False, **KLEIN["klein9b"]),  # 8 + 24 blocks
        is_distilled=False,
    )


_BUILDERS = {"flux": _flux_pipeline, "qwen-image": _qwen_image_pipeline, "flux2-klein": _klein9b_pipeline}


def real_pipeline(family: str, device: str = "cuda", seed: int = 0) -> Any:
    """The real-size random-weight pipeline of `family` built on `device` in bf16 ("meta": no
    memory, for checking configs)."""
    import torch

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            return _BUILDERS[family]()
    finally:
        torch.set_default_dtype(previous)


def param_counts(pipe: Any) -> dict[str, float]:
    """Billions of parameters per model component."""
    return {
        name: round(sum(p.numel() for p in c.parameters()) / 1e9, 3)
        for name, c in pipe.components.items()
        if hasattr(c, "parameters")
    }


def write_dataset(out: Path, images: int = IMAGES, side: int = 1024, seed: int = 0) -> None:
    """`images` side x side PNG test patterns with .txt captions in `out`."""
    import numpy as np
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / float(side)
    for i in range(images):
        a, b, c = rng.uniform(0.5, 6.0, 3)
        img = np.stack([np.sin(a * xx + i), np.cos(b * yy), np.sin(c * (xx + yy))], -1)  # [H, W, 3]
        Image.fromarray(((img + 1) * 127.5).astype(np.uint8)).save(out / f"img{i:02d}.png")
        (out / f"img{i:02d}.txt").write_text(f"a test pattern number {i}, waves and colours")


def component_gb(pipe: Any) -> dict[str, float]:
    """GB (10^9) of each model component's parameters and buffers in their dtype: what its
    safetensors hold (works on the meta device)."""
    return {
        name: sum(t.numel() * t.element_size() for t in (*c.parameters(), *c.buffers())) / 1e9
        for name, c in pipe.components.items()
        if hasattr(c, "parameters")
    }


def _folder_gb(folder: Path) -> float:
    return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e9, 2)


def _peak_rss_gib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def _placed(root: Path, family: str, sizes: dict[str, float], prefer: str, tiny: bool) -> e2e_place.Placement:
    """Choose the places (bench/e2e_place.py; NoSpaceLeft before anything is written), create the
    home there and link DIR/home to it unless DIR/home already is one (an earlier build's)."""
    home_gb = TINY_HOME_GB if tiny else e2e_place.HOME_GB
    placement = e2e_place.place(
        root, family, sum(sizes.values()), e2e_place.run_host_gb(sizes), prefer, home_gb
    )
    home = home_dir(root)
    if not home.exists():  # neither a folder nor a live link
        placement.home.mkdir(parents=True, exist_ok=True)
        e2e_place.link(placement.home, home)
    return placement


def _build(
    root: Path, family: str, pipe: Any, sizes: dict[str, float], prefer: str, tiny: bool = False
) -> dict[str, Any]:
    placement = _placed(root, family, sizes, prefer, tiny)
    t = time.monotonic()
    save_pipeline(pipe, placement.pipeline)
    e2e_place.link(placement.pipeline, pipeline_dir(root, family))
    return {
        "save_s": round(time.monotonic() - t, 2),
        "params_b": param_counts(pipe),
        "pipeline_gb": _folder_gb(pipeline_dir(root, family)),
        "pipeline_at": str(placement.pipeline),
        "home_at": str(home_dir(root).resolve()),
        "placement": {**placement.where, **placement.figures},
    }


def build_real(root: Path, family: str, seed: int = 0, prefer: str = "auto") -> dict[str, Any]:
    """Write DIR/<family> (real size, built on the GPU) and the 1024 px dataset, where there is
    room (bench/e2e_place.py; NoSpaceLeft before building when there is none). Returns timings,
    sizes, the places and the process's peak host RSS."""
    sizes = component_gb(real_pipeline(family, "meta", seed))
    e2e_place.place(root, family, sum(sizes.values()), e2e_place.run_host_gb(sizes), prefer)  # refuse early
    t0 = time.monotonic()
    pipe = real_pipeline(family, "cuda", seed)
    import torch

    torch.cuda.synchronize()
    built = time.monotonic() - t0
    result = _build(root, family, pipe, sizes, prefer)
    write_dataset(dataset_dir(root), seed=seed)
    return {"family": family, "build_s": round(built, 1), **result, "peak_host_rss_gib": _peak_rss_gib()}


def build_tiny(root: Path, family: str, seed: int = 0, prefer: str = "disk") -> dict[str, Any]:
    """Write DIR/<family> (lorastudio.tiny's pipeline, saved like the real one, placed like it:
    on DIR's disk by default) and the tiny sample dataset (8 images)."""
    from lorastudio.tiny import build_tiny_pipeline, make_sample_dataset

    t0 = time.monotonic()
    pipe = build_tiny_pipeline(family, seed)
    built = time.monotonic() - t0
    result = _build(root, family, pipe, component_gb(pipe), prefer, tiny=True)
    make_sample_dataset(dataset_dir(root), seed)
    return {"family": family, "tiny": True, "build_s": round(built, 2), **result}
