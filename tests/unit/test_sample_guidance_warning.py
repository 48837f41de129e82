"""A true-CFG family's sample prompt `guidance` is named by the run's warnings (config_samples.
unapplied_sample_guidance_warning): Qwen-Image's previews have no negative prompt, so its pipeline
never applies their scale (RELIABILITY 1560), and a prompt's guidance 7 rendered the image of no
guidance while the config took it silently (session 37 generate2's Known problem)."""

from __future__ import annotations

from pathlib import Path

from lorastudio.config import TrainConfig
from lorastudio.config_samples import unapplied_sample_guidance_warning
from lorastudio.data import scan_dataset
from lorastudio.data.scan_warnings import scan_warnings


def _cfg(family: str, folder: Path, prompts: list) -> TrainConfig:
    return TrainConfig.model_validate(
        {"family": family, "base_model": "/unused", "data_dir": str(folder), "sample_prompts": prompts}
    )


def test_a_qwen_prompts_guidance_above_one_is_named(tmp_path: Path) -> None:
    prompts = ["plain", {"prompt": "a dog", "guidance": 7}, {"prompt": "a cat", "guidance": 1}]
    said = unapplied_sample_guidance_warning(_cfg("qwen-image", tmp_path, prompts))
    assert said is not None and said.startswith("sample prompt 2 (7): guidance not applied")
    assert "Qwen-Image" in said and "negative prompt" in said
    two = prompts + [{"prompt": "x", "guidance": 2.5}]
    assert unapplied_sample_guidance_warning(_cfg("qwen-image", tmp_path, two)).startswith(
        "sample prompts 2 (7), 4 (2.5):"
    )


def test_no_warning_where_the_scale_is_applied_or_not_given(tmp_path: Path) -> None:
    guided = ["plain", {"prompt": "a dog", "guidance": 7}]
    assert unapplied_sample_guidance_warning(_cfg("flux", tmp_path, guided)) is None  # applied
    unset = ["plain", {"prompt": "a dog", "seed": 3}, {"prompt": "a cat", "guidance": 1}]
    assert unapplied_sample_guidance_warning(_cfg("qwen-image", tmp_path, unset)) is None


def test_the_run_states_it_with_its_dataset_warnings(sample_dataset: Path) -> None:
    cfg = _cfg("qwen-image", sample_dataset, [{"prompt": "a dog", "guidance": 4}])
    warnings = scan_warnings(scan_dataset(sample_dataset, resolution=64, multiple=16), cfg, None)
    assert any(w.startswith("sample prompt 1 (4): guidance not applied") for w in warnings)
