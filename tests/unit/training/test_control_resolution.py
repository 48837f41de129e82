"""TrainConfig.control_resolution (data/control_sizing.py) in runs: each control's latent has the
shape its family's edit pipeline would encode (the pipelines' own resize arithmetic on the same
image), batches never mix control sizes, and a run resumes exactly."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.config import resolve_train_config
from lorastudio.data.run_scan import scan_for_run
from lorastudio.settings import get_settings
from lorastudio.training.inputs.latents import build_latent_cache
from lorastudio.training.loop import train

AREA = 128  # the int rule's side in these tiny runs (the pipelines' ~1 MP would dwarf a 32 px target)


@pytest.fixture(scope="module")
def shaped_pairs(small_dataset, tmp_path_factory):
    """small_dataset with a control per target of another shape than its bucket: 64x96 and
    96x64 alternately (two control sizes under every rule but "target")."""
    out = tmp_path_factory.mktemp("shaped-pairs") / "shaped"
    shutil.copytree(small_dataset, out)
    (out / "control").mkdir()
    rng = np.random.default_rng(0)
    for i, img in enumerate(sorted(out.glob("*.png"))):
        w, h = (96, 64) if i % 2 else (64, 96)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(out / "control" / img.name)
    return out


def _qwen_size(w, h, area):
    """QwenImageEdit(Plus)Pipeline's calculate_dimensions at `area`."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import calculate_dimensions

    return calculate_dimensions(area, w / h)


def _flux2_size(w, h, area):
    """Flux2Pipeline's reference sizing with its 1 MP cap replaced by `area`."""
    from diffusers.pipelines.flux2.image_processor import Flux2ImageProcessor

    img = Image.new("RGB", (w, h))
    if w * h > area:
        img = Flux2ImageProcessor._resize_to_target_area(img, area)
    return img.width // 16 * 16, img.height // 16 * 16


def _kontext_size(w, h, area):
    """Kontext at another area: the side ratio kept (calculate_dimensions' rounding, to 16)."""
    side_w = math.sqrt(area * w / h)
    return round(side_w / 16) * 16, round(side_w / (w / h) / 16) * 16


@pytest.mark.parametrize(
    ("family", "pipeline_size", "scale"),
    [
        ("qwen-image-edit", _qwen_size, 8),
        ("flux-kontext", _kontext_size, 8),
        ("flux2-klein", _flux2_size, 16),
    ],
)
def test_control_latents_have_the_pipelines_shape(make_config, shaped_pairs, family, pipeline_size, scale):
    fam = families.get(family)
    cfg = resolve_train_config(
        make_config(family, data_dir=str(shaped_pairs), control_resolution=AREA, resolution=32)
    )
    scan = scan_for_run(shaped_pairs, cfg, fam.spec, get_settings())
    vae = fam.load_vae(cfg.base_model, None, torch.float32, torch.device("cpu"))
    cache = build_latent_cache(
        fam, vae, scan.items, cfg, np.random.default_rng(0), device=torch.device("cpu"),
        emit=[].append, check_stop=lambda: None,
    )  # fmt: skip
    for item, controls in zip(scan.items, cache.controls, strict=True):
        ((w, h),), (size,) = item.control_dims, item.control_sizes
        pw, ph = pipeline_size(w, h, AREA * AREA)
        assert size == (pw, ph) != item.bucket
        (slot,) = controls  # one slot [V, C, h, w] at its own size
        assert slot.shape[-2:] == (ph // scale, pw // scale)
    sizes = {it.control_sizes for it in scan.items}
    assert len(sizes) == 2 and len({k for k in scan.batch_keys()}) >= 2  # batches never mix them
    batch = cache.sample([0, 2], torch.Generator().manual_seed(0), torch.float32, torch.device("cpu"))
    assert batch.controls.shape[:2] == (2, 1) and batch.controls.shape[-2:] == cache.controls[0][0].shape[-2:]


def test_the_pipeline_rule_encodes_a_control_at_the_pipelines_size(make_config, shaped_pairs, tmp_path):
    """One sample at the real rule: Kontext's preferred resolution for a 2:3 control (832x1248)."""
    data = tmp_path / "one"
    data.mkdir()
    (data / "control").mkdir()
    first = sorted(shaped_pairs.glob("*.png"))[0]
    for src, dst in (
        (first, data / first.name),
        (shaped_pairs / "control" / first.name, data / "control" / first.name),
    ):
        shutil.copy(src, dst)
    shutil.copy(first.with_suffix(".txt"), data / first.with_suffix(".txt").name)
    fam = families.get("flux-kontext")
    cfg = resolve_train_config(make_config("flux-kontext", data_dir=str(data), control_resolution="pipeline"))
    scan = scan_for_run(data, cfg, fam.spec, get_settings())
    assert scan.items[0].control_sizes == ((832, 1248),)  # PREFERRED_KONTEXT_RESOLUTIONS' nearest to 2:3
    vae = fam.load_vae(cfg.base_model, None, torch.float32, torch.device("cpu"))
    cache = build_latent_cache(
        fam, vae, scan.items, cfg, np.random.default_rng(0), device=torch.device("cpu"),
        emit=[].append, check_stop=lambda: None,
    )  # fmt: skip
    assert cache.controls[0][0].shape[-2:] == (1248 // 8, 832 // 8)


def test_controls_of_their_own_sizes_train_and_change_the_run(make_config, shaped_pairs):
    common = {"data_dir": str(shaped_pairs), "steps": 2, "batch_size": 2, "resolution": 32}
    sized = train(make_config("qwen-image-edit", output_name="sized", control_resolution=AREA, **common),
                  [].append, device="cpu")  # fmt: skip
    target = train(make_config("qwen-image-edit", output_name="target", **common), [].append, device="cpu")
    assert sized.steps_run == 2 and all(math.isfinite(x) for x in sized.losses)
    assert sized.losses != target.losses


def test_a_run_with_sized_controls_resumes_exactly(make_config, shaped_pairs):
    from lorastudio.config import parse_train_config
    from lorastudio.training.events import StopRequest
    from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings

    common = {
        "data_dir": str(shaped_pairs), "steps": 4, "batch_size": 1, "resolution": 32, "save_every": 2,
        "control_resolution": AREA, "random_flip": True, "cache_variants": 2,
    }  # fmt: skip
    whole = train(make_config("flux-kontext", output_name="whole", **common), [].append, device="cpu")
    events: list = []
    cfg = make_config("flux-kontext", output_name="parted", **common)
    stop = lambda: StopRequest(save=True) if sum(e.type == "progress" for e in events) >= 2 else None  # noqa: E731
    assert train(cfg, events.append, stop, device="cpu").steps_run == 2
    checkpoint = find_checkpoint(get_settings().outputs_dir / "parted")
    again = parse_train_config(resume_settings(read_checkpoint_info(checkpoint), {}))
    assert again.control_resolution == AREA
    resumed = train(again, [].append, device="cpu", resume=checkpoint)
    assert resumed.losses == whole.losses
    from lorastudio.errors import ConfigError

    with pytest.raises(ConfigError, match="control_resolution"):  # other control latents: not this run
        train(again.model_copy(update={"control_resolution": "target", "steps": 5}), [].append,
              device="cpu", resume=checkpoint)  # fmt: skip


def test_control_resolution_is_refused_for_a_family_without_controls(make_config):
    from lorastudio.errors import ConfigError

    with pytest.raises(ConfigError, match="control_resolution"):
        resolve_train_config(make_config("flux", control_resolution="target"))


@pytest.fixture(scope="module")
def two_slot_pairs(shaped_pairs, tmp_path_factory):
    """shaped_pairs with a control_2/ whose images have the other shape: two slots of two sizes."""
    out = tmp_path_factory.mktemp("two-slots") / "two"
    shutil.copytree(shaped_pairs, out)
    (out / "control_2").mkdir()
    for path in sorted((out / "control").glob("*.png")):
        with Image.open(path) as img:
            img.transpose(Image.Transpose.TRANSPOSE).save(out / "control_2" / path.name)  # 64x96 <-> 96x64
    return out


def test_slots_of_different_sizes_reach_predict_as_a_tuple_and_split_into_micro_batches(
    make_config, two_slot_pairs, monkeypatch
):
    """FLUX.2 klein with two references of different shapes per sample: the batch holds one
    [B, C, h_k, w_k] per slot, and micro-batches of 1 train as the unsplit batch of 2."""
    from lorastudio.families.flux2 import Flux2Family

    seen: list = []
    original = Flux2Family.predict

    def spy(self, denoiser, noisy, level, cond, info, cfg):
        seen.append(info.get("controls"))
        return original(self, denoiser, noisy, level, cond, info, cfg)

    monkeypatch.setattr(Flux2Family, "predict", spy)
    common = {"data_dir": str(two_slot_pairs), "steps": 2, "batch_size": 2, "resolution": 32,
              "control_resolution": AREA}  # fmt: skip
    whole = train(make_config("flux2-klein", output_name="whole", **common), [].append, device="cpu")
    controls = seen[0]
    assert isinstance(controls, tuple) and len(controls) == 2
    assert controls[0].shape[0] == 2 and controls[0].shape[-2:] != controls[1].shape[-2:]
    seen.clear()
    split = train(make_config("flux2-klein", output_name="split", micro_batch_size=1, **common),
                  [].append, device="cpu")  # fmt: skip
    assert all(c[0].shape[0] == 1 for c in seen)  # each micro-batch: its own slice of every slot
    assert split.losses == pytest.approx(whole.losses, rel=1e-5)


def test_a_control_resolution_for_a_dataset_without_controls_is_refused(make_config, small_dataset, tmp_path):
    """Kontext on a text-to-image dataset: the setting would size nothing, so it is refused, by
    the engine and by the job service's validation."""
    from lorastudio.errors import ConfigError
    from lorastudio.jobs.validation import validate_run
    from lorastudio.settings import Settings

    settings = Settings(home=tmp_path / "home").ensure_dirs()
    cfg = make_config("flux-kontext", data_dir=str(small_dataset), control_resolution=AREA)
    with pytest.raises(ConfigError, match="control_resolution"):
        train(cfg, [].append, device="cpu")
    shutil.copytree(small_dataset, settings.datasets_dir / "plain")
    raw = {**cfg.model_dump(exclude_unset=True), "data_dir": "plain"}
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    assert [p.field for p in err.value.problems] == ["control_resolution"]
    assert train(make_config("flux-kontext", data_dir=str(small_dataset), control_resolution="pipeline"),
                 [].append, device="cpu").steps_run == 2  # fmt: skip


def test_a_preview_sizes_its_reference_as_training_did(make_config, shaped_pairs):
    """Kontext at control_resolution 128: the preview renders its reference at the size training
    encoded controls at (FluxKontextPipeline, _auto_resize off, takes the image's own size): the
    same image as the pipeline given the sized reference."""
    from lorastudio.data.control_sizing import control_size, sized_image
    from lorastudio.data.images import load_rgb
    from lorastudio.generate import load_pipeline
    from lorastudio.generate.pipeline import generate_image

    first = sorted((shaped_pairs / "control").glob("*.png"))[0]
    prompt = {"prompt": "invert it", "controls": [f"control/{first.name}"]}
    cfg = make_config(
        "flux-kontext", data_dir=str(shaped_pairs), control_resolution=AREA, resolution=32, steps=1,
        sample_steps=2, sample_prompts=[prompt],
    )  # fmt: skip
    result = train(cfg, [].append, device="cpu", return_denoiser=True)
    with Image.open(result.lora_path.parent / "samples/step-000001-0.png") as image:
        preview = np.asarray(image.convert("RGB"))
    fam = families.get("flux-kontext")
    reference = load_rgb(first)
    sized = sized_image(
        reference,
        control_size(fam.spec.control_sizing, AREA, *reference.size),
        fam.spec.control_sizing,
        AREA**2,
    )
    assert sized.size in ((112, 160), (160, 112))  # the Kontext rule at 128 x 128, not the 32 px preview
    pipe = load_pipeline(cfg.base_model, "flux-kontext", device="cpu")
    pipe.transformer = result.denoiser  # the LoRA as trained
    # generate_image fits a reference to the output size: the pipeline called with the sized one
    pixels = pipe(
        prompt="invert it", image=sized, width=32, height=32, num_inference_steps=2, guidance_scale=2.5,
        _auto_resize=False, max_area=32 * 32, max_sequence_length=cfg.max_sequence_length,
        generator=torch.Generator("cpu").manual_seed(cfg.sample_seed), output_type="pil",
    ).images[0]  # fmt: skip
    assert np.array_equal(preview, np.asarray(pixels))
    fitted = generate_image(pipe, "flux-kontext", prompt="invert it", seed=cfg.sample_seed, steps=2,
                            width=32, height=32, extra={"max_sequence_length": cfg.max_sequence_length},
                            controls=[reference])  # fmt: skip
    assert not np.array_equal(preview, np.asarray(fitted))  # the output-size reference differs
