"""The kohya sd-scripts / musubi-tuner argument tables the importer maps by (no torch).

Names from sd-scripts' train_network.py / library/train_util.py arguments and musubi-tuner's
hv_train_network.py arguments (their docs: docs/train_network_README, docs/config_README), and
the kohya_ss GUI's saved JSON (the same names, "" for unset, and a few of its own: sdxl,
flux1_checkbox, LoRA_type, epoch).
"""

from __future__ import annotations

from lorastudio.config_import import values
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED

SIMPLE = {  # kohya argument -> our setting, converter
    "max_train_steps": ("steps", values.integer),
    "max_train_epochs": ("num_epochs", values.integer),
    "epoch": ("num_epochs", values.integer),
    "train_batch_size": ("batch_size", values.integer),
    "gradient_accumulation_steps": ("grad_accum", values.integer),
    "text_encoder_lr": ("text_encoder_lr", values.number),
    "lr_warmup_steps": ("lr_warmup_steps", values.integer),
    "lr_scheduler_num_cycles": ("lr_cycles", values.integer),
    "lr_scheduler_power": ("lr_power", values.number),
    "network_dim": ("lora_rank", values.integer),
    "network_alpha": ("lora_alpha", values.number),
    "network_dropout": ("lora_dropout", values.number),
    "seed": ("seed", values.integer),
    "noise_offset": ("noise_offset", values.number),
    "min_snr_gamma": ("snr_gamma", values.number),
    "prior_loss_weight": ("prior_loss_weight", values.number),
    "save_every_n_steps": ("save_lora_every", values.integer),
    "sample_every_n_steps": ("sample_every", values.integer),
    "save_precision": ("save_dtype", values.save_dtype),
    "output_name": ("output_name", values.text),
    "huber_c": ("huber_c", values.number),
    "guidance_scale": ("guidance", values.number),
    "t5xxl_max_token_length": ("max_sequence_length", values.integer),
    "blocks_to_swap": ("offload_blocks", values.integer),
    "v_parameterization": ("v_prediction", values.flag),
    "lr_scheduler": ("lr_scheduler", values.scheduler),
    "save_last_n_steps_state": ("keep_last", values.integer),
}

INIT_LORA = ("network_weights", "lora_network_weights")  # the LoRA a run trains on from (init_lora)

NEEDLESS = {  # kohya argument -> why lorastudio needs no setting for it
    "dim_from_weights": "with init_lora, a lora_rank left blank takes the file's rank",
    "output_dir": "each run is written under the studio home's outputs/<output_name>",
    "logging_dir": "trackers write under the run's folder",
    "log_prefix": "trackers name the run by its output_name",
    "log_tracker_name": "trackers name the run by its output_name",
    "save_model_as": "LoRA files are .safetensors",
    "xformers": "attention_backend auto picks the kernel",
    "sdpa": "attention_backend auto picks the kernel",
    "mem_eff_attn": "attention_backend auto picks the kernel",
    "flash_attn": "attention_backend auto picks the kernel",
    "split_attn": "attention_backend auto picks the kernel",
    "cache_latents": "latents are cached by default (latent_cache auto)",
    "cache_latents_to_disk": "latent_cache auto caches in memory, or on disk when it is large",
    "cache_text_encoder_outputs": "captions are encoded once, before training",
    "cache_text_encoder_outputs_to_disk": "captions are encoded once, before training",
    "persistent_data_loader_workers": "the data is cached before the loop",
    "max_data_loader_n_workers": "the data is cached before the loop",
    "highvram": "memory_budget_gb plans memory",
    "lowram": "memory_budget_gb plans memory",
    "lowvram": "memory_budget_gb plans memory",
    "vae_batch_size": "the VAE encodes in batches of its own",
    "training_comment": "the run's record keeps its settings",
    "full_bf16": "the adapter trains in fp32 with bf16 compute",
    "full_fp16": "the adapter trains in fp32 with fp16 compute",
    "wandb_api_key": "log in once with `wandb login`",
    "wandb_run_name": "the run is named by its output_name",
    "save_state": "save_every writes resumable checkpoints",
    "save_state_on_train_end": "a stopped run saves a checkpoint",
    "huggingface_repo_id": "`lorastudio lora push` uploads a LoRA after the run",
    "async_upload": "`lorastudio lora push` uploads a LoRA after the run",
    "ddp_timeout": "num_gpus launches its own processes",
    "ddp_gradient_as_bucket_view": "num_gpus launches its own processes",
    "ddp_static_graph": "num_gpus launches its own processes",
    "num_cpu_threads_per_process": "the run uses the CPUs its container allows",
    "fused_backward_pass": "the optimizer is fused where it can be",
    "fp8_scaled": "carried with fp8_base",
    "fp8_llm": "text encoders run once, in phase 1",
    "fp8_t5": "text encoders run once, in phase 1",
    "vae_dtype": "the VAE runs once, in phase 2",
    "model_list": "the base is base_model",
}

UNSUPPORTED = {  # kohya argument -> what lorastudio lacks
    "clip_skip": "the family's own text encoder layers",
    "max_token_length": "SDXL captions are read at 77 tokens",
    "multires_noise_iterations": "no multi-resolution noise",
    "multires_noise_discount": "no multi-resolution noise",
    "ip_noise_gamma": "no input perturbation noise",
    "ip_noise_gamma_random_strength": "no input perturbation noise",
    "noise_offset_random_strength": "noise_offset is a fixed strength",
    "adaptive_noise_scale": "noise_offset is a fixed strength",
    "debiased_estimation_loss": "min-SNR weighting (snr_gamma) only",
    "scale_weight_norms": "no max-norm regularisation",
    "zero_terminal_snr": "the base's own noise schedule",
    "base_weights": "merge LoRAs into the base before training",
    "save_every_n_epochs": "saves are counted in optimizer steps (save_lora_every)",
    "save_last_n_epochs": "keep_loras counts snapshots",
    "save_last_n_steps": "keep_loras counts snapshots",
    "sample_every_n_epochs": "samples are counted in optimizer steps (sample_every)",
    "sample_sampler": "samples use the family's own scheduler",
    "sample_at_first": "no sample round before the first step",
    "color_aug": "no colour augmentation",
    "face_crop_aug_range": "no face-crop augmentation",
    "caption_dropout_every_n_epochs": "caption_dropout drops per sample",
    "min_bucket_reso": "the buckets come from the resolution",
    "max_bucket_reso": "the buckets come from the resolution",
    "bucket_reso_steps": "the buckets step by the family's resolution multiple",
    "in_json": "fine-tuning metadata: captions are <image>.txt files",
    "vae": "the VAE comes from base_config (a diffusers folder or hub id)",
    "ae": "the VAE comes from base_config (a diffusers folder or hub id)",
    "clip_l": "text encoders come from base_config (a diffusers folder or hub id)",
    "clip_g": "text encoders come from base_config (a diffusers folder or hub id)",
    "t5xxl": "text encoders come from base_config (a diffusers folder or hub id)",
    "text_encoder": "text encoders come from base_config (a diffusers folder or hub id)",
    "text_encoder1": "text encoders come from base_config (a diffusers folder or hub id)",
    "text_encoder2": "text encoders come from base_config (a diffusers folder or hub id)",
    "apply_t5_attn_mask": "the family's own text mask",
    "mode_scale": "timestep_sampling is logit_normal, uniform or sigmoid",
    "sigmoid_scale": "sigmoid sampling at scale 1",
    "min_timestep": "noise levels span the whole schedule",
    "max_timestep": "noise levels span the whole schedule",
    "resume": "`lorastudio train --resume` takes a lorastudio checkpoint",
    "masked_loss": "a dataset's masks/ folder (or alpha_mask) turns masked loss on",
    "weighted_captions": "captions are read as written",
    "lr_scheduler_args": "each schedule's options are settings of their own",
    "lr_scheduler_type": "the schedules are diffusers' (lr_scheduler)",
    "lr_scheduler_min_lr_ratio": "the schedules decay to 0",
    "lr_decay_steps": "the schedules span the run",
    "lr_scheduler_timescale": "the schedules span the run",
    "scale_v_pred_loss_like_noise_pred": "v-prediction's loss as it is",
    "v_pred_like_loss": "v-prediction's loss as it is",
    "network_train_text_encoder_only": "the denoiser always gets the adapter",
    "img_in_txt_in_offloading": "block swap (offload_blocks) moves whole blocks",
}


# the kohya_ss GUI's own fields (its saved JSON; presets/lora/*.json), beside sd-scripts' arguments
_PUSH = "`lorastudio lora push` uploads a LoRA after the run"
_LAUNCH = "num_gpus launches the data-parallel processes"
NEEDLESS |= {
    "dynamo_backend": "compile auto decides", "dynamo_mode": "compile auto decides",
    "dynamo_use_dynamic": "compile auto decides", "dynamo_use_fullgraph": "compile auto decides",
    "extra_accelerate_launch_args": _LAUNCH, "gpu_ids": "`lorastudio train --device` picks the GPU",
    "main_process_port": _LAUNCH, "multi_gpu": _LAUNCH, "num_machines": _LAUNCH, "num_processes": _LAUNCH,
    "flux1_cache_text_encoder_outputs": "captions are encoded once, before training",
    "flux1_cache_text_encoder_outputs_to_disk": "captions are encoded once, before training",
    "sdxl_cache_text_encoder_outputs": "captions are encoded once, before training",
    "sdxl_no_half_vae": "the VAE runs once, in phase 2, at the precision it needs",
    "huggingface_path_in_repo": _PUSH, "huggingface_repo_type": _PUSH, "huggingface_repo_visibility": _PUSH,
    "huggingface_token": _PUSH, "resume_from_huggingface": _PUSH, "save_state_to_huggingface": _PUSH,
    "log_config": "the run's record keeps its settings", "log_tracker_config": "trackers take their defaults",
    "metadata_author": "the LoRA's header names the run", "metadata_description": "the LoRA's header names the run",
    "metadata_license": "the LoRA's header names the run", "metadata_tags": "the LoRA's header names the run",
    "metadata_title": "the LoRA's header names the run", "save_as_bool": "the GUI's own switch",
    "unit": "the GUI's own switch", "split_mode": "block swap (offload_blocks) moves whole blocks",
    "noise_offset_type": "noise_offset is the original kind", "train_on_input": "the GUI's IA3 switch",
    "no_token_padding": "captions are padded as the family's pipeline pads them",
}  # fmt: skip
UNSUPPORTED |= {
    "additional_parameters": "extra command-line arguments are not read: check them by hand",
    "stop_text_encoder_training": "the text encoders train to the end (train_text_encoder)",
    "block_alphas": "per-block ranks: rank_pattern / alpha_pattern name modules",
    "block_dims": "per-block ranks: rank_pattern / alpha_pattern name modules",
    "conv_alphas": "adapters train linear layers only", "conv_dims": "adapters train linear layers only",
    "conv_block_alphas": "adapters train linear layers only", "conv_block_dims": "adapters train linear layers only",
    "block_lr_zero_threshold": "one learning rate for every block", "down_lr_weight": "one learning rate for every block",
    "mid_lr_weight": "one learning rate for every block", "up_lr_weight": "one learning rate for every block",
    "loraplus_lr_ratio": "no LoRA+ ratios", "loraplus_unet_lr_ratio": "no LoRA+ ratios",
    "loraplus_text_encoder_lr_ratio": "no LoRA+ ratios",
}  # fmt: skip
ZERO_OFF = frozenset({  # kohya arguments whose 0 means unset (the GUI writes 0 for them)
    "save_every_n_steps", "sample_every_n_steps", "noise_offset", "min_snr_gamma", "text_encoder_lr",
    "lr_warmup_steps", "save_last_n_steps_state", "max_train_epochs", "epoch", "blocks_to_swap",
    "max_train_steps", "v_parameterization",
})  # fmt: skip


def unset(why: str = "") -> str:
    """Why an argument the file leaves empty ("", null) is not carried."""
    return f"{NOT_NEEDED}: unset in the file" + (f" ({why})" if why else "")


def needless(key: str) -> str:
    """Why `key` is not needed here."""
    return f"{NOT_NEEDED}: {NEEDLESS[key]}"


def unsupported(key: str, value: object = True) -> str:
    """Why `key` is not carried: not supported, or not needed when the peer has it off."""
    from lorastudio.config_import.values import is_off

    if is_off(value):
        return f"{NOT_NEEDED}: off ({UNSUPPORTED[key]})"
    return f"{NOT_SUPPORTED}: {UNSUPPORTED[key]}"
