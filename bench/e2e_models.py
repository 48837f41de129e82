"""The real-size random-weight pipelines of bench/e2e_build.py: FLUX.1-dev, Qwen-Image, FLUX.2
[klein] 9B base, Z-Image and SDXL base of the released configs (see e2e_build's docstring for the sources), built
in bf16 on any device ("meta": no memory, for sizes and configs), with lorastudio's tiny
tokenizers (their ids stay inside the real vocabularies)."""

from __future__ import annotations

from typing import Any

# the CLIP text models' released configs: openai/clip-vit-large-patch14 (FLUX.1, SDXL) and laion's
# OpenCLIP ViT-bigG-14 (SDXL's second encoder, with its 1280-wide projection)
CLIP = {
    "L": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
          "hidden_act": "quick_gelu", "projection_dim": 768},
    "bigG": {"hidden_size": 1280, "intermediate_size": 5120, "num_attention_heads": 20, "num_hidden_layers": 32,
             "hidden_act": "gelu", "projection_dim": 1280},
}  # fmt: skip


def clip_config(size: str, tokenizer: Any) -> Any:
    """The CLIPTextConfig of CLIP[size] (49408-token vocab, 77 positions) with `tokenizer`'s special
    token ids (lorastudio's tiny CLIP tokenizer)."""
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=49408,
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **CLIP[size],
    )


def _flux_pipeline() -> Any:
    """FLUX.1-dev of the released configs, in the current default device and dtype."""
    return flux_pipeline()


def flux_pipeline(double_blocks: int = 19, single_blocks: int = 38, t5_layers: int = 24) -> Any:
    """FLUX.1-dev's pipeline at the released widths with the given depths (the defaults: the
    released ones; fewer: a model of a few GB for the CPU benches, bench/prefetch_start.py), in
    the current default device and dtype."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5Config, T5EncoderModel

    from lorastudio.tiny import tokenizers as toks

    tokenizer, tokenizer_2 = toks.clip_tokenizer(), toks.t5_tokenizer()
    text_encoder = CLIPTextModel(clip_config("L", tokenizer))  # openai/clip-vit-large-patch14's text model
    text_encoder_2 = T5EncoderModel(
        T5Config(  # google/t5-v1_1-xxl's encoder
            vocab_size=32128,
            d_model=4096,
            d_kv=64,
            d_ff=10240,
            num_layers=t5_layers,
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
    transformer = FluxTransformer2DModel(  # FLUX.1-dev: 19 + 38 blocks
        guidance_embeds=True, num_layers=double_blocks, num_single_layers=single_blocks
    )
    vae = _flux1_vae(16)
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


# Qwen/Qwen3-4B's and Qwen/Qwen3-8B's released configs (Z-Image's and FLUX.2 [klein] 9B's text encoders)
QWEN3 = {
    "4b": {"hidden_size": 2560, "intermediate_size": 9728, "tie_word_embeddings": True},
    "8b": {"hidden_size": 4096, "intermediate_size": 12288, "tie_word_embeddings": False},
}


def qwen3_config(size: str, tokenizer: Any = None) -> Any:
    """The Qwen3Config of QWEN3[size] (36 layers, 32 heads, 8 KV heads of 128), with the special
    token ids of `tokenizer` (lorastudio's tiny Qwen tokenizer, whose ids stay inside the vocab)
    when given."""
    from transformers import Qwen3Config

    ids = {}
    if tokenizer is not None:
        ids = {
            "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
            "pad_token_id": tokenizer.pad_token_id,
        }
    return Qwen3Config(
        vocab_size=151936,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        **QWEN3[size],
        **ids,
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
    from transformers import Qwen3ForCausalLM

    from bench.models_2026 import KLEIN, SCHEDULERS
    from lorastudio.tiny import tokenizers as toks

    tokenizer = toks.qwen_tokenizer()
    text_encoder = Qwen3ForCausalLM(qwen3_config("8b", tokenizer))  # FLUX.2-klein-9B's text_encoder
    return Flux2KleinPipeline(
        # FLUX.2's scheduler config (as lorastudio.tiny's klein): the pipeline computes mu per call
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULERS["klein9b"], time_shift_type="exponential"),
        vae=AutoencoderKLFlux2(),  # the defaults are the released FLUX.2 VAE (32 latent channels)
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=Flux2Transformer2DModel(guidance_embeds=False, **KLEIN["klein9b"]),  # 8 + 24 blocks
        is_distilled=False,
    )


def _flux1_vae(latent_channels: int = 16) -> Any:
    """The 4-level KL VAE of FLUX.1 (16 latent channels; Z-Image ships it) or SDXL (4 channels)."""
    from diffusers import AutoencoderKL

    if latent_channels == 4:  # SDXL's (stabilityai/sdxl-vae)
        scale: dict[str, Any] = {"scaling_factor": 0.13025}
    else:  # FLUX.1's
        scale = {
            "scaling_factor": 0.3611,
            "shift_factor": 0.1159,
            "use_quant_conv": False,
            "use_post_quant_conv": False,
        }
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[128, 256, 512, 512],
        layers_per_block=2,
        latent_channels=latent_channels,
        sample_size=1024,
        **scale,
    )


def _z_image_pipeline() -> Any:
    """Z-Image (Tongyi-MAI/Z-Image-Turbo's configs): ZImageTransformer2DModel's defaults (the
    released 6.15 B single-stream DiT), Qwen3-4B as Qwen3Model (the pipeline reads its second-to-last
    hidden state), FLUX.1's VAE; in the current default device and dtype."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
    from transformers import Qwen3Model

    from lorastudio.tiny import tokenizers as toks

    tokenizer = toks.qwen_tokenizer()
    text_encoder = Qwen3Model(qwen3_config("4b", tokenizer))  # Z-Image's text_encoder
    transformer = ZImageTransformer2DModel()
    with torch.no_grad():  # the pad tokens are allocated with torch.empty (a checkpoint fills them)
        for name, param in transformer.named_parameters():
            if "pad_token" in name:
                param.normal_(std=0.02)
    return ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
        ),
        vae=_flux1_vae(16),
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )


def _sdxl_pipeline() -> Any:
    """SDXL base 1.0 (the 2.57 B U-Net of bench/models.SDXL_UNET, CLIP-L and OpenCLIP bigG text
    encoders, its VAE), in the current default device and dtype."""
    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    from bench.models import SDXL_UNET
    from lorastudio.tiny import tokenizers as toks

    tokenizer = toks.clip_tokenizer()
    clip_l = CLIPTextModel(clip_config("L", tokenizer))  # openai/clip-vit-large-patch14's text model
    clip_g = CLIPTextModelWithProjection(clip_config("bigG", tokenizer))  # laion's OpenCLIP ViT-bigG-14
    with torch.device("cpu"):  # its sigmas are copied to the CPU at init: not built on "meta"
        scheduler = EulerDiscreteScheduler(  # stabilityai/stable-diffusion-xl-base-1.0 scheduler_config.json
            num_train_timesteps=1000,
            beta_start=0.00085,
            beta_end=0.012,
            beta_schedule="scaled_linear",
            steps_offset=1,
            timestep_spacing="leading",
            prediction_type="epsilon",
        )
    return StableDiffusionXLPipeline(
        vae=_flux1_vae(4),
        text_encoder=clip_l,
        text_encoder_2=clip_g,
        tokenizer=tokenizer,
        tokenizer_2=toks.clip_tokenizer(),
        unet=UNet2DConditionModel(**SDXL_UNET),
        scheduler=scheduler,
    )


_BUILDERS = {
    "flux": _flux_pipeline,
    "qwen-image": _qwen_image_pipeline,
    "flux2-klein": _klein9b_pipeline,
    "z-image": _z_image_pipeline,
    "sdxl": _sdxl_pipeline,
}


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


def component_gb(pipe: Any) -> dict[str, float]:
    """GB (10^9) of each model component's parameters and buffers in their dtype: what its
    safetensors hold (works on the meta device)."""
    return {
        name: sum(t.numel() * t.element_size() for t in (*c.parameters(), *c.buffers())) / 1e9
        for name, c in pipe.components.items()
        if hasattr(c, "parameters")
    }
