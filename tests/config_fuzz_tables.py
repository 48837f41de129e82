"""The hand-made tables of the fuzz generator (tests/config_fuzz.py): the values of settings that
need meaning rather than a type, the features weighed, the small ranges of `sized` documents and each
setting's companions in `coherent` ones."""

from __future__ import annotations

from typing import Any

from lorastudio import families

MISSING = object()  # "leave the field out"


# Fields whose values need meaning, not just a type (paths, names, patterns): drawn by hand.
# Each is a list of valid choices; `sized` documents use them as they are.
def hand_values(dataset: str, family: str, seed: int) -> dict[str, list[Any]]:
    spec = families.get(family).spec
    side = max(32, 2 * spec.resolution_multiple)
    return {
        "revision": ["main"],
        "base_config": [MISSING],
        "data_dir": [dataset],
        "output_name": [f"fuzz.run-{seed}", f"F_{seed}"],  # unique per document (a sample trains)
        "trigger_word": ["sks", "ohwx person"],
        "default_caption": ["a photo", "a shape on a plain background"],
        "control_dirs": [[]],
        "validation_split": [0.25, 0.5],
        "lora_targets": [["to_q"], ["to_q", "to_k", "to_v"], ["attn"], ["ff"]],
        "rank_pattern": [{"to_q": 2}, {"to_k": 8}],
        "alpha_pattern": [{"to_q": 1.0}, {"to_v": 4.0}],
        "report_to": [[], ["tensorboard"], ["wandb"]],
        "assistant_lora": [MISSING],
        "init_lora": [MISSING],  # a file to start from: tests/unit/training/test_init_lora.py
        "resolution": [side, [side], [side, side + spec.resolution_multiple]],
        "optimizer_betas": [[0.9, 0.99], [0.95, 0.999]],
        "family": [family],
        "base_model": [MISSING],  # set by the caller
        "control_resolution": ["target", 64],
    }


# The features the audit weighs (sessions 22-27): drawn more often than the rest.
FEATURES: tuple[str, ...] = (
    "adapter", "lokr_factor", "lokr_decompose_both", "optimizer", "prodigy_d_coef",
    "prodigy_safeguard_warmup", "ema_decay", "ema_update_every", "ema_on_cpu", "sample_with_ema",
    "validation_split", "validate_every", "latent_cache", "cache_variants", "caption_variants",
    "datasets", "offload_blocks", "fuse_projections", "micro_batch_size", "sample_prompts",
    "sample_every", "sample_steps", "report_to", "weight_decay", "preservation", "alpha_mask",
    "unmasked_weight", "grad_accum", "lr_scheduler", "lr_warmup_steps", "loss", "huber_schedule",
    "save_every", "save_lora_every", "keep_loras", "lora_format", "save_dtype", "random_crop",
    "random_flip", "shuffle_tags", "tag_dropout", "caption_dropout", "lora_dropout",
    "gradient_checkpointing", "base_precision", "compile", "num_epochs", "train_text_encoder",
    "timestep_sampling", "flow_shift", "guidance", "snr_gamma", "noise_offset",
)  # fmt: skip

# In `sized` documents, the valid range of settings that change how long a CPU run takes.
SMALL: dict[str, tuple[float, float]] = {
    "steps": (2, 2),
    "num_epochs": (0, 1),
    "batch_size": (1, 2),
    "grad_accum": (1, 2),
    "lora_rank": (1, 8),
    "cache_variants": (1, 2),
    "caption_variants": (2, 3),
    "sample_steps": (1, 2),
    "sample_every": (1, 2),
    "validate_every": (1, 2),
    "save_every": (1, 2),
    "save_lora_every": (1, 2),
    "keep_loras": (1, 3),
    "keep_last": (1, 3),
    "offload_blocks": (0, 2),
    "micro_batch_size": (1, 2),
    "max_sequence_length": (8, 32),
    "lr_warmup_steps": (0, 2),
    "lr_cycles": (2, 3),
    "num_gpus": (1, 1),
    "memory_budget_gb": (0.5, 64),
    "latent_cache_max_gb": (0.01, 8),
    "lokr_factor": (-1, 4),
    "repeats": (1, 3),
    "width": (16, 48),
    "height": (16, 48),
    "keep_tokens": (0, 3),
    "max_bad_steps": (1, 5),
    "ema_update_every": (1, 2),
}


# What a setting needs beside it to mean anything (the combination rules, config_rules.py and its
# neighbours): `coherent` documents add it, so that most of them are accepted and train.
COMPANIONS: dict[str, dict[str, Any]] = {
    "huber_schedule": {"loss": "huber"},
    "huber_c": {"loss": "smooth_l1"},
    "caption_variants": {"shuffle_tags": True},
    "keep_tokens": {"shuffle_tags": True},
    "sample_steps": {"sample_prompts": ["a red square"]},
    "sample_every": {"sample_prompts": ["a red square"]},
    "sample_seed": {"sample_prompts": ["a red square"]},
    "prodigy_d_coef": {"optimizer": "prodigy", "learning_rate": 1.0},
    "prodigy_safeguard_warmup": {"optimizer": "prodigy", "learning_rate": 1.0},
    "prodigy_use_bias_correction": {"optimizer": "prodigy", "learning_rate": 1.0},
    "adafactor_relative_step": {"optimizer": "adafactor"},
    "adafactor_scale_parameter": {"optimizer": "adafactor"},
    "adafactor_warmup_init": {"optimizer": "adafactor"},
    "lokr_factor": {"adapter": "lokr"},
    "lokr_decompose_both": {"adapter": "lokr"},
    "lr_warmup_steps": {"lr_scheduler": "constant_with_warmup"},
    "lr_cycles": {"lr_scheduler": "cosine_with_restarts"},
    "lr_power": {"lr_scheduler": "polynomial"},
    "validate_every": {"validation_split": 0.25},
    "validation_seed": {"validation_split": 0.25},
    "keep_loras": {"save_lora_every": 1},
    "sample_with_ema": {"ema_decay": 0.9},
    "ema_on_cpu": {"ema_decay": 0.9},
    "ema_update_every": {"ema_decay": 0.9},
    "cache_variants": {"random_flip": True},
    "preservation": {"trigger_word": "sks"},
    "text_encoder_lr": {"train_text_encoder": True},
    "micro_batch_size": {"batch_size": 2, "micro_batch_size": 1},
    "unmasked_weight": {"alpha_mask": True},
}
