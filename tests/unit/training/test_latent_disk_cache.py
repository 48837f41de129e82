"""The on-disk latent cache (latent_cache = "disk"): a second run on the same data and model
encodes nothing and trains bitwise like the first; a changed image, bucket or VAE re-encodes
what changed; a damaged shard is re-encoded; a resume is exact; RAM holds no set-wide tensors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from lorastudio import families
from lorastudio.data.disk_cache import cache_root, cache_stats, clear_cache, latent_mode
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.inputs.text_signature import PROBE_TEXTS
from lorastudio.training.loop import train

AUGMENTED = {"random_crop": True, "random_flip": True, "cache_variants": 2, "steps": 3}


@pytest.fixture
def encodes(monkeypatch) -> list[int]:
    """Images per VAE call of the runs of a test (the FLUX.1 family's encode_pixels, counted)."""
    family = families.get("flux")
    cls = type(family)
    real = cls.encode_pixels
    calls: list[int] = []

    def counting(self, vae, pixels):
        calls.append(int(pixels.shape[0]))
        return real(self, vae, pixels)

    monkeypatch.setattr(cls, "encode_pixels", counting)
    return calls


@pytest.fixture
def text_encodes(monkeypatch) -> list[str]:
    """The captions the runs of a test encode (the FLUX.1 family's encode_prompts, recorded)."""
    cls = type(families.get("flux"))
    real = cls.encode_prompts
    seen: list[str] = []

    def recording(self, encoders, prompts, cfg, **kwargs):
        seen.extend(prompts)
        return real(self, encoders, prompts, cfg, **kwargs)

    monkeypatch.setattr(cls, "encode_prompts", recording)
    return seen


def _shards(kind: str = "latents") -> list[Path]:
    return sorted((cache_root(get_settings()) / kind).rglob("*.safetensors"))


def _run(make_config, name: str, **overrides):
    settings = {**AUGMENTED, "latent_cache": "disk", **overrides}
    events: list = []
    result = train(make_config(output_name=name, **settings), events.append, device="cpu")
    return result, events


def test_a_second_run_encodes_nothing_and_trains_bitwise_alike(make_config, encodes, text_encodes):
    first, _ = _run(make_config, "first")
    assert len(encodes) == 4 and set(encodes) == {2}  # 4 images, their 2 variants in one call each
    assert len(_shards()) == 8 and not list(cache_root(get_settings()).rglob("*.tmp"))
    assert len(text_encodes) == 6 and len(_shards("text")) == 4  # the 4 captions (+ 2 probes, in RAM)
    assert text_encodes[-2:] == list(
        PROBE_TEXTS
    )  # what the encoders give (training/inputs/text_signature.py)
    encodes.clear()
    text_encodes.clear()
    second, events = _run(make_config, "second")
    assert encodes == [] and text_encodes == []
    latents = [e for e in events if e.type == "preparing" and e.phase == "latents"]
    assert (latents[0].done, latents[0].total) == (4, 4)  # every image found on disk
    assert second.losses == first.losses
    memory, _ = _run(make_config, "memory", latent_cache="memory")  # the same draws as the RAM cache
    assert memory.losses == first.losses


def test_changed_image_bucket_or_vae_re_encodes_only_what_changed(
    make_config, encodes, text_encodes, small_dataset, tmp_path
):
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    _run(make_config, "a", data_dir=str(data))
    encodes.clear()
    text_encodes.clear()
    sorted(data.glob("*.txt"))[1].write_text("a new caption")
    _run(make_config, "a2", data_dir=str(data))
    assert encodes == [] and text_encodes == ["a new caption"]  # only the changed caption
    image = sorted(data.glob("*.png"))[0]
    from PIL import Image

    with Image.open(image) as img:
        changed = img.convert("RGB")
    changed.putpixel((0, 0), (1, 2, 3))
    changed.save(image)
    _run(make_config, "b", data_dir=str(data))
    assert len(encodes) == 1  # only the changed image
    encodes.clear()
    _run(make_config, "c", data_dir=str(data), resolution=48)  # every bucket changes
    assert len(encodes) == 4
    encodes.clear()
    model = tmp_path / "model"
    shutil.copytree(make_config().base_model, model)
    weights = next((model / "vae").glob("*.safetensors"))
    tensors = load_file(str(weights))
    save_file({k: v * 1.01 for k, v in tensors.items()}, str(weights))  # same shapes, other values
    _run(make_config, "d", data_dir=str(data), base_model=str(model))
    assert len(encodes) == 4
    assert len([s for s in cache_stats(cache_root(get_settings())) if s.kind == "latents"]) == 2  # two VAEs


def test_a_truncated_or_corrupt_shard_is_re_encoded(make_config, encodes):
    first, _ = _run(make_config, "first")
    shards = _shards()
    with shards[0].open("r+b") as fh:
        fh.truncate(shards[0].stat().st_size // 2)
    data = bytearray(shards[3].read_bytes())
    data[-5] ^= 0xFF  # a flipped bit in the tensor bytes: the crc32 catches it
    shards[3].write_bytes(bytes(data))
    encodes.clear()
    second, _ = _run(make_config, "second")
    assert 1 <= len(encodes) <= 2  # the images of the two damaged shards (maybe one image)
    assert second.losses == first.losses
    assert all(load_file(str(s)) for s in _shards())  # rewritten whole


def test_a_disk_cached_run_resumes_exactly(make_config, encodes):
    full, _ = _run(make_config, "full", steps=4)
    events: list = []

    def stop():
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    settings = {**AUGMENTED, "latent_cache": "disk", "steps": 4, "save_every": 1}
    train(make_config(output_name="run", **settings), events.append, stop, device="cpu")
    encodes.clear()
    resumed = train(
        make_config(output_name="run", **settings),
        [].append,
        device="cpu",
        resume=get_settings().outputs_dir / "run",
    )
    assert encodes == [] and resumed.losses == full.losses


def test_over_budget_auto_run_holds_no_set_wide_tensors(make_config, small_dataset, monkeypatch):
    from lorastudio.training import loop_phases as loop  # where the phases look their helpers up

    sources = []
    real = loop.prepare_latents

    def keep(*args, **kwargs):
        sources.append(real(*args, **kwargs))
        return sources[-1]

    monkeypatch.setattr(loop, "prepare_latents", keep)
    train(make_config(output_name="auto", latent_cache_max_gb=1e-9, **AUGMENTED), [].append, device="cpu")
    (source,) = sources
    assert type(source).__name__ == "DiskLatents" and source.kept == {}
    assert not any(isinstance(v, torch.Tensor) for v in vars(source).values())
    batch = source.sample([0, 1], torch.Generator().manual_seed(0), torch.float32, torch.device("cpu"))
    assert batch.latents.shape[0] == 2 and np.isfinite(batch.latents.numpy()).all()


def test_modes_and_clear():
    assert latent_mode("auto", 10, 1.0) == "memory" and latent_mode("auto", 2 * 1024**3, 1.0) == "disk"
    assert latent_mode("memory", 2 * 1024**3, 1.0) == "per_step" and latent_mode("off", 1, 8.0) == "per_step"
    assert latent_mode("disk", 1, 8.0) == "disk"
    from lorastudio.config import parse_train_config
    from lorastudio.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_train_config({"family": "flux", "base_model": "x", "data_dir": "d", "latent_cache": "ram"})
    assert [p.field for p in err.value.problems] == ["latent_cache"]
    root = cache_root(get_settings())
    shard = root / "latents" / ("abc" * 7)[:20] / "12" / ("12ff" * 16 + ".safetensors")
    shard.parent.mkdir(parents=True)
    save_file({"mean": torch.zeros(2)}, str(shard))
    (stats,) = cache_stats(root)
    assert (stats.kind, stats.model, stats.files) == ("latents", ("abc" * 7)[:20], 1)
    assert clear_cache(root) == stats.bytes and cache_stats(root) == []


def test_cli_lists_and_clears_the_cache(make_config):
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    _run(make_config, "cli", steps=1)
    listed = CliRunner().invoke(app, ["cache", "ls"])
    assert listed.exit_code == 0, listed.output
    assert "latents" in listed.output and "total: 12 shards" in listed.output  # 8 latents, 4 captions
    missing = CliRunner().invoke(app, ["cache", "clear", "--model", "nope", "--yes"])
    assert missing.exit_code != 0 and not missing.output.startswith("freed")
    from lorastudio.jobs.homelock import HomeLock

    with HomeLock.for_cli_run(get_settings().home):  # a `lorastudio train` reads them meanwhile
        busy = CliRunner().invoke(app, ["cache", "clear", "--yes"])
    assert busy.exit_code == 1 and "cache not cleared" in busy.output, busy.output
    assert "total: 12 shards" in CliRunner().invoke(app, ["cache", "ls"]).output  # nothing removed
    cleared = CliRunner().invoke(app, ["cache", "clear", "--yes"])
    assert cleared.exit_code == 0 and cleared.output.startswith("freed 0.0")
    paths = CliRunner().invoke(app, ["paths"]).output
    assert f"cache     {cache_root(get_settings())}" in paths
    assert (
        _shards() == _shards("text") == []
        and "total: 0 shards" in CliRunner().invoke(app, ["cache", "ls"]).output
    )


def test_the_preflight_says_how_many_images_a_run_reuses(tiny_model, small_dataset, run_settings):
    from lorastudio.jobs.hardware import HostInfo, precisions_for
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.jobs.validation import validate_run

    cpu = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
    settings = get_settings().ensure_dirs()
    shutil.copytree(small_dataset, settings.datasets_dir / "small")
    over = {**AUGMENTED, "latent_cache": "disk", "caption_dropout": 0.3}  # "" is encoded too
    raw = run_settings("flux", tiny_model("flux"), Path("small"), over)

    def section(name: str) -> dict:
        run = validate_run({**raw, "output_name": name}, settings, live_output_names=set())
        return preflight_report(run, cpu)["latent_cache"]

    before = section("a")
    assert (before["mode"], before["images"], before["images_cached"], before["disk_bytes"]) == (
        "disk",
        4,
        0,
        0,
    )
    train(
        validate_run({**raw, "output_name": "a"}, settings, live_output_names=set()).worker_config,
        [].append,
        device="cpu",
    )
    after = section("b")
    assert after["images_cached"] == 4 and after["disk_bytes"] > 0 and "reuses 4 of 4" in after["note"]
    assert (before["texts"], before["texts_cached"], after["texts_cached"]) == (5, 0, 5)
    shard = _shards()[0]
    shard.unlink()
    assert section("c")["images_cached"] == 3 and "cache's cap" not in section("c")["note"]
    settings.cache_max_gb = 0.0  # LORASTUDIO_CACHE_MAX_GB=0
    assert "exceed the cache's cap of 0.00 GB" in section("d")["note"]
    settings.cache_max_gb = None
    auto = validate_run(
        {**raw, "latent_cache": "auto", "output_name": "e"}, settings, live_output_names=set()
    )
    assert preflight_report(auto, cpu)["latent_cache"]["mode"] == "memory"


def test_shards_the_disk_refuses_stay_in_ram_for_the_run_and_a_warning_says_so(make_config, monkeypatch):
    """The run goes on with the refused shards in RAM; since RELIABILITY 1742 a RunWarning per
    cache (latents, text embeddings) names the folder, the reason and the fix (was: not a word,
    while RAM took what the disk cache was chosen to hold and the next run encoded it all again)."""
    from lorastudio.training.inputs import cache_shards

    first, _ = _run(make_config, "first", latent_cache="memory")

    def full_disk(shard, data, problems=None):  # what data/cache_io says of a full disk
        if problems is not None:
            problems.append(f"{shard}: No space left on device")
        return False

    monkeypatch.setattr(cache_shards, "write_shard_bytes", full_disk)
    full, events = _run(make_config, "full")
    assert full.losses == first.losses and _shards() == _shards("text") == []
    said = [e.message for e in events if e.type == "warning"]
    root = cache_root(get_settings())
    assert len(said) == 2, said
    for kind in ("latents", "text"):
        (note,) = [m for m in said if f"{root / kind}" in m]
        assert "No space left on device" in note and "keeps them in RAM" in note
        assert "LORASTUDIO_CACHE_DIR" in note


def test_a_shard_write_the_disk_refuses_names_the_shard_and_why(tmp_path):
    """data/cache_io.write_shard_bytes tells the run why (RELIABILITY 1742): a file where the
    shard's folder goes (as a full disk refuses the folder) reads as the shard and the reason."""
    from lorastudio.data.cache_io import write_shard_bytes
    from lorastudio.data.disk_cache import shard_path

    shard = shard_path(tmp_path, "latents", "m", "ab" + "0" * 62)
    shard.parent.parent.mkdir(parents=True)
    shard.parent.write_bytes(b"")  # a file in the folder's place
    problems: list[str] = []
    assert not write_shard_bytes(shard, b"x", problems)
    assert problems == [f"{shard}: Not a directory"]
    assert write_shard_bytes(shard_path(tmp_path, "latents", "m", "cd" + "0" * 62), b"x", problems)
    assert len(problems) == 1


def test_a_paired_run_caches_its_control_latents_and_re_encodes_a_changed_control(
    make_config, small_pairs, tmp_path, monkeypatch
):
    data = tmp_path / "pairs"
    shutil.copytree(small_pairs, data)
    settings = {**AUGMENTED, "data_dir": str(data)}
    cls = type(families.get("flux-kontext"))
    calls: list[int] = []
    real = cls.encode_controls

    def counting(self, vae, pixels):
        calls.append(int(pixels.shape[0]))
        return real(self, vae, pixels)

    monkeypatch.setattr(cls, "encode_controls", counting)

    def run(name: str, mode: str = "disk"):
        cfg = make_config("flux-kontext", output_name=name, latent_cache=mode, **settings)
        return train(cfg, [].append, device="cpu")

    memory = run("m", "memory")
    first = run("a")
    assert first.losses == memory.losses and all("controls" in load_file(str(s)) for s in _shards())
    calls.clear()
    second = run("b")
    assert calls == [] and second.losses == first.losses
    controls = sorted((data / "control").glob("*.png"))
    shutil.copy(controls[1], controls[0])  # another control image for the first target
    run("c")
    assert len(calls) == 1  # the one target whose control changed
