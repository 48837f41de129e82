"""One builder per family: tiny random-weight pipelines of the real diffusers / transformers classes.

Each builder keeps the structure of the real model (UNet levels, 8x VAEs, latent channels,
packing, text encoders, schedulers with the real configs) and shrinks only widths and depths
(hidden sizes 16-64), so a training step at 32-64 px takes a few hundredths of a second on CPU.

Determinism: every component is initialised right after `torch.manual_seed` with a seed derived
from (seed, component name), inside `torch.random.fork_rng` so the caller's RNG state is left
as it was. The same seed gives byte-identical weights in any process.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.tiny import flux2 as tiny_flux2
from lorastudio.tiny import tokenizers as toks

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline
    from transformers import CLIPTokenizer


def _seed_for(seed: int, component: str) -> None:
    """Seed torch's global CPU generator for one component (stable across processes)."""
    torch.manual_seed((seed * 1_000_003 + zlib.crc32(component.encode())) % (2**63))


def _kl_vae(seed: int, latent_channels: int, scaling: float, shift: float | None, quant: bool) -> Any:
    """A 4-level (8x) AutoencoderKL like the SDXL / FLUX.1 VAEs, 16-32 channels wide."""
    from diffusers import AutoencoderKL

    _seed_for(seed, "vae")
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[16, 16, 32, 32],
        layers_per_block=1,
        norm_num_groups=8,
        latent_channels=latent_channels,
        sample_size=64,
        scaling_factor=scaling,
        shift_factor=shift,
        use_quant_conv=quant,
        use_post_quant_conv=quant,
        force_upcast=True,
    )


def _clip_text_config(tok: CLIPTokenizer, hidden: int, layers: int, act: str, projection: int) -> Any:
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_attention_heads=4,
        num_hidden_layers=layers,
        max_position_embeddings=toks.CLIP_MAX_LENGTH,
        hidden_act=act,
        projection_dim=projection,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def build_sdxl(seed: int) -> DiffusionPipeline:
    """SDXL: CLIP-L + OpenCLIP-bigG analogues, a 3-level UNet with text_time embeddings, 4-ch VAE."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    tokenizer = toks.clip_tokenizer()
    tokenizer_2 = toks.clip_tokenizer(pad_token="!")  # SDXL's second tokenizer pads with "!"
    _seed_for(seed, "text_encoder")
    text_encoder = CLIPTextModel(_clip_text_config(tokenizer, 32, 2, "quick_gelu", 32))
    _seed_for(seed, "text_encoder_2")
    text_encoder_2 = CLIPTextModelWithProjection(_clip_text_config(tokenizer_2, 64, 2, "gelu", 32))
    _seed_for(seed, "unet")
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=2,
        block_out_channels=(16, 32, 32),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(1, 2, 2),  # SDXL's config names the number of heads this way
        transformer_layers_per_block=(1, 1, 2),
        use_linear_projection=True,
        cross_attention_dim=32 + 64,  # both encoders' penultimate states, concatenated
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,  # 6 time ids x 8 + pooled projection
        norm_num_groups=8,
    )
    vae = _kl_vae(seed, latent_channels=4, scaling=0.13025, shift=None, quant=True)
    scheduler = EulerDiscreteScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        prediction_type="epsilon",
        interpolation_type="linear",
        timestep_spacing="leading",
        steps_offset=1,
        use_karras_sigmas=False,
    )
    return StableDiffusionXLPipeline(
        vae=vae,
        text_encoder=text_encoder,
        text_encoder_2=text_encoder_2,
        tokenizer=tokenizer,
        tokenizer_2=tokenizer_2,
        unet=unet,
        scheduler=scheduler,
        force_zeros_for_empty_prompt=True,
        add_watermarker=False,
    )


def build_flux(seed: int) -> DiffusionPipeline:
    """FLUX.1-dev: CLIP (pooled) + T5 (sequence), MM-DiT with guidance embeddings, 16-ch VAE."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5Config, T5EncoderModel

    tokenizer = toks.clip_tokenizer()
    tokenizer_2 = toks.t5_tokenizer()
    _seed_for(seed, "text_encoder")
    text_encoder = CLIPTextModel(_clip_text_config(tokenizer, 32, 2, "quick_gelu", 32))
    _seed_for(seed, "text_encoder_2")
    text_encoder_2 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_2),
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            feed_forward_proj="gated-gelu",
            is_encoder_decoder=False,
            use_cache=False,
            tie_word_embeddings=False,
            pad_token_id=tokenizer_2.pad_token_id,
            eos_token_id=tokenizer_2.eos_token_id,
            decoder_start_token_id=tokenizer_2.pad_token_id,
        )
    )
    _seed_for(seed, "transformer")
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,  # 16 latent channels packed 2x2
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,  # T5 d_model
        pooled_projection_dim=32,  # CLIP hidden size
        guidance_embeds=True,  # FLUX.1-dev is guidance-distilled
        axes_dims_rope=(4, 6, 6),  # sums to the head dim
    )
    vae = _kl_vae(seed, latent_channels=16, scaling=0.3611, shift=0.1159, quant=False)
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )


def qwen_image_transformer(seed: int) -> Any:
    """The tiny Qwen-Image QwenImageTransformer2DModel of `build_qwen_image(seed)` (same weights)."""
    from diffusers import QwenImageTransformer2DModel

    _seed_for(seed, "transformer")
    return QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=64,
        out_channels=16,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,  # Qwen2.5-VL hidden size
        guidance_embeds=False,
        axes_dims_rope=(4, 6, 6),
    )


def z_image_transformer(seed: int) -> Any:
    """The tiny Z-Image ZImageTransformer2DModel of `build_z_image(seed)` (same weights)."""
    from diffusers import ZImageTransformer2DModel

    _seed_for(seed, "transformer")
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,),
        all_f_patch_size=(1,),
        in_channels=16,
        dim=32,
        n_layers=2,
        n_refiner_layers=1,
        n_heads=2,
        n_kv_heads=2,
        norm_eps=1e-5,
        qk_norm=True,
        cap_feat_dim=32,  # Qwen3 hidden size
        rope_theta=256.0,
        t_scale=1000.0,
        axes_dims=[8, 4, 4],  # sums to the head dim
        axes_lens=[1536, 512, 512],
    )
    with torch.no_grad():  # allocated with torch.empty (garbage, maybe NaN); a checkpoint fills them
        transformer.x_pad_token.copy_(torch.randn_like(transformer.x_pad_token) * 0.02)
        transformer.cap_pad_token.copy_(torch.randn_like(transformer.cap_pad_token) * 0.02)
    return transformer


def qwen_image_transformer_inputs(batch: int = 2, side: int = 4, text: int = 7) -> dict[str, Any]:
    """Keyword inputs of `qwen_image_transformer` for one forward (seeded): `batch` images of
    side x side packed tokens and `text` text tokens."""
    g = torch.Generator().manual_seed(1)
    return {
        "hidden_states": torch.randn(batch, side * side, 64, generator=g),  # [B, tokens, 4 x 16]
        "encoder_hidden_states": torch.randn(batch, text, 32, generator=g),  # [B, T, D]
        "timestep": torch.tensor([0.3, 0.8])[:batch],
        "img_shapes": [[(1, side, side)]] * batch,
    }


def z_image_transformer_inputs() -> dict[str, Any]:
    """Keyword inputs of `z_image_transformer` for one forward (seeded): two 8x8 latents, two
    captions of different lengths."""
    g = torch.Generator().manual_seed(1)
    return {
        "x": [torch.randn(16, 1, 8, 8, generator=g) for _ in range(2)],  # B x [C, F, h, w]
        "t": torch.tensor([0.3, 0.8]),
        "cap_feats": [torch.randn(5, 32, generator=g), torch.randn(9, 32, generator=g)],  # B x [L_i, D]
        "return_dict": False,
    }


def qwen_vl_config() -> Any:
    """The tiny Qwen2.5-VL (Qwen-Image's text encoder, the tiny captioner) over the tiny Qwen tokenizer."""
    from transformers import Qwen2_5_VLConfig

    tokenizer = toks.qwen_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in toks.QWEN_SPECIALS}
    special_ids = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": tokenizer.pad_token_id,
    }
    return Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6},
            **special_ids,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_heads": 2,
            "out_hidden_size": 32,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        vision_token_id=ids["<|vision_pad|>"],
        **special_ids,
    )


def build_qwen_image(seed: int) -> DiffusionPipeline:
    """Qwen-Image: Qwen2.5-VL text encoder, MM-DiT (patch 2), 5-D Qwen VAE with its real latent stats."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline
    from transformers import Qwen2_5_VLForConditionalGeneration

    config = qwen_vl_config()
    _seed_for(seed, "text_encoder")
    text_encoder = Qwen2_5_VLForConditionalGeneration(config)
    transformer = qwen_image_transformer(seed)
    _seed_for(seed, "vae")
    vae = AutoencoderKLQwenImage(  # latents_mean / latents_std: the real defaults
        base_dim=16,
        z_dim=16,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
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
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=toks.qwen_tokenizer(),
        transformer=transformer,
    )


def build_z_image(seed: int) -> DiffusionPipeline:
    """Z-Image: Qwen3 text encoder with its chat template, single-stream DiT, the FLUX.1 VAE."""
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline
    from transformers import Qwen3Config, Qwen3Model

    tokenizer = toks.qwen_tokenizer()
    _seed_for(seed, "text_encoder")
    text_encoder = Qwen3Model(
        Qwen3Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,  # the pipeline reads the second-to-last hidden state
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            vocab_size=len(tokenizer),
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    transformer = z_image_transformer(seed)
    vae = _kl_vae(seed, latent_channels=16, scaling=0.3611, shift=0.1159, quant=False)
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
    )
    return ZImagePipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=toks.qwen_tokenizer(),
        transformer=transformer,
    )


BUILDERS: dict[str, Callable[[int], DiffusionPipeline]] = {
    "sdxl": build_sdxl,
    "flux": build_flux,
    "qwen-image": build_qwen_image,
    "z-image": build_z_image,
    "flux2": tiny_flux2.build_flux2,
    "flux2-klein": tiny_flux2.build_flux2_klein,
    "chroma": lambda seed: _more("chroma", seed),
    "krea2": lambda seed: _more("krea2", seed),
}


def _more(family: str, seed: int) -> DiffusionPipeline:
    """Builders kept in their own modules (tiny/chroma.py, ...), imported when used."""
    import importlib

    module = importlib.import_module(f"lorastudio.tiny.{family.replace('-', '_')}")
    return getattr(module, f"build_{family.replace('-', '_')}")(seed)


def build(family: str, seed: int) -> DiffusionPipeline:
    """The tiny pipeline of `family` (a key of BUILDERS), every module in eval mode.

    The caller's torch RNG state is restored afterwards. Raises KeyError for an unknown family
    (the public API checks names first and raises UnknownFamily).
    """
    from lorastudio.tiny.edit_models import EDIT_BUILDERS  # built from the builders above

    builder = {**BUILDERS, **EDIT_BUILDERS}[family]
    with torch.random.fork_rng(devices=[]):
        pipe = builder(seed)
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()  # built from a config = train mode (dropout on); from_pretrained = eval
    return pipe
