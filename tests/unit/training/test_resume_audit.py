"""Session 25 resume audit (tiny models, CPU): a run stopped and resumed is bitwise the
uninterrupted run for the surfaces added since session 21's audit: an edit family with controls
and masks, the disk latent / text cache (filled by the first run, read by the resume, cleared or
damaged between them), and an extended edit run. Compared: losses per step, the final LoRA's
tensors, the raw EMA file, every sample PNG."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from lorastudio.data.disk_cache import cache_root
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from stop_at import stop_at


def _outputs(run_dir: Path) -> dict[str, object]:
    """Every LoRA file's tensors and every sample image's pixels under a run folder (checkpoints
    left out), by path relative to the folder with the run's name replaced."""
    name = run_dir.name
    out: dict[str, object] = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir)
        if rel.parts[0] == "checkpoints" or not path.is_file():
            continue
        key = str(rel).replace(name, "RUN")
        if path.suffix == ".safetensors":
            out[key] = load_file(str(path))
        elif path.suffix == ".png":
            out[key] = Image.open(path).tobytes()
    return out


def _assert_same_outputs(a: Path, b: Path) -> None:
    one, two = _outputs(a), _outputs(b)
    assert one.keys() == two.keys() and one
    assert any(k.endswith(".raw.safetensors") for k in one) and any(k.endswith(".png") for k in one), list(
        one
    )
    for key, value in one.items():
        other = two[key]
        if isinstance(value, dict):
            assert value.keys() == other.keys(), key
            assert all(torch.equal(value[k], other[k]) for k in value), key
        else:
            assert value == other, key


@pytest.fixture(scope="module")
def masked_pairs(small_pairs: Path, tmp_path_factory) -> Path:
    """small_pairs with a mask per target (the left half weighted)."""
    out = tmp_path_factory.mktemp("masked-pairs") / "pairs"
    shutil.copytree(small_pairs, out)
    (out / "masks").mkdir()
    for image in sorted(out.glob("*.png")):
        w, h = Image.open(image).size
        mask = Image.new("L", (w, h), 0)
        mask.paste(255, (0, 0, w // 2, h))
        mask.save(out / "masks" / image.name)
    return out


EDIT = {
    "steps": 4,
    "batch_size": 1,
    "ema_decay": 0.9,
    "sample_prompts": ["make it red"],
    "sample_every": 2,
    "sample_steps": 2,
    "save_every": 1,
}


def _edit(family: str) -> dict:
    """EDIT at the family's smallest sample size: FLUX.2's pipelines take references of 64 px a
    side or more (FamilySpec.min_reference_side; the job service's validation refuses less)."""
    return {**EDIT, "resolution": 64} if family.startswith("flux2") else EDIT


def _resume_equals_full(make_config, family: str, stop: int, between=None, extend: int | None = None, **over):
    full = train(
        make_config(family, output_name="full", **{**over, "steps": extend or over["steps"]}),
        [].append,
        device="cpu",
    )
    events, check = stop_at(stop)
    first = train(
        make_config(family, output_name="part", **over),
        events.append,
        check if extend is None else None,
        device="cpu",
    )
    if extend is None:
        assert first.stopped and first.steps_run == stop
    if between is not None:
        between()
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(
        make_config(family, output_name="part", **{**over, "steps": extend or over["steps"]}),
        [].append,
        device="cpu",
        resume=run_dir,
    )
    assert resumed.losses == full.losses
    _assert_same_outputs(get_settings().outputs_dir / "full", run_dir)
    return full, resumed


SLOW = pytest.mark.slow  # the default suite keeps one case of each test (< 2 s each)


@pytest.mark.parametrize(
    ("family", "cache"),
    [
        ("flux-kontext", "disk"),
        ("flux2-klein", "memory"),
        pytest.param("flux-kontext", "memory", marks=SLOW),
        pytest.param("flux2-klein", "disk", marks=SLOW),
        pytest.param("flux2", "memory", marks=SLOW),
        pytest.param("flux2", "disk", marks=SLOW),
        pytest.param("qwen-image-edit", "memory", marks=SLOW),
        pytest.param("qwen-image-edit", "disk", marks=SLOW),
    ],
)
def test_edit_family_with_controls_and_masks_resumes_bitwise(make_config, masked_pairs, family, cache):
    _resume_equals_full(
        make_config, family, 2, data_dir=str(masked_pairs), latent_cache=cache, **_edit(family)
    )


def _clear_cache() -> None:
    shutil.rmtree(cache_root(get_settings()))


def _damage_cache() -> None:
    shards = sorted(cache_root(get_settings()).rglob("*.safetensors"))
    assert shards
    for i, shard in enumerate(shards):
        if i % 2 == 0:
            with shard.open("r+b") as fh:
                fh.truncate(shard.stat().st_size // 2)


@pytest.mark.parametrize(
    ("family", "between"),
    [
        ("flux", _damage_cache),
        pytest.param("flux", _clear_cache, marks=SLOW),
        pytest.param("qwen-image-edit", _clear_cache, marks=SLOW),
        pytest.param("qwen-image-edit", _damage_cache, marks=SLOW),
    ],
)
def test_disk_cache_cleared_or_damaged_before_the_resume(
    make_config, masked_pairs, small_dataset, family, between
):
    data = masked_pairs if family == "qwen-image-edit" else small_dataset
    over = {**EDIT, "random_crop": True, "cache_variants": 2}
    _resume_equals_full(
        make_config, family, 2, between=between, data_dir=str(data), latent_cache="disk", **over
    )


@pytest.mark.parametrize(
    "family",
    ["flux-kontext", pytest.param("qwen-image-edit", marks=SLOW), pytest.param("flux2-klein", marks=SLOW)],
)
def test_extended_edit_run_equals_the_longer_run(make_config, masked_pairs, family):
    _resume_equals_full(
        make_config, family, 4, extend=6, data_dir=str(masked_pairs), latent_cache="disk", **_edit(family)
    )


COMBOS = [
    {"validation_split": 0.25, "validate_every": 2, "caption_dropout": 0.3},
    {"grad_accum": 2, "adapter": "lokr"},
    {"adapter": "dora", "lr_scheduler": "cosine", "lr_warmup_steps": 2},
    {"optimizer": "prodigy", "learning_rate": 1.0},
    {"save_lora_every": 1, "keep_loras": 2, "lora_dropout": 0.1},
    {"num_epochs": 2},
]


@pytest.mark.slow
@pytest.mark.parametrize("combo", range(len(COMBOS)))
@pytest.mark.parametrize("family", ["flux-kontext", "qwen-image-edit", "flux2-klein"])
def test_edit_families_with_the_disk_cache_resume_bitwise_with_other_settings(
    make_config, masked_pairs, family, combo
):
    """Validation, accumulation, LoKr / DoRA, warmup, Prodigy, LoRA snapshots, LoRA dropout,
    epochs: each with controls, masks, EMA, samples and the disk cache (~90 s in all)."""
    over = {**_edit(family), **COMBOS[combo]}
    _resume_equals_full(make_config, family, 2, data_dir=str(masked_pairs), latent_cache="disk", **over)
