"""Every TrainConfig field changes what a run does, or is refused where it cannot be honoured.

Each row trains a 2-step run with one field changed from a reference run and checks an
observable difference (losses, LoRA weights, steps, file contents). The table must name every
field of TrainConfig, so a new field without a behaviour test fails here.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import FAMILY_SPECIFIC_FIELDS, TrainConfig, parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.planning.memory import checkpointing_mode

# field -> (reference overrides, changed value, what to compare: "run" = losses/weights/steps)
CHANGES: dict[str, tuple[dict[str, Any], Any, str]] = {
    "resolution": ({}, 48, "run"),
    "aspect_buckets": ({"resolution": 64}, False, "run"),
    "no_upscale": ({"resolution": 96}, True, "run"),  # the 64 px images train at 64, not 96
    "random_crop": ({}, True, "run"),
    "random_flip": ({}, True, "run"),
    "cache_variants": ({"random_crop": True}, 2, "run"),
    "latent_cache_max_gb": ({"latent_cache": "memory"}, 0.0, "run"),  # over it: encoded per step
    # "disk" trains like "memory" (test_latent_disk_cache: bitwise); "off" draws crops every step
    "latent_cache": ({}, "off", "run"),
    "trigger_word": ({}, "sks", "run"),
    "default_caption": ({"trigger_word": "sks", "data_dir": "<partly captioned>"}, "a shape", "run"),
    "caption_dropout": ({}, 0.5, "run"),
    "steps": ({}, 3, "steps"),
    "num_epochs": ({}, 2, "steps"),
    "batch_size": ({}, 1, "run"),
    "grad_accum": ({}, 2, "run"),
    "learning_rate": ({}, 1e-3, "run"),
    "lr_scheduler": ({}, "linear", "run"),
    "lr_warmup_steps": ({"lr_scheduler": "constant_with_warmup"}, 1, "run"),
    "lr_cycles": ({"lr_scheduler": "cosine_with_restarts", "lr_cycles": 2}, 3, "run"),
    "lr_power": ({"lr_scheduler": "polynomial"}, 2.0, "run"),
    "weight_decay": ({}, 0.5, "run"),
    "max_grad_norm": ({}, 1e-4, "run"),
    "seed": ({}, 1, "run"),
    "lora_rank": ({}, 8, "rank"),
    "lora_alpha": ({}, 16.0, "run"),
    "lora_dropout": ({}, 0.5, "run"),
    "lora_targets": ({}, ["to_q"], "targets"),
    "base_precision": ({}, "bf16", "run"),
    "gradient_checkpointing": ({}, "selective", "checkpointing"),
    "snr_gamma": ({"family": "sdxl", "snr_gamma": None}, 0.1, "run"),
    "noise_offset": ({"family": "sdxl"}, 0.1, "run"),
    "timestep_sampling": ({}, "uniform", "run"),
    "logit_mean": ({}, 1.0, "run"),
    "logit_std": ({}, 2.0, "run"),
    "flow_shift": ({}, 3.0, "run"),
    "guidance": ({}, 4.0, "run"),
    "max_sequence_length": ({}, 24, "run"),
    "output_name": ({}, "elsewhere", "output"),
    "loss": ({}, "l1", "run"),
    "huber_c": ({"loss": "huber"}, 0.5, "run"),
    "huber_schedule": ({"loss": "huber"}, "snr", "run"),
}
# fields whose behaviour is tested elsewhere (or is the identity of the run)
ELSEWHERE = {
    "family": "tests/families (the contract suite runs every family)",
    "base_model": "test_preflight (missing / other family / incomplete) and every run",
    "data_dir": "test_preflight (missing / empty / uncaptioned) and every run",
    "datasets": "tests/unit/training/test_datasets_mix (repeats, loss_weight, caption_dropout, resume) and "
    "tests/unit/data/test_data_mix, test_data_entries",
    "shuffle_tags": "tests/unit/training/test_caption_variants_run (the run changes, variants encoded, resume)",
    "keep_tokens": "tests/unit/data/test_data_caption_variants and test_caption_variants_run",
    "tag_dropout": "tests/unit/data/test_data_caption_variants and test_caption_variants_run",
    "caption_variants": "tests/unit/training/test_caption_variants_run (the texts encoded in phase 1)",
    "preservation": "test_preservation (the target is the base prediction bitwise, fused too; class-prompt "
    "drift 14x smaller; exact resume; refused without a trigger word, with train_text_encoder, num_gpus > 1, "
    "an edit family)",
    "prior_loss_weight": "test_regularisation (a reg entry's loss x prior_loss_weight, bitwise a plain entry with that "
    "loss_weight; exact resume; another value refused on resume; refused without a reg entry)",
    "kohya_folders": "tests/unit/training/test_datasets_mix::test_kohya_folders_train_with_their_repeats",
    "control_dirs": "tests/unit/jobs/test_jobs_paired_validation and tests/unit/data/test_data_pairs (parallel control folders)",
    "control_resolution": "tests/unit/training/test_control_resolution (latent shapes per rule, runs, resume) "
    "and tests/unit/data/test_data_control_sizing (the pipelines' sizes and pixels)",
    "revision": "test_preflight and tests/unit/jobs/test_revision_local (refused with a local folder: config, resolvers, generate, captioning; an old run with one resumes)",
    "base_config": "test_single_file_run (a single file trains and generates with its configs; refused without one)",
    "v_prediction": "test_single_file_run (v-prediction objective and scheduler; refused against the file's v_pred marker)",
    "enable_tf32": "test_train_run (matmul precision during and after the run)",
    "save_every": "test_checkpoints (a checkpoint every N steps, resumable)",
    "keep_last": "test_checkpoints (older checkpoints removed)",
    "save_lora_every": "tests/unit/lora/test_snapshots (a loadable LoRA snapshot every N steps)",
    "keep_loras": "tests/unit/lora/test_snapshots (older snapshots removed, checkpoints not)",
    "max_bad_steps": "test_divergence (the run fails after N non-finite steps in a row)",
    "lora_format": "tests/unit/lora (each layout and each family's default written, checked, loadable)",
    "compile": "test_compile (regional compile requested / refused / auto)",
    "attention_backend": "test_attention (refused without CUDA; the kernel each run reports; math trains like auto)",
    "fuse_projections": "test_fused_projections (a fused run trains like an unfused one, reports its groups; refused for fp8 / int8 / nf4)",
    "offload_blocks": "test_memory (block swap: blocks wait in CPU RAM, same losses; refused on the CPU)",
    "micro_batch_size": "test_plan (a batch split into micro-batches: same losses; must divide batch_size)",
    "memory_budget_gb": "test_plan (the plan chooser measures candidates on a fake device; refused when all fixed)",
    "num_gpus": "test_ddp (2 gloo processes equal 1 process; refused without a launch)",
    "sample_prompts": "test_samples (one PNG per prompt per round; the training maths unchanged)",
    "sample_every": "test_samples (a round every N steps and at the end)",
    "sample_steps": "tests/families/test_sample_previews (the sample equals inference with these steps)",
    "sample_seed": "test_samples (another seed, another image) and tests/families/test_sample_previews",
    "report_to": "test_trackers (refused without the package; TensorBoard gets the metrics and samples)",
    # training methods (issue 28)
    "optimizer": "test_optimizers (prodigy / adafactor losses fall; 8-bit refused on the CPU; exact resume)",
    "optimizer_betas": "test_optimizers (reach AdamW; refused for Adafactor)",
    "optimizer_eps": "test_optimizers (reaches AdamW; refused for Lion)",
    "prodigy_d_coef": "test_optimizers (a larger d_coef falls faster; refused for another optimizer)",
    "prodigy_safeguard_warmup": "test_optimizers (accepted for prodigy only)",
    "prodigy_use_bias_correction": "test_optimizers (exact resume with it)",
    "adafactor_relative_step": "test_optimizers (own step size, lr null; refuses lr / schedule; resume)",
    "adafactor_scale_parameter": "test_optimizers (reaches Adafactor; refused for another optimizer)",
    "adafactor_warmup_init": "test_optimizers (refused without relative_step)",
    "ema_decay": "test_ema (the saved LoRA is the hand-computed EMA; the raw one beside it; exact resume)",
    "ema_update_every": "test_ema (every 2nd step: 2 updates, another EMA)",
    "ema_on_cpu": "test_ema (exact resume with the shadow in CPU memory)",
    "sample_with_ema": "test_ema (samples render the EMA or the raw weights)",
    "adapter": "test_adapters (DoRA / LoHa / LoKr learn; files give ComfyUI / diffusers the trained layers)",
    "lokr_factor": "test_adapters (factor 4 trains and exports; refused for another adapter, 0 refused)",
    "lokr_decompose_both": "test_adapters (low-rank w1 exported as lokr_w1_a / _b; refused for another adapter)",
    "rank_pattern": "test_adapters (to_k at rank 2; a pattern matching nothing refused; kohya LoRA refused)",
    "alpha_pattern": "test_adapters (to_k at alpha 2 in the layers and the file's .alpha)",
    "save_dtype": "test_save_dtype (every LoRA file in the dtype, the fp32 weights rounded; loads in diffusers; fp16 overflow refused)",
    "train_text_encoder": "test_text_encoder_lora (both CLIPs train; kohya / diffusers files load; exact resume; other families refused)",
    "text_encoder_lr": "test_text_encoder_lora (1e-6 leaves the encoders nearly still while the U-Net trains)",
    "assistant_lora": "test_assistant (merged for training, not in the LoRA, refused on a base not distilled)",
    "init_lora": "test_init_lora (the file's weights exactly at the start, every family; the loss continues; "
    "resume without the file) and test_init_lora_rules (each refusal before any model loads)",
    # issue 29 part 4
    "alpha_mask": "test_masked_loss (the step gets the RGBA alpha) and tests/unit/data/test_data_masks",
    "unmasked_weight": "test_masked_loss (0: unmasked errors teach nothing; 0.5: they count)",
    # issue 29 part 6
    "validation_split": "test_validation_loss (seeded hold-out never trained on; a folder; refused when nothing trains)",
    "validate_every": "test_validation_loss (rounds every N steps, same series for the same seed, exact resume)",
    "validation_seed": "test_validation_seed (runs of other seeds: the same noise; another validation_seed: other "
    "noise; an older checkpoint resumes with its seed's noise exactly)",
}


def test_the_table_covers_every_field():
    assert set(CHANGES) | set(ELSEWHERE) == set(TrainConfig.model_fields)
    assert not set(CHANGES) & set(ELSEWHERE)


@pytest.fixture(scope="module")
def partly_captioned(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("partly") / "data"
    shutil.copytree(small_dataset, out)
    sorted(out.glob("*.txt"))[0].unlink()
    return out


_runs: dict[str, tuple[TrainResult, dict[str, torch.Tensor]]] = {}


def _run(make_config, overrides: dict[str, Any], key: str, keep_denoiser: bool = False):
    if key in _runs and not keep_denoiser:
        return _runs[key]
    name = (
        f"r{len(list(get_settings().outputs_dir.glob('*')))}" if get_settings().outputs_dir.exists() else "r0"
    )
    cfg = make_config(**{"output_name": name, **overrides})
    result = train(cfg, [].append, device="cpu", return_denoiser=keep_denoiser)
    weights = load_file(str(result.lora_path))
    _runs[key] = (result, weights)
    return result, weights


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_field_changes_the_run(field, make_config, partly_captioned):
    base, value, check = CHANGES[field]
    base = {k: (str(partly_captioned) if v == "<partly captioned>" else v) for k, v in base.items()}
    ref, ref_weights = _run(make_config, base, repr(sorted(base.items())))
    new, new_weights = _run(
        make_config, {**base, field: value}, f"{field}={value!r}", check == "checkpointing"
    )
    if check == "run":
        same_weights = ref_weights.keys() == new_weights.keys() and all(
            torch.equal(ref_weights[k], new_weights[k]) for k in ref_weights
        )
        assert new.losses != ref.losses or not same_weights
    elif check == "steps":
        assert new.steps_run != ref.steps_run and len(new.losses) == new.steps_run
    elif check == "rank":
        ranks = {min(t.shape) for t in new_weights.values()}
        assert ranks == {value} and {min(t.shape) for t in ref_weights.values()} == {4}
    elif check == "targets":
        assert new_weights and all(".to_q." in k for k in new_weights)
        assert any(".to_k." in k for k in ref_weights)
    elif check == "checkpointing":  # the blocks checkpointed with the selective policy, same maths
        assert checkpointing_mode(new.denoiser) == value  # the reference run: "auto" = off
        assert new.losses == pytest.approx(ref.losses) and new_weights.keys() == ref_weights.keys()
        for k in ref_weights:
            torch.testing.assert_close(new_weights[k], ref_weights[k], rtol=1e-4, atol=1e-6)
    elif check == "output":
        assert new.lora_path.name == f"{value}.safetensors" != ref.lora_path.name
    else:
        raise AssertionError(f"unknown check {check}")


@pytest.mark.parametrize("family", families.names())
def test_family_specific_settings_are_refused_where_not_supported(family, tiny_model, small_dataset):
    spec = families.get(family).spec
    values = {
        "snr_gamma": 3.0,
        "noise_offset": 0.05,
        "timestep_sampling": "uniform",
        "logit_mean": 0.5,
        "logit_std": 1.5,
        "flow_shift": 2.0,
        "guidance": 2.0,
        "max_sequence_length": 64,
        "train_text_encoder": True,
        "text_encoder_lr": 1e-5,
        "v_prediction": True,
    }
    assert set(values) == set(FAMILY_SPECIFIC_FIELDS)
    base = {"family": family, "base_model": str(tiny_model(family)), "data_dir": str(small_dataset)}
    for field, value in values.items():
        if (
            field in spec.supports
        ):  # the logit settings shape logit_normal sampling (some families default to another)
            needs = {"timestep_sampling": "logit_normal"} if field.startswith("logit_") else {}
            needs |= {"train_text_encoder": True} if field == "text_encoder_lr" else {}
            parse_train_config({**base, field: value, **needs})
        else:
            with pytest.raises(ConfigError, match=field):
                parse_train_config({**base, field: value})
