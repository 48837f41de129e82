"""The on-disk latent cache (latent_cache = "disk") with controls of their own sizes
(control_resolution, data/control_sizing.py): a paired run at the pipeline's rule trains bitwise
like the in-memory cache, a second run encodes nothing, and another rule re-encodes the controls
(the shard key holds the rule and the sizes) rather than read latents of another size."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.data.disk_cache import cache_root
from lorastudio.settings import get_settings
from lorastudio.training.loop import train

AUGMENTED = {"random_crop": True, "random_flip": True, "cache_variants": 2, "steps": 2, "batch_size": 1}


@pytest.fixture(scope="module")
def two_shapes(small_dataset, tmp_path_factory) -> Path:
    """Two targets of small_dataset, each with control/ (64x96, then 96x64) and control_2/ (the
    other shape): controls of two aspect ratios, two slots of different sizes per sample."""
    out = tmp_path_factory.mktemp("two-shapes") / "pairs"
    out.mkdir()
    (out / "control").mkdir()
    (out / "control_2").mkdir()
    rng = np.random.default_rng(1)
    for i, img in enumerate(sorted(small_dataset.glob("*.png"))[:2]):
        shutil.copy(img, out / img.name)
        shutil.copy(img.with_suffix(".txt"), out / img.with_suffix(".txt").name)
        w, h = (96, 64) if i % 2 else (64, 96)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(out / "control" / img.name)
        Image.fromarray(rng.integers(0, 256, (w, h, 3), dtype=np.uint8)).save(out / "control_2" / img.name)
    return out


@pytest.fixture(scope="module")
def plus_2509(tmp_path_factory) -> Path:
    """A tiny Qwen-Image-Edit-Plus (2509) folder: up to 3 controls per target."""
    from lorastudio.tiny.qwen_edit import build_qwen_image_edit

    folder = tmp_path_factory.mktemp("plus") / "plus-2509"
    build_qwen_image_edit(0, plus=True).save_pretrained(folder)
    return folder


def _shards() -> list[Path]:
    return sorted((cache_root(get_settings()) / "latents").rglob("*.safetensors"))


@pytest.mark.parametrize(
    ("base", "others"),
    [
        (128, (96, "target")),  # the int rule: the pipeline's arithmetic at a tiny area, fast
        pytest.param("pipeline", (128, "target"), marks=pytest.mark.slow),  # ~1 MP controls: ~1 min
    ],
)
@pytest.mark.parametrize(("family", "slots"), [("flux-kontext", 1), ("qwen-image-edit", 2)])
def test_sized_controls_on_disk_train_as_in_memory_and_a_new_rule_re_encodes(
    make_config, two_shapes, plus_2509, monkeypatch, family, slots, base, others
):
    """FLUX.1 Kontext (one control) and Qwen-Image-Edit-Plus (two, of transposed shapes): `base`
    the run's control_resolution, `others` the rules it is then changed to."""
    data = two_shapes
    if slots == 1:  # Kontext takes one control: control/ only
        data = two_shapes.parent / "one-slot"
        shutil.copytree(two_shapes, data, ignore=shutil.ignore_patterns("control_2"), dirs_exist_ok=True)
    cls = type(families.get(family))
    calls: list[tuple[int, ...]] = []
    real = cls.encode_controls

    def counting(self, vae, pixels):
        calls.append(tuple(pixels.shape))
        return real(self, vae, pixels)

    monkeypatch.setattr(cls, "encode_controls", counting)

    # Qwen-Image-Edit refuses random_flip (its prompt sees the unflipped controls)
    augmented = {**AUGMENTED, "random_flip": family == "flux-kontext"}
    if slots == 2:
        augmented["base_model"] = str(plus_2509)

    def run(name: str, mode: str = "disk", rule: str | int = base):
        cfg = make_config(
            family,
            output_name=name,
            latent_cache=mode,
            control_resolution=rule,
            data_dir=str(data),
            **augmented,
        )
        return train(cfg, [].append, device="cpu")

    memory = run("memory", "memory")
    calls.clear()
    disk = run("disk")
    assert disk.losses == memory.losses  # bitwise: the same latents, the same draws
    assert len(calls) == 2 * slots  # per target, one VAE call per slot (its variants together)
    assert all(c[2] * c[3] > (512 * 512 if base == "pipeline" else 64 * 64) for c in calls)
    seen = {tuple(c[2:]) for c in calls}
    shards = [load_file(str(s)) for s in _shards()]
    # 2 targets x 2 variants (the flipped and the unflipped; without flips the two crops of a
    # 32 px image in its 32 px bucket are one variant)
    assert len(shards) == (4 if augmented["random_flip"] else 2)
    for tensors in shards:
        names = sorted(n for n in tensors if n.startswith("control"))
        assert names == [f"control_{n}" for n in range(slots)]
        if slots == 2:  # the slots' own (transposed) sizes
            assert tensors["control_0"].shape[-2:] == tensors["control_1"].shape[-2:][::-1]
    calls.clear()
    again = run("again")
    assert calls == [] and again.losses == disk.losses  # a second disk run encodes nothing
    for rule in others:  # another rule: the controls encoded again, at its sizes
        calls.clear()
        other = run(f"rule-{rule}", rule=rule)
        # one VAE call per target and slot (per target: "target" crops all its slots alike)
        assert (
            len(calls) == (2 if rule == "target" else 2 * slots) and not {tuple(c[2:]) for c in calls} & seen
        )
        assert other.losses != disk.losses
        if rule != "target":  # the re-encoded latents are the in-memory cache's
            assert run(f"memory-{rule}", "memory", rule).losses == other.losses
    calls.clear()
    assert run("back").losses == disk.losses and calls == []  # the first rule's shards still serve


def test_the_preflight_counts_and_sizes_the_cache_with_the_controls_own_sizes(
    tiny_model, two_shapes, run_settings
):
    """The preflight's "reuses N of M" uses the run's keys (control sizes and rule included), and
    its RAM figure (which picks memory or disk under "auto") counts each control at its own size
    as the run does: a budget between the bucket-sized and the own-sized figure goes to disk."""
    from lorastudio.jobs.hardware import HostInfo, precisions_for
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.jobs.validation import validate_run
    from lorastudio.training.inputs.latents import cache_bytes

    cpu = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
    settings = get_settings().ensure_dirs()
    shutil.copytree(two_shapes, settings.datasets_dir / "pairs", ignore=shutil.ignore_patterns("control_2"))
    over = {**AUGMENTED, "latent_cache": "disk", "control_resolution": 128}
    raw = run_settings("flux-kontext", tiny_model("flux-kontext"), Path("pairs"), over)

    def validated(name: str, **changes):
        return validate_run({**raw, **changes, "output_name": name}, settings, live_output_names=set())

    def section(name: str, **changes) -> dict:
        return preflight_report(validated(name, **changes), cpu)["latent_cache"]

    assert (section("a")["images"], section("a")["images_cached"]) == (2, 0)
    train(validated("a").worker_config, [].append, device="cpu")
    assert "reuses 2 of 2" in section("b")["note"]
    assert section("c", control_resolution=96)["images_cached"] == 0  # other sizes: other keys
    assert section("d", control_resolution="target")["images_cached"] == 0

    items = validated("e").scan.items
    spec = families.get("flux-kontext").spec
    sizing = ([it.bucket for it in items], 2, spec.latent_channels, spec.vae_scale_factor)
    own = cache_bytes(*sizing, control_sizes=[s for it in items for s in it.control_sizes])
    bucket_sized = cache_bytes(*sizing, controls=1)
    assert own > bucket_sized
    budget = (own - 1) / 1024**3  # the own-sized cache just does not fit
    assert section("f", latent_cache="auto", latent_cache_max_gb=budget)["mode"] == "disk"
    assert section("g", latent_cache="auto", latent_cache_max_gb=own / 1024**3)["mode"] == "memory"


def test_per_step_encoding_and_held_out_images_take_the_controls_own_sizes(
    make_config, two_shapes, plus_2509, monkeypatch
):
    """latent_cache "off" (EncodedPerStep) and the validation hold-out with two controls of
    transposed shapes (control_resolution 128): every predict, trained or held out, gets the two
    slots at their own sizes (a tuple), never the target's crop."""
    from lorastudio.data.control_sizing import control_size
    from lorastudio.families.qwen_image_edit import QwenImageEditFamily

    seen: list = []
    original = QwenImageEditFamily.predict

    def spy(self, denoiser, noisy, level, cond, info, cfg):
        seen.append((tuple(noisy.shape[-2:]), info.get("controls")))
        return original(self, denoiser, noisy, level, cond, info, cfg)

    monkeypatch.setattr(QwenImageEditFamily, "predict", spy)
    cfg = make_config(
        "qwen-image-edit", base_model=str(plus_2509), data_dir=str(two_shapes), output_name="off",
        latent_cache="off", control_resolution=128, validation_split=0.5, validate_every=1, steps=2,
        batch_size=1,
    )  # fmt: skip
    events: list = []
    result = train(cfg, events.append, device="cpu")
    rounds = [e for e in events if e.type == "validation"]
    assert result.steps_run == 2 and len(rounds) == 2 and all(np.isfinite(e.loss) for e in rounds)
    sizing = families.get("qwen-image-edit").spec.control_sizing
    expected = {  # (h, w) latents of each slot of either target: 64x96 / 96x64 and transposed
        tuple(
            (s[1] // 8, s[0] // 8) for s in (control_size(sizing, 128, w, h), control_size(sizing, 128, h, w))
        )
        for w, h in ((64, 96), (96, 64))
    }
    assert len(seen) >= 4  # 2 training steps, 2 validation rounds
    for target, controls in seen:
        assert isinstance(controls, tuple) and len(controls) == 2
        shapes = tuple(tuple(c.shape[-2:]) for c in controls)
        assert shapes in expected and target not in shapes


@pytest.mark.parametrize("mode", ["disk", "off"])
def test_the_host_forecast_sizes_the_vae_call_the_run_makes(
    tiny_model, two_shapes, run_settings, monkeypatch, mode
):
    """jobs/host_memory: with controls of their own sizes the VAE term is the largest VAE call
    the run makes (images x pixels, recorded), on disk (a slot's variants per call) and encoded
    per step (one control per call), not every control of a sample at the largest size at once."""
    from lorastudio.jobs import host_memory
    from lorastudio.jobs.hardware import HostInfo, precisions_for
    from lorastudio.jobs.preflight import WEIGHT_BYTES, param_count, plan_for_estimate
    from lorastudio.jobs.validation import validate_run

    cls = type(families.get("flux-kontext"))
    calls: list[int] = []
    for name in ("encode_pixels", "encode_controls"):
        real = getattr(cls, name)

        def recording(self, vae, pixels, real=real):
            calls.append(int(pixels.shape[0] * pixels.shape[2] * pixels.shape[3]))
            return real(self, vae, pixels)

        monkeypatch.setattr(cls, name, recording)
    cpu = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
    settings = get_settings().ensure_dirs()
    shutil.copytree(two_shapes, settings.datasets_dir / "pairs", ignore=shutil.ignore_patterns("control_2"))
    over = {**AUGMENTED, "latent_cache": mode, "control_resolution": 128, "batch_size": 2}
    if mode == "off":  # nothing is cached: cache_variants is refused (config_cache.latent_cache_problems)
        del over["cache_variants"]
    raw = run_settings("flux-kontext", tiny_model("flux-kontext"), Path("pairs"), over)
    run = validate_run({**raw, "output_name": mode}, settings, live_output_names=set())
    train(run.worker_config, [].append, device="cpu")
    cfg, scan = run.config, run.scan
    forecast = host_memory.host_memory_forecast(
        cfg, run.model_dir, plan_for_estimate(cfg, cpu), cpu, scan.bucket_histogram(),
        scan.controls_per_image(), [s for it in scan.items for s in it.control_sizes],
    )  # fmt: skip
    weights = param_count(run.model_dir / "vae") * WEIGHT_BYTES["fp32"] / 1e9
    c0 = host_memory._vae_first_channels(run.model_dir / "vae")
    expected = host_memory.VAE_ACT_PER_CHANNEL_PIXEL * c0 * max(calls) * 4 / 1e9
    assert forecast["phases"]["latents"] - weights == pytest.approx(expected, rel=0.1)  # phases: 3 decimals


def test_a_mixed_dataset_on_disk_trains_as_in_memory(make_config, two_shapes, tmp_path):
    """FLUX.1 Kontext with one target paired (a control of its own size) and one without: its
    shard holds no controls, the other's one control_0, and the run trains bitwise as in RAM."""
    data = tmp_path / "mixed"
    shutil.copytree(two_shapes, data, ignore=shutil.ignore_patterns("control_2"))
    sorted((data / "control").glob("*.png"))[0].unlink()

    def run(name: str, mode: str):
        cfg = make_config("flux-kontext", output_name=name, latent_cache=mode, control_resolution=128,
                          data_dir=str(data), **AUGMENTED)  # fmt: skip
        return train(cfg, [].append, device="cpu")

    memory = run("memory", "memory")
    assert run("disk", "disk").losses == memory.losses
    names = sorted(tuple(sorted(load_file(str(s)))) for s in _shards())
    assert names == [("control_0", "mean", "std")] * 2 + [("mean", "std")] * 2


def test_a_shard_whose_control_has_another_shape_is_re_encoded(
    make_config, two_shapes, tmp_path, monkeypatch
):
    """A whole shard (valid crc32) under a right key whose control_0 has another size is not
    read: its image is encoded again and the run trains as the first."""
    from lorastudio.training.inputs.latents_disk import write_shard

    data = tmp_path / "one-slot"
    shutil.copytree(two_shapes, data, ignore=shutil.ignore_patterns("control_2"))
    cls = type(families.get("flux-kontext"))
    calls: list[int] = []
    real = cls.encode_controls

    def counting(self, vae, pixels):
        calls.append(int(pixels.shape[0]))
        return real(self, vae, pixels)

    monkeypatch.setattr(cls, "encode_controls", counting)

    def run(name: str):
        cfg = make_config("flux-kontext", output_name=name, latent_cache="disk", control_resolution=128,
                          data_dir=str(data), **AUGMENTED)  # fmt: skip
        return train(cfg, [].append, device="cpu")

    first = run("first")
    shard = _shards()[0]
    tensors = load_file(str(shard))
    tensors["control_0"] = tensors["control_0"][:, :-1].contiguous()  # one latent row short
    assert write_shard(shard, tensors)
    calls.clear()
    assert run("second").losses == first.losses and len(calls) == 1  # that one image, again
