"""The terms of the host RAM forecast (jobs/host_memory.py) that come from what a run keeps
beside its denoiser, from the configs of the local pipeline, without loading it:

    texts     the caption embeddings (training/inputs/conditioning.encode_texts: every text's tensors
              moved to the CPU and held in a dict from phase 1 to the run's end, on a GPU host
              too): texts x tokens x width x dtype bytes (+ a pooled vector), 0 where they go to
              the on-disk cache (latent_mode "disk", training/inputs/conditioning_disk.py) or are
              encoded in every step (train_text_encoder)
        texts   the texts phase 1 encodes: the captions' variants (caption_report's
                texts_encoded), the empty caption and the sample prompts
        tokens  the family's token limit (caption_tokens.limit, else max_sequence_length, else
                512): exact where its encode_prompts pads to it (FamilySpec.text_padded), a bound
                where it cuts to the caption's tokens (Qwen-Image, Z-Image, Krea 2,
                Qwen-Image-Edit: `exact` False, so the forecast may only warn where it leads)
        width   the denoiser config's text input: joint_attention_dim (FLUX.1, FLUX.2, Chroma,
                Qwen-Image), cross_attention_dim (SDXL: both CLIPs' states), cap_feat_dim
                (Z-Image), text_hidden_dim x num_text_layers (Krea 2's stacked layers); the
                pooled vector pooled_projection_dim (FLUX.1), SDXL's
                projection_class_embeddings_input_dim - 6 x addition_time_embed_dim; Chroma's
                float text mask (FamilySpec.masked_attention), a value per token
    kept      the components a CPU run keeps loaded through its denoiser phase besides the
              denoiser: the VAE where latents are encoded per step (latent_cache "off", or
              "memory" over its budget), the text encoders with train_text_encoder

Measured on the tiny models' encode_prompts (tests/unit/jobs/test_host_memory_texts.py: the
term equals the tensors' bytes for a padded family and bounds a cut one).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.jobs.host_memory_vae import _vae_config

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.families.spec import FamilySpec

_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")


def text_bytes_per_text(spec: FamilySpec, denoiser: Path, cfg: TrainConfig, act_bytes: int) -> int:
    """Bytes of one text's embeddings as encode_prompts keeps them (module docstring): tokens x
    width (+ pooled) x `act_bytes`; 0 when the denoiser config names no text width."""
    config = _vae_config(denoiser)  # any component's config.json
    width = 0
    for key in ("joint_attention_dim", "cross_attention_dim", "cap_feat_dim"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            width = value
            break
    else:
        hidden, layers = config.get("text_hidden_dim"), config.get("num_text_layers")
        if isinstance(hidden, int) and isinstance(layers, int):
            width = hidden * layers
    pooled = config.get("pooled_projection_dim")
    if not isinstance(pooled, int):  # SDXL: the pooled text beside six time embeddings
        total = config.get("projection_class_embeddings_input_dim")
        time_dim = config.get("addition_time_embed_dim")
        pooled = total - 6 * time_dim if isinstance(total, int) and isinstance(time_dim, int) else 0
    limit = spec.caption_tokens.limit if spec.caption_tokens else None
    tokens = limit or cfg.max_sequence_length or 512
    mask = tokens if spec.masked_attention else 0  # Chroma keeps its float text mask beside
    return (tokens * width + max(pooled, 0) + mask) * act_bytes if width else 0


def texts_held_gb(
    spec: FamilySpec, denoiser: Path, cfg: TrainConfig, texts: int, mode: str, act_bytes: int
) -> tuple[float, bool]:
    """(GB of caption embeddings the run holds in RAM, whether that is exact rather than a
    bound): `texts` x text_bytes_per_text, 0 when the latent `mode` is "disk" (the captions'
    shards on disk too, unless the family's prompt sees the controls) or the text encoders train
    (nothing cached)."""
    if cfg.train_text_encoder or (mode == "disk" and not spec.prompt_sees_controls):
        return 0.0, True
    held = texts * text_bytes_per_text(spec, denoiser, cfg, act_bytes) / 1e9
    return held, spec.text_padded


def kept_params(model_dir: Path, cfg: TrainConfig, mode: str) -> int:
    """Parameters of the components a CPU run keeps loaded through its denoiser phase besides the
    denoiser (module docstring): the VAE's when latents are encoded per step, the text encoders'
    with train_text_encoder."""
    from lorastudio.jobs.vram_estimate import param_count

    kept = param_count(model_dir / "vae") if mode == "per_step" else 0
    if cfg.train_text_encoder:
        kept += sum(param_count(model_dir / name) for name in _ENCODERS)
    return kept


def texts_encoded(cfg: TrainConfig, scan: DatasetScan, spec: FamilySpec) -> int:
    """The texts phase 1 encodes and keeps (training/loop_inputs.encode_conditioning): the
    captions with their variants (and "" under caption dropout), per control set where the
    family's prompt sees the controls, and the sample prompts."""
    from lorastudio.data.caption_variants import captions_to_encode, item_dropouts, scan_variants

    variants = scan_variants(scan, cfg.caption_variants, cfg.seed)
    dropouts = item_dropouts(scan, cfg.caption_dropout)
    captions = [it.caption for it in scan.items]
    if spec.prompt_sees_controls:
        dropping = max(dropouts, default=0.0) > 0
        keyed = {
            (text, it.controls)
            for it, vs in zip(scan.items, variants, strict=True)
            for text in [it.caption, *vs, *([""] if dropping else [])]
        }
        count = len(keyed)
    else:
        count = len(captions_to_encode(captions + [v for vs in variants for v in vs], dropouts))
    return count + len(cfg.sample_prompts)
